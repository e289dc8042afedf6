"""``toren init NAME``: a new agent directory that runs offline."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from toren.cli.output import JSON_OPTION_HELP, console, print_json, safe, toren_command
from toren.errors import ConfigError

AGENT_YAML = """\
# {name}: created by `toren init`. Reference: docs/reference/agent-yaml.md
name: {name}
description: A new Toren agent (edit prompt.md and tools.py).
# toren/scripted is the built-in offline model: no key, no network. Other models come
# from provider plugins (`toren plugins` lists what is installed).
model: toren/scripted
limits:
  maxSteps: 20
"""

PROMPT = """\
You are {name}, a careful assistant. Use your tools to find facts before you answer,
and say which tool each fact came from.
"""

TOOLS = '''\
"""Tools of {name}: every public function here is a tool the model can call."""


def word_count(text: str) -> int:
    """Count the words in a piece of text.

    Args:
        text: The text to count.
    """
    return len(text.split())
'''


def init(
    name: Annotated[str, typer.Argument(
        metavar="NAME", help="Directory to create; its name is the agent's.")],
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Create an agent directory (agent.yaml, prompt.md, tools.py) that runs offline."""
    target = Path(name).resolve()
    agent_name = target.name
    from toren.agents import check_agent_name, load_agent  # not at import: --help stays light

    check_agent_name(agent_name, where=str(target))
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"{target} already exists and is not empty; pick another name")
    if not target.parent.is_dir():
        raise ConfigError(f"{target.parent} does not exist; create it first")
    # Write into a scratch directory and move it in place, so a failure leaves nothing behind.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{agent_name}-") as scratch:
        staged = Path(scratch) / agent_name
        staged.mkdir()
        (staged / "agent.yaml").write_text(AGENT_YAML.format(name=agent_name))
        (staged / "prompt.md").write_text(PROMPT.format(name=agent_name))
        (staged / "tools.py").write_text(TOOLS.format(name=agent_name))
        load_agent(staged)  # what we write must load
        if target.exists():
            target.rmdir()
        shutil.move(str(staged), target)
    files = ["agent.yaml", "prompt.md", "tools.py"]
    if as_json:
        print_json({"name": agent_name, "directory": str(target), "files": files})
        return
    console.print(f"Created agent [bold]{agent_name}[/] in {safe(target)}")
    for file in files:
        console.print(f"  {file}")
    console.print(f"Next: {safe(toren_command())} dev --dir {safe(shlex.quote(name))}")
