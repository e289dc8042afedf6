"""Agent directories: every mistake is an error naming the file, the line and a fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from toren.agents import (
    Limits,
    check_env,
    discover_agent_dirs,
    load_agent,
    load_agents,
    missing_env,
)
from toren.errors import AgentDefinitionError, ConfigError, MissingEnvError
from toren.seams.plugins import PluginHost
from toren.seams.tools import Tool, tool_from_function

MakeAgentDir = Callable[..., Path]


def load_error(directory: Path, tools: dict[str, Tool] | None = None,
               known_models: Callable[[str], object] | None = None) -> AgentDefinitionError:
    """The error that loading ``directory`` raises, failing the test unless it is the right kind."""
    try:
        load_agent(directory, tools, known_models)
    except AgentDefinitionError as exc:
        return exc
    except Exception as exc:  # a crash instead of a user-facing error is a bug in itself
        pytest.fail(f"expected AgentDefinitionError, got {type(exc).__name__}: {exc}")
    pytest.fail(f"{directory} loaded without error")


def web_search(query: str) -> str:
    """Search the web."""
    return query


def echo_upper(text: str) -> str:
    """Shout."""
    return text.upper()


PLUGIN_TOOLS = {
    "web_search": tool_from_function(web_search, source="plugin web"),
    "echo_upper": tool_from_function(echo_upper, source="plugin echo"),
}


# -- agent.yaml against the schema ---------------------------------------------------------------


def test_minimal_agent_loads_with_defaults(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir("my-crew")

    agent = load_agent(directory)
    assert agent.name == "my-crew"
    assert agent.schema_name == "agent_my_crew"
    assert agent.model == "toren/scripted"
    assert agent.prompt == "You are a test agent.\n"
    assert agent.limits == Limits()
    assert agent.tools == {} and agent.subagents == {} and agent.env == ()


def test_full_agent_yaml_loads(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir("dir-name", prompt=None, agent_yaml="""\
        name: crew-one
        description: Finds things.
        model: toren/scripted
        prompt: system.md
        limits:
          maxSteps: 7
          maxBudgetUsd: 0.5
          maxToolOutputBytes: 1024
        tools: [web_search]
        env: [SEARCH_KEY]
        """)
    (directory / "system.md").write_text("Be brief.\n")

    agent = load_agent(directory, PLUGIN_TOOLS)
    assert (agent.name, agent.description, agent.prompt) == ("crew-one", "Finds things.",
                                                             "Be brief.\n")
    assert agent.limits == Limits(max_steps=7, max_budget_usd=0.5, max_tool_output_bytes=1024)
    assert list(agent.tools) == ["web_search"]
    assert agent.env == ("SEARCH_KEY",)
    assert agent.to_json()["schema"] == "agent_crew_one"


def test_misspelt_top_level_key_suggests_the_valid_one(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="model: toren/scripted\ndescripton: hi\n")

    error = load_error(directory)
    assert error.path == str(directory / "agent.yaml")
    assert error.line == 2
    assert error.message.startswith(f"{directory / 'agent.yaml'}:2: ")
    assert "unknown key 'descripton'" in error.message
    assert "did you mean 'description'" in error.message


def test_misspelt_model_key_suggests_model(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="# my agent\nname: crew\nmodle: toren/scripted\n")

    error = load_error(directory)
    # BUG (toren/agents/loader.py, validate_against_schema): the errors are sorted by line
    # only, so the "'model' is a required property" error (reported at line 1, the document)
    # wins over the unknown key 'modle' at line 3 that caused it; the user never sees the
    # suggestion.
    assert "did you mean 'model'" in error.message, error.message
    assert error.line == 3


def test_misspelt_nested_key_names_its_path_and_line(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="""\
        model: toren/scripted
        limits:
          maxBudgetUsd: 1
          maxStep: 3
        """)

    error = load_error(directory)
    assert error.line == 4
    assert f"{directory / 'agent.yaml'}:4:" in error.message
    assert "unknown key 'limits.maxStep'" in error.message
    assert "did you mean 'maxSteps'" in error.message
    assert "maxToolOutputBytes" in error.message  # the valid keys are listed


def test_wrong_type_names_the_field_and_line(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="""\
        model: toren/scripted
        limits:
          maxSteps: ten
        """)

    error = load_error(directory)
    assert error.line == 3
    assert "limits.maxSteps" in error.message
    assert "expected integer" in error.message and "'ten'" in error.message


@pytest.mark.parametrize(("text", "line", "words"), [
    ("model: toren/scripted\ntools: web_search\n", 2, ["tools", "expected array"]),
    ("model: toren/scripted\nlimits:\n  maxSteps: 0\n", 3, ["limits.maxSteps", "minimum"]),
    ("model: gpt-4o\n", 1, ["model", "provider prefix", "toren/scripted"]),
    ("model: toren/scripted\nenv: [GOOD, 1BAD]\n", 2, ["env.1", "1BAD"]),
    ("name: crew\n", 1, ["'model' is a required property"]),
])
def test_schema_violations(make_agent_dir: MakeAgentDir, text: str, line: int,
                           words: list[str]) -> None:
    error = load_error(make_agent_dir(agent_yaml=text))
    assert error.line == line
    for word in words:
        assert word in error.message


def test_first_problem_by_line_is_reported_and_the_rest_counted(
        make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="""\
        model: toren/scripted
        limits:
          maxSteps: many
        tools: 3
        """)

    error = load_error(directory)
    assert error.line == 3
    assert "(1 more problem(s) after this one)" in error.message


@pytest.mark.parametrize(("text", "line"), [
    ("model: toren/scripted\nlimits: [1, 2\nname: x\n", 3),
    ("model: toren/scripted\ndescription: \"unterminated\n", 3),
    ("model: toren/scripted\n\tname: tab\n", 2),
])
def test_malformed_yaml_names_the_line(make_agent_dir: MakeAgentDir, text: str,
                                       line: int) -> None:
    error = load_error(make_agent_dir(agent_yaml=text))
    assert error.line == line
    assert "invalid YAML" in error.message
    assert error.message.startswith(f"{error.path}:{line}: ")


def test_duplicate_key_names_the_second_occurrence(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="""\
        model: toren/scripted
        limits:
          maxSteps: 3
          maxSteps: 4
        """)

    error = load_error(directory)
    assert error.line == 4
    assert "'maxSteps' appears twice" in error.message


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_file_asks_for_a_model(make_agent_dir: MakeAgentDir, text: str) -> None:
    directory = make_agent_dir(agent_yaml=text)

    error = load_error(directory)
    assert error.path == str(directory / "agent.yaml")
    assert "'model' is a required property" in error.message


@pytest.mark.parametrize("text", ["- model\n", "just a string\n", "42\n"])
def test_a_document_that_is_not_a_mapping(make_agent_dir: MakeAgentDir, text: str) -> None:
    error = load_error(make_agent_dir(agent_yaml=text))
    assert error.line == 1
    assert "expected a mapping" in error.message


def test_missing_prompt_md(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(prompt=None)

    error = load_error(directory)
    assert error.path == str(directory / "agent.yaml")
    assert "prompt.md is missing" in error.message
    assert str(directory / "prompt.md") in error.message


def test_missing_custom_prompt_file_points_at_the_prompt_key(
        make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="model: toren/scripted\nprompt: system.md\n")

    error = load_error(directory)
    assert error.line == 2
    assert "system.md is missing" in error.message


def test_no_agent_yaml(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    error = load_error(tmp_path / "empty")
    assert "no agent.yaml" in error.message


# -- names and schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["My Crew!", "crew.one", "1crew", "Crew", "a" * 58])
def test_names_that_cannot_be_schema_names(make_agent_dir: MakeAgentDir, name: str) -> None:
    directory = make_agent_dir(agent_yaml=f"model: toren/scripted\nname: {name!r}\n")

    error = load_error(directory)
    assert error.line == 2
    assert f"agent name {name!r} cannot be mapped to a database schema name" in error.message
    assert "agent_my_crew" in error.message  # shows what a good name becomes


def test_directory_name_that_cannot_be_a_schema_name(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir("Bad.Name")

    error = load_error(directory)
    assert str(directory) in error.message
    assert "'Bad.Name' cannot be mapped to a database schema name" in error.message
    assert "set name:" in error.message  # how to keep the directory and fix the name


def test_directory_name_is_fine_when_name_is_set(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir("Bad.Name", agent_yaml="name: good-name\nmodel: toren/scripted\n")

    assert load_agent(directory).name == "good-name"


def test_two_crews_mapping_to_one_schema_name_both(tmp_path: Path,
                                                   make_agent_dir: MakeAgentDir) -> None:
    dashed = make_agent_dir("my-crew")
    underscored = make_agent_dir("my_crew")

    with pytest.raises(AgentDefinitionError) as info:
        load_agents([dashed, underscored], {})
    message = info.value.message
    assert "'my-crew'" in message and "'my_crew'" in message
    assert str(dashed) in message and str(underscored) in message
    assert "agent_my_crew" in message


def test_discover_agent_dirs(tmp_path: Path, make_agent_dir: MakeAgentDir) -> None:
    first = make_agent_dir("alpha")
    second = make_agent_dir("beta")
    (tmp_path / "not-an-agent").mkdir()

    assert discover_agent_dirs([tmp_path]) == [first, second]
    assert discover_agent_dirs([first, tmp_path]) == [first, second]
    with pytest.raises(AgentDefinitionError, match="toren init"):
        discover_agent_dirs([tmp_path / "not-an-agent"])
    with pytest.raises(AgentDefinitionError, match="not a directory"):
        discover_agent_dirs([tmp_path / "missing"])


# -- tools.py ------------------------------------------------------------------------------------


def test_tools_py_functions_become_tools(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(tools_py='''\
        """Crew tools."""
        import json
        from os.path import join

        from toren import tool


        def word_count(text: str) -> int:
            """Count words."""
            return len(text.split())


        @tool(idempotent=True, name="lookup")
        def look_up(topic: str) -> str:
            return topic


        def _helper() -> None:
            pass
        ''')

    agent = load_agent(directory)
    assert list(agent.tools) == ["word_count", "lookup"]  # not join, json, tool or _helper
    assert agent.tools["lookup"].idempotent is True
    assert agent.tools["word_count"].source == str(directory / "tools.py")
    assert agent.tools["word_count"].function("a b c") == 3


def test_tools_py_syntax_error_names_the_file_and_line(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(tools_py="""\
        def fine(x: str) -> str:
            return x


        def broken(x: str) -> str:
            return x +
        """)

    error = load_error(directory)
    assert error.path == str(directory / "tools.py")
    assert error.line == 6
    assert "syntax error" in error.message


def test_tools_py_import_time_exception_names_the_file_and_line(
        make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(tools_py="""\
        import os

        SETTING = os.environ.get("NOPE", "")
        raise RuntimeError("tools.py needs a database")
        """)

    # BUG (toren/agents/loader.py, _import_file): os.path.samefile() is called on every traceback
    # frame's filename, including "<frozen importlib._bootstrap_external>", and raises
    # FileNotFoundError, so the user gets a crash instead of this error.
    error = load_error(directory)
    assert error.path == str(directory / "tools.py")
    assert error.line == 4
    assert "RuntimeError: tools.py needs a database" in error.message


def test_tools_py_bad_tool_names_the_function_line(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(tools_py="""\
        def fine(x: str) -> str:
            return x


        def spread(*parts: str) -> str:
            return "".join(parts)
        """)

    error = load_error(directory)
    assert error.path == str(directory / "tools.py")
    assert error.line == 5
    assert "spread" in error.message


def test_tools_py_two_functions_with_one_tool_name(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(tools_py="""\
        from toren import tool


        @tool(name="same")
        def first() -> int:
            return 1


        @tool(name="same")
        def second() -> int:
            return 2
        """)

    error = load_error(directory)
    assert error.line == 9
    assert "'same'" in error.message


def test_unknown_plugin_tool_lists_the_installed_ones(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="""\
        model: toren/scripted
        tools:
          - echo_upper
          - web_serch
        """)

    error = load_error(directory, PLUGIN_TOOLS)
    assert error.line == 4
    assert "unknown tool 'web_serch'" in error.message
    assert "did you mean 'web_search'" in error.message
    assert "installed plugin tools: echo_upper, web_search" in error.message


def test_unknown_tool_with_no_plugins_installed(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="model: toren/scripted\ntools: [web_search]\n")

    error = load_error(directory, {})
    assert "installed plugin tools: none" in error.message


def test_plugin_tool_clashing_with_tools_py(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(
        agent_yaml="model: toren/scripted\ntools: [web_search]\n",
        tools_py="def web_search(query: str) -> str:\n    return query\n")

    error = load_error(directory, PLUGIN_TOOLS)
    assert error.line == 2
    assert "plugin web" in error.message and "tools.py" in error.message


def test_plugin_tools_are_enabled_after_crew_tools(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="model: toren/scripted\ntools: [web_search]\n",
                               tools_py="def local(x: str) -> str:\n    return x\n")

    agent = load_agent(directory, PLUGIN_TOOLS)
    assert list(agent.tools) == ["local", "web_search"]
    assert agent.tools["web_search"] is PLUGIN_TOOLS["web_search"]



def _grouped(name: str) -> Tool:
    def function(x: str) -> str:
        """A grouped tool."""
        return x
    return tool_from_function(function, source="plugin box", name=name, group="box")


GROUPED = {name: _grouped(name) for name in ("box_run", "box_read")}


def test_a_group_name_enables_every_tool_of_the_group(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(agent_yaml="model: toren/scripted\ntools: [box]\n")
    assert list(load_agent(directory, GROUPED).tools) == ["box_run", "box_read"]
    single = make_agent_dir("single", agent_yaml="model: toren/scripted\ntools: [box_read]\n")
    assert list(load_agent(single, GROUPED).tools) == ["box_read"]


def test_a_group_clashing_with_tools_py_and_an_unknown_name_list_the_groups(
        make_agent_dir: MakeAgentDir) -> None:
    clash = make_agent_dir(agent_yaml="model: toren/scripted\ntools: [box]\n",
                           tools_py="def box_run(x: str) -> str:\n    return x\n")
    error = load_error(clash, GROUPED)
    assert error.line == 2 and "group 'box'" in error.message
    unknown = make_agent_dir("unknown", agent_yaml="model: toren/scripted\ntools: [boxes]\n")
    assert "box (group)" in load_error(unknown, GROUPED).message


def test_the_sandbox_section_reaches_tools_and_bad_keys_are_named(
        make_agent_dir: MakeAgentDir) -> None:
    good = make_agent_dir(agent_yaml="model: toren/scripted\nsandbox:\n  network: true\n"
                                     "  snapshotEvery: 5\n")
    assert load_agent(good).tool_config == {"sandbox": {"network": True, "snapshotEvery": 5}}
    bad = make_agent_dir("bad", agent_yaml="model: toren/scripted\nsandbox:\n  netwrk: true\n")
    error = load_error(bad)
    assert error.line == 3 and "did you mean 'network'" in error.message
    zero = make_agent_dir("zero", agent_yaml="model: toren/scripted\nsandbox:\n"
                                             "  snapshotEvery: 0\n")
    assert "snapshotEvery" in load_error(zero).message


# -- models --------------------------------------------------------------------------------------


def test_model_without_provider_names_the_plugin_to_install(
        make_agent_dir: MakeAgentDir) -> None:
    host = PluginHost(entry_points=False)
    directory = make_agent_dir(agent_yaml="# crew\nmodel: anthropic/claude-sonnet-4-5\n")

    def known(model_id: str) -> object:
        return host.provider_for(model_id).get_model(model_id)

    error = load_error(directory, known_models=known)
    assert error.line == 2
    assert "no installed provider serves 'anthropic/claude-sonnet-4-5'" in error.message
    assert "install toren-anthropic" in error.message


def test_unknown_builtin_model(make_agent_dir: MakeAgentDir) -> None:
    host = PluginHost(entry_points=False)
    directory = make_agent_dir(agent_yaml="model: toren/gpt\n")

    error = load_error(directory, known_models=lambda m: host.provider_for(m).get_model(m))
    assert error.line == 1
    assert "toren/scripted" in error.message


# -- subagents -----------------------------------------------------------------------------------


CREW_TOOLS = '''\
def lookup(topic: str) -> str:
    """Look up."""
    return topic


def count(text: str) -> int:
    """Count."""
    return len(text.split())
'''


def test_subagents_inherit_model_tools_and_limits(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(
        agent_yaml="model: toren/scripted\nlimits:\n  maxSteps: 9\n  maxToolOutputBytes: 4096\n",
        tools_py=CREW_TOOLS,
        subagents={
            "plain": "Just a prompt, no front matter.\n",
            "narrow": """\
                ---
                description: Looks things up.
                model: toren/scripted-fast
                tools: [lookup]
                limits:
                  maxSteps: 2
                ---
                You look things up.
                """,
        })

    agent = load_agent(directory)
    plain, narrow = agent.subagents["plain"], agent.subagents["narrow"]
    assert plain.model == "toren/scripted"
    assert list(plain.tools) == ["lookup", "count"]
    assert plain.limits == agent.limits == Limits(max_steps=9, max_tool_output_bytes=4096)
    assert plain.prompt == "Just a prompt, no front matter.\n"

    assert narrow.description == "Looks things up."
    assert narrow.model == "toren/scripted-fast"
    assert list(narrow.tools) == ["lookup"]
    assert narrow.limits == Limits(max_steps=2, max_tool_output_bytes=4096)
    assert narrow.prompt == "You look things up.\n"
    assert agent.to_json()["subagents"]["narrow"]["tools"] == ["lookup"]


def test_subagent_with_empty_tools_gets_none(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(tools_py=CREW_TOOLS,
                               subagents={"thinker": "---\ntools: []\n---\nThink.\n"})

    assert load_agent(directory).subagents["thinker"].tools == {}


@pytest.mark.parametrize(("front", "line", "words"), [
    ("description: d\nmodle: toren/scripted\n", 3, ["unknown key 'modle'",
                                                    "did you mean 'model'"]),
    ("limits:\n  maxSteps: many\n", 3, ["limits.maxSteps", "expected integer"]),
    ("limits:\n  maxStepz: 2\n", 3, ["did you mean 'maxSteps'"]),
    ("description: d\ntools: [lookup, serch]\n", 3, ["unknown tool 'serch'", "lookup, count"]),
    ("description: [unclosed\n", 3, ["invalid YAML"]),
    ("description: d\ndescription: e\n", 3, ["'description' appears twice"]),
    ("model: nope\n", 2, ["provider prefix"]),
])
def test_subagent_front_matter_errors_name_the_file_line(
        make_agent_dir: MakeAgentDir, front: str, line: int, words: list[str]) -> None:
    directory = make_agent_dir(tools_py=CREW_TOOLS,
                               subagents={"helper": f"---\n{front}---\nHelp.\n"})

    error = load_error(directory)
    assert error.path == str(directory / "subagents" / "helper.md")
    assert error.line == line, error.message
    for word in words:
        assert word in error.message


def test_subagent_with_an_empty_prompt(make_agent_dir: MakeAgentDir) -> None:
    directory = make_agent_dir(subagents={"mute": "---\ndescription: d\n---\n\n"})

    error = load_error(directory)
    assert error.path == str(directory / "subagents" / "mute.md")
    assert "prompt" in error.message and "empty" in error.message


# -- required environment ------------------------------------------------------------------------


def test_check_env_lists_every_missing_variable_at_once(make_agent_dir: MakeAgentDir) -> None:
    first = load_agent(make_agent_dir("first", env=["SEARCH_KEY", "SHARED_KEY"]))
    second = load_agent(make_agent_dir("second", env=["SHARED_KEY", "PRESENT_KEY"]))
    env = {"PRESENT_KEY": "x", "SEARCH_KEY": ""}  # empty counts as missing

    with pytest.raises(MissingEnvError) as info:
        check_env([first, second], {"second": ["PROVIDER_KEY"]}, env=env)
    message = info.value.message
    assert isinstance(info.value, ConfigError)
    assert "SEARCH_KEY (needed by first)" in message
    assert "SHARED_KEY (needed by first, second)" in message
    assert "PROVIDER_KEY (needed by second)" in message
    assert "PRESENT_KEY" not in message
    assert "\n" not in message
    assert missing_env([first, second], env=env) == {"SEARCH_KEY": ["first"],
                                                     "SHARED_KEY": ["first", "second"]}


def test_check_env_passes_when_everything_is_set(make_agent_dir: MakeAgentDir) -> None:
    agent = load_agent(make_agent_dir(env=["A_KEY"]))

    check_env([agent], env={"A_KEY": "set"})
    check_env([agent], {"test-agent": ["B_KEY"]}, env={"A_KEY": "1", "B_KEY": "2"})
