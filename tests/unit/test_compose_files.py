"""The Compose rung's files stay in step with the code: the version they pin, the settings
.env.example lists, the agents they serve. (compose/test.sh runs them on real containers.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

import toren
from toren.agents import load_agent

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"


def compose_file(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_env_example_lists_every_setting_of_the_readme() -> None:
    result = subprocess.run([sys.executable, str(COMPOSE / "ci" / "env_example.py")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^# ([A-Z][A-Z0-9_]*)=$", (COMPOSE / ".env.example").read_text(),
                            re.MULTILINE))
    assert {"DATABASE_URL", "TOREN_SHUTDOWN_GRACE", "TOREN_CONCURRENCY"} <= listed
    assert "POSTGRES_PASSWORD=\n" in (COMPOSE / ".env.example").read_text()  # required, empty


def test_the_image_and_both_compose_files_pin_this_version() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^ARG TOREN_VERSION=(\S+)$", dockerfile, re.MULTILINE) == [
        toren.__version__] * 2
    for path in (COMPOSE / "docker-compose.yml", COMPOSE / "trust-domains" /
                 "docker-compose.yml"):
        spec = compose_file(path)
        anchor = spec["x-toren"]
        assert anchor["image"] == f"${{TOREN_IMAGE:-toren:{toren.__version__}}}", path
        assert anchor["build"]["args"]["TOREN_VERSION"] == toren.__version__, path


def test_the_compose_file_orders_start_up_and_drains_on_stop() -> None:
    services = compose_file(COMPOSE / "docker-compose.yml")["services"]
    assert set(services) == {"postgres", "setup", "toren", "worker", "worker-long"}
    assert services["postgres"]["healthcheck"]["test"][0] == "CMD-SHELL"
    assert "ports" not in services["postgres"]  # never published outside the project
    for name in ("toren", "worker", "worker-long"):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["setup"]["condition"] == "service_completed_successfully"
        # more than the default TOREN_SHUTDOWN_GRACE (10 s): work in hand drains first
        assert int(services[name]["stop_grace_period"].rstrip("s")) > 10
        assert services[name]["restart"] == "unless-stopped"
    assert services["setup"]["command"] == [
        "toren db migrate && toren keys create admin --if-none"]
    assert services["worker"]["profiles"] == ["workers"]
    # the long lane: its own worker, only with the long profile, with its own concurrency and
    # the database of the others (the anchor's environment, merged)
    long = services["worker-long"]
    assert long["profiles"] == ["long"] and long["command"] == ["worker", "--lane", "long"]
    assert long["environment"]["DATABASE_URL"] == services["toren"]["environment"][
        "DATABASE_URL"]
    assert long["environment"]["TOREN_CONCURRENCY"] == "${TOREN_LONG_CONCURRENCY:-8}"
    assert services["toren"]["ports"] == ["${TOREN_PUBLISH:-127.0.0.1:8420}:8420"]


def test_the_trust_domain_agents_load() -> None:
    domains = COMPOSE / "trust-domains"
    names = sorted(load_agent(agent).name for agent in domains.glob("*/*")
                   if (agent / "agent.yaml").exists())
    assert names == ["helpdesk", "ledger-clerk"]
    services = compose_file(domains / "docker-compose.yml")["services"]
    assert services["support"]["environment"]["TOREN_DIRS"] == "/agents/support"
    assert services["finance"]["environment"]["TOREN_DIRS"] == "/agents/finance"


def test_the_ci_agent_loads() -> None:
    agent = load_agent(COMPOSE / "ci" / "agents" / "slow-crew")
    assert sorted(agent.tools) == ["fetch_page", "summarize"]


def test_compose_test_reads_the_kernels_version() -> None:
    # the image is built with TOREN_VERSION from this line; it once read a file the version
    # had moved out of, and only the CI's Compose step found it
    script = (ROOT / "compose" / "test.sh").read_text()
    match = re.search(r"^version=\$\(python3 -c '(.+)'\)$", script, re.M)
    assert match, "compose/test.sh no longer reads the version as this test expects"
    found = subprocess.run([sys.executable, "-c", match[1]], cwd=ROOT, capture_output=True,
                           text=True, check=False)
    assert (found.returncode, found.stdout.strip()) == (0, toren.__version__), found.stderr
