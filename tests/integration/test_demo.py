"""README's run command: ``scorer demo`` brings up a worker and traffic, then stops, and
every way of stopping it stops the worker and the broker it started."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from scorer.kafka.launcher import stop_broker
from tests.support.kafka import settings_for
from tests.support.worker import SCORER, consume, free_port, worker_env

pytestmark = pytest.mark.integration


def test_demo_scores_sample_traffic_and_stops_cleanly(kafka_bootstrap, tmp_path):
    settings = settings_for(kafka_bootstrap, tmp_path, web_port=free_port(), parking_ttl_seconds=2)
    done = subprocess.run(
        [SCORER, "demo", "--duration", "12", "--rate", "100", "--bad-share", "0.05"],
        env=worker_env(settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{settings.web_port}/metrics" in done.stdout
    assert "demo stopped" in done.stdout
    counts = dict(re.findall(r"(scored|unjudged|deadletter|parked) (\d+)", done.stdout))
    assert int(counts["scored"]) > 100
    assert int(counts["deadletter"]) > 0
    scored = consume(settings, settings.scored_topic, expected=int(counts["scored"]), timeout=30)
    assert len(scored) >= int(counts["scored"])
    assert b"retrievalMetrics" in scored[0].value


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    "stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "Ctrl-C"]
)
def test_a_stop_signal_stops_the_worker_and_the_broker_it_started(tmp_path, stop):
    """The demo starts its own broker (no KAFKA_BOOTSTRAP_SERVERS) in ``tmp_path``."""
    port = free_port()
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("KAFKA_", "SCORER_"))
    }
    env.update(SCORER_STATE_DIR=str(tmp_path), SCORER_WEB_PORT=str(port), PYTHONUNBUFFERED="1")
    demo = subprocess.Popen(
        [SCORER, "demo", "--queries", "20", "--rate", "20"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output: list[str] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            output.append(line)
            if line.startswith("scorer demo is running"):
                break
        else:
            pytest.fail("the demo ended before it ran:\n" + "".join(output))
        broker = json.loads((tmp_path / "kafka" / "broker.json").read_text())["pid"]
        assert _alive(broker)
        demo.send_signal(stop)
        rest, _ = demo.communicate(timeout=90)
        output.append(rest)
    finally:
        if demo.poll() is None:
            demo.kill()
        stop_broker(tmp_path)  # whatever the outcome, no JVM is left behind
    text = "".join(output)
    assert demo.returncode == 0, text
    assert text.rstrip().endswith("demo stopped"), text
    assert not _alive(broker), f"broker pid {broker} outlived the demo"
    with socket.socket() as probe:  # the worker is gone with its web port
        assert probe.connect_ex(("127.0.0.1", port)) != 0
