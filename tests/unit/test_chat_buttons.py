"""Approval buttons' data (toren.host.chat.buttons): compact, and signed for one chat, session,
approval, decision and digest of the arguments shown."""

from __future__ import annotations

import dataclasses

import pytest

from toren.core.approvals import approval_id
from toren.host.chat.buttons import button_data, parse_button, press_signed

KEY = bytes(range(32))
WHERE = {"channel": "telegram", "agent": "bot", "chat_id": "111",
         "session_id": "6e164e46-0d6a-4657-a654-ac197d56ecf2", "digest": "ab" * 32}
APPROVAL = approval_id("toren:run:task:1:0")


@pytest.mark.parametrize("outcome", ["approved", "always", "denied"])
def test_a_button_fits_telegram_and_is_valid_where_it_was_shown(outcome: str) -> None:
    data = button_data(KEY, **WHERE, approval_id=APPROVAL, outcome=outcome)
    assert len(data.encode()) <= 64  # Telegram's callback_data limit
    press = parse_button(data)
    assert press is not None and (press.approval_id, press.outcome) == (APPROVAL, outcome)
    assert press_signed(KEY, press, **WHERE)


@pytest.mark.parametrize("change", [
    {"channel": "whatsapp"}, {"agent": "desk"}, {"chat_id": "222"}, {"chat_id": "11"},
    {"session_id": "6e164e46-0d6a-4657-a654-ac197d56ecf3"},
    {"digest": "cd" * 32}])  # the arguments are not the ones the button was shown with
def test_a_button_is_not_valid_in_another_chat_session_agent_or_channel(
        change: dict[str, str]) -> None:
    press = parse_button(button_data(KEY, **WHERE, approval_id=APPROVAL, outcome="approved"))
    assert press is not None
    assert not press_signed(KEY, press, **(WHERE | change))
    assert not press_signed(bytes(32), press, **WHERE)  # another deployment's key


def test_a_signature_moved_to_another_approval_or_decision_is_not_valid() -> None:
    press = parse_button(button_data(KEY, **WHERE, approval_id=APPROVAL, outcome="approved"))
    assert press is not None
    other = approval_id("toren:other:task:1:0")
    assert not press_signed(KEY, dataclasses.replace(press, approval_id=other), **WHERE)
    assert not press_signed(KEY, dataclasses.replace(press, outcome="denied"), **WHERE)
    assert not press_signed(KEY, dataclasses.replace(press, outcome="always"), **WHERE)


@pytest.mark.parametrize("data", [
    "", "a", f"a:{APPROVAL}", f"x:{APPROVAL}:{'A' * 22}", f"a:{APPROVAL}:{'A' * 21}",
    f"a:{APPROVAL}:{'A' * 23}", f"a:{APPROVAL.upper()}:{'A' * 22}", f"a:../{'A' * 22}",
    f"a:{APPROVAL}:{'A' * 21}=", f"a:{APPROVAL}:{'A' * 22}\n", "a:" + "9" * 200])
def test_data_no_toren_button_carries_is_no_press(data: str) -> None:
    assert parse_button(data) is None
