"""Toren's plugin hooks: what a plugin (entry-point group ``toren``) may register.

Every hook receives a ``register`` callback (or the object to extend) and is called once per
process by ``toren.seams.plugins.PluginHost`` when plugins are loaded, before any agent is loaded.
Plugins import what the hooks hand them, and everything else they use, from ``toren.plugin``
(plugin API v1, docs/reference/plugins.md).
Hooks are synchronous; what they register has async methods. Call hooks with keyword
arguments only; a hook implementation may accept fewer arguments than the spec names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import typer
    from aiohttp import web

    from toren.seams.channels import Channel
    from toren.seams.model import ModelProvider
    from toren.seams.plugin_api import PluginRuntime
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
# CLI
# -------------------------------------------------------------------------


@hookspec
def register_commands(app: typer.Typer) -> None:
    """Add commands to the ``toren`` CLI.

    Called once when the CLI starts, after the built-in commands exist. Add commands or
    sub-apps to ``app`` (``app.command()(fn)`` or ``app.add_typer(sub, name="noun")``). A
    command name that is already taken is an error naming the plugin.
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
    For routes per agent that authenticate their caller themselves, use
    ``Channel.routes`` instead.
    """


HOOK_NAMES: tuple[str, ...] = tuple(
    name for name, value in dict(globals()).items()
    if name.startswith("register_") and callable(value)
)

__all__ = ["HOOK_NAMES", "hookimpl", "hookspec"]


