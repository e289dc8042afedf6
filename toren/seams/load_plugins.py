"""``TOREN_LOAD_PLUGINS``: which installed plugins load. Read by ``toren.config.Settings`` and,
without the rest of the settings, by the CLI's plugin commands (``toren.cli.plugin_commands``)."""

from __future__ import annotations


def parse_load_plugins(value: str | None) -> tuple[str, ...] | None:
    """The names in ``value`` (comma-separated distributions or plugin names); ``None`` when
    unset: every installed plugin loads. An empty value loads none."""
    if value is None:
        return None
    return tuple(name.strip() for name in value.split(",") if name.strip())
