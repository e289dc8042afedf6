"""The worker supervisor's pure decisions: restart backoff, when a streak of deaths ends, what
an exit says, how many processes ``--processes`` / ``TOREN_PROCESSES`` asks for."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from toren.config import (
    MAX_WORKER_PROCESSES,
    Settings,
    available_cpus,
    cgroup_cpu_limit,
    worker_processes,
)
from toren.errors import ConfigError
from toren.host.supervisor import (
    RESTART_BASE_S,
    RESTART_CAP_S,
    STABLE_AFTER_S,
    child_command,
    child_env,
    exit_description,
    failures_after_exit,
    restart_delay,
)


def test_the_restart_delay_doubles_with_each_death_in_a_row_up_to_the_cap() -> None:
    delays = [restart_delay(failures) for failures in range(1, 12)]
    assert delays[:4] == [RESTART_BASE_S, 2 * RESTART_BASE_S, 4 * RESTART_BASE_S,
                          8 * RESTART_BASE_S]
    assert delays == sorted(delays)
    assert max(delays) == RESTART_CAP_S == delays[-1]
    assert restart_delay(0) == 0.0
    assert restart_delay(10_000) == RESTART_CAP_S  # no overflow however long it loops


def test_a_child_that_stayed_up_a_while_starts_a_new_streak() -> None:
    assert failures_after_exit(0, uptime_s=0.2) == 1
    assert failures_after_exit(5, uptime_s=1.0) == 6
    assert failures_after_exit(5, uptime_s=STABLE_AFTER_S) == 1
    # so a child that dies once a day restarts after the base delay each time
    assert restart_delay(failures_after_exit(7, uptime_s=86_400)) == RESTART_BASE_S


def test_an_exit_names_its_code_or_its_signal() -> None:
    assert exit_description(3) == (3, None, "exit code 3")
    assert exit_description(-signal.SIGKILL) == (None, "SIGKILL", "killed by SIGKILL")
    assert exit_description(-signal.SIGSEGV)[1] == "SIGSEGV"
    assert exit_description(-200)[1] == "signal 200"


def test_a_child_runs_this_toren_s_worker_on_the_same_directories_and_lane() -> None:
    command = child_command(["/agents", "/more agents"], lane="short")
    assert command[:3] == [sys.executable, "-m", "toren"]
    assert command[3:] == ["worker", "--processes", "1", "--json", "--dir", "/agents",
                           "--dir", "/more agents", "--lane", "short"]


@pytest.mark.parametrize(("text", "cpus"), [
    ("max 100000\n", None), ("200000 100000\n", 2.0), ("50000 100000", 0.5),
    ("150000 100000", 1.5), ("", None), ("garbage", None), ("0 100000", None),
    ("-1 100000", None), ("1 2 3", None),
])
def test_a_cgroup_cpu_quota_is_read_as_cpus(text: str, cpus: float | None) -> None:
    assert cgroup_cpu_limit(text) == cpus


def test_auto_is_the_cpus_here_capped_by_the_container_quota(tmp_path: Path) -> None:
    here = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    assert available_cpus(tmp_path / "absent") == here
    quota.write_text("max 100000\n")
    assert available_cpus(quota) == here
    quota.write_text("50000 100000\n")  # half a CPU (a 512-unit Fargate task): one process
    assert available_cpus(quota) == 1
    quota.write_text(f"{100000 * here + 50000} 100000\n")  # more quota than CPUs: the CPUs
    assert available_cpus(quota) == here
    quota.write_text("100000 100000\n")
    assert available_cpus(quota) == 1


@pytest.mark.parametrize(("value", "count"), [("1", 1), (" 4 ", 4), ("AUTO", None),
                                              (str(MAX_WORKER_PROCESSES), MAX_WORKER_PROCESSES)])
def test_a_process_count_is_a_number_or_auto(value: str, count: int | None) -> None:
    assert worker_processes(value, "--processes") == (count or available_cpus())


@pytest.mark.parametrize("value", ["0", "-1", "abc", "2.5", "", str(MAX_WORKER_PROCESSES + 1),
                                   "1e3", "\x1b[31m2"])
def test_a_bad_process_count_names_the_option_and_what_to_write(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        worker_processes(value, "--processes")
    message = raised.value.message
    assert message.startswith("--processes=")
    assert "whole number from 1 to" in message and "auto" in message


def test_toren_processes_is_a_setting_and_defaults_to_one_process() -> None:
    assert Settings.from_env({}).processes == 1
    assert Settings.from_env({"TOREN_PROCESSES": "3"}).processes == 3
    assert Settings.from_env({}).supervisor is None
    assert Settings.from_env({"TOREN_SUPERVISOR": "vm-1-ab"}).supervisor == "vm-1-ab"
    with pytest.raises(ConfigError, match="TOREN_PROCESSES='none'"):
        Settings.from_env({"TOREN_PROCESSES": "none"})


def test_each_child_knows_its_supervisor_and_slot_and_gets_its_own_metrics_port() -> None:
    env = {"PATH": "/bin", "TOREN_PROCESSES": "auto", "TOREN_METRICS_PORT": "9464"}
    first, third = child_env(env, "vm-1-ab", 1), child_env(env, "vm-1-ab", 3)
    assert (first["TOREN_SUPERVISOR"], first["TOREN_SUPERVISOR_SLOT"]) == ("vm-1-ab", "1")
    assert (first["TOREN_PROCESSES"], first["PATH"]) == ("1", "/bin")
    assert (first["TOREN_METRICS_PORT"], third["TOREN_METRICS_PORT"]) == ("9464", "9466")
    assert "TOREN_METRICS_PORT" not in child_env({}, "vm-1-ab", 2)
    assert env["TOREN_METRICS_PORT"] == "9464"  # the supervisor's own is left alone
    settings = Settings.from_env(third)
    assert (settings.supervisor, settings.supervisor_slot, settings.processes,
            settings.metrics_port) == ("vm-1-ab", 3, 1, 9466)
    assert Settings.from_env({}).supervisor_slot is None
