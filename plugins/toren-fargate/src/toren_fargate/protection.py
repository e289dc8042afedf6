"""ECS task scale-in protection through the ECS agent's endpoint, on while the worker is busy.

ECS scales a service in by stopping tasks; a protected task is never chosen. The worker asks for
protection when it takes work and gives it up when idle, so scale-in stops idle tasks only:
``PUT $ECS_AGENT_URI/task-protection/v1/state`` with ``{"ProtectionEnabled": true,
"ExpiresInMinutes": n}`` (the task role needs no permission for it: the agent calls
``ecs:UpdateTaskProtection`` with its own). A deployment still stops protected tasks (with
SIGTERM, then the drain); expiry bounds protection of a worker that hangs.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import aiohttp

from toren.plugin import TorenError

log = logging.getLogger(__name__)

PATH = "/task-protection/v1/state"
#: Renew a protection once less than this share of it is left.
RENEW_AT = 0.5
#: Seconds idle before protection is given up: a worker taking short messages one after the
#: other would otherwise call the agent (and ECS's rate-limited UpdateTaskProtection) twice
#: per message.
IDLE_BEFORE_RELEASE_S = 5.0


class ProtectionError(TorenError):
    """The ECS agent refused or did not answer a task protection request (retried on the next
    tick)."""

    code = "task_protection_failed"
    retryable = True


class TaskProtection:
    """The protection state of this task, set through the ECS agent.

    Args:
        agent_uri: ``ECS_AGENT_URI`` (no trailing slash).
        minutes: ``ExpiresInMinutes`` of each protection.
    """

    def __init__(self, agent_uri: str, minutes: int,
                 idle_before_release_s: float = IDLE_BEFORE_RELEASE_S) -> None:
        self.url = agent_uri + PATH
        self.minutes = minutes
        self.idle_before_release_s = idle_before_release_s
        self.enabled = False
        self._expires_at = 0.0
        self._idle_since: float | None = None
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def update(self, busy: bool, *, now_final: bool = False) -> None:
        """Protect the task while ``busy`` (renewing before it expires); unprotect it once it
        has been idle ``idle_before_release_s`` (at once with ``now_final``: the worker is
        stopping). Calls the agent only on a change or a renewal."""
        now = time.monotonic()
        if busy:
            self._idle_since = None
            if not self.enabled or self._expires_at - now < RENEW_AT * self.minutes * 60:
                await self._put(True)
                self.enabled, self._expires_at = True, now + self.minutes * 60
            return
        if self._idle_since is None:
            self._idle_since = now
        if self.enabled and (now_final
                             or now - self._idle_since >= self.idle_before_release_s):
            await self._put(False)
            self.enabled = False

    async def _put(self, enabled: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"ProtectionEnabled": enabled}
        if enabled:
            body["ExpiresInMinutes"] = self.minutes
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self._session.put(self.url, json=body) as response:
                text = await response.text()
                if response.status != 200:
                    raise ProtectionError(f"the ECS agent answered {response.status} to task "
                                          f"protection {enabled}: {text[:300]}")
                answer = await response.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            raise ProtectionError(f"the ECS agent at {self.url} could not set task protection "
                                  f"{enabled}: {exc or type(exc).__name__}") from exc
        # the agent answers 200 with {"protection": {...}}, or with {"failure": {"Reason"}}
        # or {"error": {"Code", "Message"}} when ECS refused
        if not isinstance(answer, dict) or "protection" not in answer:
            problem = answer.get("failure") or answer.get("error") if isinstance(
                answer, dict) else answer
            raise ProtectionError(f"ECS refused task protection {enabled}: {problem}")
        log.info("task scale-in protection %s", "on" if enabled else "off")
        return answer if isinstance(answer, dict) else {}
