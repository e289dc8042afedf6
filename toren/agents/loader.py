"""Agent directories: agent.yaml + prompt.md + tools.py + subagents/*.md, validated at load time."""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from toren.agents.channels import load_channels
from toren.agents.children import background_tool, peer_tool
from toren.agents.memory import memory_tools
from toren.agents.questions import ask_user_tool
from toren.agents.schedules import load_schedules
from toren.agents.versions import AgentVersion, snapshot
from toren.agents.yamlfile import MAX_CHARS, LocatedYaml, load_located
from toren.config import positive_number
from toren.core.approvals import ApprovalPolicy
from toren.core.attachments import AttachmentPolicy
from toren.core.flow import Concurrency
from toren.core.limits import Compaction, Limits
from toren.core.memory import MemoryConfig
from toren.core.output import OutputSchema
from toren.core.pricing import Pricing
from toren.core.schedules import ScheduleSpec
from toren.core.webhooks import WebhookSubscription, parse_subscriptions
from toren.errors import (
    AgentDefinitionError,
    InvalidWebhook,
    MissingEnvError,
    ToolError,
    TorenError,
)
from toren.regular_files import NotARegularFile, open_regular, read_regular
from toren.schemas import load_schema
from toren.seams.channels import Channel
from toren.seams.policies import PolicyRef
from toren.seams.tool_sources import ToolSource, ToolSourceEntry, entries_json
from toren.seams.tools import TOOL_MARK, Tool, tool_from_function

if TYPE_CHECKING:
    import jsonschema

AGENT_FILE = "agent.yaml"
#: Called with a model id; raises ``ConfigError`` when no installed provider serves it.
ModelCheck = Callable[[str], object]
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,56}$")
SUBAGENT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
#: Largest prompt file (``prompt.md``, each ``subagents/*.md``) in bytes. A system prompt goes
#: with every model call, so a bigger file is a mistake (a log, a data dump, a device) that
#: would be paid for on every step.
MAX_PROMPT_BYTES = 1024 * 1024
#: Seconds that importing ``tools.py`` or ``workflow.py`` may take (``TOREN_IMPORT_TIMEOUT``).
IMPORT_TIMEOUT_ENV = "TOREN_IMPORT_TIMEOUT"
DEFAULT_IMPORT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SubagentSpec:
    """A named task agent from ``subagents/<name>.md``."""

    name: str
    description: str
    model: str
    prompt: str
    tools: dict[str, Tool]
    limits: Limits
    path: Path
    #: The tool-source entries it uses (``mcpServers:``): its own, and the agent's it takes.
    tool_sources: tuple[ToolSourceEntry, ...] = ()
    #: ``output:``: the JSON Schema its final answer must match (``None``: text).
    output: OutputSchema | None = None


@dataclass(frozen=True)
class AgentSpec:
    """A loaded, validated agent directory."""

    name: str
    directory: Path
    model: str
    prompt: str
    description: str = ""
    limits: Limits = field(default_factory=Limits)
    tools: dict[str, Tool] = field(default_factory=dict)
    env: tuple[str, ...] = ()
    #: For variables required by plugin tools: which tool needs each, enabled where.
    env_sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    subagents: dict[str, SubagentSpec] = field(default_factory=dict)
    base_url: str | None = None
    pricing: dict[str, Pricing] = field(default_factory=dict)
    compaction: Compaction = field(default_factory=Compaction)
    #: ``async def workflow(ctx)`` from ``workflow.py``; ``None`` runs the agent as one task.
    workflow: Callable[..., Any] | None = None
    #: ``allowOutsideFiles``: definition files may be symbolic links out of the directory.
    allow_outside_files: bool = False
    #: agent.yaml sections read by plugin tools (``sandbox:``), handed to each tool call as
    #: ``ToolCallContext.agent_config``.
    tool_config: dict[str, Any] = field(default_factory=dict)
    #: Tools whose calls wait for a person's approval (``approvals:`` and
    #: ``@tool(requires_approval=True)``), by name; subagents' calls of them too.
    approvals: dict[str, ApprovalPolicy] = field(default_factory=dict)
    #: ``schedules:``: runs started on a timetable (``toren.core.schedules``).
    schedules: tuple[ScheduleSpec, ...] = ()
    #: ``fallbacks:``: models tried in order when a task's model fails (``ModelFellBack``).
    fallbacks: tuple[str, ...] = ()
    #: ``peers:``: agents this one may call (an ``ask_<peer>`` tool each).
    peers: tuple[str, ...] = ()
    #: ``acceptsFrom:``: agents that may call this one (or start it in the background).
    accepts_from: tuple[str, ...] = ()
    #: ``background:``: agents a session of this one may start in the background.
    background: tuple[str, ...] = ()
    #: ``askUser:``: the agent has the tool ``ask_user`` (it asks a person and waits).
    ask_user: bool = False
    #: ``memory:``: the agent keeps memories beyond a session, with the tools ``remember``,
    #: ``recall``, ``update_memory`` and ``forget`` (``None``: no memory).
    memory: MemoryConfig | None = None
    #: ``channels:``: the channels (chat apps) serving this agent, each with its settings
    #: (validated by the channel's ``settings_schema`` and ``check_settings``).
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The definition files as loaded and their hash (``toren.agents.versions``).
    version: AgentVersion | None = None
    #: ``onChange:``: what a worker serving this definition does with runs pinned to another
    #: version of the agent: ``continue`` them on theirs, or ``upgrade`` them to this one.
    on_change: str = "continue"
    #: ``retention:``: how long the agent's finished runs stay in the hot tables before they
    #: are archived (``30d``, ``never``); ``None`` takes ``TOREN_RETENTION``.
    retention: str | None = None
    #: ``runtime:``: the lane of workers that runs it, ``short`` (the default) or ``long``
    #: (``toren.host.lanes``; ``toren worker --lane``).
    runtime: str = "short"
    #: ``promptCaching:``: model calls ask the provider to cache their prompt's prefix.
    prompt_caching: bool = True
    #: Entries of tool-source keys (``mcpServers:``), bound by their plugins: tools discovered
    #: while the agent runs (``toren.seams.tool_sources``).
    tool_sources: tuple[ToolSourceEntry, ...] = ()
    #: ``output:``: the JSON Schema the final answer must match (``None``: text).
    output: OutputSchema | None = None
    #: ``attachments:``: which files its model is shown as content blocks.
    attachments: AttachmentPolicy = field(default_factory=AttachmentPolicy)
    #: ``policies:``: the policy plugins asked about its runs, in order, with their settings
    #: (``toren.seams.policies``); subagents' tasks are asked the same.
    policies: tuple[PolicyRef, ...] = ()
    #: ``notify:``: completion webhooks of every run (``toren.core.webhooks``), registered
    #: with the agent so the store writes their deliveries with the status change.
    notify: tuple[WebhookSubscription, ...] = ()
    #: ``concurrency:``: how many of its runs execute at once (per key value), registered with
    #: the agent so the queue's claim enforces it; ``None``: no limit.
    concurrency: Concurrency | None = None
    #: ``priority:``: its runs' priority unless a run sets its own (-100..100).
    priority: int = 0

    @property
    def schema_name(self) -> str:
        return schema_name_for(self.name)

    @property
    def model_ids(self) -> list[str]:
        """The agent's model, its subagents' models and its fallbacks, each once."""
        return list(dict.fromkeys([self.model, *(s.model for s in self.subagents.values()),
                                   *self.fallbacks]))

    @property
    def all_tools(self) -> list[Tool]:
        """The agent's tools and its subagents', each once."""
        every = (*self.tools.values(),
                 *(tool for sub in self.subagents.values() for tool in sub.tools.values()))
        return list({id(tool): tool for tool in every}.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "model": self.model,
            "directory": str(self.directory), "schema": self.schema_name,
            "limits": self.limits.to_json(), "tools": list(self.tools), "env": list(self.env),
            "subagents": {name: {"model": sub.model, "tools": list(sub.tools),
                                 "description": sub.description,
                                 "toolSources": entries_json(sub.tool_sources),
                                 "output": sub.output.to_json() if sub.output else None}
                          for name, sub in self.subagents.items()},
            "baseUrl": self.base_url, "workflow": self.workflow is not None,
            "pricing": {model: price.to_json() for model, price in self.pricing.items()},
            "approvals": {name: policy.to_json() for name, policy in self.approvals.items()},
            "schedules": [schedule.to_json() for schedule in self.schedules],
            "fallbacks": list(self.fallbacks),
            "peers": list(self.peers), "acceptsFrom": list(self.accepts_from),
            "background": list(self.background), "channels": sorted(self.channels),
            "askUser": self.ask_user,
            "memory": self.memory.to_json() if self.memory is not None else None,
            "version": self.version.hash if self.version else None,
            "humanVersion": self.version.human if self.version else None,
            "onChange": self.on_change, "retention": self.retention, "runtime": self.runtime,
            "promptCaching": self.prompt_caching,
            "toolSources": entries_json(self.tool_sources),
            "output": self.output.to_json() if self.output else None,
            "attachments": self.attachments.to_json(),
            "policies": [ref.to_json() for ref in self.policies],
            "notify": [{"url": sub.url, "events": list(sub.events),
                        "secretEnv": sub.secret_env} for sub in self.notify],
            "concurrency": self.concurrency.to_json() if self.concurrency else None,
            "priority": self.priority,
        }


def schema_name_for(name: str) -> str:
    """The Postgres schema of an agent: ``my-crew`` -> ``agent_my_crew``."""
    return "agent_" + name.replace("-", "_")


def discover_agent_dirs(dirs: Sequence[Path] | None = None) -> list[Path]:
    """Agent directories under ``dirs`` (default: the current directory).

    Each given directory counts if it holds an ``agent.yaml``, and so does each of its
    immediate subdirectories that holds one.
    """
    roots = list(dirs) if dirs else [Path.cwd()]
    found: list[Path] = []
    for root in roots:
        root = root.resolve()
        if not root.is_dir():
            raise AgentDefinitionError(f"{root}: not a directory")
        # anything named agent.yaml counts (a FIFO, a dangling link): loading it says what is
        # wrong with it, rather than the directory being passed over in silence
        matches = [root] if os.path.lexists(root / AGENT_FILE) else []
        matches += sorted(child for child in root.iterdir()
                          if child.is_dir() and os.path.lexists(child / AGENT_FILE))
        if not matches:
            raise AgentDefinitionError(
                f"{root}: no {AGENT_FILE} here or in its immediate subdirectories; "
                "create one with `toren init NAME`, or point --dir at an agent directory"
            )
        found += [m for m in matches if m not in found]
    return found


def load_agents(dirs: Iterable[Path], tools: Mapping[str, Tool],
                known_models: ModelCheck | None = None, *,
                unavailable: Mapping[str, str] | None = None,
                import_timeout_s: float | None = None,
                channels: Mapping[str, Channel] | None = None,
                tool_sources: Mapping[str, ToolSource] | None = None) -> list[AgentSpec]:
    """Load every agent directory; names must map to distinct schema names.

    ``tools`` are the plugin-registered tools agents may enable; ``known_models``, if given, is
    called with each model id and raises ``ConfigError`` for one no provider serves.
    ``import_timeout_s`` bounds the import of each ``tools.py`` and ``workflow.py`` (default:
    ``TOREN_IMPORT_TIMEOUT``, else 10 s). ``unavailable`` maps tool names that installed
    plugins could not register on this machine to why (``PluginHost.unavailable_tools``).
    ``channels`` are the installed channels that ``channels:`` may list (``None``: any name is
    accepted and settings are not checked, for tools that only read definitions).
    ``tool_sources`` are the installed tool sources by agent.yaml key (``mcpServers``);
    ``None``: such keys are checked against the schema only and bind no entries.
    """
    agents: list[AgentSpec] = []
    by_schema: dict[str, AgentSpec] = {}
    for directory in dirs:
        agent = load_agent(directory, tools, known_models, import_timeout_s=import_timeout_s,
                           unavailable=unavailable, channels=channels,
                           tool_sources=tool_sources)
        other = by_schema.get(agent.schema_name)
        if other is not None:
            raise AgentDefinitionError(
                f"agent {agent.name!r} ({agent.directory}) and agent {other.name!r} "
                f"({other.directory}) both map to the database schema {agent.schema_name}; "
                "rename one of them (name: in agent.yaml)"
            )
        by_schema[agent.schema_name] = agent
        agents.append(agent)
    return agents


def load_agent(directory: Path, tools: Mapping[str, Tool] | None = None,
               known_models: ModelCheck | None = None, *,
               import_timeout_s: float | None = None,
               unavailable: Mapping[str, str] | None = None,
               channels: Mapping[str, Channel] | None = None,
               tool_sources: Mapping[str, ToolSource] | None = None,
               attempt: int = 1) -> AgentSpec:
    """Load and validate one agent directory, or raise ``AgentDefinitionError``.

    The spec carries the ``version`` of what was loaded: if a definition file changes during
    the load, it is loaded again (``attempt`` counts the tries).
    """
    directory = directory.resolve()
    timeout_s = import_timeout() if import_timeout_s is None else import_timeout_s
    yaml_path = directory / AGENT_FILE
    if not os.path.lexists(yaml_path):
        raise AgentDefinitionError(f"no {AGENT_FILE} in this directory", path=str(directory))
    # agent.yaml holds allowOutsideFiles, so that key cannot vouch for agent.yaml itself
    check_inside(directory, yaml_path, False, remedy=(
        f"{AGENT_FILE} must be in its directory (allowOutsideFiles, which it holds, cannot "
        "allow it): copy the file into the directory"))
    located = load_located(read_definition(yaml_path, max_bytes=MAX_CHARS), path=str(yaml_path))
    if located.data is None:
        located.data = {}
    validate_against_schema(located, load_schema("agent.schema.json"), str(yaml_path))
    data: dict[str, Any] = located.data

    name = data.get("name") or directory.name
    if "name" not in data:
        check_agent_name(name, where=f"{directory} (the directory's name; set name: "
                                     f"in {AGENT_FILE} to choose another)")
    model = data["model"]
    if known_models is not None:
        _check_model(known_models, model, str(yaml_path), located.line_of(("model",)))

    fallbacks = tuple(data.get("fallbacks", ()))
    for index, fallback in enumerate(fallbacks):
        line = located.line_of(("fallbacks", index))
        if fallback == model:
            raise AgentDefinitionError(
                f"fallbacks: {fallback!r} is the agent's own model; list other models, tried "
                "in order when the model fails", path=str(yaml_path), line=line)
        if known_models is not None:
            _check_model(known_models, fallback, str(yaml_path), line, "fallbacks")

    allow_outside = bool(data.get("allowOutsideFiles", False))
    prompt_file = data.get("prompt", "prompt.md")
    output_files = [data["output"]] if isinstance(data.get("output"), str) else []
    before = _snapshot_or_none(directory, prompt_file, data.get("version"), output_files)
    prompt = _read_prompt(directory, prompt_file, yaml_path, located, allow_outside)
    for code_file in ("tools.py", "workflow.py"):
        if os.path.lexists(directory / code_file):
            check_inside(directory, directory / code_file, allow_outside)
    crew_tools = load_tools_file(directory / "tools.py", name, timeout_s=timeout_s)
    enabled = dict(crew_tools)
    env = list(data.get("env", ()))
    env_sources: dict[str, list[str]] = {}
    for index, entry in enumerate(data.get("tools", [])):
        tool_name = entry if isinstance(entry, str) else entry["name"]
        line = located.line_of(("tools", index))
        available = tools or {}
        group = [tool for tool in available.values() if tool.group == tool_name]
        if tool_name not in available and group:  # a group: every tool in it
            for tool in group:
                if tool.name in crew_tools:
                    raise AgentDefinitionError(
                        f"tool {tool.name!r} is defined in tools.py and also enabled by the "
                        f"group {tool_name!r} from {tool.source}; rename the function in "
                        "tools.py", path=str(yaml_path), line=located.line_of(("tools", index)))
                enabled[tool.name] = tool
            continue
        if tool_name not in available and tool_name in (unavailable or {}):
            raise AgentDefinitionError(
                f"tool {tool_name!r} cannot be used on this machine: "
                f"{(unavailable or {})[tool_name]}",
                path=str(yaml_path), line=located.line_of(("tools", index)))
        if tool_name not in available:
            raise AgentDefinitionError(
                f"unknown tool {tool_name!r} in tools:{_suggest(tool_name, available)}; "
                f"installed plugin tools: {_tool_choices(available)}",
                path=str(yaml_path), line=line)
        if tool_name in crew_tools:
            raise AgentDefinitionError(
                f"tool {tool_name!r} is defined in tools.py and also enabled from "
                f"{available[tool_name].source}; rename the function in tools.py",
                path=str(yaml_path), line=line)
        if tool_name in enabled:
            raise AgentDefinitionError(f"tool {tool_name!r} is enabled twice in tools:",
                                       path=str(yaml_path), line=line)
        enabled[tool_name] = _configure_tool(available[tool_name], entry, located, index,
                                             str(yaml_path))
        # the tool's variables join the agent's required env, so startup checks them
        for var in enabled[tool_name].env_vars:
            if var not in env:
                env.append(var)
            where = f"{yaml_path}:{line}" if line else str(yaml_path)
            env_sources.setdefault(var, []).append(f"tool {tool_name} enabled at {where}")
    _add_child_tools(enabled, data, located, str(yaml_path))
    entries = bind_tool_sources(name, data, located, str(yaml_path), tool_sources, enabled)
    for entry in entries:  # their variables join the agent's required env, as tools' do
        line = located.line_of((entry_key(data, entry), entry.name), key=True)
        where = f"{yaml_path}:{line}" if line else str(yaml_path)
        for var in entry.required_env:
            if var not in env:
                env.append(var)
            env_sources.setdefault(var, []).append(
                f"{entry_key(data, entry)}.{entry.name} at {where}")
    notify = _notify(data, located, str(yaml_path))
    for hook in notify:  # a webhook's secret is required at startup, as a tool's key is
        if hook.secret_env is not None and hook.secret_env not in env:
            env.append(hook.secret_env)
            env_sources.setdefault(hook.secret_env, []).append(f"notify: {hook.url}")
    limits = Limits.from_yaml(data.get("limits"))
    agent = AgentSpec(
        name=name, directory=directory, model=model, prompt=prompt,
        description=data.get("description", ""), limits=limits, tools=enabled,
        env=tuple(env), env_sources={var: tuple(who) for var, who in env_sources.items()},
        base_url=data.get("baseUrl"),
        pricing={model_id: Pricing.from_yaml(price)
                 for model_id, price in data.get("pricing", {}).items()},
        compaction=Compaction.from_yaml(data.get("compaction")),
        workflow=load_workflow_file(directory / "workflow.py", name, timeout_s=timeout_s),
        allow_outside_files=allow_outside, fallbacks=fallbacks,
        tool_config={key: data[key] for key in TOOL_CONFIG_KEYS if key in data},
        approvals=_approvals(data, enabled, located, str(yaml_path), entries),
        schedules=load_schedules(located, str(yaml_path)),
        peers=tuple(data.get("peers", ())), accepts_from=tuple(data.get("acceptsFrom", ())),
        background=tuple(data.get("background", ())),
        ask_user=bool(data.get("askUser", False)),
        memory=_memory(data, located, str(yaml_path)),
        channels=load_channels(located, str(yaml_path), channels),
        retention=data.get("retention"), runtime=data.get("runtime", "short"),
        prompt_caching=bool(data.get("promptCaching", True)),
        tool_sources=entries,
        output=load_output(directory, located, ("output",), str(yaml_path), allow_outside),
        attachments=AttachmentPolicy.from_yaml(data.get("attachments")),
        policies=_policies(data, located, str(yaml_path)),
        notify=notify,
        concurrency=Concurrency.from_yaml(data.get("concurrency")),
        priority=int(data.get("priority", 0)),
    )
    if agent.channels and agent.workflow is not None:
        raise AgentDefinitionError(
            "channels: this agent runs a workflow (workflow.py), which takes one input and "
            "ends; chat channels talk to agents in sessions. Remove channels: or workflow.py",
            path=str(yaml_path), line=located.line_of(("channels",), key=True))
    subagents = load_subagents(agent, known_models, tool_sources=tool_sources)
    output_files += [file for sub in subagents.values()
                     if (file := _output_file(sub.output)) is not None]
    version = snapshot(directory, prompt_file, data.get("version"), output_files)
    if before is None or {path: version.files.get(path) for path in before.files} != dict(
            before.files):
        # a file changed while the directory was loaded: what was loaded may mix both
        if attempt >= 3:
            raise AgentDefinitionError("the agent directory kept changing while it was "
                                       "loaded; try again once it is written",
                                       path=str(directory))
        return load_agent(directory, tools, known_models, import_timeout_s=import_timeout_s,
                          unavailable=unavailable, channels=channels,
                          tool_sources=tool_sources, attempt=attempt + 1)
    # the variables of the subagents' own tool-source entries are required at startup too
    env_sources = {var: list(who) for var, who in agent.env_sources.items()}
    for sub in subagents.values():
        for entry in sub.tool_sources:
            for var in entry.required_env:
                if entry not in agent.tool_sources:
                    env_sources.setdefault(var, []).append(
                        f"mcpServers.{entry.name} of {sub.path}")
    return AgentSpec(**{**agent.__dict__, "subagents": subagents, "version": version,
                        "on_change": data.get("onChange", "continue"),
                        "env": tuple(dict.fromkeys([*agent.env, *env_sources])),
                        "env_sources": {var: tuple(who) for var, who in env_sources.items()}})


def _snapshot_or_none(directory: Path, prompt_file: str, human: str | None,
                      extra: Sequence[str] = ()) -> AgentVersion | None:
    """The version before loading; ``None`` when a file cannot be read (the load says why)."""
    try:
        return snapshot(directory, prompt_file, human, extra)
    except (AgentDefinitionError, ValueError):
        return None


def _output_file(output: OutputSchema | None) -> str | None:
    """The schema file of an ``output:`` (relative to the agent directory), if it is one."""
    if output is None or output.source.endswith(":output"):
        return None
    return output.source


#: Largest output schema file, in bytes (a schema goes with every model call of its task).
MAX_SCHEMA_BYTES = 256 * 1024


def load_output(directory: Path, located: LocatedYaml, at: tuple[str, ...], path: str,
                allow_outside: bool) -> OutputSchema | None:
    """``output:`` of agent.yaml or a subagent's front matter: a JSON Schema inline or in a
    file of the agent directory (JSON, or YAML by its suffix). It must be a valid JSON Schema
    (2020-12) whose root is an object type, with ``$ref`` only within itself; any other is an
    ``AgentDefinitionError`` naming the file, line and field."""
    value = located.data.get(at[0]) if isinstance(located.data, dict) else None
    if value is None:
        return None
    where = Path(path).relative_to(directory).as_posix() if Path(path).is_relative_to(
        directory) else path
    line = located.line_of(at)
    if isinstance(value, dict):
        _check_output_schema(value, f"{where}:output", path,
                             lambda field: located.line_of((*at, *field)))
        return OutputSchema(schema=value, source=f"{where}:output")
    relative = Path(value)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise AgentDefinitionError(
            f"output: {_short(value)} is not a file inside the agent directory; give a path "
            "relative to it, such as schemas/answer.json, or the schema itself",
            path=path, line=line)
    file = directory / relative
    if os.path.lexists(file):
        check_inside(directory, file, allow_outside)
    if not os.path.lexists(file):
        raise AgentDefinitionError(
            f"output: the schema file {relative.as_posix()} is missing: create {file} with "
            "the JSON Schema of the final answer, or write the schema under output:",
            path=path, line=line)
    if file.is_dir():
        raise AgentDefinitionError(f"output: {file} is a directory; name the file that holds "
                                   "the JSON Schema", path=path, line=line)
    text = read_definition(file, max_bytes=MAX_SCHEMA_BYTES,
                           hint="an output schema goes with every model call of its task")
    lines: Callable[[tuple[str | int, ...]], int | None] = _no_line
    if file.suffix.lower() in (".yaml", ".yml"):
        parsed = load_located(text, path=str(file))
        schema: Any = parsed.data
        lines = parsed.line_of
    else:
        try:
            schema = json.loads(text)
        except ValueError as exc:
            raise AgentDefinitionError(
                f"not JSON: {getattr(exc, 'msg', exc)} (a .yaml or .yml file is read as YAML)",
                path=str(file), line=getattr(exc, "lineno", None)) from None
    source = relative.as_posix()
    if not isinstance(schema, dict):
        raise AgentDefinitionError(f"the output schema must be a JSON object (a JSON Schema), "
                                   f"not {_json_type(schema)}", path=str(file))
    _check_output_schema(schema, source, str(file), lines, field_prefix="")
    return OutputSchema(schema=schema, source=source)


def _no_line(field: tuple[str | int, ...]) -> int | None:
    return None


def _check_output_schema(schema: dict[str, Any], source: str, path: str,
                         line_of: Callable[[tuple[str | int, ...]], int | None], *,
                         field_prefix: str = "output") -> None:
    import jsonschema

    def named(field: Sequence[str | int]) -> str:
        return ".".join(str(part) for part in (field_prefix, *field) if part != "") or "(root)"

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        field = tuple(exc.absolute_path)
        raise AgentDefinitionError(
            f"{named(field)}: not a valid JSON Schema: {exc.message} (the schema of "
            f"{source} is JSON Schema 2020-12)", path=path, line=line_of(field)) from None
    if schema.get("type") != "object":
        raise AgentDefinitionError(
            f"{named(('type',))}: the output schema's root must be an object (type: object); "
            "the run's output is that object: put a list or a single value in one of its "
            "properties", path=path, line=line_of(("type",)))
    pending: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while pending:
        node, field = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                raise AgentDefinitionError(
                    f"{named((*field, '$ref'))}: {_short(ref)} points outside the schema; "
                    "Toren fetches nothing: put the definition under $defs and refer to it "
                    "as #/$defs/<name>", path=path, line=line_of((*field, "$ref")))
            pending += [(value, (*field, key)) for key, value in node.items()]
        elif isinstance(node, list):
            pending += [(value, (*field, index)) for index, value in enumerate(node)]


#: agent.yaml sections that configure plugin tools (validated by agent.schema.json).
TOOL_CONFIG_KEYS = ("sandbox", "sql")


def _tool_choices(available: Mapping[str, Tool]) -> str:
    """The tool names and groups that ``tools:`` accepts, for an error message."""
    groups = sorted({f"{tool.group} (group)" for tool in available.values() if tool.group})
    return ", ".join([*sorted(available), *groups]) or "none"


#: agent.yaml keys whose entries a tool source binds, and the distribution that serves each.
TOOL_SOURCE_KEYS = {"mcpServers": "toren-mcp"}


def entry_key(data: Mapping[str, Any], entry: ToolSourceEntry) -> str:
    """The agent.yaml key that declared ``entry``."""
    return next((key for key in TOOL_SOURCE_KEYS if entry.name in (data.get(key) or {})),
                next(iter(TOOL_SOURCE_KEYS)))


def bind_tool_sources(agent: str, data: Mapping[str, Any], located: LocatedYaml, path: str,
                      sources: Mapping[str, ToolSource] | None,
                      tools: Mapping[str, Tool], *, taken: Iterable[str] = ()
                      ) -> tuple[ToolSourceEntry, ...]:
    """The entries of each tool-source key (``mcpServers:``) bound by their installed
    sources; none when ``sources`` is ``None`` (definitions read, not served). A tool whose
    name starts with an entry's prefix, or two entries with one prefix, are errors: the
    model could not tell their tools apart."""
    entries: list[ToolSourceEntry] = []
    prefixes = {prefix: "the agent's mcpServers" for prefix in taken}
    for key, distribution in TOOL_SOURCE_KEYS.items():
        declared = data.get(key) or {}
        if not declared or sources is None:
            continue
        source = sources.get(key)
        if source is None:
            raise AgentDefinitionError(
                f"{key}: no installed plugin serves this key; install {distribution} "
                f"(pip install {distribution}) or remove {key}:", path=path,
                line=located.line_of((key,), key=True))
        for name, config in declared.items():
            line = located.line_of((key, name), key=True)
            try:
                entry = source.bind(agent, name, config)
            except ToolError as exc:
                raise AgentDefinitionError(f"{key}.{name}: {exc.message}", path=path,
                                           line=line) from None
            if entry.prefix in prefixes:
                raise AgentDefinitionError(
                    f"{key}.{name}: its tools would be named {entry.prefix}... as those of "
                    f"{prefixes[entry.prefix]}; rename one of them", path=path, line=line)
            clash = next((tool for tool in tools if tool.startswith(entry.prefix)), None)
            if clash is not None:
                raise AgentDefinitionError(
                    f"{key}.{name}: its tools are named {entry.prefix}<tool>, and so is the "
                    f"tool {clash!r} ({tools[clash].source or 'tools.py'}); rename that tool "
                    "or the server", path=path, line=line)
            prefixes[entry.prefix] = f"{key}.{name}"
            entries.append(entry)
    return tuple(entries)


def _approvals(data: dict[str, Any], tools: Mapping[str, Tool], located: LocatedYaml,
               path: str, entries: Sequence[ToolSourceEntry] = ()
               ) -> dict[str, ApprovalPolicy]:
    """``approvals:`` of agent.yaml, plus every tool marked ``requires_approval=True``. A
    tool of a tool-source entry (``time__convert_time``) is named before it is discovered:
    its name only has to start with the entry's prefix."""
    policies = {name: ApprovalPolicy() for name, tool in tools.items() if tool.requires_approval}

    def policy(tool_name: str, entry: dict[str, Any] | None) -> ApprovalPolicy:
        try:
            return ApprovalPolicy.from_yaml(entry)
        except ValueError as exc:
            raise AgentDefinitionError(f"approvals.{tool_name}: {exc}", path=path,
                                       line=located.line_of(("approvals", tool_name),
                                                            key=True)) from exc

    for tool_name, entry in (data.get("approvals") or {}).items():
        if any(tool_name.startswith(e.prefix) and tool_name != e.prefix for e in entries):
            policies[tool_name] = policy(tool_name, entry)
            continue
        if tool_name not in tools:
            raise AgentDefinitionError(
                f"approvals: the agent has no tool {tool_name!r}"
                f"{_suggest(tool_name, tools)}; its tools: {', '.join(tools) or 'none'}",
                path=path, line=located.line_of(("approvals", tool_name), key=True))
        policies[tool_name] = policy(tool_name, entry)
    return policies


def _policies(data: dict[str, Any], located: LocatedYaml, path: str) -> tuple[PolicyRef, ...]:
    """``policies:`` of agent.yaml (the schema checked their shape); a plugin listed twice is
    an error at its line. Whether each is installed is checked by the runtime that serves the
    agent (``toren.host.runtime``), which has the plugins."""
    refs: list[PolicyRef] = []
    for index, entry in enumerate(data.get("policies") or ()):
        ref = (PolicyRef(entry) if isinstance(entry, str)
               else PolicyRef(entry["name"], dict(entry.get("settings") or {})))
        if any(other.name == ref.name for other in refs):
            raise AgentDefinitionError(f"policies: {ref.name!r} is listed twice",
                                       path=path, line=located.line_of(("policies", index)))
        refs.append(ref)
    return tuple(refs)


def _memory(data: dict[str, Any], located: LocatedYaml, path: str) -> MemoryConfig | None:
    """``memory:`` of agent.yaml (the schema checked its shape); a setting that cannot work
    (``shareWith`` without the scope ``shared``, a ``keep`` that is no age) is an error at
    its line."""
    try:
        return MemoryConfig.from_yaml(data.get("memory"))
    except ValueError as exc:
        field_name = str(exc).split(":", 1)[0].removeprefix("memory.")
        raise AgentDefinitionError(str(exc), path=path,
                                   line=located.line_of(("memory", field_name), key=True)
                                   or located.line_of(("memory",), key=True)) from None


def _add_child_tools(enabled: dict[str, Tool], data: dict[str, Any], located: LocatedYaml,
                     path: str) -> None:
    """``ask_<peer>`` per ``peers:`` entry, ``start_background_run`` for ``background:`` and
    ``ask_user`` for ``askUser: true``;
    a name clash with another tool is an error at the line of the entry."""
    added: list[tuple[Tool, tuple[str | int, ...]]] = [
        (peer_tool(peer), ("peers", index)) for index, peer in
             enumerate(data.get("peers", ()))]
    if data.get("background"):
        added.append((background_tool(data["background"]), ("background",)))
    if data.get("askUser"):
        added.append((ask_user_tool(), ("askUser",)))
    config = _memory(data, located, path)
    if config is not None:
        added += [(tool, ("memory",)) for tool in memory_tools(config)]
    for tool, at in added:
        other = enabled.get(tool.name)
        if other is not None:
            raise AgentDefinitionError(
                f"{'.'.join(map(str, at))}: the tool {tool.name!r} it adds clashes with the tool "
                f"of that name from {other.source or 'tools.py'}; rename that tool",
                path=path, line=located.line_of(at))
        enabled[tool.name] = tool


def _configure_tool(tool: Tool, entry: str | dict[str, Any], located: LocatedYaml,
                    index: int, path: str) -> Tool:
    """The agent's copy of a plugin tool: ``{name, env}`` renames the variables it reads."""
    if isinstance(entry, str) or not entry.get("env"):
        return tool
    renames: dict[str, str] = entry["env"]
    for declared in renames:
        if declared not in tool.required_env:
            raise AgentDefinitionError(
                f"tools[{index}].env: tool {tool.name!r} reads no variable {declared!r}"
                f"{_suggest(declared, tool.required_env)}; it reads "
                f"{', '.join(tool.required_env) or 'no variables'}", path=path,
                line=located.line_of(("tools", index, "env", declared), key=True))
    return tool.with_env_names(renames)


def check_agent_name(name: str, *, where: str) -> None:
    if not NAME_PATTERN.match(name):
        raise AgentDefinitionError(
            f"{where}: agent name {name!r} cannot be mapped to a database schema name: use "
            "lowercase letters, digits, '-' and '_', starting with a letter, at most 57 "
            "characters (my-crew becomes schema agent_my_crew)"
        )


def validate_against_schema(located: LocatedYaml, schema: dict[str, Any], path: str) -> None:
    """Validate parsed YAML; the first error (by line) names file, line, field and a fix."""
    import jsonschema  # ~0.15 s to import: only validation needs it, not every toren command

    validator = jsonschema.Draft202012Validator(schema)
    if not isinstance(located.data, dict):
        raise AgentDefinitionError(
            f"expected a mapping of keys ({', '.join(schema.get('properties', {}))}), "
            f"got {type(located.data).__name__}", path=path, line=located.line_of(()))
    # A misspelt key also makes a required one "missing": report the misspelling first.
    problems = sorted(
        ((error.validator == "required", *_describe_error(error, located))
         for error in validator.iter_errors(located.data)),
        key=lambda problem: (problem[0], problem[1] or 0, problem[2]))
    if problems:
        _required, line, message = problems[0]
        more = f" ({len(problems) - 1} more problem(s) after this one)" if len(problems) > 1 else ""
        raise AgentDefinitionError(message + more, path=path, line=line)


#: Characters of valid keys an unknown-key error lists before it points at the reference
#: instead (agent.yaml's top level has more keys than a one-line error has room for).
MAX_KEY_LISTING = 200


def _key_listing(allowed: list[str]) -> str:
    """The valid keys, comma-separated; past ``MAX_KEY_LISTING`` characters the first of them
    and where the rest are documented."""
    listing = ", ".join(allowed)
    if len(listing) <= MAX_KEY_LISTING:
        return listing
    shown: list[str] = []
    for key in allowed:
        if len(", ".join([*shown, key])) > MAX_KEY_LISTING:
            break
        shown.append(key)
    return (f"{', '.join(shown)} and {len(allowed) - len(shown)} more "
            "(docs/reference/agent-yaml.md)")


def _describe_error(error: jsonschema.ValidationError, located: LocatedYaml
                    ) -> tuple[int | None, str]:
    if error.validator in ("anyOf", "oneOf"):
        # one of several shapes (a tool is a name or a {name, env} mapping): explain the
        # failure of the shape the value has, not that it fits none of them
        fitting = [sub for sub in error.context or () if sub.validator != "type"]
        if fitting:
            from jsonschema.exceptions import best_match

            return _describe_error(best_match(fitting), located)
    at = tuple(error.absolute_path)
    field_name = ".".join(str(part) for part in at) or "(top level)"
    if error.validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        unknown = [key for key in error.instance if key not in allowed]
        key = unknown[0]
        where = f"{field_name}." if at else ""
        return (located.line_of((*at, key), key=True),
                # the valid keys take most of a one-line error: the unknown one gets less room
                f"unknown key {_short(where + key, 40)}{_suggest(key, allowed)}; valid keys here: "
                f"{_key_listing(allowed)}")
    if error.validator == "required":
        return located.line_of(at), f"{field_name}: {error.message}"
    if error.validator == "pattern" and at == ("name",):
        return located.line_of(at), (
            f"agent name {_short(error.instance)} cannot be mapped to a database schema name: use "
            "lowercase letters, digits, '-' and '_', starting with a letter, at most 57 "
            "characters (my-crew becomes schema agent_my_crew)")
    if error.validator == "pattern" and at and (at[-1] == "model" or at[0] == "fallbacks"):
        return located.line_of(at), (f"{field_name}: {_short(error.instance)} is not a provider "
                                     "prefix and a model name; write '<provider>/<model>', "
                                     "e.g. toren/scripted")
    if error.validator == "type":
        expected = error.validator_value
        return located.line_of(at), (f"{field_name}: expected {expected}, got "
                                     f"{_json_type(error.instance)} {_short(error.instance)}")
    if "propertyNames" in error.absolute_schema_path and at == ("channels",):
        return located.line_of((*at, error.instance), key=True), (
            f"channels: {_short(error.instance)} is not a channel name; channel names are "
            "lowercase, such as telegram or whatsapp")
    if "propertyNames" in error.absolute_schema_path and isinstance(error.instance, str):
        return located.line_of((*at, error.instance), key=True), (
            f"{field_name}: the key {_short(error.instance)} is not a model id; write "
            "'<provider>/<model>', e.g. toren/scripted")
    if len(error.message) > 2 * _SHORT:  # jsonschema's message repeats the whole value
        return located.line_of(at), (f"{field_name}: {_short(error.instance)} is invalid "
                                     f"({error.validator}: {_short(error.validator_value)})")
    return located.line_of(at), f"{field_name}: {error.message}"


_SHORT = 80


def _short(value: Any, limit: int = _SHORT) -> str:
    """``repr(value)``, cut to ``limit`` characters or so: it fits in a one-line error."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text):,} characters)"


def _json_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "mapping", type(None): "null"}.get(type(value), type(value).__name__)


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_model(known_models: ModelCheck, model: str, path: str, line: int | None,
                 key: str = "model") -> None:
    try:
        known_models(model)
    except TorenError as exc:
        raise AgentDefinitionError(f"{key}: {exc.message}", path=path, line=line) from exc


def import_timeout(env: Mapping[str, str] | None = None) -> float:
    """Seconds an import of ``tools.py`` or ``workflow.py`` may take: ``TOREN_IMPORT_TIMEOUT``,
    else 10."""
    return positive_number(os.environ if env is None else env, IMPORT_TIMEOUT_ENV,
                           DEFAULT_IMPORT_TIMEOUT_S, float)


def check_inside(directory: Path, path: Path, allow_outside: bool, *,
                 remedy: str | None = None) -> None:
    """Refuse a definition file that resolves outside ``directory`` (a resolved path).

    A symbolic link out of the directory would not travel with it, and it exposes whatever it
    points at: a ``prompt.md`` linked to ``/etc/passwd`` is sent to the model provider.
    ``allowOutsideFiles: true`` in agent.yaml allows it; ``remedy`` replaces that advice
    where it does not apply.
    """
    if allow_outside:
        return
    try:
        target = path.resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # a loop of symbolic links
        raise AgentDefinitionError(f"cannot be resolved: {exc}", path=str(path)) from None
    if not target.is_relative_to(directory):
        raise AgentDefinitionError(
            f"resolves to {target}, outside the agent directory (through a symbolic link); "
            + (remedy or "copy the file into the directory, or set allowOutsideFiles: true in "
               f"{AGENT_FILE} to allow it"), path=str(path))


def _read_prompt(directory: Path, prompt_file: str, yaml_path: Path,
                 located: LocatedYaml, allow_outside: bool = False) -> str:
    line = located.line_of(("prompt",)) if "prompt" in located.data else None
    relative = Path(prompt_file)
    # The directory is the unit that is deployed: a prompt from elsewhere would not travel with it.
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise AgentDefinitionError(
            f"prompt: {_short(prompt_file)} is not a file inside the agent directory; give a "
            "path relative to it, such as prompt.md", path=str(yaml_path), line=line)
    prompt_path = directory / relative
    if os.path.lexists(prompt_path):
        check_inside(directory, prompt_path, allow_outside)
    if prompt_path.is_dir():
        raise AgentDefinitionError(f"prompt: {prompt_path} is a directory; name the file that "
                                   "holds the system prompt", path=str(yaml_path), line=line)
    if not os.path.lexists(prompt_path):  # anything else there: read_definition says what
        raise AgentDefinitionError(
            f"the prompt file {prompt_path.name} is missing: create {prompt_path} with the "
            "system prompt, or set prompt: to the file that holds it",
            path=str(yaml_path), line=line)
    return read_definition(prompt_path, max_bytes=MAX_PROMPT_BYTES, hint=PROMPT_TOO_LARGE)


PROMPT_TOO_LARGE = ("a prompt goes with every model call; shorten it, or let the agent read "
                    "long reference material through a tool")


def read_definition(path: Path, *, max_bytes: int | None = None,
                    hint: str = "keep long text in prompt.md") -> str:
    """A file of an agent directory as text (a UTF-8 byte order mark is dropped).

    Raises ``AgentDefinitionError`` if it cannot be read, is not a regular file (a FIFO or a
    device is never read: one would hang the loader, the other need not end), is larger than
    ``max_bytes`` (the error ends with ``hint``) or is not UTF-8. At most ``max_bytes + 1``
    bytes are read, so a file that grows, or one whose size the file system does not report,
    cannot exhaust memory.
    """
    try:
        fd, info = open_regular(path, stat_first=True)
        with os.fdopen(fd, "rb") as file:
            if max_bytes is None:
                raw = file.read()
            else:
                too_large = (f"more than the {max_bytes:,} bytes an agent definition of its "
                             f"kind may have; {hint}")
                if info.st_size > max_bytes:
                    raise AgentDefinitionError(f"the file is {info.st_size:,} bytes, "
                                               f"{too_large}", path=str(path))
                raw = file.read(max_bytes + 1)
                if len(raw) > max_bytes:  # it grew, or its size is not reported (/proc)
                    raise AgentDefinitionError(f"the file holds {too_large}", path=str(path))
    except NotARegularFile as exc:
        raise not_regular(path, exc) from None
    except OSError as exc:
        raise AgentDefinitionError(f"cannot be read: {exc.strerror or exc}",
                                   path=str(path)) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise AgentDefinitionError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} cannot be "
                                   "decoded); save the file as UTF-8", path=str(path),
                                   line=line) from None


def not_regular(path: Path, exc: NotARegularFile) -> AgentDefinitionError:
    """The error for a definition file that is a FIFO, a device, a socket or a directory."""
    return AgentDefinitionError(f"is {exc.kind}, not a regular file; the files of an agent "
                                "directory must be regular files: replace it with one",
                                path=str(path))


def _code_file_exists(path: Path) -> bool:
    """Whether ``path`` (tools.py, workflow.py) is there to import: ``False`` if nothing is;
    ``AgentDefinitionError`` if something is that cannot be (a FIFO, a dangling link...)."""
    if not os.path.lexists(path):
        return False
    try:
        os.close(open_regular(path, stat_first=True)[0])
    except NotARegularFile as exc:
        raise not_regular(path, exc) from None
    except OSError as exc:
        raise AgentDefinitionError(f"cannot be read: {exc.strerror or exc}",
                                   path=str(path)) from None
    return True


def load_tools_file(path: Path, agent_name: str, *,
                    timeout_s: float | None = None) -> dict[str, Tool]:
    """Every public function defined in ``tools.py`` as a tool (empty if there is no file).

    The import may take ``timeout_s`` (default: ``TOREN_IMPORT_TIMEOUT``, else 10 s).
    """
    if not _code_file_exists(path):
        return {}
    module = _import_file(path, f"toren_crew_{schema_name_for(agent_name)}_tools",
                          import_timeout() if timeout_s is None else timeout_s)
    found: dict[str, Tool] = {}
    for attr, value in vars(module).items():
        if attr.startswith("_"):
            continue
        if not inspect.isfunction(value):
            if hasattr(value, TOOL_MARK) and not isinstance(value, ModuleType):
                raise AgentDefinitionError(
                    f"{attr} is marked with @tool but is a {type(value).__name__}, not a "
                    "function; tools are functions (def or async def)", path=str(path),
                    line=_source_line(value))
            continue
        if value.__module__ != module.__name__:
            continue  # imported helpers are not tools
        try:
            tool = tool_from_function(value, source=str(path))
        except ToolError as exc:
            raise AgentDefinitionError(exc.message, path=str(path),
                                       line=_source_line(value)) from exc
        if tool.name in found:
            raise AgentDefinitionError(f"two functions are named tool {tool.name!r}",
                                       path=str(path), line=_source_line(value))
        found[tool.name] = tool
    return found


def _source_line(value: object) -> int | None:
    """The line that defines ``value``, if it has one (``exec`` and C code have none)."""
    try:
        return inspect.getsourcelines(value)[1]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None


def load_workflow_file(path: Path, agent_name: str, *,
                       timeout_s: float | None = None) -> Callable[..., Any] | None:
    """``async def workflow(ctx)`` from ``workflow.py``, or ``None`` if there is no file.

    The import may take ``timeout_s`` (default: ``TOREN_IMPORT_TIMEOUT``, else 10 s).
    """
    if not _code_file_exists(path):
        return None
    module = _import_file(path, f"toren_crew_{schema_name_for(agent_name)}_workflow",
                          import_timeout() if timeout_s is None else timeout_s)
    function = getattr(module, "workflow", None)
    if function is None:
        raise AgentDefinitionError("defines no `async def workflow(ctx)`", path=str(path))
    if not inspect.iscoroutinefunction(function):
        kind = "a plain def" if inspect.isfunction(function) else type(function).__name__
        raise AgentDefinitionError(f"`workflow` must be an async function, "
                                   f"`async def workflow(ctx)`, not {kind}", path=str(path),
                                   line=_source_line(function))
    return function  # type: ignore[no-any-return]


class _RegularFileLoader(importlib.machinery.SourceFileLoader):
    """Imports a definition file reading only regular files, without blocking: the source
    (checked before the import, but it may be swapped for a FIFO since) and its cached
    bytecode (one that is not a regular file raises ``OSError``: the import compiles the source
    instead)."""

    def get_data(self, path: str) -> bytes:
        return read_regular(Path(path))


class _ExitAtImport(BaseException):
    """``os._exit`` was called by the thread importing an agent's code (see ``_import_file``)."""

    def __init__(self, status: object) -> None:
        super().__init__(status)
        self.status = status


#: Threads importing agent code now, and the ``os._exit`` to restore when none is.
_importing: set[threading.Thread] = set()
_importing_lock = threading.Lock()
_real_exit = os._exit


def _exit_unless_importing(status: int) -> NoReturn:
    if threading.current_thread() in _importing:
        raise _ExitAtImport(status)
    _real_exit(status)


def _watch_exit(thread: threading.Thread, watching: bool) -> None:
    """Make ``os._exit`` raise in ``thread`` (while ``watching``); other threads exit as usual."""
    global _real_exit
    with _importing_lock:
        if watching:
            if not _importing:
                _real_exit = os._exit
                os._exit = _exit_unless_importing
            _importing.add(thread)
        else:
            _importing.discard(thread)
            if not _importing and os._exit is _exit_unless_importing:
                os._exit = _real_exit


def _import_file(path: Path, module_name: str, timeout_s: float) -> ModuleType:
    """Import ``path`` as ``module_name``; any failure is an ``AgentDefinitionError`` naming it.

    Code at the top of the file runs here, at startup, and three things in it would otherwise
    stop the process with no word about the file: a loop or a wait that never ends, a
    ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``...), and ``os._exit``. So the
    import runs in a daemon thread that the loader waits on for at most ``timeout_s``. A
    thread cannot be killed: after the timeout it is abandoned, and because it is a daemon the
    process can still exit with the error (the CLI does). A child process could be killed,
    but the module's import-time code would run twice (once to probe, once to use, every side
    effect doubled), and the functions the agent calls must live in this process anyway.
    ``os._exit`` skips every handler, so while the thread imports, ``os._exit`` called from
    it raises instead (calls from other threads exit as usual). One consequence of the
    thread: code that must run in the main thread, such as ``signal.signal``, fails at import.
    """
    spec = importlib.util.spec_from_file_location(
        module_name, path, loader=_RegularFileLoader(module_name, str(path)))
    assert spec is not None and spec.loader is not None
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)
    failure: list[BaseException] = []
    finished = threading.Event()

    def run() -> None:
        try:
            loader.exec_module(module)
        except BaseException as exc:  # everything is reported by the loading thread
            failure.append(exc)
        finally:
            finished.set()

    thread = threading.Thread(target=run, name=f"toren-import-{module_name}", daemon=True)
    sys.modules[module_name] = module
    _watch_exit(thread, True)
    try:
        thread.start()
        done = finished.wait(timeout_s)
    finally:
        _watch_exit(thread, False)
    if not done:
        sys.modules.pop(module_name, None)
        raise AgentDefinitionError(
            f"importing it did not finish within {timeout_s:g} s ({IMPORT_TIMEOUT_ENV}); "
            "code at the top of the file runs at startup and must return quickly: move loops "
            "and waits into a function (if it only imports slow libraries, raise the timeout)",
            path=str(path), line=_running_line(thread, path))
    if not failure:
        return module
    sys.modules.pop(module_name, None)
    exc = failure[0]
    line = _failing_line(exc, path)
    if isinstance(exc, SyntaxError):
        raise AgentDefinitionError(f"syntax error: {exc.msg}", path=str(path),
                                   line=exc.lineno) from None
    if isinstance(exc, SystemExit | _ExitAtImport):
        # e.g. a script's sys.exit() or argparse outside `if __name__ == "__main__":`
        called = "sys.exit" if isinstance(exc, SystemExit) else "os._exit"
        status = exc.code if isinstance(exc, SystemExit) else exc.status
        raise AgentDefinitionError(
            f"importing it called {called}({status!r}); code that runs on import must not "
            "exit: move it under `if __name__ == \"__main__\":`", path=str(path),
            line=line) from None
    detail = " ".join(str(exc).split())  # one line, whatever the exception said
    if isinstance(exc, Exception):
        raise AgentDefinitionError(f"importing it failed: {type(exc).__name__}: {detail}",
                                   path=str(path), line=line) from exc
    # KeyboardInterrupt, GeneratorExit, a BaseException subclass: not errors a module's
    # import may end with, and a raw one would escape every handler with a bare traceback
    raise AgentDefinitionError(
        f"importing it raised {type(exc).__name__}{': ' + detail if detail else ''}, which "
        "stops a process rather than reporting an error; raise an Exception instead, or "
        "remove the code that raises it", path=str(path), line=line) from None


def _running_line(thread: threading.Thread, path: Path) -> int | None:
    """The line of ``path`` that ``thread`` is running now (where a hung import hangs)."""
    frame = sys._current_frames().get(thread.ident or 0)
    target = str(path.resolve())
    while frame is not None:
        if frame.f_code.co_filename in (target, str(path)):
            return frame.f_lineno
        frame = frame.f_back
    return None


def _failing_line(exc: BaseException, path: Path) -> int | None:
    """The last line of ``path`` in the traceback of ``exc``."""
    target = str(path.resolve())
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename == target or f.filename == str(path)]
    return frames[-1].lineno if frames else None


FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?\n?", re.DOTALL | re.MULTILINE)
FRONT_MATTER_START = re.compile(r"\A---[ \t]*\r?\n")


def load_subagents(agent: AgentSpec, known_models: ModelCheck | None = None, *,
                   tool_sources: Mapping[str, ToolSource] | None = None
                   ) -> dict[str, SubagentSpec]:
    """``subagents/*.md`` of an agent: YAML front matter between ``---`` lines, then the prompt.

    A subagent uses the agent's tool-source entries (``mcpServers:``) unless it lists
    ``tools:``, where ``<server>__*`` takes one of them; its own ``mcpServers:`` add more."""
    folder = agent.directory / "subagents"
    if not folder.is_dir():
        return {}
    root = load_schema("agent.schema.json")
    schema = {"$schema": root["$schema"], "$defs": root["$defs"], **root["$defs"]["subagent"]}
    subagents: dict[str, SubagentSpec] = {}
    for path in sorted(folder.glob("*.md")):
        name = path.stem
        if not SUBAGENT_NAME.match(name):
            raise AgentDefinitionError(
                f"subagent name {_short(name)} (the file name) is invalid: use lowercase "
                "letters, digits, '-' and '_', starting with a letter", path=str(path))
        check_inside(agent.directory, path, agent.allow_outside_files)
        if path.is_dir():  # anything else that is not a regular file: read_definition says
            raise AgentDefinitionError("is not a file; a subagent is a Markdown file "
                                       "subagents/<name>.md", path=str(path))
        text = read_definition(path, max_bytes=MAX_PROMPT_BYTES, hint=PROMPT_TOO_LARGE)
        match = FRONT_MATTER.match(text)
        if match is None and FRONT_MATTER_START.match(text):
            raise AgentDefinitionError("the front matter that starts here has no closing '---' "
                                       "line; end it with a line of three dashes before the "
                                       "prompt", path=str(path), line=1)
        front = match.group(1) if match else ""
        body = text[match.end():] if match else text
        located = load_located(front, path=str(path), line_offset=1)
        if located.data is None:
            located.data = {}
        validate_against_schema(located, schema, str(path))
        data: dict[str, Any] = located.data
        model = data.get("model", agent.model)
        if known_models is not None and "model" in data:
            _check_model(known_models, model, str(path), located.line_of(("model",)))
        tools = dict(agent.tools)
        inherited = agent.tool_sources
        if "tools" in data:
            tools = {}
            inherited = ()
            for index, tool_name in enumerate(data["tools"]):
                taken = next((entry for entry in agent.tool_sources
                              if tool_name == f"{entry.prefix}*"), None)
                if taken is not None:
                    inherited += (taken,)
                    continue
                if tool_name not in agent.tools:
                    raise AgentDefinitionError(
                        f"unknown tool {tool_name!r}{_suggest(tool_name, agent.tools)}; a "
                        "subagent may use the agent's tools: "
                        f"{', '.join(agent.tools) or 'none'}",
                        path=str(path), line=located.line_of(("tools", index)))
                tools[tool_name] = agent.tools[tool_name]
        if not body.strip():
            raise AgentDefinitionError("the prompt (the text after the front matter) is empty",
                                       path=str(path))
        own = bind_tool_sources(agent.name, data, located, str(path), tool_sources, tools,
                                taken=[entry.prefix for entry in agent.tool_sources])
        subagents[name] = SubagentSpec(
            name=name, description=data.get("description", ""), model=model,
            prompt=body.strip() + "\n", tools=tools,
            limits=Limits.from_yaml(data.get("limits"), agent.limits), path=path,
            tool_sources=(*inherited, *own),
            output=load_output(agent.directory, located, ("output",), str(path),
                               agent.allow_outside_files),
        )
    return subagents


def _notify(data: Mapping[str, Any], located: LocatedYaml,
            path: str) -> tuple[WebhookSubscription, ...]:
    """``notify:`` as subscriptions (the schema checked its shape; this checks each URL)."""
    if "notify" not in data:
        return ()
    entries = [{("secret_env" if key == "secretEnv" else key): value
                for key, value in entry.items()} if isinstance(entry, dict) else entry
               for entry in data["notify"]]
    try:
        return parse_subscriptions(entries, field="notify", allow_secret_env=True)
    except InvalidWebhook as exc:
        raise AgentDefinitionError(exc.message, path=path,
                                   line=located.line_of(("notify",), key=True)) from None


def missing_env(agents: Iterable[AgentSpec], extra: Mapping[str, Iterable[str]] | None = None,
                env: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """Map each missing environment variable to the agents that need it."""
    env = os.environ if env is None else env
    missing: dict[str, list[str]] = {}
    for agent in agents:
        needed = list(agent.env) + list((extra or {}).get(agent.name, ()))
        for var in needed:
            if not env.get(var):
                missing.setdefault(var, [])
                if agent.name not in missing[var]:
                    missing[var].append(agent.name)
    return missing


def check_env(agents: Iterable[AgentSpec], extra: Mapping[str, Iterable[str]] | None = None,
              env: Mapping[str, str] | None = None) -> None:
    """Raise ``MissingEnvError`` listing every missing variable (and who needs it) at once."""
    agents = list(agents)
    missing = missing_env(agents, extra, env)
    if missing:
        sources = {(agent.name, var): who for agent in agents
                   for var, who in agent.env_sources.items()}

        def needed_by(var: str, names: list[str]) -> str:
            return ", ".join(
                f"{name}: {'; '.join(sources[(name, var)])}" if (name, var) in sources else name
                for name in names)

        listed = "; ".join(f"{var} (needed by {needed_by(var, names)})"
                           for var, names in sorted(missing.items()))
        raise MissingEnvError(f"missing environment variables: {listed}. Set them, e.g. "
                              f"export {sorted(missing)[0]}=...")
