"""Who may talk to an agent over a chat channel: the allow-list, then pairing by code."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import Any

#: Letters and digits that cannot be mistaken for one another when read aloud or retyped.
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8


def new_pairing_code() -> str:
    """A one-time code an operator approves with ``toren channels pair approve CODE``."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(code: str) -> str:
    """A code as typed by a person (any case, spaces or dashes) in its stored form."""
    return "".join(ch for ch in code.upper() if ch.isalnum())


def allow_listed(settings: Mapping[str, Any], user_id: str,
                 env: Mapping[str, str] | None = None) -> bool:
    """Whether ``user_id`` is in the settings' ``allow_from`` or in the comma-separated
    variable that ``allow_from_env`` names."""
    listed = {str(entry).strip() for entry in settings.get("allow_from") or ()}
    variable = settings.get("allow_from_env")
    if variable:
        value = (os.environ if env is None else env).get(variable, "")
        listed |= {entry.strip() for entry in value.split(",") if entry.strip()}
    return user_id in listed


REFUSAL_TEXT = ("Sorry, I can only talk with people my operator has approved. This is the only "
                "reply you will get.")


def pairing_text(code: str) -> str:
    """What a person not on the allow-list reads, once, when pairing is on."""
    return (f"Hello! I don't know you yet. Ask my operator to approve you with the code "
            f"{code} (toren channels pair approve {code}), then send your message again.")


BUSY_TEXT = ("I'm still working on your previous message; send this one again once I have "
             "answered.")
