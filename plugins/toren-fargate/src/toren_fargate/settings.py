"""The fargate runtime's settings, read from the environment once, when the runtime is made."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from toren.plugin import ConfigError

#: Fargate's longest ``stopTimeout`` (seconds between SIGTERM and SIGKILL).
MAX_STOP_TIMEOUT_S = 120
#: What a stopping worker needs beyond ``TOREN_SHUTDOWN_GRACE``: handing back what did not
#: finish, signing out (at most 5 s) and closing connections.
STOP_MARGIN_S = 8.0
_NAMESPACE = re.compile(r"^[A-Za-z0-9._/#:-]{1,255}$")


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float,
            what: str) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # NaN fails too
        raise ConfigError(f"{name}={raw!r}: expected {what} from {low:g} to {high:g}")
    return value


@dataclass(frozen=True)
class FargateSettings:
    """How the worker behaves as a Fargate task.

    Args:
        stop_timeout_s: the task definition's ``stopTimeout`` (``TOREN_FARGATE_STOP_TIMEOUT``,
            default 30, ECS's default): the runtime refuses to start when
            ``TOREN_SHUTDOWN_GRACE`` plus its own margin does not fit in it.
        health_port: port of the health endpoint (``TOREN_FARGATE_HEALTH_PORT``, default
            8081; 0 turns it off).
        health_host: address it listens on (``TOREN_FARGATE_HEALTH_HOST``, default
            ``0.0.0.0``: the container's health check and the target group reach it).
        agent_uri: the ECS agent's endpoint (``ECS_AGENT_URI``, set by ECS in every task);
            unset means no scale-in protection (not on ECS).
        protection_minutes: ``ExpiresInMinutes`` of each protection (``TOREN_FARGATE_
            PROTECTION_MINUTES``, default 60); renewed while busy, so a worker that hangs
            loses it at the latest this long after its last renewal.
        metric_interval_s: seconds between queue-depth metrics (``TOREN_FARGATE_METRIC_
            INTERVAL``, default 60; 0 turns them off).
        metric_namespace: the CloudWatch namespace (``TOREN_FARGATE_METRIC_NAMESPACE``,
            default ``Toren``).
        fleet: the ``Fleet`` dimension of the fleet-wide metric (``TOREN_FARGATE_FLEET``,
            default ``default``): one name per worker service.
        cloudwatch_endpoint_url: a CloudWatch-compatible endpoint instead of AWS's
            (``TOREN_CLOUDWATCH_ENDPOINT_URL``; moto in tests).
        region: ``AWS_REGION`` or ``AWS_DEFAULT_REGION`` (default ``us-east-1``).
    """

    stop_timeout_s: float = 30.0
    health_port: int = 8081
    health_host: str = "0.0.0.0"
    agent_uri: str | None = None
    protection_minutes: int = 60
    metric_interval_s: float = 60.0
    metric_namespace: str = "Toren"
    fleet: str = "default"
    cloudwatch_endpoint_url: str | None = None
    region: str = "us-east-1"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FargateSettings:
        env = os.environ if env is None else env
        namespace = env.get("TOREN_FARGATE_METRIC_NAMESPACE", "Toren")
        if not _NAMESPACE.match(namespace) or namespace.startswith("AWS/"):
            raise ConfigError(f"TOREN_FARGATE_METRIC_NAMESPACE={namespace!r} is not a valid "
                              "CloudWatch namespace: 1-255 letters, digits or . _ / # : -, "
                              "not starting with AWS/")
        fleet = env.get("TOREN_FARGATE_FLEET", "default")
        if not 1 <= len(fleet) <= 255 or not fleet.isprintable():
            raise ConfigError(f"TOREN_FARGATE_FLEET={fleet!r}: expected 1-255 printable "
                              "characters (the metric's Fleet dimension)")
        return cls(
            stop_timeout_s=_number(env, "TOREN_FARGATE_STOP_TIMEOUT", 30.0, 2,
                                   MAX_STOP_TIMEOUT_S, "seconds (the task's stopTimeout)"),
            health_port=int(_number(env, "TOREN_FARGATE_HEALTH_PORT", 8081, 0, 65535,
                                    "a port number (0: no health endpoint)")),
            health_host=env.get("TOREN_FARGATE_HEALTH_HOST") or "0.0.0.0",
            agent_uri=(env.get("ECS_AGENT_URI") or "").rstrip("/") or None,
            protection_minutes=int(_number(env, "TOREN_FARGATE_PROTECTION_MINUTES", 60, 1,
                                           2880, "whole minutes (ECS allows 1-2880)")),
            metric_interval_s=_number(env, "TOREN_FARGATE_METRIC_INTERVAL", 60.0, 0, 3600,
                                      "seconds (0: no metric)"),
            metric_namespace=namespace, fleet=fleet,
            cloudwatch_endpoint_url=env.get("TOREN_CLOUDWATCH_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        )

    def check_drain_fits(self, shutdown_grace_s: float) -> None:
        """``ConfigError`` when a drain of ``shutdown_grace_s`` cannot end before ECS's
        SIGKILL: work in hand would be cut off instead of handed back."""
        needed = shutdown_grace_s + STOP_MARGIN_S
        if needed > self.stop_timeout_s:
            raise ConfigError(
                f"TOREN_SHUTDOWN_GRACE={shutdown_grace_s:g} needs a stopTimeout of at least "
                f"{needed:g} s (grace + {STOP_MARGIN_S:g} s to hand back and sign out), but "
                f"TOREN_FARGATE_STOP_TIMEOUT={self.stop_timeout_s:g}: raise the task "
                f"definition's stopTimeout (at most {MAX_STOP_TIMEOUT_S}) and this setting "
                "with it, or lower TOREN_SHUTDOWN_GRACE")
