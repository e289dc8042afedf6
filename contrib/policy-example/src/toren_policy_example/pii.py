"""Finding and masking personal data in text: email addresses, phone numbers and payment card
numbers (only digit runs that pass the Luhn check, so order numbers and timestamps stay)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

#: The kinds ``redact`` knows, and the placeholder each is replaced by.
PLACEHOLDERS = {"email": "[email]", "card": "[card]", "phone": "[phone]"}

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
                    r"\.[A-Za-z]{2,}(?![\w-])")
# 13 to 19 digits, optionally grouped by single spaces or hyphens (4111 1111 1111 1111)
_CARD = re.compile(r"(?<![\d+-])\d(?:[ -]?\d){12,18}(?![\d-])")
# an international (+...) or grouped number: 8 to 15 digits with separators between groups
_PHONE = re.compile(r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}"
                    r"(?:[ .-]\d{2,4}){1,4}(?![\w])|(?<![\w+])\+\d{8,15}(?!\w)")


def luhn_valid(digits: str) -> bool:
    """Whether a string of digits passes the Luhn checksum card numbers carry."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _digits(text: str) -> str:
    return "".join(char for char in text if char.isdigit())


def _card(match: re.Match[str]) -> str:
    digits = _digits(match.group())
    return PLACEHOLDERS["card"] if luhn_valid(digits) else match.group()


def _phone(match: re.Match[str]) -> str:
    text = match.group()
    if _DATE.fullmatch(text):
        return text
    count = len(_digits(text))
    # a date (2026-12-04) or a version (1.2.3) has too few digits; a card was masked before
    if 8 <= count <= 15 and (text.startswith("+") or re.search(r"[ ().-]", text)):
        return PLACEHOLDERS["phone"]
    return text


#: A date written with separators (2026-12-04, 2026.12.04) is not a phone number.
_DATE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{4}")

_MASKERS: dict[str, tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = {
    "email": (_EMAIL, lambda match: PLACEHOLDERS["email"]),
    "card": (_CARD, _card),
    "phone": (_PHONE, _phone),
}


def redact(text: str, kinds: Iterable[str] = ("email", "card", "phone")) -> str:
    """``text`` with every email address, Luhn-valid card number and phone number of
    ``kinds`` replaced by its placeholder (cards before phones: a card is not a phone)."""
    wanted = set(kinds)
    for kind in ("email", "card", "phone"):  # this order, whatever the settings say
        if kind in wanted:
            pattern, mask = _MASKERS[kind]
            text = pattern.sub(mask, text)
    return text
