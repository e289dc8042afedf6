"""The agent definition an eval runs (docs/guides/evals.md): a directory as it is, or a copy of
it whose agent.yaml names another model. The copy is a definition of its own (another version
hash), kept in the database like any other, so every worker that takes a case run runs it
with that model."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from toren.errors import AgentDefinitionError, ConfigError

#: What a copy of an agent directory leaves out: caches and local state, never definition.
_IGNORED = shutil.ignore_patterns("__pycache__", ".toren", ".git", "*.pyc")


def with_model(directory: Path, model: str, root: Path) -> Path:
    """A copy of agent directory ``directory`` under ``root`` whose agent.yaml says
    ``model: <model>`` (its subagents keep their own models). ``ConfigError`` for an empty
    model id; ``AgentDefinitionError`` for an agent.yaml that is not a mapping."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigError("--model must be a model id such as anthropic/claude-sonnet-4-5")
    source = directory / "agent.yaml"
    try:
        data = yaml.safe_load(source.read_text("utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AgentDefinitionError(f"cannot be read to change its model: {exc}",
                                   path=str(source)) from None
    if not isinstance(data, dict):
        raise AgentDefinitionError("is not a mapping", path=str(source))
    data["model"] = model.strip()
    target = root / directory.resolve().name
    shutil.copytree(directory, target, ignore=_IGNORED, symlinks=False)
    (target / "agent.yaml").write_text(
        yaml.safe_dump(data, sort_keys=False, allow_unicode=True), "utf-8")
    return target
