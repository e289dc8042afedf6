"""The plugin API, version 1: everything a third-party tool, model provider, channel or route
plugin may import from Toren, in one module (docs/reference/plugins.md).

What is here is public: it changes only as docs/reference/versioning.md says (a minor release
adds, a major one may remove; a removal is announced with a ``DeprecationWarning`` for one minor
release first). Everything else under ``toren.`` is internal and may change in any release.
Drivers (store, queue, archive, worker runtime, tracer, secrets) add ``toren.plugin.drivers``;
plugins that add CLI commands add ``toren.plugin.cli``; tests use ``toren.testing``.

A plugin says which versions of this API it was written for with a module attribute on the
module its entry point names (``TOREN_PLUGIN_API = ">=1.0,<2"``, a PEP 440 range); Toren
refuses to load a plugin whose range does not hold ``API_VERSION``, naming both.
"""

from typing import TYPE_CHECKING

from toren.config import Settings, positive_number, switch
from toren.core.approvals import ApprovalRecord
from toren.core.chat_text import split_text, storable_text
from toren.core.pricing import Pricing
from toren.core.runs import RunRecord
from toren.errors import (
    AgentDefinitionError,
    AgentNotRegistered,
    AgentVersionMissing,
    ApprovalAlreadyDecided,
    ApprovalNotFound,
    ApprovalStale,
    ArchiveMismatch,
    ArchiveNotConfigured,
    ArchiveUnavailable,
    CallRefused,
    ChannelError,
    ConfigError,
    ContextWindowExceeded,
    DatabaseTlsError,
    DatabaseUnavailable,
    DriverNotFound,
    ForkRefused,
    InvalidAnswer,
    InvalidApprovalArguments,
    InvalidFlowControl,
    InvalidForkOverride,
    InvalidForkStep,
    InvalidWebhook,
    LeaseLost,
    MigrationError,
    MissingEnvError,
    NoDatabase,
    NonDeterminismError,
    NotAnApprover,
    PairingNotFound,
    PluginError,
    PluginNotInstalled,
    PluginUnavailable,
    PolicyRejected,
    ProviderError,
    QuestionAlreadyAnswered,
    QuestionNotFound,
    RestoreConflict,
    RunCancelled,
    RunFinishedError,
    RunNotFound,
    RunNotUpgradable,
    RunVersionStale,
    ScheduleNotFound,
    ScheduleRemoved,
    SessionBusy,
    SessionEnded,
    SessionNotFound,
    SignalTimeout,
    SignalTooLarge,
    ToolError,
    TorenError,
    UnstorableValue,
    WebhookSignatureError,
)
from toren.execution.context import ToolCallContext, current_tool_call, wait_for_signal
from toren.files import DOCX, PDF, XLSX
from toren.lazy_names import lazy_getattr
from toren.regular_files import NotARegularFile, kind_of, open_regular, read_regular
from toren.seams.channels import Channel, ChannelContext
from toren.seams.hookspecs import HOOK_NAMES, hookimpl
from toren.seams.model import (
    IMAGE_TYPES,
    PDF_TYPE,
    SHOWABLE_TYPES,
    Attachment,
    Message,
    Model,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OnText,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
    image_size,
    image_type,
    pdf_pages,
)
from toren.seams.plugin_api import API_ATTRIBUTE, PluginRuntime
from toren.seams.policies import (
    ModelResponseView,
    PolicyRef,
    ProposedToolCall,
    ResponseDecision,
    RunStart,
    RunStartDecision,
    ToolCallDecision,
    ToolCallResult,
    ToolResultDecision,
)
from toren.seams.routes import AUTHENTICATED, route_scope
from toren.seams.store.channels import ChannelPairing, ChannelSend, ChannelUpdate
from toren.seams.tool_sources import SourcedTool, ToolSource, ToolSourceEntry
from toren.seams.tools import ToolFile, ToolResult, tool
from toren.version import PLUGIN_API_VERSION as API_VERSION
from toren.version import __version__

if TYPE_CHECKING:
    from toren.client import TorenClient, TorenUnreachable, check_id
    from toren.host.chat import COMMON_SETTINGS, ChatBot, ChatChannel
    from toren.host.chat.downloads import read_at_most
    from toren.host.chat.webhooks import WebhookBodyError, webhook_json

#: Names imported when first used: they pull in aiohttp (the client; the chat channels' host
#: side), which a tool plugin's import (every CLI command loads plugins, `toren --help` too)
#: should not pay for.
_LAZY = {"TorenClient": "toren.client", "TorenUnreachable": "toren.client",
         "check_id": "toren.client", "COMMON_SETTINGS": "toren.host.chat",
         "ChatBot": "toren.host.chat", "ChatChannel": "toren.host.chat",
         "read_at_most": "toren.host.chat.downloads",
         "WebhookBodyError": "toren.host.chat.webhooks",
         "webhook_json": "toren.host.chat.webhooks"}


__getattr__ = lazy_getattr(globals(), _LAZY, "toren.plugin")


__all__ = [
    "API_ATTRIBUTE",
    "API_VERSION",
    "AUTHENTICATED",
    "COMMON_SETTINGS",
    "DOCX",
    "HOOK_NAMES",
    "IMAGE_TYPES",
    "PDF",
    "PDF_TYPE",
    "SHOWABLE_TYPES",
    "XLSX",
    "AgentDefinitionError",
    "AgentNotRegistered",
    "AgentVersionMissing",
    "ApprovalAlreadyDecided",
    "ApprovalNotFound",
    "ApprovalRecord",
    "ApprovalStale",
    "ArchiveMismatch",
    "ArchiveNotConfigured",
    "ArchiveUnavailable",
    "Attachment",
    "CallRefused",
    "Channel",
    "ChannelContext",
    "ChannelError",
    "ChannelPairing",
    "ChannelSend",
    "ChannelUpdate",
    "ChatBot",
    "ChatChannel",
    "ConfigError",
    "ContextWindowExceeded",
    "DatabaseTlsError",
    "DatabaseUnavailable",
    "DriverNotFound",
    "ForkRefused",
    "InvalidAnswer",
    "InvalidApprovalArguments",
    "InvalidFlowControl",
    "InvalidForkOverride",
    "InvalidForkStep",
    "InvalidWebhook",
    "LeaseLost",
    "Message",
    "MigrationError",
    "MissingEnvError",
    "Model",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ModelResponseView",
    "NoDatabase",
    "NonDeterminismError",
    "NotARegularFile",
    "NotAnApprover",
    "OnText",
    "PairingNotFound",
    "PluginError",
    "PluginNotInstalled",
    "PluginRuntime",
    "PluginUnavailable",
    "PolicyRef",
    "PolicyRejected",
    "Pricing",
    "ProposedToolCall",
    "ProviderError",
    "QuestionAlreadyAnswered",
    "QuestionNotFound",
    "ResponseDecision",
    "RestoreConflict",
    "RunCancelled",
    "RunFinishedError",
    "RunNotFound",
    "RunNotUpgradable",
    "RunRecord",
    "RunStart",
    "RunStartDecision",
    "RunVersionStale",
    "ScheduleNotFound",
    "ScheduleRemoved",
    "SessionBusy",
    "SessionEnded",
    "SessionNotFound",
    "Settings",
    "SignalTimeout",
    "SignalTooLarge",
    "SourcedTool",
    "StopReason",
    "ToolCall",
    "ToolCallContext",
    "ToolCallDecision",
    "ToolCallResult",
    "ToolError",
    "ToolFile",
    "ToolResult",
    "ToolResultDecision",
    "ToolSource",
    "ToolSourceEntry",
    "ToolSpec",
    "TorenClient",
    "TorenError",
    "TorenUnreachable",
    "UnstorableValue",
    "Usage",
    "WebhookBodyError",
    "WebhookSignatureError",
    "__version__",
    "check_id",
    "current_tool_call",
    "hookimpl",
    "image_size",
    "image_type",
    "kind_of",
    "open_regular",
    "pdf_pages",
    "positive_number",
    "read_at_most",
    "read_regular",
    "route_scope",
    "split_text",
    "storable_text",
    "switch",
    "tool",
    "wait_for_signal",
    "webhook_json",
]
