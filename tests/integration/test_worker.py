"""The streaming scorer end to end: a real broker, a real worker process.

One worker serves the module (starting one costs seconds); each test uses
query and result ids of its own and asserts on deltas of /metrics.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from schemas import GoldenQuery, RetrievalResult, ScoredResult
from scorer.core.metrics import retrieval_metrics
from scorer.kafka.demo import DemoTraffic
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from tests.support.kafka import settings_for
from tests.support.worker import SCORER, Worker, consume, worker_env

pytestmark = pytest.mark.integration

TTL = 6.0


@pytest.fixture(scope="module")
def settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return settings_for(
        kafka_bootstrap,
        tmp_path_factory.mktemp("worker"),
        partitions=3,
        parking_ttl_seconds=TTL,
        facet_allowlist=("type", "popularity", "dynamism"),
    )


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[Worker]:
    ensure_topics(settings)
    running = Worker(settings, settings.state_dir).start()
    yield running
    running.stop()


def produce(settings: Settings, records: list[tuple[str, bytes | None, str]], **kwargs) -> None:
    """Send ``(key, value, topic)`` records as they are (no validation)."""

    async def run() -> None:
        producer = AIOKafkaProducer(**settings.aiokafka_options(), acks="all")
        await producer.start()
        try:
            for key, value, topic in records:
                await producer.send_and_wait(topic, key=key.encode(), value=value, **kwargs)
        finally:
            await producer.stop()

    asyncio.run(run())


def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def outcomes(worker: Worker) -> dict[str, float]:
    values = {
        outcome: worker.metric("scorer_results_total", {"outcome": outcome})
        for outcome in ("scored", "unjudged", "deadletter")
    }
    values["parked"] = worker.metric("scorer_parked_results")
    values["inputs"] = worker.metric("scorer_inputs_total", {"topic": "results"})
    return values


def assert_every_input_accounted(worker: Worker) -> None:
    counts = outcomes(worker)
    placed = counts["scored"] + counts["unjudged"] + counts["deadletter"] + counts["parked"]
    assert placed == counts["inputs"], counts


def scored_by_id(settings: Settings, expected: int) -> dict[str, list[ScoredResult]]:
    by_id: dict[str, list[ScoredResult]] = {}
    for record in consume(settings, settings.scored_topic, expected):
        scored = ScoredResult.model_validate_json(record.value)
        assert record.key == scored.query_id.encode()
        by_id.setdefault(scored.result_id, []).append(scored)
    return by_id


def offline_eval(settings: Settings, qrels: Path, run: Path, *options: str) -> dict:
    """``scorer eval QRELS RUN --format json`` on the same files, as a user would run it."""
    done = subprocess.run(
        [SCORER, "eval", str(qrels), str(run), "--format", "json", *options],
        env=worker_env(settings),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


def write_jsonl(path: Path, events) -> Path:
    path.write_bytes(b"".join(event.to_json_bytes() + b"\n" for event in events))
    return path


def test_replayed_files_are_scored_once_with_the_offline_numbers(worker, settings, tmp_path):
    traffic = DemoTraffic.generate(queries=150, unjudged_share=0.0, seed=11)
    results = list(traffic.results(limit=600))
    golden_file = write_jsonl(tmp_path / "golden.jsonl", traffic.golden)
    results_file = write_jsonl(tmp_path / "results.jsonl", results)
    before = outcomes(worker)
    ndcg_sum_before = worker.metric("scorer_retrieval_ndcg_at_10_sum", {"facet": "all"})

    replay = subprocess.run(
        [SCORER, "replay", "--golden", str(golden_file), "--results", str(results_file)],
        env=worker_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replay.returncode == 0, replay.stderr
    assert "sent 600 events" in replay.stdout

    by_id = scored_by_id(settings, expected=600)
    assert set(by_id) == {result.result_id for result in results}
    assert all(len(copies) == 1 for copies in by_id.values())

    offline = offline_eval(settings, golden_file, results_file, "--per-query")
    assert len(offline["results"]) == 600
    for row in offline["results"]:
        event = by_id[row["resultId"]][0]
        # Both objects of the scored event, the seed's five and the judgment measures.
        for group, got in (
            ("retrievalMetrics", event.retrieval_metrics.model_dump(by_alias=True)),
            ("judgmentMetrics", event.judgment_metrics.model_dump(by_alias=True)),
        ):
            assert got.keys() == row[group].keys()
            for name, value in row[group].items():
                assert got[name] == pytest.approx(value, abs=1e-12), (row["resultId"], name)
    judged = [row["judgmentMetrics"]["judgedAtK"] for row in offline["results"]]
    assert min(judged) < 1.0 and max(judged) > 0.0  # not a trivial agreement

    wait_for(lambda: outcomes(worker)["scored"] - before["scored"] == 600, what="600 scored")
    ndcg_sum = worker.metric("scorer_retrieval_ndcg_at_10_sum", {"facet": "all"})
    expected_sum = sum(copies[0].retrieval_metrics.ndcg_at_10 for copies in by_id.values())
    assert ndcg_sum - ndcg_sum_before == pytest.approx(expected_sum, abs=1e-9)
    tail = {"facet": "popularity", "value": "tail"}
    tail_count = sum(1 for c in by_id.values() if c[0].facets.get("popularity") == "tail")
    assert tail_count > 0
    assert worker.metric("scorer_retrieval_recall_at_k_count", tail) >= tail_count
    assert_every_input_accounted(worker)


def test_results_before_their_qrels_are_parked_then_scored(worker, settings):
    golden = GoldenQuery(query_id="late-q", qrels={"d1": 3, "d2": 1}, facets={"type": "list"})
    results = [
        RetrievalResult(result_id=f"late-{i}", run_id="r", query_id="late-q", ranked=["d2", "d1"])
        for i in range(3)
    ]
    before = outcomes(worker)
    produce(settings, [("late-q", r.to_json_bytes(), settings.results_topic) for r in results])
    wait_for(lambda: outcomes(worker)["parked"] - before["parked"] == 3, what="3 parked")
    produce(settings, [("late-q", golden.to_json_bytes(), settings.qrels_topic)])
    wait_for(lambda: outcomes(worker)["scored"] - before["scored"] == 3, what="3 scored")
    by_id = scored_by_id(settings, expected=1)
    scored = [by_id[f"late-{i}"][0] for i in range(3)]
    expected = retrieval_metrics(["d2", "d1"], golden.qrels, 10)
    assert all(
        (*s.retrieval_metrics.model_dump().values(), *s.judgment_metrics.model_dump().values())
        == tuple(expected)
        for s in scored
    )
    assert scored[0].facets == {"type": "list"}
    assert outcomes(worker)["parked"] == before["parked"]
    assert_every_input_accounted(worker)


def test_results_without_qrels_are_unjudged_after_the_ttl(worker, settings):
    before = outcomes(worker)
    result = RetrievalResult(result_id="lonely-1", run_id="r", query_id="lonely-q", ranked=["a"])
    produce(settings, [("lonely-q", result.to_json_bytes(), settings.results_topic)])
    wait_for(lambda: outcomes(worker)["parked"] - before["parked"] == 1, what="1 parked")
    started = time.monotonic()
    wait_for(
        lambda: outcomes(worker)["unjudged"] - before["unjudged"] == 1,
        timeout=TTL + 15,
        what="1 unjudged",
    )
    assert time.monotonic() - started >= TTL - 2.0
    assert outcomes(worker)["parked"] == before["parked"]
    assert_every_input_accounted(worker)


def test_results_without_qrels_are_unjudged_after_the_ttl_under_exactly_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """With no input after it: the expiry command went in the transaction of its
    partition, which nothing committed once the inputs stopped; the result stayed
    parked, the transaction timed out and the worker's later commands failed."""
    settings = settings_for(
        kafka_bootstrap,
        tmp_path,
        partitions=3,
        parking_ttl_seconds=TTL,
        processing_guarantee="exactly_once",
    )
    ensure_topics(settings)
    worker = Worker(settings, tmp_path).start()
    try:
        results = [
            RetrievalResult(
                result_id=f"lonely-{n}", run_id="r", query_id=f"lonely-{n}", ranked=["a"]
            )
            for n in range(3)
        ]
        produce(
            settings, [(r.query_id, r.to_json_bytes(), settings.results_topic) for r in results]
        )
        wait_for(lambda: outcomes(worker)["parked"] == 3, what="3 parked")
        started = time.monotonic()
        wait_for(lambda: outcomes(worker)["unjudged"] == 3, timeout=TTL + 15, what="3 unjudged")
        assert time.monotonic() - started >= TTL - 2.0
        assert outcomes(worker)["parked"] == 0
        assert_every_input_accounted(worker)
    finally:
        worker.stop()


def test_bad_events_go_to_the_dead_letter_topic_and_scoring_goes_on(worker, settings):
    good = GoldenQuery(query_id="dl-q", qrels={"a": 2})
    too_long = orjson.dumps(
        {"resultId": "x", "runId": "r", "queryId": "dl-q", "ranked": [str(i) for i in range(1001)]}
    )
    bad = [
        ("dl-q", b"{not json", settings.results_topic, "InvalidJson"),
        ("dl-q", b'{"resultId":1,"runId":"r","queryId":"dl-q","ranked":[]}',
         settings.results_topic, "SchemaViolation"),
        ("dl-q", too_long, settings.results_topic, "SchemaViolation"),
        ("other-key", b'{"resultId":"k","runId":"r","queryId":"dl-q","ranked":[]}',
         settings.results_topic, "KeyMismatch"),
        ("dl-q", b'{"queryId":"dl-q","qrels":{"a":4}}', settings.qrels_topic, "SchemaViolation"),
        ("dl-q", b"\xff\x00garbage", settings.qrels_topic, "InvalidJson"),
    ]  # fmt: skip
    headers = [("trace-id", b"t-123")]
    produce(settings, [(key, value, topic) for key, value, topic, _ in bad], headers=headers)
    produce(settings, [("dl-q", good.to_json_bytes(), settings.qrels_topic)])
    after = RetrievalResult(result_id="dl-after", run_id="r", query_id="dl-q", ranked=["a"])
    produce(settings, [("dl-q", after.to_json_bytes(), settings.results_topic)])

    letters = consume(settings, settings.deadletter_topic, expected=len(bad))
    assert len(letters) == len(bad)
    by_value = {letter.value: letter for letter in letters}
    for key, value, topic, error_class in bad:
        letter = by_value[value]
        got = dict(letter.headers)
        assert letter.key == key.encode()
        assert got["trace-id"] == b"t-123"
        assert got["x-scorer-error-class"] == error_class.encode()
        assert got["x-scorer-error-message"]
        assert got["x-scorer-source-topic"] == topic.encode()
        assert int(got["x-scorer-source-offset"]) >= 0
        assert int(got["x-scorer-source-partition"]) in range(settings.partitions)
    scored = scored_by_id(settings, expected=1)
    assert scored["dl-after"][0].retrieval_metrics.mrr == 1.0
    assert (
        worker.metric("scorer_deadletters_total", {"topic": "qrels", "error": "SchemaViolation"})
        >= 1
    )
    assert_every_input_accounted(worker)


def test_a_qrels_tombstone_removes_the_query(worker, settings):
    golden = GoldenQuery(query_id="gone-q", qrels={"a": 1})
    produce(settings, [("gone-q", golden.to_json_bytes(), settings.qrels_topic)])
    first = RetrievalResult(result_id="gone-1", run_id="r", query_id="gone-q", ranked=["a"])
    produce(settings, [("gone-q", first.to_json_bytes(), settings.results_topic)])
    wait_for(lambda: "gone-1" in scored_by_id(settings, expected=1), what="gone-1 scored")

    before = outcomes(worker)
    deleted_before = worker.metric("scorer_qrels_total", {"outcome": "deleted"})
    produce(settings, [("gone-q", None, settings.qrels_topic)])
    wait_for(
        lambda: worker.metric("scorer_qrels_total", {"outcome": "deleted"}) == deleted_before + 1,
        what="tombstone counted",
    )
    second = RetrievalResult(result_id="gone-2", run_id="r", query_id="gone-q", ranked=["a"])
    produce(settings, [("gone-q", second.to_json_bytes(), settings.results_topic)])
    wait_for(lambda: outcomes(worker)["parked"] - before["parked"] == 1, what="gone-2 parked")
    assert "gone-2" not in scored_by_id(settings, expected=0)
    assert outcomes(worker)["scored"] == before["scored"]
    assert_every_input_accounted(worker)


def test_health_and_readiness(worker):
    assert worker.get("/healthz") == (200, b'{"status":"alive"}')
    status, body = worker.get("/readyz")
    assert status == 200
    assert orjson.loads(body) == {"ready": True, "status": "consuming"}
