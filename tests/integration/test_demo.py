"""README's run command: ``scorer demo`` brings up a worker and traffic, then stops."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.integration.worker_support import SCORER, consume, free_port, worker_env
from tests.support.kafka import settings_for

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
