"""Hostile input on both input topics, to a real worker: it never stops, every message
is accounted for (scored, parked, unjudged, dead letter; qrels stored, deleted, dead
letter), the dead-letter topic holds exactly the dead letters counted, and memory
stays bounded. Cases come from hypothesis, derandomized so that CI sees the same ones."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from schemas import GoldenQuery
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from tests.integration.test_reliability import read_topic
from tests.integration.test_worker import wait_for
from tests.support.kafka import settings_for
from tests.support.worker import Worker

pytestmark = pytest.mark.integration

QUERY_POOL = [f"fz-q{i}" for i in range(8)]
"""Query ids the generated events mostly use; half of them have qrels."""

EDGE_TEXT = ["", "\x00", "a\x00b", "\u202eevil", "\U0001f600" * 3, "\ud800", "\udfff x", "é" * 300]

ids = st.one_of(
    st.sampled_from(QUERY_POOL),
    st.sampled_from(EDGE_TEXT),
    st.text(max_size=40),
    st.text(st.characters(codec=None), min_size=250, max_size=270),
)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    ids,
)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
facets = st.one_of(st.dictionaries(ids, ids, max_size=20), json_any)
result_event = st.fixed_dictionaries(
    {},
    optional={
        "resultId": st.one_of(ids, json_any),
        "runId": st.one_of(st.sampled_from(["fz-run-a", "fz-run-b"]), ids, json_any),
        "queryId": st.one_of(ids, json_any),
        "ranked": st.one_of(st.lists(ids, max_size=30), st.lists(json_leaf, max_size=5)),
        "facets": facets,
        "k": st.one_of(st.integers(min_value=-5, max_value=2_000), json_leaf),
        "timestamp": st.one_of(st.datetimes().map(lambda d: d.isoformat()), json_leaf),
    },
)
qrels_event = st.fixed_dictionaries(
    {},
    optional={
        "queryId": st.one_of(ids, json_any),
        "qrels": st.one_of(
            st.dictionaries(ids, st.integers(min_value=-3, max_value=6), max_size=20),
            st.dictionaries(ids, json_leaf, max_size=5),
            json_any,
        ),
        "facets": facets,
    },
)


def wire(event_strategy: st.SearchStrategy) -> st.SearchStrategy:
    """``(key, value)`` records: JSON of an event (ASCII-escaped or raw UTF-8, lone
    surrogates included), or random bytes, or a tombstone; keyed by the queryId,
    random bytes or nothing."""

    def encode(event: object, ascii_only: bool) -> bytes:
        return json.dumps(event, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")

    def key_of(event: object) -> st.SearchStrategy:
        query_id = event.get("queryId") if isinstance(event, dict) else None
        own = []
        if isinstance(query_id, str):
            own = [st.just(query_id.encode("utf-8", "surrogatepass"))]
        return st.one_of(*own, st.binary(max_size=20), st.none())

    values = st.one_of(
        st.tuples(event_strategy, st.booleans()).map(lambda e: (encode(*e), e[0])),
        st.binary(max_size=300).map(lambda v: (v, None)),
        st.just((None, None)),
    )
    return values.flatmap(
        lambda pair: key_of(pair[1]).map(
            # A record needs a key or a value: a tombstone always has a key.
            lambda key: (b"" if key is None and pair[0] is None else key, pair[0])
        )
    )


def examples(strategy: st.SearchStrategy, count: int) -> list:
    """``count`` examples of ``strategy``, the same ones on every run."""
    found: list = []

    @hypothesis_settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(example: object) -> None:
        found.append(example)

    collect()
    return found


def handmade_cases(
    topic_results: str, topic_qrels: str
) -> list[tuple[str, bytes | None, bytes | None]]:
    """What random generation rarely reaches: depth, size, grade bounds, id lists."""
    deep_list = b"[" * 50_000 + b"]" * 50_000
    deep_object = b'{"a":' * 20_000 + b"1" + b"}" * 20_000
    huge_ranked = json.dumps(
        {"resultId": "big", "runId": "r", "queryId": "fz-q0", "ranked": ["d"] * 50_000}
    ).encode()
    huge_string = json.dumps(
        {"resultId": "s" * 800_000, "runId": "r", "queryId": "fz-q0", "ranked": []}
    ).encode()
    huge_qrels = json.dumps(
        {"queryId": "fz-q1", "qrels": {f"d{i}": 1 for i in range(20_000)}}
    ).encode()
    cases = [(topic_results, b"fz-q0", body) for body in (deep_list, deep_object, huge_ranked)]
    cases += [(topic_results, b"fz-q0", huge_string), (topic_qrels, b"fz-q1", huge_qrels)]
    for grade in (-1, 4, 10**30, 2.5, "3", True, None):
        body = json.dumps({"queryId": "fz-q2", "qrels": {"d": grade}}).encode()
        cases.append((topic_qrels, b"fz-q2", body))
    cases.append(
        (
            topic_results,
            b"fz-q0",
            b'{"resultId":"nul\\u0000","runId":"r","queryId":"fz-q0","ranked":["\\ud800"]}',
        )
    )
    # Well-formed results among the noise: judged (scored) and not (parked, then unjudged).
    for i, query_id in enumerate(QUERY_POOL * 5):
        body = json.dumps(
            {"resultId": f"ok-{i}", "runId": "fz-run", "queryId": query_id, "ranked": ["d1"]}
        ).encode()
        cases.append((topic_results, query_id.encode(), body))
    return cases


def send(settings: Settings, records: list[tuple[str, bytes | None, bytes | None]]) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(
            **settings.aiokafka_options(), acks="all", max_request_size=2_000_000
        )
        await producer.start()
        try:
            futures = [await producer.send(t, key=k, value=v) for t, k, v in records]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def counters(worker: Worker) -> dict[str, float]:
    def results(outcome: str) -> float:
        return worker.metric("scorer_results_total", {"outcome": outcome})

    def qrels(outcome: str) -> float:
        return worker.metric("scorer_qrels_total", {"outcome": outcome})

    return {
        "results_in": worker.metric("scorer_inputs_total", {"topic": "results"}),
        "qrels_in": worker.metric("scorer_inputs_total", {"topic": "qrels"}),
        "scored": results("scored"),
        "unjudged": results("unjudged"),
        "results_deadletter": results("deadletter"),
        "duplicate": results("duplicate"),
        "parked": worker.metric("scorer_parked_results"),
        "stored": qrels("stored"),
        "deleted": qrels("deleted"),
        "qrels_deadletter": qrels("deadletter"),
    }


def test_hostile_input_is_accounted_for_and_memory_stays_bounded(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=2, parking_ttl_seconds=3.0)
    ensure_topics(settings)
    golden = [
        GoldenQuery(query_id=q, qrels={"d1": 3, "d2": 1}, facets={"type": "factoid"})
        for q in QUERY_POOL[::2]
    ]
    result_records = examples(wire(result_event), 2_500)
    qrels_records = examples(wire(qrels_event), 1_500)
    # The broker refuses keyless records on the compacted qrels topic: they get b"".
    rounds = [
        [(settings.results_topic, k, v) for k, v in result_records[:1_250]]
        + [(settings.qrels_topic, k or b"", v) for k, v in qrels_records[:750]],
        [(settings.results_topic, k, v) for k, v in result_records[1_250:]]
        + [(settings.qrels_topic, k or b"", v) for k, v in qrels_records[750:]]
        + handmade_cases(settings.results_topic, settings.qrels_topic),
    ]
    worker = Worker(settings, tmp_path).start()
    try:
        send(
            settings,
            [(settings.qrels_topic, g.query_id.encode(), g.to_json_bytes()) for g in golden],
        )
        wait_for(lambda: counters(worker)["stored"] == len(golden), 60, "golden stored")
        assert worker.process is not None
        pid = worker.process.pid
        rss = [rss_bytes(pid)]
        sent = {"results": 0, "qrels": 0}
        started = time.monotonic()
        for records in rounds:
            send(settings, records)
            sent["results"] += sum(1 for t, _, _ in records if t == settings.results_topic)
            sent["qrels"] += sum(1 for t, _, _ in records if t == settings.qrels_topic)
            wait_for(
                lambda: (
                    counters(worker)["results_in"] == sent["results"]
                    and counters(worker)["qrels_in"] == sent["qrels"] + len(golden)
                ),
                180,
                f"{sent} consumed",
            )
            rss.append(rss_bytes(pid))
        elapsed = time.monotonic() - started
        # Parked results expire after the 3 s TTL: every one ends somewhere final.
        wait_for(lambda: counters(worker)["parked"] == 0, 30, "parking drained")
        assert worker.process.poll() is None, worker.tail()
        assert worker.get("/readyz")[0] == 200

        counts = counters(worker)
        results_placed = (
            counts["scored"]
            + counts["unjudged"]
            + counts["results_deadletter"]
            + counts["duplicate"]
            + counts["parked"]
        )
        assert results_placed == counts["results_in"] == sent["results"], counts
        qrels_placed = counts["stored"] + counts["deleted"] + counts["qrels_deadletter"]
        assert qrels_placed == counts["qrels_in"], counts
        dead_letters = counts["results_deadletter"] + counts["qrels_deadletter"]
        letters = read_topic(
            settings, settings.deadletter_topic, lambda got: len(got) >= dead_letters, 60
        )
        assert len(letters) == dead_letters
        assert all(dict(letter.headers)["x-scorer-error-class"] for letter in letters)
        # Each kind of outcome was reached: the cases are not all rejected alike.
        assert counts["scored"] > 0 and counts["unjudged"] > 0 and counts["stored"] > len(golden)
        assert counts["deleted"] > 0 and counts["qrels_deadletter"] > 0

        # The second round (as big as the first, plus the huge cases) must not keep
        # growing the process: caches and parking are bounded.
        growth = rss[2] - rss[1]
        assert growth < 100 * 2**20, [r // 2**20 for r in rss]
        print(
            f"\n[fuzz] results {sent['results']}, qrels {sent['qrels']} in {elapsed:.1f}s; "
            f"scored {counts['scored']:.0f}, unjudged {counts['unjudged']:.0f}, dead letters "
            f"results {counts['results_deadletter']:.0f} / qrels {counts['qrels_deadletter']:.0f}, "
            f"duplicate ids {counts['duplicate']:.0f}, qrels stored {counts['stored']:.0f}, "
            f"deleted {counts['deleted']:.0f}; "
            f"RSS MiB start/after round 1/after round 2: {[r // 2**20 for r in rss]}"
        )
    finally:
        worker.stop()
