"""One-of-N drivers chosen by name through stevedore, and the error when one is missing."""

from __future__ import annotations

import pytest
from toren_postgres.queue import PostgresQueue
from toren_postgres.store import PostgresStore

from toren.config import Settings
from toren.errors import ConfigError, DriverNotFound
from toren.host.inprocess import InProcessRuntime
from toren.seams.drivers import KINDS, driver_class, driver_names, installed_drivers
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


def test_missing_queue_driver_names_the_package_and_the_setting() -> None:
    with pytest.raises(DriverNotFound) as info:
        driver_class("queue", "sqs")

    message = info.value.message
    assert isinstance(info.value, ConfigError)
    assert info.value.code == "driver_not_found"
    assert "pip install toren-sqs" in message
    assert "TOREN_QUEUE=sqs" in message
    assert "installed: postgres" in message


def test_missing_runtime_driver_names_its_distribution() -> None:
    with pytest.raises(DriverNotFound) as info:
        driver_class("runtime", "fargate")

    assert "pip install toren-aws" in info.value.message
    assert "TOREN_RUNTIME=fargate" in info.value.message


def test_unknown_driver_guesses_the_package_name() -> None:
    with pytest.raises(DriverNotFound) as info:
        driver_class("store", "dynamo")

    assert "pip install toren-dynamo" in info.value.message
    assert "TOREN_STORE=dynamo" in info.value.message


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
