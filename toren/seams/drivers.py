"""One-of-N drivers (store, queue, runtime) loaded with stevedore by configured name."""

from __future__ import annotations

import importlib.metadata as metadata
from dataclasses import dataclass
from typing import Any, cast

from stevedore import DriverManager
from stevedore.exception import NoMatches

from toren.errors import DriverNotFound, PluginError
from toren.seams.plugin_api import check_extension_api


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
    # picked by the scheme of TOREN_ARCHIVE's URL (toren.seams.archive)
    "archive": DriverKind("archive", "toren.archive", "TOREN_ARCHIVE", "file"),
    "tracer": DriverKind("tracer", "toren.tracer", "TOREN_TRACER", "none"),
}

#: The distribution that provides each of Toren's own published drivers, for the install hint.
#: Only names in this map are ever suggested to ``pip install``: a hint built from whatever
#: name was configured would send users to a package anyone could register (dependency
#: confusion).
KNOWN_DISTRIBUTIONS: dict[tuple[str, str], str] = {
    ("toren.store", "postgres"): "toren-postgres",
    ("toren.queue", "postgres"): "toren-postgres",
    ("toren.queue", "sqs"): "toren-sqs",
    ("toren.runtime", "inprocess"): "toren",
    ("toren.runtime", "fargate"): "toren-fargate",
    ("toren.archive", "file"): "toren",
    ("toren.archive", "s3"): "toren-s3",
    ("toren.tracer", "otel"): "toren-otel",
}
#: Drivers Toren plans but has not published: named as not yet available, never as a package.
PLANNED_DRIVERS: dict[tuple[str, str], str] = {}


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
        raise DriverNotFound(missing_driver_message(spec, name)) from exc
    check_extension_api(manager.extensions[0], f"{kind} driver {name}",
                        f"choose another {kind} driver with {spec.env_var}")
    return cast(type[Any], manager.driver)


def missing_driver_message(spec: DriverKind, name: str) -> str:
    """Why ``name`` cannot be loaded, and what to do: install a known distribution, wait for
    a planned driver, or pick one of the installed drivers."""
    installed = [f"{row['name']} ({row['distribution']})" for row in installed_drivers()
                 if row["kind"] == spec.kind]
    choices = ", ".join(installed) or "none"
    head = f"no {spec.kind} driver named {name!r} is installed ({spec.env_var}={name})"
    dist = KNOWN_DISTRIBUTIONS.get((spec.namespace, name))
    if dist is not None:
        return f"{head}: pip install {dist}"
    planned = PLANNED_DRIVERS.get((spec.namespace, name))
    if planned is not None:
        return (f"{head}: {planned} is planned but not yet available; set {spec.env_var} to "
                f"an installed {spec.kind} driver: {choices}")
    return (f"{head}, and no Toren distribution provides it; set {spec.env_var} to an "
            f"installed {spec.kind} driver: {choices}, or install the third-party "
            f"distribution that registers {name!r} in the {spec.namespace} entry-point group")


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
