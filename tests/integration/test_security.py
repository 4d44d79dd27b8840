"""Security as configured: SCRAM login end to end, a refused login failing fast and
clearly, secrets kept out of logs, errors and /metrics, a read-only HTTP API that
validates its input, and a web server bound only where it is told."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from scorer.kafka.launcher import SaslListener
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from tests.integration.test_reliability import (
    Feeder,
    golden_and_results,
    keyed,
    load_golden,
    read_scored,
)
from tests.support.kafka import settings_for
from tests.support.worker import SCORER, Worker, worker_env

pytestmark = pytest.mark.integration


def sasl_settings(sasl: SaslListener, state_dir: Path, password: str | None = None) -> Settings:
    return settings_for(
        sasl.bootstrap,
        state_dir,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism=sasl.mechanism,
        kafka_sasl_username=sasl.username,
        kafka_sasl_password=password or sasl.password,
        partitions=2,
    )


@pytest.fixture(scope="module")
def sasl(kafka_sasl: SaslListener) -> SaslListener:
    return kafka_sasl


@pytest.fixture(scope="module")
def settings(sasl: SaslListener, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return sasl_settings(sasl, tmp_path_factory.mktemp("security"))


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[Worker]:
    ensure_topics(settings)
    running = Worker(settings, settings.state_dir).start()
    yield running
    running.stop()


def test_a_worker_logged_in_with_scram_scores_end_to_end(worker, settings, sasl):
    golden, results = golden_and_results("sasl", queries=20, results=200, seed=2)
    load_golden(settings, worker, golden)
    feeder = Feeder(settings, keyed(settings.results_topic, results), rate=1_000)
    feeder.start()
    feeder.join_checked(60)
    everything = {result.result_id for result in results}
    _, tally = read_scored(settings, everything, 60)
    assert set(tally.copies) == everything
    assert tally.duplicates == 0


def test_the_password_never_shows_in_logs_metrics_or_settings(worker, settings, sasl):
    password = sasl.password
    status, metrics = worker.get("/metrics")
    assert status == 200 and b"scorer_results_total" in metrics
    assert password.encode() not in metrics
    log = worker.log.read_bytes()
    assert b"Joined group" in log  # the log is the worker's, at info level
    assert password.encode() not in log
    assert password not in repr(settings)
    assert password not in str(settings)
    assert password not in settings.model_dump_json()


def test_a_wrong_password_stops_the_worker_at_start_with_one_clear_line(sasl, tmp_path):
    wrong = "not-the-password-" + sasl.password[:4][::-1]
    settings = sasl_settings(sasl, tmp_path, password=wrong)
    done = subprocess.run(
        [SCORER, "worker"],
        env=worker_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"Error: cannot use Kafka at {sasl.bootstrap}: ")
    assert "SaslAuthenticationFailed" in lines[0]
    assert "SCORER_KAFKA_SASL_" in lines[0]
    assert wrong not in done.stdout + done.stderr
    assert sasl.password not in done.stdout + done.stderr


def request(worker: Worker, method: str, path: str) -> int:
    call = urllib.request.Request(worker.url + path, data=b"{}", method=method)
    try:
        with urllib.request.urlopen(call, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/evals/runs/bm25-v1/metrics",
        "/api/v1/evals/runs/bm25-v1/scores",
        "/api/v1/evals/runs/a/compare/b",
        "/healthz",
    ],
)
def test_the_http_api_is_read_only(worker, method, path):
    assert request(worker, method, path) == 405


@pytest.mark.parametrize(
    ("run_id", "reason"),
    [
        ("x" * 257, "1 to 256"),
        ("bad%01id", "control characters"),
        ("tab%09id", "control characters"),
    ],
)
def test_bad_run_ids_are_rejected_with_400(worker, run_id, reason):
    for path in (f"/api/v1/evals/runs/{run_id}/metrics", f"/api/v1/evals/runs/{run_id}/scores"):
        status, body = worker.get(path)
        assert status == 400, path
        assert reason in orjson.loads(body)["error"]


def listening_addresses(port: int) -> set[str]:
    """``address:port`` of every socket listening on ``port`` (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_the_web_server_listens_only_on_the_configured_address(worker, settings):
    assert settings.web_host == "127.0.0.1"
    # 127.0.0.1 in /proc/net/tcp: four bytes in host (little-endian) order.
    assert listening_addresses(worker.port) == {"0100007F"}
    assert worker.get("/healthz")[0] == 200
    # Another address of this machine (all of 127/8 is local): nothing answers there.
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.2", worker.port), timeout=5),
    ):
        pass
