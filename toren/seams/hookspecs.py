"""Toren's plugin hooks: what a plugin (entry-point group ``toren``) may register.

Every ``register_*`` hook receives a ``register`` callback (or the object to extend) and is
called once per process by ``toren.seams.plugins.PluginHost`` when plugins are loaded, before
any agent is loaded. The policy hooks (``before_*``, ``after_*``) are asked per run, tool call
and model response, of the plugins an agent lists under ``policies:``.
Plugins import what the hooks hand them, and everything else they use, from ``toren.plugin``
(plugin API v1, docs/reference/plugins.md).
Hooks are synchronous; what they register has async methods. Call hooks with keyword
arguments only; a hook implementation may accept fewer arguments than the spec names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import typer
    from aiohttp import web

    from toren.seams.channels import Channel
    from toren.seams.embedders import Embedder
    from toren.seams.model import ModelProvider
    from toren.seams.plugin_api import PluginRuntime
    from toren.seams.policies import (
        ModelResponseView,
        ProposedToolCall,
        ResponseDecision,
        RunStart,
        RunStartDecision,
        ToolCallDecision,
        ToolCallResult,
        ToolResultDecision,
    )
    from toren.seams.tool_sources import ToolSource

hookspec = pluggy.HookspecMarker("toren")
hookimpl = pluggy.HookimplMarker("toren")


# -------------------------------------------------------------------------
# Model providers
# -------------------------------------------------------------------------


@hookspec
def register_models(register: Callable[[ModelProvider], None]) -> None:
    """Register model providers.

    Called once when plugins load. Call ``register(provider)`` with a
    ``toren.plugin.ModelProvider`` for each id prefix the plugin serves (``anthropic`` serves
    ``anthropic/<model>``). An agent's ``model:`` routes to the provider owning its prefix; two
    plugins registering the same prefix is an error naming both.
    """


# -------------------------------------------------------------------------
# Tools
# -------------------------------------------------------------------------


@hookspec
def register_tools(register: Callable[..., None]) -> None:
    """Register tools that agents may enable by name in ``agent.yaml`` ``tools:``.

    Called once when plugins load. Call ``register(function)`` for a plain (sync or async)
    function, optionally decorated with ``toren.tool(...)``; its JSON Schema comes from the
    signature and docstring. ``register(function, name="other_name")`` renames it;
    ``register(function, group="sandbox")`` also puts it in a group that ``tools: [sandbox]``
    enables at once. Tool names are what the model sees, so a name registered by two plugins is
    an error naming both (and so is a group two plugins share).
    """


@hookspec
def register_tool_sources(register: Callable[[ToolSource], None]) -> None:
    """Register tool sources: tools an agent.yaml key declares and the plugin discovers while
    the agent runs (toren-mcp's ``mcpServers:``), rather than functions known at load.

    Called once when plugins load. Call ``register(source)`` with a
    ``toren.plugin.ToolSource`` naming the top-level agent.yaml ``key`` it reads; two plugins
    registering the same key is an error naming both. The loader hands it each entry of the
    key (``bind``, no I/O); workers start the entries of the agents they serve and stop them on
    shutdown; each task asks its entries for their current tools. Their calls are tool calls
    like any other (recorded, capped, approved by name, never re-run once completed).
    """


# -------------------------------------------------------------------------
# Channels
# -------------------------------------------------------------------------


@hookspec
def register_channels(register: Callable[[Channel], None]) -> None:
    """Register channels: ways for people to talk to agents (chat apps, terminals, HTTP).

    Called once when plugins load. Call ``register(channel)`` with a
    ``toren.plugin.Channel`` (chat apps: a ``toren.plugin.ChatChannel``).
    An agent selects the channels that serve it under ``channels:`` in agent.yaml, with each
    one's settings, which the loader validates against the channel's ``settings_schema`` and
    ``check_settings``; a listed channel that no plugin registered is a load error naming the
    distribution to install. ``toren dev`` and ``toren serve`` start each channel that a
    served agent lists once the runtime is up (after checking its ``required_env`` and
    ``required_env_for`` each agent's settings), add its ``routes`` to the server, and stop
    it on shutdown. A channel no served agent lists is never started.
    """


# -------------------------------------------------------------------------
# Embedders
# -------------------------------------------------------------------------


@hookspec
def register_embedders(register: Callable[[Embedder], None]) -> None:
    """Register embedders: text to vectors, for semantic recall of memories.

    Called once when plugins load. Call ``register(embedder)`` with a
    ``toren.plugin.Embedder`` for each embedding model the plugin serves; an agent names one
    under ``memory.embeddings`` in agent.yaml, and a name no plugin registered is an error when
    the runtime starts, naming the file and the installed embedders. The task loop embeds each
    memory written and each recall's query with it; two plugins registering one name is an
    error naming both (plugin API 1.7; docs/guides/memory.md).
    """


# -------------------------------------------------------------------------
# CLI
# -------------------------------------------------------------------------


@hookspec
def register_commands(app: typer.Typer) -> None:
    """Add commands to the ``toren`` CLI (deprecated since plugin API 1.5).

    Declare commands in the ``toren.commands`` entry-point group instead
    (docs/reference/plugins.md#commands): ``toren --help`` lists those without importing
    every plugin. Called once, and only when ``toren`` is asked for a command that neither
    the kernel nor an entry point provides; every plugin is imported for it, and ``toren
    --help`` does not list what it adds. Add commands or sub-apps to ``app``
    (``app.command()(fn)`` or ``app.add_typer(sub, name="noun")``). A command name that is
    already taken is an error.
    """


# -------------------------------------------------------------------------
# HTTP routes
# -------------------------------------------------------------------------


@hookspec
def register_routes(app: web.Application, runtime: PluginRuntime) -> None:
    """Add HTTP routes to the Toren server (``toren serve``, ``toren dev``).

    Called once per server by ``toren.server.app.create_app``, after the API's own routes
    and the channels' webhooks exist and before the server listens; ``runtime`` is the
    started runtime the API serves, as ``toren.plugin.PluginRuntime`` documents it. Add
    routes to the aiohttp ``app`` (``app.router.add_post(...)``) and any start-up/clean-up
    to ``app.cleanup_ctx``.
    Unlike a channel's webhooks, these routes are part of the API: the same API keys
    (``Authorization: Bearer``) and browser guard apply to them as to ``/runs``. A route
    that is already taken (by the API or another plugin) is an error naming the plugin.
    Wrap a handler in ``toren.plugin.route_scope(scope)`` to say which API-key scope it
    needs (plugin API 1.4); without it, only a key holding every scope (``admin``) may call
    it. For routes per agent that authenticate their caller themselves, use
    ``Channel.routes`` instead.
    """


# -------------------------------------------------------------------------
# Policies (plugin API 1.3): asked of the plugins an agent lists under policies:, in that
# order, for every run of that agent; never of a plugin the agent does not list. A hook may
# be a plain function (keep it quick: it runs on the worker's event loop) or ``async def``
# (one that takes longer than 30 s fails closed).
# Returning None means no objection. A hook that raises or answers with another type fails
# closed (deny, block, reject, or the result withheld) with a reason naming the plugin.
# -------------------------------------------------------------------------


@hookspec
def before_run_start(run: RunStart, settings: dict[str, Any]) -> RunStartDecision | None:
    """Allow or reject a run before it is created, or a session's next message before it is
    taken.

    Called by ``Runtime.start_run`` (``toren run``, ``POST /runs``, the client, schedules are
    not asked) and by ``SessionsService.send`` for each message of a session (``toren chat``,
    ``POST /sessions/{id}/messages``, chat channels, MCP; ``run.session_id`` set, ``run.input``
    the message's text), for an agent that lists the plugin under ``policies:``, before
    anything is written; ``settings`` are the agent's settings for the plugin. Return
    ``RunStartDecision.reject(reason)`` to refuse: the caller gets ``PolicyRejected`` (HTTP
    403, code ``policy_rejected``) with the reason, and nothing is created or taken.
    """


@hookspec
def before_tool_call(call: ProposedToolCall,
                     settings: dict[str, Any]) -> ToolCallDecision | None:
    """Decide a tool call the model made before it starts.

    Called by the task loop once per call, after the model's response is in the log and the
    call's arguments passed the tool's schema, for an agent that lists the plugin under
    ``policies:``. Return ``ToolCallDecision.allow()``, ``.deny(reason)`` (the model reads the
    reason as the call's result), ``.require_approval(reason)`` (a person decides first) or
    ``.rewrite(arguments, reason)``. The decision is recorded (``PolicyDecided``) with the
    call's start, so a resumed task never asks again.
    """


@hookspec
def after_model_response(response: ModelResponseView,
                         settings: dict[str, Any]) -> ResponseDecision | None:
    """Keep, redact or block a model's response before it is acted on.

    Called by the task loop once per model response (not for compaction summaries), after the
    response is in the log and before its tool calls are decided, for an agent that lists the
    plugin under ``policies:``. ``ResponseDecision.redact(text)`` replaces the text later model
    calls, the task's output and the transcript see (the log keeps the original for audit);
    ``.block(reason)`` ends the task with the error ``policy_blocked``.
    """


@hookspec
def after_tool_call(result: ToolCallResult,
                    settings: dict[str, Any]) -> ToolResultDecision | None:
    """Keep or redact a tool's result before it is recorded.

    Called by the task loop once per tool call that ran (peer calls and calls that did not
    run are not asked), before the result is appended, for an agent that lists the plugin
    under ``policies:``. ``ToolResultDecision.redact(text)`` records, and shows the model,
    ``text`` instead: the original never reaches the log.
    """


#: Every hook, in the order declared here (pluggy marks each spec with ``toren_spec``).
HOOK_NAMES: tuple[str, ...] = tuple(
    name for name, value in dict(globals()).items()
    if callable(value) and hasattr(value, "toren_spec")
)
#: The policy hooks (``toren.seams.policies`` asks them), in the order a run meets them.
POLICY_HOOK_NAMES: tuple[str, ...] = tuple(
    name for name in HOOK_NAMES if not name.startswith("register_"))

__all__ = ["HOOK_NAMES", "POLICY_HOOK_NAMES", "hookimpl", "hookspec"]


