"""Plugin loading: built-ins plus the entry-point group ``toren``, and what each registered."""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

from toren.errors import ConfigError, PluginError, PluginUnavailable, ToolError, TorenError
from toren.seams import hookspecs
from toren.seams.channels import Channel
from toren.seams.embedders import Embedder
from toren.seams.model import ModelProvider
from toren.seams.plugin_api import PluginRuntime, check_plugin_api, declared_api_range
from toren.seams.policies import PolicyHooks
from toren.seams.tool_sources import ToolSource
from toren.seams.tools import Tool, tool_from_function

ENTRY_POINT_GROUP = "toren"

#: Built-ins register through the same hooks as third-party plugins (llm's DEFAULT_PLUGINS).
DEFAULT_PLUGINS: dict[str, str] = {"scripted": "toren.default_plugins.scripted"}

log = logging.getLogger(__name__)


@dataclass
class PluginInfo:
    """One loaded plugin: where it came from and what it registered."""

    name: str
    distribution: str
    version: str
    hooks: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)
    #: The agent.yaml keys of the tool sources it registered (``mcpServers``).
    tool_sources: list[str] = field(default_factory=list)
    #: The embedders it registered (``memory.embeddings``).
    embedders: list[str] = field(default_factory=list)
    default: bool = False
    #: Why the plugin registered nothing on this machine (``PluginUnavailable``), if it did not.
    unavailable: str | None = None
    #: The plugin API versions it declares it supports (``TOREN_PLUGIN_API``), if it does.
    api: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "name": self.name, "distribution": self.distribution, "version": self.version,
            "default": self.default, "hooks": self.hooks, "models": self.models,
            "tools": self.tools, "channels": self.channels, "api": self.api,
            "toolSources": self.tool_sources, "embedders": self.embedders,
        }
        if self.unavailable is not None:
            data["unavailable"] = self.unavailable
        return data


class PluginHost:
    """Loads plugins once and holds the registries built from their hooks.

    Created at startup by the CLI, server and ``toren.Runtime``; agents are resolved against its
    ``providers``, ``tools`` and ``channels``.
    """

    def __init__(self, load: Iterable[str] | None = None, *, entry_points: bool = True,
                 collect: bool = True) -> None:
        self.pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.info: dict[str, PluginInfo] = {}
        self.providers: dict[str, ModelProvider] = {}
        self.tools: dict[str, Tool] = {}
        #: Tool and group names that an unavailable plugin would have registered -> why not.
        self.unavailable_tools: dict[str, str] = {}
        self.channels: dict[str, Channel] = {}
        #: Tool sources by the agent.yaml key they read (``register_tool_sources``).
        self.tool_sources: dict[str, ToolSource] = {}
        #: Embedders by name (``register_embedders``; ``memory.embeddings``).
        self.embedders: dict[str, Embedder] = {}
        self._owner: dict[tuple[str, str], str] = {}
        #: Asks the policy hooks of the plugins an agent lists under ``policies:``.
        self.policies = PolicyHooks(self.pm.hook)
        #: plugins were named (TOREN_LOAD_PLUGINS): one that cannot register is a warning
        self._chosen = load is not None
        for name, module_name in DEFAULT_PLUGINS.items():
            module = importlib.import_module(module_name)
            self._register(module, name, "toren", _version("toren"), default=True)
        if entry_points:
            self._load_entry_points(None if load is None else set(load))
        self._check_pending()
        if collect:  # the CLI's commands need no registry (``add_commands``): start-up time
            self._collect()

    def add_plugin(self, plugin: Any, name: str, *, distribution: str = "(in-process)") -> None:
        """Register an object or module with hook implementations after loading.

        For tests and embedding: what it registers joins the registries as if it had been
        installed (duplicates are errors as usual).
        """
        self._register(plugin, name, distribution, "-")
        self._check_pending()
        for hook_name, registrar in (("register_models", self._model_registrar),
                                     ("register_tools", self._tool_registrar),
                                     ("register_tool_sources", self._tool_source_registrar),
                                     ("register_channels", self._channel_registrar),
                                     ("register_embedders", self._embedder_registrar)):
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin_name == name:
                    arguments = {"register": registrar(name)} if "register" in impl.argnames else {}
                    self._invoke(impl, hook_name, arguments)

    def _check_pending(self) -> None:
        """A misspelt hook name is an error, not a silent no-op."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            name = self.pm.get_name(exc.plugin) or repr(exc.plugin)
            raise PluginError(f"plugin {name!r} implements a hook Toren does not have: "
                              f"{exc}; the hooks are {', '.join(hookspecs.HOOK_NAMES)}") from None

    # -- loading -------------------------------------------------------------------------------

    def _load_entry_points(self, allowed: set[str] | None) -> None:
        seen: dict[str, str] = {}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist else "?"
            if allowed is not None and dist not in allowed and ep.name not in allowed:
                continue
            if ep.name in seen:
                if seen[ep.name] == dist:
                    continue  # the same distribution seen twice on sys.path
                raise PluginError(
                    f"two distributions register a plugin named {ep.name!r}: {seen[ep.name]} "
                    f"and {dist}; uninstall one, or pick one with TOREN_LOAD_PLUGINS")
            seen[ep.name] = dist
            try:
                module = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin {ep.name!r} from distribution {dist} failed to load "
                    f"({ep.value}): {type(exc).__name__}: {exc}"
                ) from exc
            version = ep.dist.version if ep.dist else "?"
            self._register(module, ep.name, dist, version)

    def _register(
        self, module: ModuleType, name: str, dist: str, version: str, *, default: bool = False
    ) -> None:
        check_plugin_api(module, name, dist, version)
        try:
            self.pm.register(module, name=name)
        except ValueError as exc:
            raise PluginError(f"plugin {name!r} ({dist}) is registered twice: {exc}") from exc
        hooks = [impl_name for impl_name in hookspecs.HOOK_NAMES if hasattr(module, impl_name)]
        self.info[name] = PluginInfo(name, dist, version, hooks=hooks, default=default,
                                     api=declared_api_range(module))

    def _call_each(self, hook_name: str, **kwargs: Any) -> None:
        """Call every implementation of a hook, binding ``plugin`` so registrations are traced."""
        for impl in reversed(getattr(self.pm.hook, hook_name).get_hookimpls()):
            arguments = {k: v(impl.plugin_name) for k, v in kwargs.items() if k in impl.argnames}
            self._invoke(impl, hook_name, arguments)

    def _invoke(self, impl: Any, hook_name: str, arguments: dict[str, Any]) -> None:
        """Call one hook implementation; its failures name the plugin and the hook."""
        try:
            impl.function(**arguments)
        except PluginUnavailable as exc:
            self.info[impl.plugin_name].unavailable = exc.message
            self.unavailable_tools.update(dict.fromkeys(exc.names, exc.message))
            # said where it matters: by an agent that names the plugin's tools (the loader's
            # error) and by `toren plugins list`; a warning on every command only when the
            # plugin was chosen by name, not merely installed
            log.log(logging.WARNING if self._chosen else logging.INFO,
                    "plugin %s is unavailable: %s", self._describe(impl.plugin_name),
                    exc.message)
        except TorenError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {self._describe(impl.plugin_name)} failed in "
                              f"{hook_name}: {type(exc).__name__}: {exc}") from exc

    def _collect(self) -> None:
        self._call_each("register_models", register=self._model_registrar)
        self._call_each("register_tools", register=self._tool_registrar)
        self._call_each("register_tool_sources", register=self._tool_source_registrar)
        self._call_each("register_channels", register=self._channel_registrar)
        self._call_each("register_embedders", register=self._embedder_registrar)

    def _claim(self, kind: str, key: str, plugin: str) -> None:
        owner = self._owner.get((kind, key))
        if owner is not None:
            raise PluginError(
                f"{kind} {key!r} is registered by two plugins: {self._describe(owner)} and "
                f"{self._describe(plugin)}; uninstall one, or restrict loading with "
                "TOREN_LOAD_PLUGINS"
            )
        self._owner[(kind, key)] = plugin

    def _claim_group(self, group: str, plugin: str) -> None:
        """A tool group belongs to the first plugin that registers a tool in it."""
        owner = self._owner.setdefault(("tool group", group), plugin)
        if owner != plugin:
            self._claim("tool group", group, plugin)  # raises, naming both plugins

    def _describe(self, plugin: str) -> str:
        info = self.info[plugin]
        return f"{plugin} ({info.distribution} {info.version})"

    def _model_registrar(self, plugin: str) -> Callable[[ModelProvider], None]:
        def register(provider: ModelProvider) -> None:
            if not isinstance(provider, ModelProvider):
                raise PluginError(f"plugin {plugin!r} registered {provider!r}, "
                                  "which is not a toren.plugin.ModelProvider")
            self._claim("model prefix", provider.prefix, plugin)
            self.providers[provider.prefix] = provider
            self.info[plugin].models.append(f"{provider.prefix}/*")
        return register

    def _tool_registrar(self, plugin: str) -> Callable[..., None]:
        def register(function: Callable[..., Any], name: str | None = None,
                     group: str | None = None) -> None:
            try:
                tool = tool_from_function(function, source=f"plugin {plugin}", name=name,
                                          group=group)
            except ToolError as exc:
                raise PluginError(f"plugin {self._describe(plugin)}: {exc.message}") from exc
            if group is not None and group in self.tools:
                raise PluginError(f"plugin {self._describe(plugin)}: tool group {group!r} has "
                                  "the name of a tool; tools: in agent.yaml could not tell them "
                                  "apart")
            if tool.name in {t.group for t in self.tools.values()}:
                raise PluginError(f"plugin {self._describe(plugin)}: tool {tool.name!r} has the "
                                  "name of a tool group")
            if group is not None:
                self._claim_group(group, plugin)
            self._claim("tool", tool.name, plugin)
            self.tools[tool.name] = tool
            self.info[plugin].tools.append(tool.name)
        return register

    def _tool_source_registrar(self, plugin: str) -> Callable[[ToolSource], None]:
        def register(source: ToolSource) -> None:
            if not isinstance(source, ToolSource):
                raise PluginError(f"plugin {plugin!r} registered {source!r}, "
                                  "which is not a toren.plugin.ToolSource")
            if not source.key:
                raise PluginError(f"plugin {self._describe(plugin)} registered a tool source "
                                  "with no key: set ToolSource.key to the agent.yaml key it "
                                  "reads")
            self._claim("tool source key", source.key, plugin)
            self.tool_sources[source.key] = source
            self.info[plugin].tool_sources.append(source.key)
        return register

    async def close_tool_sources(self) -> None:
        """Let each tool source release what it holds for the process (its end)."""
        for source in self.tool_sources.values():
            try:
                await source.close()
            except Exception:
                log.exception("tool source %r failed to close", source.key)

    def _channel_registrar(self, plugin: str) -> Callable[[Channel], None]:
        def register(channel: Channel) -> None:
            if not isinstance(channel, Channel):
                raise PluginError(f"plugin {plugin!r} registered {channel!r}, "
                                  "which is not a toren.plugin.Channel")
            self._claim("channel", channel.name, plugin)
            self.channels[channel.name] = channel
            self.info[plugin].channels.append(channel.name)
        return register

    def _embedder_registrar(self, plugin: str) -> Callable[[Embedder], None]:
        def register(embedder: Embedder) -> None:
            if not isinstance(embedder, Embedder):
                raise PluginError(f"plugin {plugin!r} registered {embedder!r}, "
                                  "which is not a toren.plugin.Embedder")
            if not embedder.name or embedder.dimensions <= 0:
                raise PluginError(f"plugin {self._describe(plugin)} registered an embedder "
                                  "without a name or dimensions: set Embedder.name and "
                                  "Embedder.dimensions")
            self._claim("embedder", embedder.name, plugin)
            self.embedders[embedder.name] = embedder
            self.info[plugin].embedders.append(embedder.name)
        return register

    # -- lookups -------------------------------------------------------------------------------

    def provider_for(self, model_id: str) -> ModelProvider:
        """The provider owning ``model_id``'s prefix, or a ``ConfigError`` listing the choices."""
        prefix, sep, rest = model_id.partition("/")
        if not sep or not rest:
            raise ConfigError(f"model {model_id!r} has no provider prefix: write it as "
                              f"'<provider>/<model>' with one of {self._prefixes()}")
        provider = self.providers.get(prefix)
        if provider is None:
            raise ConfigError(f"no installed provider serves {model_id!r}: installed providers "
                              f"are {self._prefixes()} (install toren-{prefix} for '{prefix}/')")
        return provider

    def _prefixes(self) -> str:
        return ", ".join(sorted(self.providers)) or "none"

    def add_commands(self, app: Any) -> None:
        """Let plugins extend the CLI (``register_commands``); a taken name is an error."""
        for impl in reversed(self.pm.hook.register_commands.get_hookimpls()):
            before = Counter(_command_names(app))
            self._invoke(impl, "register_commands", {"app": app})
            after = Counter(_command_names(app))
            for name, count in after.items():
                if count > 1 and count > before.get(name, 0):
                    raise PluginError(f"plugin {self._describe(impl.plugin_name)} adds the "
                                      f"command {name!r}, which already exists")

    def add_routes(self, app: Any, runtime: PluginRuntime) -> None:
        """Let plugins add HTTP routes to the server's aiohttp ``app`` (``register_routes``).

        Called once by ``toren.server.app.create_app``; a route a plugin cannot add (a path
        and method already taken) is an error naming the plugin."""
        for impl in reversed(self.pm.hook.register_routes.get_hookimpls()):
            arguments = {name: value for name, value in (("app", app), ("runtime", runtime))
                         if name in impl.argnames}
            before = Counter(_route_names(app))
            self._invoke(impl, "register_routes", arguments)
            for route, count in Counter(_route_names(app)).items():
                if count > 1 and count > before.get(route, 0):
                    raise PluginError(f"plugin {self._describe(impl.plugin_name)} adds the "
                                      f"route {route}, which already exists")


def _command_names(app: Any) -> list[str]:
    """Names of a typer app's commands and sub-apps, in registration order."""
    names = [info.name or info.callback.__name__.replace("_", "-")
             for info in app.registered_commands]
    names += [info.name or "" for info in app.registered_groups]
    return names


def _route_names(app: Any) -> list[str]:
    """``METHOD /path`` of each route of an aiohttp app (HEAD, added with GET, left out)."""
    return [f"{route.method} {route.resource.canonical}" for route in app.router.routes()
            if route.method != "HEAD" and route.resource is not None]


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"
