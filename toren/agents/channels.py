"""``channels:`` of agent.yaml: each channel listed is installed and checks its own settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toren.agents.yamlfile import LocatedYaml
from toren.errors import AgentDefinitionError
from toren.seams.channels import Channel, plugin_for_channel


def load_channels(located: LocatedYaml, path: str,
                  installed: Mapping[str, Channel] | None) -> dict[str, dict[str, Any]]:
    """The ``channels:`` of a validated agent.yaml, as ``{name: settings}``.

    With ``installed`` (the channels plugins registered), a name no plugin registered is an
    error naming the distribution to install, and each channel validates its settings (its
    ``settings_schema``, then ``check_settings``); errors name the file, line and field.
    """
    entries: dict[str, Any] = located.data.get("channels") or {}
    found: dict[str, dict[str, Any]] = {}
    name = str(located.data.get("name", ""))
    for channel_name, raw in entries.items():
        settings: dict[str, Any] = dict(raw or {})
        if installed is not None:
            channel = installed.get(channel_name)
            if channel is None:
                have = ", ".join(sorted(installed)) or "none"
                raise AgentDefinitionError(
                    f"channels: the channel {channel_name!r} is not installed; install it with "
                    f"`pip install {plugin_for_channel(channel_name)}` (installed channels: "
                    f"{have})", path=path, line=located.line_of(("channels", channel_name),
                                                                 key=True))
            _check_schema(channel, channel_name, settings, located, path)
            problems = channel.check_settings(name, settings)
            if problems:
                field_path, message = problems[0]
                parts: tuple[str | int, ...] = tuple(
                    int(part) if part.isdigit() else part
                    for part in field_path.split(".") if part)
                where = ".".join(("channels", channel_name, *map(str, parts)))
                raise AgentDefinitionError(f"{where}: {message}", path=path,
                                           line=located.line_of(("channels", channel_name,
                                                                 *parts)))
        found[channel_name] = settings
    return found


def _check_schema(channel: Channel, channel_name: str, settings: dict[str, Any],
                  located: LocatedYaml, path: str) -> None:
    import jsonschema  # imported on use, as the loader does

    validator = jsonschema.Draft202012Validator(dict(channel.settings_schema))
    errors = sorted(validator.iter_errors(settings),
                    key=lambda error: [str(part) for part in error.absolute_path])
    if not errors:
        return
    error = errors[0]
    at: tuple[str | int, ...] = ("channels", channel_name, *error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        unknown = next(key for key in error.instance if key not in allowed)
        where = ".".join(map(str, at))
        raise AgentDefinitionError(
            f"{where}: unknown key {unknown!r} for the {channel_name} channel; valid keys: "
            f"{', '.join(allowed) or 'none'}", path=path,
            line=located.line_of((*at, unknown), key=True))
    where = ".".join(map(str, at))
    # a missing key is missing from the mapping: point at the mapping's own key
    raise AgentDefinitionError(f"{where}: {error.message[:300]}", path=path,
                               line=located.line_of(at, key=error.validator == "required"))
