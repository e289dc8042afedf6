"""The ``testplugin`` entry point: a tool, a model provider, a channel and a CLI command."""

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
