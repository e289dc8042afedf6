"""The ``testplugin`` entry point: a tool, a model provider, a channel, a CLI command, and the
policy hooks (asked only for agents that list ``testplugin`` under ``policies:``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import typer

import toren
from toren.plugin import (
    Channel,
    ChannelContext,
    Model,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ModelResponseView,
    ProposedToolCall,
    ResponseDecision,
    RunStart,
    RunStartDecision,
    ToolCallDecision,
    ToolCallResult,
    ToolResultDecision,
)

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"


def echo_upper(text: str) -> str:
    """Return the text in upper case.

    Args:
        text: The text to shout.
    """
    return text.upper()


class UpperModel(Model):
    """Answers with the latest message in upper case."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].text if request.messages else ""
        return ModelResponse(text=last.upper(), model=self.model_id)


class UpperProvider(ModelProvider):
    """Serves ``testprov/<anything>``."""

    prefix = "testprov"
    description = "test provider from toren-testplugin"

    def get_model(self, model_id: str) -> Model:
        return UpperModel(model_id)


class RecordingChannel(Channel):
    """A channel that records that it was started and stopped (in memory, and in the file
    named by ``TOREN_TESTCHANNEL_LOG`` when set, for tests that run ``toren`` in a subprocess).
    """

    name = "testchannel"
    description = "test channel from toren-testplugin"

    def __init__(self) -> None:
        self.started: Any = None
        self.stopped = False

    async def start(self, context: ChannelContext) -> None:
        self.started = context
        _note(f"start {','.join(sorted(context.channel_agents(self.name)))}")

    async def stop(self) -> None:
        self.stopped = True
        _note("stop")


def _note(line: str) -> None:
    path = os.environ.get("TOREN_TESTCHANNEL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def hello_testplugin(name: str = "world") -> None:
    """Say hello from toren-testplugin."""
    typer.echo(f"hello {name} from toren-testplugin")


@toren.hookimpl
def register_tools(register: Callable[..., None]) -> None:
    register(echo_upper)


@toren.hookimpl
def register_models(register: Callable[[ModelProvider], None]) -> None:
    register(UpperProvider())


@toren.hookimpl
def register_channels(register: Callable[[Channel], None]) -> None:
    register(RecordingChannel())


@toren.hookimpl
def register_commands(app: typer.Typer) -> None:
    app.command("hello-testplugin")(hello_testplugin)


# -- policy hooks: each does what the agent's settings for ``testplugin`` say, and appends a
# line to settings["count_file"] (when set) each time it is asked, so tests in subprocesses
# can count the calls across a SIGKILL.


def _count(settings: dict[str, Any], line: str) -> None:
    path = settings.get("count_file")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def _raise_in(settings: dict[str, Any], hook: str) -> None:
    if hook in settings.get("raise_in", ()):
        raise RuntimeError(f"testplugin was told to fail in {hook}")


@toren.hookimpl
def before_run_start(run: RunStart, settings: dict[str, Any]) -> RunStartDecision | None:
    _count(settings, f"before_run_start {run.agent}")
    _raise_in(settings, "before_run_start")
    word = settings.get("reject_input")
    if word and word in str(run.input):
        return RunStartDecision.reject(f"the input mentions {word!r}")
    return None


@toren.hookimpl
async def before_tool_call(call: ProposedToolCall,
                           settings: dict[str, Any]) -> ToolCallDecision | None:
    _count(settings, f"before_tool_call {call.call_id}")
    _raise_in(settings, "before_tool_call")
    if call.name in settings.get("deny", {}):
        return ToolCallDecision.deny(settings["deny"][call.name])
    if call.name in settings.get("approve", ()):
        return ToolCallDecision.require_approval(f"{call.name} needs a person")
    if call.name in settings.get("rewrite", {}):
        return ToolCallDecision.rewrite({**call.arguments, **settings["rewrite"][call.name]},
                                        "capped by testplugin")
    if settings.get("answer_wrong_type"):
        return "allow"  # type: ignore[return-value]
    return ToolCallDecision.allow()


@toren.hookimpl
def after_model_response(response: ModelResponseView,
                         settings: dict[str, Any]) -> ResponseDecision | None:
    _count(settings, f"after_model_response {response.step}")
    _raise_in(settings, "after_model_response")
    block = settings.get("block_response")
    if block and block in response.text:
        return ResponseDecision.block(f"the response mentions {block!r}")
    text = response.text
    for word in settings.get("redact_response", ()):
        text = text.replace(word, "[redacted]")
    return ResponseDecision.redact(text, "words redacted") if text != response.text else None


@toren.hookimpl
def after_tool_call(result: ToolCallResult,
                    settings: dict[str, Any]) -> ToolResultDecision | None:
    _count(settings, f"after_tool_call {result.call_id}")
    _raise_in(settings, "after_tool_call")
    text = result.output
    for word in settings.get("redact_result", ()):
        text = text.replace(word, "[redacted]")
    return ToolResultDecision.redact(text, "words redacted") if text != result.output else None
