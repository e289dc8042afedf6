"""Approval buttons: each one's data is signed for one chat, session, approval and decision.

A chat shows an approval as Approve and Deny buttons; a press sends the button's data back.
The platform vouches for who pressed and in which chat, but the data is whatever the client
sent (a modified Telegram client sends any callback data it likes), so it carries a MAC over
(channel, agent, chat, session, approval, decision) with the deployment's button key
(``ChannelChats.chat_button_key``). A press counts only when the MAC matches the chat it came
from and the session that chat serves; anything else decides nothing.

The data is ``<a|d>:<approval id>:<MAC>``: 61 ASCII characters, under Telegram's 64-byte
limit for callback data (WhatsApp allows 256).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass

#: The letter a button's data starts with -> the decision it makes.
DECISIONS = {"a": "approved", "d": "denied"}
#: Bytes of HMAC-SHA256 kept (128 bits; 22 characters of base64url).
MAC_BYTES = 16
#: Bytes of a new deployment's button key.
KEY_BYTES = 32
#: What a person reads when a press is refused for its data.
NOT_VALID_TEXT = "This button is not valid here: nothing was decided."

_DATA = re.compile(r"([ad]):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
                   r":([A-Za-z0-9_-]{22})")


@dataclass(frozen=True)
class ButtonPress:
    """What a button's data claims: the approval, the decision and the MAC vouching for it."""

    approval_id: str
    outcome: str
    mac: str


def button_data(key: bytes, *, channel: str, agent: str, chat_id: str, session_id: str,
                approval_id: str, outcome: str) -> str:
    """The data of the button that decides ``approval_id`` as ``outcome`` in ``chat_id``."""
    letter = next(letter for letter, decision in DECISIONS.items() if decision == outcome)
    mac = _mac(key, channel, agent, chat_id, session_id, approval_id, outcome)
    return f"{letter}:{approval_id}:{mac}"


def parse_button(data: str) -> ButtonPress | None:
    """The press a button's data describes; ``None`` for data no Toren button carries."""
    match = _DATA.fullmatch(data)
    if match is None:
        return None
    letter, approval_id, mac = match.groups()
    return ButtonPress(approval_id=approval_id, outcome=DECISIONS[letter], mac=mac)


def press_signed(key: bytes, press: ButtonPress, *, channel: str, agent: str, chat_id: str,
                 session_id: str) -> bool:
    """Whether ``press`` carries the MAC of a button shown in ``chat_id`` for ``session_id``
    (compared in constant time)."""
    expected = _mac(key, channel, agent, chat_id, session_id, press.approval_id, press.outcome)
    return hmac.compare_digest(expected.encode("ascii"), press.mac.encode("ascii"))


def _mac(key: bytes, channel: str, agent: str, chat_id: str, session_id: str,
         approval_id: str, outcome: str) -> str:
    # a JSON array: no choice of ids can make two different tuples sign the same bytes
    message = json.dumps([channel, agent, chat_id, session_id, approval_id, outcome],
                         separators=(",", ":")).encode("utf-8", "surrogatepass")
    digest = hmac.new(key, message, hashlib.sha256).digest()[:MAC_BYTES]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
