"""``scorer worker`` at its default log level: it says, in two lines, that it is ready
and where it listens, and Ctrl-C stops it without mode's ``-INT-`` banner."""

from __future__ import annotations

import signal

import pytest

from scorer.kafka.topics import ensure_topics
from tests.support.kafka import settings_for
from tests.support.worker import Worker

pytestmark = pytest.mark.integration


def test_default_level_says_ready_and_where_and_ctrl_c_is_quiet(kafka_bootstrap, tmp_path):
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=1)
    ensure_topics(settings)
    worker = Worker(settings, tmp_path).launch("--loglevel", "warning")
    try:
        worker.wait_ready(timeout=90)
        assert worker.process is not None
        worker.stop(signal.SIGINT)
        assert worker.process.returncode == 0, worker.tail()
    finally:
        worker.stop()
    output = worker.log.read_text()
    assert (
        f"scorer worker ready: group {settings.app_id} reads {settings.results_topic} and "
        f"{settings.qrels_topic}, writes {settings.scored_topic}\n"
        f"listening on http://127.0.0.1:{worker.port}: /metrics, run API "
        "/api/v1/evals/runs/{runId}/metrics, /readyz\n"
    ) in output
    assert "-INT-" not in output
