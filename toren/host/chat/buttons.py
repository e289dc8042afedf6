"""Approval buttons: each one's data is signed for one chat, session, approval and decision.

A chat shows an approval as Approve, Approve always and Deny buttons; a press sends the
button's data back. The platform vouches for who pressed and in which chat, but the data is
whatever the client sent (a modified Telegram client sends any callback data it likes), so it
carries a MAC over (channel, agent, chat, session, approval, decision, digest of the arguments
shown) with the deployment's button key (``ChannelChats.chat_button_key``). A press counts only
when the MAC matches the chat it came from, the session that chat serves and the arguments the
approval has; anything else decides nothing.

The data is ``<a|r|d>:<approval id>:<MAC>``: 61 ASCII characters, under Telegram's 64-byte
limit for callback data (WhatsApp allows 256). Edit and answer are not offered in chats: a
reply there is the session's next message to the agent, which no signature ties to one
approval; they are decided with the CLI, the API, MCP or the console.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass

#: The letter a button's data starts with -> the decision it makes (``always``: approved for
#: every later call of the tool with the same arguments in the session).
DECISIONS = {"a": "approved", "r": "always", "d": "denied"}
#: Bytes of HMAC-SHA256 kept (128 bits; 22 characters of base64url).
MAC_BYTES = 16
#: Bytes of a new deployment's button key.
KEY_BYTES = 32
#: What a person reads when a press is refused for its data.
NOT_VALID_TEXT = "This button is not valid here: nothing was decided."

_DATA = re.compile(r"([ard]):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
                   r":([A-Za-z0-9_-]{22})")


@dataclass(frozen=True)
class ButtonPress:
    """What a button's data claims: the approval, the decision and the MAC vouching for it."""

    approval_id: str
    outcome: str
    mac: str


def button_data(key: bytes, *, channel: str, agent: str, chat_id: str, session_id: str,
                approval_id: str, outcome: str, digest: str) -> str:
    """The data of the button that decides ``approval_id`` (whose arguments have ``digest``)
    as ``outcome`` in ``chat_id``."""
    letter = next(letter for letter, decision in DECISIONS.items() if decision == outcome)
    mac = _mac(key, channel, agent, chat_id, session_id, approval_id, outcome, digest)
    return f"{letter}:{approval_id}:{mac}"


def parse_button(data: str) -> ButtonPress | None:
    """The press a button's data describes; ``None`` for data no Toren button carries."""
    match = _DATA.fullmatch(data)
    if match is None:
        return None
    letter, approval_id, mac = match.groups()
    return ButtonPress(approval_id=approval_id, outcome=DECISIONS[letter], mac=mac)


def press_signed(key: bytes, press: ButtonPress, *, channel: str, agent: str, chat_id: str,
                 session_id: str, digest: str) -> bool:
    """Whether ``press`` carries the MAC of a button shown in ``chat_id`` for ``session_id``
    and an approval whose arguments have ``digest`` (compared in constant time)."""
    expected = _mac(key, channel, agent, chat_id, session_id, press.approval_id, press.outcome,
                    digest)
    return hmac.compare_digest(expected.encode("ascii"), press.mac.encode("ascii"))


def _mac(key: bytes, channel: str, agent: str, chat_id: str, session_id: str,
         approval_id: str, outcome: str, digest: str) -> str:
    # a JSON array: no choice of ids can make two different tuples sign the same bytes
    message = json.dumps([channel, agent, chat_id, session_id, approval_id, outcome, digest],
                         separators=(",", ":")).encode("utf-8", "surrogatepass")
    tag = hmac.new(key, message, hashlib.sha256).digest()[:MAC_BYTES]
    return base64.urlsafe_b64encode(tag).rstrip(b"=").decode("ascii")
