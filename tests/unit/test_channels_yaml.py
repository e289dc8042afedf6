"""``channels:`` in agent.yaml: installed channels only, settings checked by the channel, each
mistake an error naming the file, the line and the field."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from toren.agents import load_agent
from toren.errors import AgentDefinitionError
from toren.host.chat import COMMON_SETTINGS, ChatBot, ChatChannel
from toren.seams.channels import Channel, plugin_for_channel


class Chatty(ChatChannel):
    """A chat channel with one required setting, for the loader's sake (never started)."""

    name = "chatty"
    settings_schema = {"type": "object", "additionalProperties": False,
                       "required": ["token_env"],
                       "properties": COMMON_SETTINGS | {"token_env": {"type": "string"},
                                                        "limit": {"type": "integer"}}}

    def check_settings(self, agent: str, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
        if settings.get("limit", 1) > 10:
            return [("limit", "at most 10")]
        return super().check_settings(agent, settings)

    async def open_bot(self, bot: ChatBot) -> None:
        return None

    async def close_bot(self, bot: ChatBot) -> None:
        return None

    async def send_text(self, bot: ChatBot, chat_id: str, text: str,
                        payload: Mapping[str, Any]) -> None:
        return None


INSTALLED: dict[str, Channel] = {"chatty": Chatty()}


def agent(tmp_path: Path, channels_yaml: str) -> Path:
    directory = tmp_path / "bot"
    directory.mkdir()
    (directory / "prompt.md").write_text("hi")
    (directory / "agent.yaml").write_text("model: toren/scripted\n"
                                          + textwrap.dedent(channels_yaml))
    return directory


def error(directory: Path) -> AgentDefinitionError:
    with pytest.raises(AgentDefinitionError) as caught:
        load_agent(directory, channels=INSTALLED)
    return caught.value


def test_listed_channels_and_their_settings_are_loaded(tmp_path: Path) -> None:
    spec = load_agent(agent(tmp_path, """\
        channels:
          chatty:
            token_env: T
            allow_from: [1, "2"]
        """), channels=INSTALLED)
    assert spec.channels == {"chatty": {"token_env": "T", "allow_from": [1, "2"]}}
    assert spec.to_json()["channels"] == ["chatty"]


def test_an_agent_without_channels_lists_none(tmp_path: Path) -> None:
    assert load_agent(agent(tmp_path, ""), channels=INSTALLED).channels == {}


def test_a_channel_not_installed_names_the_plugin_to_install(tmp_path: Path) -> None:
    exc = error(agent(tmp_path, """\
        channels:
          chatty: {token_env: T}
          telegram:
            bot_token_env: X
        """))
    assert exc.line == 4
    assert "'telegram' is not installed" in str(exc)
    assert "pip install toren-telegram" in str(exc) and "installed channels: chatty" in str(exc)
    assert plugin_for_channel("whatsapp") == "toren-whatsapp"
    assert plugin_for_channel("signal") == "toren-signal"


@pytest.mark.parametrize(("body", "line", "words"), [
    ("channels:\n  chatty:\n    token_env: T\n    tokn: x\n", 5,
     "channels.chatty: unknown key 'tokn' for the chatty channel"),
    ("channels:\n  chatty:\n    token_env: 7\n", 4, "channels.chatty.token_env: 7 is not"),
    ("channels:\n  chatty:\n    allow_from: [1]\n", 3, "'token_env' is a required property"),
    ("channels:\n  chatty:\n    token_env: T\n    limit: 11\n", 5,
     "channels.chatty.limit: at most 10"),
    ("channels:\n  chatty:\n    token_env: T\n    pairing: false\n", 5,
     "nobody could talk to the agent"),
    ("channels:\n  chatty:\n    token_env: T\n    when_busy: shout\n", 5,
     "channels.chatty.when_busy: 'shout' is not one of"),
    ("channels:\n  Chatty!: {}\n", 3, "'Chatty!' is not a channel name"),
    ("channels: [chatty]\n", 2, "channels: expected object"),
    ("channels:\n  chatty: 3\n", 3, "channels.chatty: expected"),
])
def test_bad_settings_name_file_line_and_field(tmp_path: Path, body: str, line: int,
                                               words: str) -> None:
    exc = error(agent(tmp_path, body))
    assert exc.path == str(tmp_path / "bot" / "agent.yaml")
    assert exc.line == line, str(exc)
    assert words in str(exc)


def test_an_agent_with_a_workflow_cannot_be_served_by_a_channel(tmp_path: Path) -> None:
    directory = agent(tmp_path, "channels:\n  chatty: {token_env: T}\n")
    (directory / "workflow.py").write_text("async def workflow(ctx):\n    return None\n")
    exc = error(directory)
    assert exc.line == 2 and "runs a workflow" in str(exc)
