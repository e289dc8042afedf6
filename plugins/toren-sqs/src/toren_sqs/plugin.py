"""toren-sqs's pluggy hooks: the ``toren queue`` commands for the dead-letter queues."""

from __future__ import annotations

import typer

from toren import hookimpl

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"


@hookimpl
def register_commands(app: typer.Typer) -> None:
    from toren_sqs.commands import app as queue_app

    app.add_typer(queue_app, name="queue")
