"""The plugin API's contracts that are not a hook: what ``register_routes`` hands a plugin
(``PluginRuntime``), and whether a plugin was written for this kernel's API
(``check_plugin_api``)."""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from toren.errors import PluginError
from toren.version import PLUGIN_API_VERSION, __version__

if TYPE_CHECKING:
    from toren.config import Settings
    from toren.core.approvals import ApprovalRecord
    from toren.core.runs import RunRecord
    from toren.seams.channels import ChannelContext

#: The module attribute a plugin declares its supported API range with.
API_ATTRIBUTE = "TOREN_PLUGIN_API"


class PluginRuntime(Protocol):
    """The started Toren process a ``register_routes`` hook receives (plugin API v1): the
    documented subset of ``toren.Runtime`` a plugin's routes may call. Each method behaves
    and raises as its namesake on ``toren.Runtime`` (docs/reference/host-api.md)."""

    @property
    def settings(self) -> Settings:
        """The deployment's settings (read from the environment at start)."""

    @property
    def agents(self) -> Mapping[str, object]:
        """The served agents by name."""

    @property
    def channel_context(self) -> ChannelContext:
        """The narrower object channels get: sessions, approvals, the channel stores."""

    async def start_run(self, agent: str, input: Any, *,
                        idempotency_key: str | None = None,
                        files: Sequence[str] | None = None,
                        traceparent: str | None = None) -> str:
        """Start a run of ``agent``; its id (the same id again for a used key)."""

    async def get_run(self, run_id: str) -> RunRecord:
        """The run's row; ``RunNotFound``."""

    async def wait_for_run(self, run_id: str, *, timeout_s: float | None = None,
                           poll_s: float = 0.1) -> RunRecord:
        """Wait until the run is terminal; ``TimeoutError`` after ``timeout_s``."""

    async def cancel_run(self, run_id: str, reason: str = "cancelled by request") -> RunRecord:
        """Cancel the run now."""

    async def start_session(self, agent: str, *, idempotency_key: str | None = None,
                            traceparent: str | None = None) -> str:
        """Open a session with ``agent``; its id."""

    async def send_message(self, session_id: str, text: str, *,
                           idempotency_key: str | None = None,
                           files: Sequence[str] | None = None) -> int:
        """The session's next message; the turn it started."""

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The session's status and transcript."""

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        """One approval; ``ApprovalNotFound``."""

    async def decide_approval(self, approval_id: str, outcome: str, *, decided_by: str,
                              reason: str | None = None, digest: str | None = None,
                              scope: str = "call", arguments: dict[str, Any] | None = None,
                              answer: str | None = None) -> ApprovalRecord:
        """Decide a pending approval as ``decided_by``: ``approved`` (``scope="run"``:
        approve always), ``denied``, ``edited`` with ``arguments`` or ``answered`` with
        ``answer``; ``digest``, when given, must be the approval's (``ApprovalStale``)."""


def declared_api_range(module: ModuleType) -> str | None:
    """The range of plugin API versions ``module`` declares (``TOREN_PLUGIN_API``), if any."""
    declared = getattr(module, API_ATTRIBUTE, None)
    return None if declared is None else str(declared)


def check_extension_api(extension: Any, what: str, leave_out: str) -> None:
    """``check_plugin_api`` for what stevedore loaded (a driver's class, a secret source's):
    the module that defines it; the distribution that installed it is looked up only to
    name it in a refusal (stevedore's entry points do not carry it)."""
    module = sys.modules.get(getattr(extension.plugin, "__module__", ""))
    if module is None or _supported(module):
        return
    dist = extension.entry_point.dist
    names = [dist.name] if dist is not None else metadata.packages_distributions().get(
        module.__name__.partition(".")[0], [])
    name = names[0] if names else "?"
    try:
        version = metadata.version(name)
    except (metadata.PackageNotFoundError, ValueError):
        version = "?"
    check_plugin_api(module, what, name, version, leave_out=leave_out)


def _supported(module: ModuleType) -> bool:
    """Whether loading ``module`` needs no refusal: it declares no range, or a well-formed
    one holding this kernel's ``PLUGIN_API_VERSION``."""
    declared = getattr(module, API_ATTRIBUTE, None)
    if declared is None:
        return True
    # packaging loads here, not at import: `toren --help` checks the command modules it lists
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(str(declared)).contains(PLUGIN_API_VERSION)
    except (InvalidSpecifier, TypeError):
        return False


def check_plugin_api(module: ModuleType, name: str, distribution: str, version: str, *,
                     leave_out: str = "leave it out with TOREN_LOAD_PLUGINS") -> None:
    """Refuse a plugin written for another plugin API than this kernel's: ``PluginError``
    naming both versions and what to upgrade. A plugin that declares nothing is let through
    (v1 reads an absent range as "any 1.x"; ``toren plugins`` shows its API as ``-``);
    ``leave_out`` says how to start without it."""
    if _supported(module):
        return
    declared = getattr(module, API_ATTRIBUTE)
    where = f"plugin {name!r} ({distribution} {version})"
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        supported = SpecifierSet(str(declared))
    except (InvalidSpecifier, TypeError):
        raise PluginError(f"{where} declares {API_ATTRIBUTE} = {declared!r}, which is not a "
                          "version range; write one such as \">=1.0,<2\"") from None
    # below one of the plugin's lower bounds: this toren is too old for it; else too new
    kernel_too_old = any(spec.operator in (">", ">=") and not spec.contains(PLUGIN_API_VERSION)
                         for spec in supported)
    advice = (f"upgrade toren to a release whose plugin API is in {declared} "
              f"(pip install -U toren), or install an older {distribution}"
              if kernel_too_old else
              f"upgrade {distribution} to a release written for plugin API "
              f"{PLUGIN_API_VERSION} (pip install -U {distribution}), or install a toren "
              f"whose plugin API is in {declared}")
    raise PluginError(f"{where} supports plugin API {declared}, but toren {__version__} has "
                      f"plugin API {PLUGIN_API_VERSION}: {advice}. Uninstall it or "
                      f"{leave_out} to start without it")
