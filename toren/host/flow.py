"""Startup check of flow control (docs/guides/flow-control.md) against the queue driver."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from toren.agents.loader import AGENT_FILE
from toren.errors import ConfigError

if TYPE_CHECKING:
    from toren.agents import AgentSpec


def check_flow_control(agents: Iterable[AgentSpec], queue_driver: str, supported: bool) -> None:
    """Refuse to start when an agent sets ``concurrency:`` or a ``priority:`` other than 0
    and the queue driver cannot honour them (its claim does not, as SQS's cannot): the
    setting would be silently ignored otherwise."""
    if supported:
        return
    for agent in agents:
        for field, used in (("concurrency", agent.concurrency is not None),
                            ("priority", agent.priority != 0)):
            if used:
                raise ConfigError(
                    f"{agent.directory / AGENT_FILE}: {field}: needs a queue that enforces flow "
                    f"control at claim time, and TOREN_QUEUE={queue_driver} does not (it has "
                    "no priorities and no claim-time filter); remove it from the agent, or run "
                    "this agent's fleet with TOREN_QUEUE=postgres (docs/guides/flow-control.md)")
