"""``/readyz`` of a worker whose input topics do not exist: not ready, with the reason,
and one log line that names the command creating them."""

from __future__ import annotations

import time

import orjson
import pytest

from schemas import GoldenQuery, RetrievalResult
from scorer.kafka.topics import ensure_topics
from tests.integration.test_worker import produce
from tests.support.kafka import settings_for
from tests.support.worker import Worker, consume

pytestmark = pytest.mark.integration


def test_not_ready_while_the_input_topics_are_missing(kafka_bootstrap, tmp_path):
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=1)
    worker = Worker(settings, tmp_path).launch()
    try:
        deadline = time.monotonic() + 60
        status, body = worker.get("/readyz")
        while b"input topics missing" not in body:
            assert time.monotonic() < deadline, f"no answer naming the topics:\n{worker.tail()}"
            assert worker.process is not None and worker.process.poll() is None, worker.tail()
            time.sleep(0.3)
            status, body = worker.get("/readyz")
        assert status == 503
        assert orjson.loads(body) == {
            "ready": False,
            "status": f"input topics missing: {settings.results_topic}, {settings.qrels_topic} "
            "(run `scorer topics create`)",
        }
        time.sleep(6)  # a second lookup, which must not log again
        assert worker.get("/readyz")[0] == 503
        lines = worker.tail(400).splitlines()
        logged = [line for line in lines if "scorer topics create" in line and "[WARNING]" in line]
        assert len(logged) == 1, logged
        assert (
            f"input topics missing: {settings.results_topic}, {settings.qrels_topic};"
            in (logged[0])
        )
        # It does not claim to be ready, and says once, on its own output, why not.
        assert not [line for line in lines if line.startswith("scorer worker ready")]
        said = [line for line in lines if line.startswith("scorer worker started, not ready")]
        assert said == [
            "scorer worker started, not ready yet: input topics missing: "
            f"{settings.results_topic}, {settings.qrels_topic} (run `scorer topics create`)"
        ]

        # Faust does not pick up topics created after it started: still not ready ...
        ensure_topics(settings)
        deadline = time.monotonic() + 30
        while b"created after start-up" not in body:
            assert time.monotonic() < deadline, body
            time.sleep(0.3)
            status, body = worker.get("/readyz")
        assert status == 503
        # ... until restarted, and then it scores.
        worker.stop()
        worker.start()
        golden = GoldenQuery(query_id="q1", qrels={"d1": 1})
        result = RetrievalResult(result_id="r1", run_id="run", query_id="q1", ranked=["d1"])
        produce(settings, [("q1", golden.to_json_bytes(), settings.qrels_topic)])
        produce(settings, [("q1", result.to_json_bytes(), settings.results_topic)])
        (scored,) = consume(settings, settings.scored_topic, expected=1, timeout=60)
        assert orjson.loads(scored.value)["resultId"] == "r1"
    finally:
        worker.stop()
