"""One-of-N drivers chosen by name through stevedore, and the error when one is missing."""

from __future__ import annotations

import pytest
from toren_postgres.queue import PostgresQueue
from toren_postgres.store import PostgresStore

from toren.config import Settings
from toren.errors import DriverNotFound
from toren.host.inprocess import InProcessRuntime
from toren.seams.drivers import (
    KINDS,
    KNOWN_DISTRIBUTIONS,
    PLANNED_DRIVERS,
    driver_class,
    driver_names,
    installed_drivers,
    missing_driver_message,
)
from toren.seams.queue import Queue
from toren.seams.store import Store
from toren.seams.worker_runtime import WorkerRuntime


@pytest.mark.parametrize(("kind", "name", "expected", "base"), [
    ("store", "postgres", PostgresStore, Store),
    ("queue", "postgres", PostgresQueue, Queue),
    ("runtime", "inprocess", InProcessRuntime, WorkerRuntime),
])
def test_driver_class_picks_by_name(kind: str, name: str, expected: type, base: type) -> None:
    found = driver_class(kind, name)

    assert found is expected
    assert issubclass(found, base)
    assert name in driver_names(kind)


def test_a_missing_published_driver_names_its_distribution() -> None:
    message = missing_driver_message(KINDS["queue"], "sqs")
    assert "TOREN_QUEUE=sqs" in message and message.endswith(": pip install toren-sqs")


def test_a_planned_driver_names_no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PLANNED_DRIVERS, ("toren.runtime", "lambda"), "the Lambda runtime")
    with pytest.raises(DriverNotFound) as info:
        driver_class("runtime", "lambda")

    assert "TOREN_RUNTIME=lambda" in info.value.message
    assert "the Lambda runtime is planned" in info.value.message
    assert "not yet available" in info.value.message
    assert "inprocess (toren)" in info.value.message
    assert "pip install" not in info.value.message


@pytest.mark.parametrize("name", ["dynamo", "mysql", "postgres2"])
def test_an_unknown_driver_invites_no_install_of_a_guessed_package(name: str) -> None:
    with pytest.raises(DriverNotFound) as info:
        driver_class("store", name)

    message = info.value.message
    assert f"TOREN_STORE={name}" in message
    assert "pip install" not in message
    assert f"toren-{name}" not in message
    assert "no Toren distribution provides it" in message
    assert "installed store driver: postgres (toren-postgres)" in message


def test_only_published_distributions_are_suggested() -> None:
    # what a user without toren-postgres would read
    message = missing_driver_message(KINDS["store"], "postgres")

    assert message.endswith(": pip install toren-postgres")
    assert set(KNOWN_DISTRIBUTIONS.values()) == {"toren", "toren-postgres", "toren-sqs",
                                                 "toren-fargate", "toren-s3", "toren-otel"}
    assert missing_driver_message(KINDS["runtime"], "fargate").endswith(
        ": pip install toren-fargate")
    assert not set(KNOWN_DISTRIBUTIONS) & set(PLANNED_DRIVERS)


def test_settings_pick_drivers_from_the_environment() -> None:
    settings = Settings.from_env({"TOREN_QUEUE": "sqs", "TOREN_STORE": "postgres",
                                  "TOREN_RUNTIME": "fargate"})

    assert (settings.queue_driver, settings.store_driver, settings.runtime_driver) == (
        "sqs", "postgres", "fargate")
    defaults = Settings.from_env({})
    assert (defaults.queue_driver, defaults.store_driver, defaults.runtime_driver) == (
        KINDS["queue"].default, KINDS["store"].default, KINDS["runtime"].default)


def test_installed_drivers_name_their_distributions() -> None:
    rows = {(row["kind"], row["name"]): row for row in installed_drivers()}

    assert rows[("store", "postgres")]["distribution"] == "toren-postgres"
    assert rows[("queue", "postgres")]["target"] == "toren_postgres.queue:PostgresQueue"
    assert rows[("runtime", "inprocess")]["distribution"] == "toren"
    assert all(row["version"] not in ("", "?") for row in rows.values())
