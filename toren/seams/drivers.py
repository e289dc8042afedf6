"""One-of-N drivers (store, queue, runtime) loaded with stevedore by configured name."""

from __future__ import annotations

import importlib.metadata as metadata
from dataclasses import dataclass
from typing import Any, cast

from stevedore import DriverManager
from stevedore.exception import NoMatches

from toren.errors import DriverNotFound, PluginError


@dataclass(frozen=True)
class DriverKind:
    """A driver namespace, the setting that picks a driver in it, and the default."""

    kind: str
    namespace: str
    env_var: str
    default: str


KINDS: dict[str, DriverKind] = {
    "store": DriverKind("store", "toren.store", "TOREN_STORE", "postgres"),
    "queue": DriverKind("queue", "toren.queue", "TOREN_QUEUE", "postgres"),
    "runtime": DriverKind("runtime", "toren.runtime", "TOREN_RUNTIME", "inprocess"),
}

#: Which distribution provides each of Toren's own drivers, for the "install X" hint.
KNOWN_DISTRIBUTIONS: dict[tuple[str, str], str] = {
    ("toren.store", "postgres"): "toren-postgres",
    ("toren.queue", "postgres"): "toren-postgres",
    ("toren.queue", "sqs"): "toren-sqs",
    ("toren.runtime", "inprocess"): "toren",
    ("toren.runtime", "fargate"): "toren-aws",
}


def driver_class(kind: str, name: str) -> type[Any]:
    """The class registered as ``name`` in ``kind``'s namespace.

    Raises ``DriverNotFound`` naming the distribution to install when none provides it.
    """
    spec = KINDS[kind]

    def failed(_manager: Any, entry_point: Any, exc: BaseException) -> None:
        raise PluginError(
            f"the {kind} driver {entry_point.name!r} ({entry_point.value}) failed to load: "
            f"{type(exc).__name__}: {exc}"
        ) from exc

    try:
        manager: DriverManager[Any] = DriverManager(
            spec.namespace, name, invoke_on_load=False, on_load_failure_callback=failed)
    except NoMatches as exc:
        installed = ", ".join(sorted(driver_names(kind))) or "none"
        dist = KNOWN_DISTRIBUTIONS.get((spec.namespace, name), f"toren-{name}")
        raise DriverNotFound(
            f"no {kind} driver named {name!r} is installed ({spec.env_var}={name}; "
            f"installed: {installed}): pip install {dist}"
        ) from exc
    return cast(type[Any], manager.driver)


def driver_names(kind: str) -> list[str]:
    return [ep.name for ep in metadata.entry_points(group=KINDS[kind].namespace)]


def installed_drivers() -> list[dict[str, str]]:
    """Every installed driver of every kind, with its distribution (for ``toren plugins``)."""
    rows = []
    for spec in KINDS.values():
        for ep in metadata.entry_points(group=spec.namespace):
            rows.append({
                "kind": spec.kind, "name": ep.name, "target": ep.value,
                "distribution": ep.dist.name if ep.dist else "?",
                "version": ep.dist.version if ep.dist else "?",
            })
    return rows
