"""agent.yaml's peers:, acceptsFrom: and background: keys: the tools they give, and the errors
(file, line, what to do) for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from toren.agents import load_agent
from toren.errors import AgentDefinitionError
from toren.testing import write_agent_dir


def test_peers_give_an_ask_tool_each_and_background_one_start_tool(tmp_path: Path) -> None:
    agent = load_agent(write_agent_dir(tmp_path, "desk", peers=["writer", "fact-checker"],
                                       acceptsFrom=["boss"], background=["writer"]))
    assert agent.peers == ("writer", "fact-checker") and agent.accepts_from == ("boss",)
    assert agent.background == ("writer",)
    ask = agent.tools["ask_fact-checker"]
    assert ask.idempotent and ask.parameters["required"] == ["request"]
    start = agent.tools["start_background_run"]
    assert start.parameters["properties"]["agent"]["enum"] == ["writer"]
    assert agent.to_json()["acceptsFrom"] == ["boss"]


def test_an_agent_without_the_keys_has_no_such_tools_and_accepts_no_one(tmp_path: Path) -> None:
    agent = load_agent(write_agent_dir(tmp_path, "solo"))
    assert agent.tools == {} and agent.accepts_from == () and agent.peers == ()


@pytest.mark.parametrize(("yaml", "tools_py", "message"), [
    ("peers: [Writer]\n", None, "agent.yaml:2: peers.0: 'Writer' does not match"),
    ("peers: writer\n", None, "agent.yaml:2: peers: expected array, got string 'writer'"),
    ("peers: [a, a]\n", None, "agent.yaml:2: peers: ['a', 'a'] has non-unique elements"),
    ("acceptFrom: [desk]\n", None, "unknown key 'acceptFrom' (did you mean 'acceptsFrom'?)"),
    ("background: []\n", None, "agent.yaml:2: background: [] should be non-empty"),
    ("peers: [writer]\n", 'def ask_writer(x: str) -> str:\n    """x"""\n    return x\n',
     "peers.0: the tool 'ask_writer' it adds clashes with the tool of that name from"),
])
def test_bad_values_name_the_file_line_and_fix(tmp_path: Path, yaml: str, tools_py: str | None,
                                               message: str) -> None:
    directory = write_agent_dir(tmp_path, "bad", agent_yaml="model: toren/scripted\n" + yaml,
                                tools_py=tools_py)
    with pytest.raises(AgentDefinitionError) as error:
        load_agent(directory)
    assert message in str(error.value)
