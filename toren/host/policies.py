"""The host's side of policy hooks: an agent's ``policies:`` (and ``memory.embeddings``) checked
against the installed plugins at startup, and ``before_run_start`` asked before a run is
created."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toren.agents import AgentSpec
from toren.errors import ConfigError, PolicyRejected
from toren.seams.policies import PolicyHooks, RunStart


def check_policies(agents: Iterable[AgentSpec], hooks: PolicyHooks) -> None:
    """Refuse to start when an agent lists a policy no installed plugin implements: a
    ``ConfigError`` naming the agent, the policy and the installed policy plugins. Called by
    ``Runtime`` once its agents are loaded."""
    installed = hooks.implementers()
    for agent in agents:
        for ref in agent.policies:
            if ref.name not in installed:
                choices = ", ".join(sorted(installed)) or "none"
                raise ConfigError(
                    f"agent {agent.name!r} ({agent.directory}/agent.yaml) lists the policy "
                    f"{ref.name!r} under policies:, but no installed plugin of that name "
                    f"implements a policy hook (installed policy plugins: {choices}); install "
                    "it, or remove it from policies:")


def check_embedders(agents: Iterable[AgentSpec], embedders: Mapping[str, object]) -> None:
    """Refuse to start when an agent's ``memory.embeddings`` names an embedder no installed
    plugin registered: a ``ConfigError`` naming the agent's file and the installed ones."""
    for agent in agents:
        wanted = agent.memory.embeddings if agent.memory is not None else None
        if wanted is not None and wanted not in embedders:
            choices = ", ".join(sorted(embedders)) or "none"
            raise ConfigError(
                f"agent {agent.name!r} ({agent.directory}/agent.yaml) names the embedder "
                f"{wanted!r} under memory.embeddings, but no installed plugin registered it "
                f"(installed embedders: {choices}); install it, or remove memory.embeddings")


async def ask_before_run_start(hooks: PolicyHooks, agent: AgentSpec, input: Any,
                               idempotency_key: str | None, *,
                               session_id: str | None = None) -> None:
    """Ask the agent's policies whether a run of it may start with ``input`` (or, with
    ``session_id``, whether the session may take the message ``input``); raise
    ``PolicyRejected`` (HTTP 403) with the rejecting plugin's reason. Called by
    ``Runtime.start_run`` and ``SessionsService.send`` before anything is written."""
    if not agent.policies:
        return
    outcome = await hooks.ask_before_run_start(
        agent.policies, RunStart(agent.name, input, idempotency_key, session_id))
    if outcome.action == "reject":
        what = (f"the message to session {session_id} of {agent.name}" if session_id
                else f"the run of {agent.name}")
        raise PolicyRejected(f"policy {outcome.plugin} rejected {what}: {outcome.reason}")
