"""compose/observability: the overlay, the collector's and Prometheus's files agree with each
other and with Toren's settings (not run on containers: the images cannot be pulled in CI)."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "compose"


def load(name: str) -> dict:
    return yaml.safe_load((COMPOSE / "observability" / name).read_text())


def test_the_overlay_turns_tracing_on_and_mounts_files_that_exist() -> None:
    overlay = load("docker-compose.yml")
    base = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    for name in ("toren", "worker"):
        assert name in base["services"]
        service = overlay["services"][name]
        assert service["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
            "http://otel-collector:4318")
        assert "toren-otel" in service["build"]["args"]["PLUGINS"].split()
        assert (COMPOSE.parent / "plugins" / "toren-otel" / "pyproject.toml").exists()
    for service in overlay["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (COMPOSE / source).exists(), source  # relative to the first file: compose/


def test_prometheus_scrapes_where_toren_serves_metrics() -> None:
    overlay = load("docker-compose.yml")
    prometheus = load("prometheus.yml")
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    assert jobs["toren-api"]["static_configs"][0]["targets"] == ["toren:8420"]
    worker_port = int(overlay["services"]["worker"]["environment"]["TOREN_METRICS_PORT"])
    assert jobs["toren-workers"]["dns_sd_configs"][0]["port"] == worker_port
    assert overlay["services"]["worker"]["environment"]["TOREN_METRICS_HOST"] == "0.0.0.0"


def test_the_collector_receives_otlp_http_and_exports_traces() -> None:
    collector = load("otel-collector.yaml")
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    pipeline = collector["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"] and pipeline["exporters"]
