"""``scorer tail`` against a real broker: one line per scored event and dead letter,
read_committed (an aborted transaction's events never show), filters, ``--json``."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from schemas import RetrievalMetrics, ScoredResult
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from scorer.stream.events import RejectedEvent, deadletter_headers
from tests.support.kafka import settings_for
from tests.support.worker import SCORER, worker_env

pytestmark = pytest.mark.integration

SCORED_AT = datetime(2026, 5, 4, 12, 30, 15, tzinfo=UTC)


def scored(result_id: str, run_id: str, facets: dict[str, str], ndcg: float) -> bytes:
    metrics = RetrievalMetrics(
        recall_at_k=0.5, precision_at_k=0.1, ndcg_at_10=ndcg, mrr=1.0, hit_at_k=1
    )
    event = ScoredResult(
        result_id=result_id, run_id=run_id, query_id=f"q-{result_id}", facets=facets, k=10,
        retrieval_metrics=metrics, qrels_fingerprint="f", scorer_version="0", scored_at=SCORED_AT,
    )  # fmt: skip
    return event.to_json_bytes()


def send(settings: Settings, events: list[bytes], *, abort: bool) -> None:
    """``events`` to the scored topic in one transaction, committed or aborted."""

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers,
            transactional_id=f"{settings.app_id}-{abort}",
        )
        await producer.start()
        try:
            await producer.begin_transaction()
            for value in events:
                await producer.send_and_wait(settings.scored_topic, value, key=b"k", partition=0)
            if abort:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())


def dead_letter(settings: Settings) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers)
        await producer.start()
        try:
            headers = deadletter_headers(
                RejectedEvent("invalid-json", "unexpected end of data"),
                settings.results_topic, 1, 42,
            )  # fmt: skip
            await producer.send_and_wait(
                settings.deadletter_topic, b"{truncated", headers=headers, timestamp_ms=1_000_000
            )
        finally:
            await producer.stop()

    asyncio.run(run())


def tail(settings: Settings, *args: str) -> list[str]:
    done = subprocess.run(
        [SCORER, "tail", "--from-beginning", *args],
        env=worker_env(settings), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture(scope="module")
def topics(kafka_bootstrap, tmp_path_factory) -> Settings:
    settings = settings_for(kafka_bootstrap, tmp_path_factory.mktemp("tail"), partitions=1)
    ensure_topics(settings)
    send(settings, [scored("aborted", "a", {}, 0.0)], abort=True)
    send(
        settings,
        [
            scored("r1", "bm25", {"type": "factoid"}, 0.25),
            scored("r2", "hybrid", {"type": "list"}, 0.5),
            scored("r3", "hybrid", {"type": "factoid", "popularity": "tail"}, 0.75),
        ],
        abort=False,
    )
    dead_letter(settings)
    return settings


def test_one_readable_line_per_committed_event(topics):
    assert tail(topics, "--max-count", "3") == [
        "12:30:15 scored     run=bm25 query=q-r1 ndcg@10=0.250 recall@10=0.500 "
        "precision@10=0.100 mrr=1.000 hit@10=1 type=factoid",
        "12:30:15 scored     run=hybrid query=q-r2 ndcg@10=0.500 recall@10=0.500 "
        "precision@10=0.100 mrr=1.000 hit@10=1 type=list",
        "12:30:15 scored     run=hybrid query=q-r3 ndcg@10=0.750 recall@10=0.500 "
        "precision@10=0.100 mrr=1.000 hit@10=1 popularity=tail type=factoid",
    ]


def test_read_uncommitted_shows_the_aborted_event_too(topics):
    first = tail(topics, "--max-count", "1", "--read-uncommitted")
    assert first[0].startswith("12:30:15 scored     run=a query=q-aborted ")


def test_filters_by_run_and_facet_and_prints_json(topics):
    (line,) = tail(topics, "--run", "hybrid", "--facet", "type=factoid", "--json", "-n", "1")
    assert orjson.loads(line)["resultId"] == "r3"


def test_dead_letters_with_their_reason(topics):
    lines = tail(topics, "--deadletter", "--run", "nobody", "--max-count", "1")
    assert lines == [
        f"00:16:40 deadletter from={topics.results_topic}[1]@42 error=invalid-json: "
        "unexpected end of data value=b'{truncated'"
    ]
    (line,) = tail(topics, "--deadletter", "--run", "nobody", "--json", "-n", "1")
    assert orjson.loads(line) == {
        "deadLetter": {
            "errorClass": "invalid-json",
            "errorMessage": "unexpected end of data",
            "sourceTopic": topics.results_topic,
            "sourcePartition": "1",
            "sourceOffset": "42",
        },
        "value": "{truncated",
    }
