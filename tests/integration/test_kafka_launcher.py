"""`scorer kafka up|status|env|down` run a real broker from the state dir, and fail clearly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scorer.settings import local_bootstrap

SCORER = Path(sys.executable).with_name("scorer")


def _scorer(state_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("KAFKA_")}
    environment.update(SCORER_STATE_DIR=str(state_dir), **env)
    return subprocess.run(
        [SCORER, "kafka", *args], env=environment, capture_output=True, text=True, timeout=180
    )


@pytest.mark.integration
def test_up_status_env_down_run_and_remove_a_sasl_broker(tmp_path: Path) -> None:
    try:
        up = _scorer(tmp_path, "up", "--sasl")
        assert up.returncode == 0, up.stderr
        record = json.loads((tmp_path / "kafka" / "broker.json").read_text())
        assert f"bootstrap: {record['bootstrap']}" in up.stdout
        assert local_bootstrap(tmp_path) == record["bootstrap"]

        status = _scorer(tmp_path, "status")
        again = _scorer(tmp_path, "up", "--sasl")
        env = _scorer(tmp_path, "env")

        assert status.returncode == 0
        assert f"(pid {record['pid']})" in status.stdout
        assert again.returncode == 0
        assert "already running" in again.stdout
        assert f"export KAFKA_SASL_PASSWORD={record['sasl']['password']}" in env.stdout
    finally:
        down = _scorer(tmp_path, "down")

    assert down.returncode == 0
    assert "Kafka stopped" in down.stdout
    assert not (tmp_path / "kafka" / "data").exists()
    assert not (tmp_path / "kafka" / "bootstrap").exists()
    assert _scorer(tmp_path, "status").returncode == 1


@pytest.mark.integration
def test_up_on_a_port_in_use_fails_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        up = _scorer(tmp_path, "up", "--port", str(port))

    assert up.returncode == 1
    assert up.stderr == (
        f"Error: port {port} on 127.0.0.1 is in use (Address already in use): "
        "choose another with --port or stop what listens there\n"
    )


def test_up_without_java_fails_in_one_line(tmp_path: Path) -> None:
    up = _scorer(tmp_path, "up", PATH=str(Path(sys.executable).parent))

    assert up.returncode == 1
    assert up.stderr.startswith("Error: java not found on PATH")
    assert up.stderr.count("\n") == 1


def test_up_without_maven_and_no_cached_jars_fails_in_one_line(tmp_path: Path) -> None:
    java_only = tmp_path / "bin"
    java_only.mkdir()
    (java_only / "java").symlink_to(Path("/usr/bin/java").resolve())

    up = _scorer(tmp_path, "up", PATH=str(java_only), XDG_CACHE_HOME=str(tmp_path / "empty-cache"))

    assert up.returncode == 1
    assert up.stderr.startswith("Error: mvn not found on PATH")
    assert up.stderr.count("\n") == 1


def test_status_without_broker_exits_1(tmp_path: Path) -> None:
    status = _scorer(tmp_path, "status")

    assert status.returncode == 1
    assert "not running" in status.stdout


@pytest.mark.integration
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_worker_on_a_fresh_broker_logs_no_error(tmp_path: Path, guarantee: str) -> None:
    """The first worker of a brand-new broker (no offsets topic yet: no group
    coordinator) starts without one ERROR line: an operator who alerts on them is not
    paged by a first deploy."""
    from scorer.kafka.topics import ensure_topics
    from tests.support.kafka import settings_for
    from tests.support.worker import Worker

    try:
        up = _scorer(tmp_path, "up")
        assert up.returncode == 0, up.stderr
        bootstrap = json.loads((tmp_path / "kafka" / "broker.json").read_text())["bootstrap"]
        settings = settings_for(bootstrap, tmp_path, partitions=2, processing_guarantee=guarantee)
        ensure_topics(settings)
        worker = Worker(settings, tmp_path).launch("--loglevel", "info")
        try:
            worker.wait_ready(120)
        finally:
            worker.stop()
        log = worker.log.read_text()
        alarming = [
            line for line in log.splitlines()
            if "[ERROR]" in line or "[CRITICAL]" in line or line.startswith("Traceback")
        ]  # fmt: skip
        assert not alarming, "\n".join(alarming[:10])
        assert "scorer worker ready" in log
    finally:
        _scorer(tmp_path, "down")
