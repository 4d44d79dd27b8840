"""docs/operations.md's guarantees under attack: real broker, real workers, real SIGKILLs.

- crash: a steady stream of results, the worker SIGKILLed after a random number
  of results scored (``CRASH_TEST_SEED`` replays a run; the seed is printed)
  and restarted; nothing is lost, exactly-once shows no duplicate to a
  read_committed consumer, at-least-once duplicates are recognisable, the run
  rollups count each result once, and the qrels table survives;
- rebalance: two workers, one killed, the other takes its partitions over;
  the killed one comes back and gets partitions again;
- broker restart: the broker stops mid-stream and comes back on the same
  port with its data; the worker rides it out without help.

The figures each scenario measures are printed (``pytest -s``) and quoted in
docs/operations.md.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from schemas import GoldenQuery, RetrievalResult
from scorer.core.measures import NDCG_SLOT
from scorer.core.metrics import retrieval_metrics
from scorer.kafka.demo import DemoTraffic
from scorer.kafka.launcher import restart_broker, start_broker, stop_broker
from scorer.kafka.topics import describe_topics, ensure_topics
from scorer.settings import Settings
from scorer.stream.stored import RollupRow, decode_rollup_record
from tests.integration.test_worker import wait_for
from tests.support.kafka import settings_for
from tests.support.worker import Worker, free_port, read_topic, wait_all_committed

pytestmark = pytest.mark.integration

SESSION_TIMEOUT = 6.0
"""The broker's minimum (group.min.session.timeout.ms): a dead worker is noticed fast."""


# ---------------------------------------------------------------- helpers


class Feeder(threading.Thread):
    """Sends ``(topic, key, value)`` records at ``rate`` per second from a thread of its
    own, riding out broker outages by resending what failed (each resend is counted:
    an input sent twice is still one resultId)."""

    def __init__(
        self, settings: Settings, records: list[tuple[str, bytes, bytes]], rate: float
    ) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.records = records
        self.rate = rate
        self.sent = 0
        self.resent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._feed())
        except BaseException as error:  # reported by the test through ``join_checked``
            self.error = error

    def _new_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self.settings.aiokafka_options(),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=10_000,
        )

    async def _feed(self) -> None:
        self._producer = self._new_producer()
        await self._producer.start()
        try:
            start = time.monotonic()
            batch = max(1, int(self.rate // 20))
            for first in range(0, len(self.records), batch):
                chunk = self.records[first : first + batch]
                delay = start + first / self.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._send(chunk)
                self.sent += len(chunk)
        finally:
            await self._producer.stop()

    async def _send(self, chunk) -> None:
        """Send ``chunk``; resend only the records whose delivery failed (the idempotent
        producer already retried them), so inputs are duplicated only by a real outage.
        After a broker restart aiokafka's idempotent producer can be stuck on an
        OutOfOrderSequence error: a new producer (new producer id) takes over."""
        deadline = time.monotonic() + 120
        failing_since: float | None = None
        while chunk:
            futures = []
            for topic, key, value in chunk:
                try:
                    futures.append(await self._producer.send(topic, key=key, value=value))
                except KafkaError as error:
                    futures.append(error)
            failed = []
            for record, future in zip(chunk, futures, strict=True):
                try:
                    if isinstance(future, BaseException):
                        raise future
                    await future
                except KafkaError:
                    failed.append(record)
            if failed and time.monotonic() > deadline:
                raise AssertionError(f"{len(failed)} records undeliverable for 120 s")
            if failed:
                self.resent += len(failed)
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > 10:
                    await self._producer.stop()
                    self._producer = self._new_producer()
                    while True:
                        try:
                            await self._producer.start()
                            break
                        except KafkaError:
                            if time.monotonic() > deadline:
                                raise
                            await asyncio.sleep(1.0)
                    failing_since = None
                await asyncio.sleep(0.5)
            chunk = failed

    def join_checked(self, timeout: float) -> None:
        self.join(timeout)
        assert not self.is_alive(), f"feeder still sending after {timeout}s ({self.sent} sent)"
        if self.error is not None:
            raise self.error


def feed(settings: Settings, records: list[tuple[str, bytes, bytes]]) -> None:
    """Send ``records`` at once and wait until they are all sent."""
    feeder = Feeder(settings, records, rate=10_000)
    feeder.start()
    feeder.join_checked(60)


@dataclass
class ScoredTally:
    """The scored topic read back: copies per resultId, checked for consistency."""

    copies: dict[str, list[dict]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable) -> ScoredTally:
        tally = cls()
        for record in records:
            scored = orjson.loads(record.value)
            # Duplicates must be recognisable: same key (queryId) and same resultId.
            assert record.key == scored["queryId"].encode(), scored["resultId"]
            tally.copies.setdefault(scored["resultId"], []).append(scored)
        return tally

    @property
    def duplicates(self) -> int:
        return sum(len(copies) - 1 for copies in self.copies.values())

    def assert_copies_agree(self) -> None:
        """Every copy of a result carries the same ids, facets and metric values."""
        for copies in self.copies.values():
            first = {k: v for k, v in copies[0].items() if k != "scoredAt"}
            for other in copies[1:]:
                assert {k: v for k, v in other.items() if k != "scoredAt"} == first


def scored_ids(records: list) -> set[str]:
    return {orjson.loads(record.value)["resultId"] for record in records}


def read_scored(
    settings: Settings, everything: set[str], timeout: float, guarantee: str = "at_least_once"
) -> tuple[list, ScoredTally]:
    """The scored topic from the start until every result id of ``everything`` shows
    (as a read_committed consumer sees it under exactly_once), and its tally."""
    isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
    records = read_topic(
        settings,
        settings.scored_topic,
        lambda got: everything <= scored_ids(got),
        timeout,
        isolation_level=isolation,
    )
    return records, ScoredTally.of(records)


def input_copies(settings: Settings, result_ids: set[str]) -> Counter[str]:
    """How many times each result was written to the results topic."""
    records = read_topic(
        settings, settings.results_topic, lambda got: len(got) >= len(result_ids), grace=1.0
    )
    return Counter(orjson.loads(record.value)["resultId"] for record in records)


def missing_ranges(settings: Settings, result_ids: set[str]) -> dict[int, list[tuple[int, int]]]:
    """Input partition -> the offset ranges (first, last) of ``result_ids``: where a
    loss happened, to read beside the worker's log."""
    records = read_topic(settings, settings.results_topic, lambda got: False, timeout=10)
    offsets: dict[int, list[int]] = {}
    for record in records:
        if orjson.loads(record.value)["resultId"] in result_ids:
            offsets.setdefault(record.partition, []).append(record.offset)
    ranges: dict[int, list[tuple[int, int]]] = {}
    for partition, found in sorted(offsets.items()):
        found.sort()
        runs = ranges.setdefault(partition, [])
        for offset in found:
            if runs and runs[-1][1] == offset - 1:
                runs[-1] = (runs[-1][0], offset)
            else:
                runs.append((offset, offset))
    return ranges


def assert_none_missing(
    settings: Settings, everything: set[str], tally: ScoredTally, context: str = ""
) -> None:
    """Every result was scored; a failure names the input offsets of the lost ones."""
    missing = everything - set(tally.copies)
    assert not missing, (
        f"{len(missing)} results never scored, at input offsets "
        f"{missing_ranges(settings, missing)}{context}"
    )


def duplicates_made_by_worker(settings: Settings, everything: set[str], tally: ScoredTally) -> int:
    """Scored duplicates beyond those of inputs the feeder had to send twice (a timeout:
    scored twice legitimately)."""
    inputs = input_copies(settings, everything)
    return tally.duplicates - sum(n - 1 for n in inputs.values())


def golden_and_results(
    tag: str, queries: int, results: int, seed: int
) -> tuple[list[GoldenQuery], list[RetrievalResult]]:
    """A judged golden set and ``results`` results over it, with ids unique to ``tag``."""
    demo = DemoTraffic.generate(queries=queries, unjudged_share=0.0, seed=seed)
    stream = [
        result.model_copy(update={"result_id": f"{tag}-{result.result_id}"})
        for result in demo.results(limit=results)
    ]
    return demo.golden, stream


def keyed(topic: str, events: Iterable[GoldenQuery | RetrievalResult]):
    return [(topic, event.query_id.encode(), event.to_json_bytes()) for event in events]


def load_golden(
    settings: Settings, worker: Worker | list[Worker], golden: list[GoldenQuery]
) -> None:
    """Send the golden set and wait until the worker(s) stored every query."""
    workers = worker if isinstance(worker, list) else [worker]
    feeder = Feeder(settings, keyed(settings.qrels_topic, golden), rate=10_000)
    feeder.start()
    feeder.join_checked(60)
    wait_for(
        lambda: (
            sum(w.metric("scorer_qrels_total", {"outcome": "stored"}) for w in workers)
            >= len(golden)
        ),
        60,
        "qrels stored",
    )


def run_counts(results: Iterable[RetrievalResult]) -> Counter[str]:
    return Counter(result.run_id for result in results)


def api_run(worker: Worker, run_id: str) -> dict | None:
    status, body = worker.get(f"/api/v1/evals/runs/{run_id}/metrics")
    return orjson.loads(body) if status == 200 else None


def rollup_topic_census(settings: Settings, results: list[RetrievalResult]) -> str:
    """Where a rollup count went short: per run, the distinct results whose contribution
    is in the rollup topic (committed, and in all), and the positions of those missing
    from the committed records (the evidence that tells a lost send from a lost fold)."""
    census = []
    for isolation in ("read_committed", "read_uncommitted"):
        records = read_topic(settings, settings.rollup_topic, lambda _: True, 30, isolation, 3.0)
        ids: dict[str, set[str]] = {}
        for record in records:
            for row in decode_rollup_record(record.value):
                ids.setdefault(record.key.decode(), set()).add(RollupRow(*row).result_id)
        census.append((isolation, ids))
    wanted: dict[str, set[str]] = {}
    for result in results:
        wanted.setdefault(result.run_id, set()).add(result.result_id)
    lines = []
    for isolation, ids in census:
        counts = {run: len(ids.get(run, set()) & want) for run, want in wanted.items()}
        lines.append(f"rollup topic {isolation}: {counts}")
    committed = census[0][1]
    for run, want in sorted(wanted.items()):
        missing = sorted(want - committed.get(run, set()))
        if missing:
            lines.append(f"{run}: not in committed contributions: {missing[:20]}")
    return "; ".join(lines)


def assert_rollups_count_each_result_once(
    worker: Worker,
    results: list[RetrievalResult],
    golden: list[GoldenQuery],
    timeout: float = 90.0,
) -> None:
    """The run API's count and nDCG mean per run equal those of the distinct results,
    and the paired comparisons track each of the run's queries once."""
    expected = run_counts(results)

    def counts_match() -> bool:
        return all(
            (doc := api_run(worker, run)) is not None and doc["count"] == count
            for run, count in expected.items()
        )

    try:
        wait_for(counts_match, timeout, "rollup counts")
    except AssertionError:
        got = {run: (api_run(worker, run) or {}).get("count") for run in expected}
        raise AssertionError(
            f"rollup counts {got}, expected {dict(expected)}; "
            f"{rollup_topic_census(worker.settings, results)}"
        ) from None
    wait_all_committed(worker.settings, timeout)  # no late redelivery can come after this
    qrels = {query.query_id: query.qrels for query in golden}
    for run, count in expected.items():
        document = api_run(worker, run)
        assert document is not None and document["count"] == count, (run, document)
        ndcg = [
            retrieval_metrics(r.ranked, qrels[r.query_id], 10).ndcg_at_10
            for r in results
            if r.run_id == run
        ]
        assert document["metrics"]["ndcgAt10"] == pytest.approx(sum(ndcg) / count, abs=1e-9)
        queries = {r.query_id for r in results if r.run_id == run}
        assert document["pairedQueries"]["tracked"] == len(queries), (run, document)
        # Each query's entry (the paired comparisons' means) holds each result once.
        status, body = worker.get(f"/api/v1/evals/runs/{run}/scores")
        assert status == 200, (run, body)
        means = orjson.loads(body)["queries"]
        per_query: dict[str, list[float]] = {}
        for r in results:
            if r.run_id == run:
                value = retrieval_metrics(r.ranked, qrels[r.query_id], 10).ndcg_at_10
                per_query.setdefault(r.query_id, []).append(value)
        assert set(means) == queries, run
        for query, values in per_query.items():
            assert means[query][NDCG_SLOT] == pytest.approx(sum(values) / len(values)), (
                run,
                query,
            )


WRITTEN_BEHIND = "at_least_once, written behind"
"""At-least-once with the rollups' run states written once per commit (the per-query
entries go as blocks with every batch, as in the default at-least-once mode)."""


def mode(guarantee: str) -> dict[str, Any]:
    """The settings of a test's ``guarantee`` parameter."""
    if guarantee == WRITTEN_BEHIND:
        return {"processing_guarantee": "at_least_once", "rollup_write_behind": True}
    return {"processing_guarantee": guarantee}


def outcome(worker: Worker, name: str) -> float:
    return worker.metric("scorer_results_total", {"outcome": name})


# ---------------------------------------------------------------- 1. crash


CRASH_RESULTS = 10_500
CRASH_RATE = 120.0
"""Slow enough that the stream outlasts three kills and restarts (about 20 s each)."""
KILLS = 3


def crash_seed() -> int:
    """The seed of the kill moments: ``CRASH_TEST_SEED`` to replay a run, else new each
    run (printed, and named in every failure)."""
    chosen = os.environ.get("CRASH_TEST_SEED")
    return int(chosen) if chosen else random.SystemRandom().randrange(2**32)


def kill_points(rng: random.Random) -> list[int]:
    """How many results each incarnation scores before its SIGKILL: the first one a
    few seconds into the stream, the others anywhere from the backlog that piled up
    while the worker restarted (scored within a second of the restart) to a few
    seconds past it."""
    return [rng.randint(200, 1_200)] + [rng.randint(50, 1_500) for _ in range(KILLS - 1)]


def wait_for_scored(worker: Worker, count: int, timeout: float) -> None:
    """Until this incarnation of ``worker`` has scored ``count`` results."""
    deadline = time.monotonic() + timeout
    while outcome(worker, "scored") < count:
        if time.monotonic() > deadline:
            scored = outcome(worker, "scored")
            raise AssertionError(f"scored {scored:.0f} of {count} in {timeout} s")
        time.sleep(0.02)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once", WRITTEN_BEHIND])
def test_sigkill_mid_stream_loses_nothing_and_rollups_count_once(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    settings = settings_for(
        kafka_bootstrap,
        tmp_path,
        partitions=4,
        broker_session_timeout=SESSION_TIMEOUT,
        **mode(guarantee),
    )
    label, guarantee = guarantee, settings.processing_guarantee
    ensure_topics(settings)
    golden, results = golden_and_results("crash", queries=300, results=CRASH_RESULTS, seed=8)
    worker = Worker(settings, tmp_path).start()
    try:
        load_golden(settings, worker, golden)
        feeder = Feeder(settings, keyed(settings.results_topic, results), rate=CRASH_RATE)
        feeder.start()
        seed = crash_seed()
        points = kill_points(random.Random(seed))
        print(f"\n[crash {label}] CRASH_TEST_SEED={seed}: kills after {points} scored")
        recoveries = []
        redeliverable = 0
        for point in points:
            wait_for_scored(worker, point, 60)
            # This incarnation found every query in the (recovered) qrels table.
            assert worker.metric("scorer_parked_total") == 0
            sent_at_kill = feeder.sent
            assert sent_at_kill < CRASH_RESULTS, f"every kill happens mid-stream (seed {seed})"
            killed = time.monotonic()
            worker.stop(signal.SIGKILL)
            # What a restart hands out again: at most every record not committed.
            redeliverable += sum(
                partition.end - (partition.committed or 0)
                for (report,) in [describe_topics(settings, [settings.results_topic])]
                for partition in report.partitions
            )
            worker.start(ready_timeout=120)
            ready = time.monotonic() - killed
            wait_for(lambda: outcome(worker, "scored") > 0, 60, "scoring resumed")
            recoveries.append((sent_at_kill, ready, time.monotonic() - killed))
        feeder.join_checked(180)

        everything = {result.result_id for result in results}
        records, tally = read_scored(settings, everything, 180, guarantee)
        assert_none_missing(
            settings,
            everything,
            tally,
            f"; seed {seed}, kills (sent at kill, ready s, scoring s): {recoveries}",
        )
        assert set(tally.copies) == everything
        tally.assert_copies_agree()
        made_by_worker = duplicates_made_by_worker(settings, everything, tally)
        if guarantee == "exactly_once":
            # A read_committed consumer sees every result once (faust_edge.transactions).
            assert made_by_worker == 0, f"{made_by_worker} duplicates made by the worker"
        else:
            # At-least-once redelivers at most what was not committed at each kill (a
            # kill in the backlog built up during a restart can redeliver all of it).
            assert 0 <= made_by_worker <= redeliverable, (made_by_worker, redeliverable)
        if guarantee == "at_least_once":
            # Killed between two offset commits: redelivered results were scored again.
            assert made_by_worker > 0
        assert worker.metric("scorer_parked_total") == 0
        assert outcome(worker, "unjudged") == 0
        assert outcome(worker, "deadletter") == 0
        assert_rollups_count_each_result_once(worker, results, golden)
        rollup_duplicates = worker.metric("scorer_rollup_duplicates_total")
        print(
            f"\n[crash {label}] results in {len(results)}, scored records {len(records)}, "
            f"distinct {len(tally.copies)}, duplicates {tally.duplicates} "
            f"(made by the worker {made_by_worker}, at most {redeliverable} uncommitted at the "
            f"kills; inputs resent {feeder.resent}), "
            f"rollup duplicates dropped by the last worker {rollup_duplicates:.0f}, "
            "kills (sent at kill, ready s, scoring again s): "
            + ", ".join(f"({s}, {r:.1f}, {a:.1f})" for s, r, a in recoveries)
        )
    finally:
        worker.stop()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_results_released_by_their_qrels_count_once_after_a_sigkill_before_the_flush(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    """Results parked for their qrels, then released by the qrels event, and the worker
    SIGKILLed after the released results were scored but before their rollup
    contributions were flushed: the qrels event is redelivered, and its release must
    count every one of them once. (Under at-least-once the parking table's tombstone
    used to land on its own, so the redelivered event found nothing to release: the run
    undercounted, as a churn run in CI showed, 1997 of 2000.)"""
    settings = settings_for(
        kafka_bootstrap,
        tmp_path,
        partitions=2,
        processing_guarantee=guarantee,
        broker_session_timeout=SESSION_TIMEOUT,
    )
    ensure_topics(settings)
    golden, results = golden_and_results("release", queries=20, results=120, seed=21)
    worker = Worker(settings, tmp_path).start()
    try:
        feed(settings, keyed(settings.results_topic, results))
        wait_for(
            lambda: worker.metric("scorer_parked_total") >= len(results), 60, "every result parked"
        )
        worker.stop()  # committed: the results are not redelivered, only parked
        # Nothing flushed or committed on its own while the qrels release the results.
        slow = settings.model_copy(
            update={"rollup_batch_seconds": 60.0, "commit_interval_seconds": 60.0}
        )
        releaser = Worker(slow, tmp_path, port=worker.port).start(ready_timeout=120)
        feed(settings, keyed(settings.qrels_topic, golden))
        wait_for(lambda: outcome(releaser, "scored") >= len(results), 60, "released and scored")
        time.sleep(2.0)  # the release's table writes land
        releaser.stop(signal.SIGKILL)
        worker.start(ready_timeout=120)
        everything = {result.result_id for result in results}
        _, tally = read_scored(settings, everything, 60)
        assert set(tally.copies) == everything
        assert_rollups_count_each_result_once(worker, results, golden)
    finally:
        worker.stop()


# ---------------------------------------------------------------- 2. rebalance


def rollup_owners(worker: Worker) -> dict[str, list[int]]:
    """Host URL -> partitions of the rollups table, as this worker's router sees it."""
    status, body = worker.get("/router/rollups/")
    if status != 200:
        return {}
    return {
        host: sorted(p for partitions in topics.values() for p in partitions)
        for host, topics in orjson.loads(body).items()
    }


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once", WRITTEN_BEHIND])
def test_a_killed_workers_partitions_move_to_the_other_and_come_back(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    settings = settings_for(
        kafka_bootstrap,
        tmp_path,
        partitions=4,
        broker_session_timeout=SESSION_TIMEOUT,
        **mode(guarantee),
    )
    label, guarantee = guarantee, settings.processing_guarantee
    ensure_topics(settings)
    golden, results = golden_and_results("rebalance", queries=100, results=4_000, seed=3)
    survivor = Worker(settings, tmp_path).start()
    victim = Worker(settings, tmp_path).start()
    try:
        both = {survivor.url, victim.url}
        wait_for(
            lambda: set(rollup_owners(survivor)) == both and survivor.get("/readyz")[0] == 200,
            90,
            "both workers own partitions",
        )
        load_golden(settings, [survivor, victim], golden)
        feeder = Feeder(settings, keyed(settings.results_topic, results), rate=100.0)
        feeder.start()
        time.sleep(5.0)
        before = rollup_owners(survivor)
        assert all(before[url] for url in both), before

        killed = time.monotonic()
        victim.stop(signal.SIGKILL)
        wait_for(
            lambda: rollup_owners(survivor) == {survivor.url: [0, 1, 2, 3]},
            60,
            "the survivor owns every partition",
        )
        taken_over = time.monotonic() - killed
        assert feeder.is_alive(), "the takeover happened mid-stream"

        restarted = time.monotonic()
        victim.start(ready_timeout=120)
        wait_for(
            lambda: (
                all(rollup_owners(survivor).get(url) for url in both)
                and all(w.get("/readyz")[0] == 200 for w in (survivor, victim))
            ),
            90,
            "partitions shared again",
        )
        returned = time.monotonic() - restarted
        after = rollup_owners(survivor)
        assert sorted(p for parts in after.values() for p in parts) == [0, 1, 2, 3]
        feeder.join_checked(120)

        everything = {result.result_id for result in results}
        _, tally = read_scored(settings, everything, 120, guarantee)
        assert_none_missing(settings, everything, tally)
        assert set(tally.copies) == everything
        tally.assert_copies_agree()
        if guarantee == "exactly_once":
            made_by_worker = duplicates_made_by_worker(settings, everything, tally)
            assert made_by_worker == 0, f"{made_by_worker} duplicates made by the workers"
        # Either worker answers for every run (forwarded to the owner).
        assert_rollups_count_each_result_once(victim, results, golden)
        assert_rollups_count_each_result_once(survivor, results, golden, timeout=10)
        print(
            f"\n[rebalance {label}] results in {len(results)}, "
            f"distinct scored {len(tally.copies)}, "
            f"duplicates {tally.duplicates}, survivor owns all partitions {taken_over:.1f}s "
            f"after the kill, shared again {returned:.1f}s after the restart; "
            f"owners before {before}, after {after}"
        )
    finally:
        victim.stop()
        survivor.stop()


# ---------------------------------------------------------------- 3. broker restart


def test_the_worker_rides_out_a_broker_restart_mid_stream(tmp_path: Path) -> None:
    broker_state = tmp_path / "broker"
    broker = start_broker(broker_state, port=free_port())
    worker: Worker | None = None
    try:
        settings = settings_for(
            broker.bootstrap, tmp_path, partitions=2, broker_session_timeout=SESSION_TIMEOUT
        )
        ensure_topics(settings)
        golden, results = golden_and_results("outage", queries=100, results=3_000, seed=4)
        worker = Worker(settings, tmp_path).start()
        load_golden(settings, worker, golden)
        feeder = Feeder(settings, keyed(settings.results_topic, results), rate=100.0)
        feeder.start()
        wait_for(lambda: outcome(worker, "scored") >= 300, 60, "scoring under way")
        pid = worker.process.pid

        went_down = time.monotonic()
        stop_broker(broker_state, keep_data=True)
        time.sleep(5.0)
        scored_while_down = outcome(worker, "scored")
        restart_broker(broker_state)
        back = time.monotonic()
        downtime = back - went_down
        wait_for(
            lambda: outcome(worker, "scored") > scored_while_down, 120, "scoring after the outage"
        )
        resumed = time.monotonic() - back
        feeder.join_checked(180)
        assert worker.process.poll() is None and worker.process.pid == pid, "no restart needed"

        everything = {result.result_id for result in results}
        _, tally = read_scored(settings, everything, 180)
        assert set(tally.copies) == everything
        tally.assert_copies_agree()
        assert_rollups_count_each_result_once(worker, results, golden, timeout=120)
        assert_every_input_placed(worker)
        print(
            f"\n[broker restart] results in {len(results)}, inputs resent by the producer "
            f"{feeder.resent}, distinct scored {len(tally.copies)}, duplicates "
            f"{tally.duplicates}, broker down {downtime:.1f}s, scoring again {resumed:.1f}s "
            f"after it was back, dead letters {outcome(worker, 'deadletter'):.0f}"
        )
    finally:
        if worker is not None:
            worker.stop()
        stop_broker(broker_state)


def assert_every_input_placed(worker: Worker) -> None:
    """The /metrics invariant: results consumed = scored + unjudged + dead letter +
    duplicate (already parked) + parked."""
    consumed = worker.metric("scorer_inputs_total", {"topic": "results"})
    outcomes = ("scored", "unjudged", "deadletter", "duplicate")
    placed = sum(outcome(worker, name) for name in outcomes)
    placed += worker.metric("scorer_parked_results")
    assert consumed == placed, (consumed, placed)


# ---------------------------------------------------------------- 4. graceful stops


@dataclass
class Stopped:
    """One graceful stop of a worker: exit code, seconds from the signal to the exit,
    and the ERROR / CRITICAL lines it logged."""

    returncode: int | None
    seconds: float
    alarms: list[str]


def stop_gracefully(worker: Worker, sig: int = signal.SIGTERM) -> Stopped:
    """Signal ``worker`` as an orchestrator does and wait for it to exit by itself
    (SIGKILL only past its own stop deadline and some slack)."""
    assert worker.process is not None and worker.process.poll() is None
    logged = worker.log.stat().st_size
    signalled = time.monotonic()
    worker.process.send_signal(sig)
    try:
        worker.process.wait(worker.settings.stop_timeout_seconds + 15)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()
    seconds = time.monotonic() - signalled
    with worker.log.open("rb") as log:
        log.seek(logged)
        lines = log.read().decode(errors="replace").splitlines()
    alarms = [line for line in lines if "[ERROR]" in line or "[CRITICAL]" in line]
    return Stopped(worker.process.returncode, seconds, alarms)


def assert_clean(stops: list[Stopped], what: str) -> None:
    failed = [
        (n, s.returncode, s.alarms[:2]) for n, s in enumerate(stops) if s.alarms or s.returncode
    ]
    assert not failed, f"{len(failed)} of {len(stops)} {what} not clean: {failed}"


def seconds_summary(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{ordered[0]:.1f}/{ordered[len(ordered) // 2]:.1f}/{ordered[-1]:.1f}"


STOPS = 10
STOP_RATE = 300.0
"""With unjudged results (parked: a table write each) and a 5 s parking TTL (sweeps
sending expiry commands), a stop meets buffered changelog writes and timer sends."""


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_worker_stopped_with_sigterm_exits_0_without_errors_every_time(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    settings = settings_for(
        kafka_bootstrap,
        tmp_path,
        partitions=4,
        processing_guarantee=guarantee,
        broker_session_timeout=SESSION_TIMEOUT,
        parking_ttl_seconds=5.0,
    )
    ensure_topics(settings)
    demo = DemoTraffic.generate(queries=200, unjudged_share=0.5, seed=11)
    results = list(demo.results(limit=int(STOP_RATE * 25 * STOPS)))
    worker = Worker(settings, tmp_path).start()
    rng = random.Random(f"stops-{guarantee}")
    stops: list[Stopped] = []
    try:
        load_golden(settings, worker, demo.golden)
        feeder = Feeder(settings, keyed(settings.results_topic, results), rate=STOP_RATE)
        feeder.start()
        for _ in range(STOPS):
            wait_for(lambda: outcome(worker, "scored") > 0, 60, "scoring under way")
            time.sleep(rng.uniform(2.0, 5.0))
            assert feeder.is_alive(), "every stop happens mid-stream"
            stops.append(stop_gracefully(worker))
            worker.start(ready_timeout=120)
        assert_clean(stops, "SIGTERM stops")
        assert max(s.seconds for s in stops) < settings.stop_timeout_seconds
        print(
            f"\n[stops {guarantee}] {len(stops)} SIGTERM stops mid-stream at "
            f"{STOP_RATE:.0f} results/s, all exit 0 without ERROR/CRITICAL; signal to exit "
            f"min/median/max {seconds_summary([s.seconds for s in stops])} s"
        )
    finally:
        worker.stop()


def log_alarms(worker: Worker) -> list[str]:
    """The ERROR and CRITICAL lines and the tracebacks of every incarnation of
    ``worker`` (one log file)."""
    lines = worker.log.read_text(errors="replace").splitlines()
    return [
        line
        for line in lines
        if "[ERROR]" in line or "[CRITICAL]" in line or line.startswith("Traceback")
    ]


ROLLING_RESULTS = 9_000
ROLLING_RATE = 100.0
"""The stream outlasts two stop-restart rounds (about 30 s each here)."""


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_rolling_restart_loses_nothing_and_rollups_count_once(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    """Two workers scoring a stream, restarted one after the other as Kubernetes does
    it: SIGTERM, wait for the exit, start again, wait until it is ready and owns
    partitions again, then the other one."""
    settings = settings_for(
        kafka_bootstrap,
        tmp_path,
        partitions=4,
        processing_guarantee=guarantee,
        broker_session_timeout=SESSION_TIMEOUT,
    )
    ensure_topics(settings)
    golden, results = golden_and_results("rolling", queries=100, results=ROLLING_RESULTS, seed=6)
    first = Worker(settings, tmp_path).start()
    second = Worker(settings, tmp_path).start()
    stops: list[Stopped] = []
    rounds: list[tuple[float, float, float]] = []
    try:
        both = {first.url, second.url}

        def shared() -> bool:
            return set(rollup_owners(first)) == both and all(
                worker.get("/readyz")[0] == 200 for worker in (first, second)
            )

        wait_for(shared, 90, "both workers own partitions")
        load_golden(settings, [first, second], golden)
        feeder = Feeder(settings, keyed(settings.results_topic, results), rate=ROLLING_RATE)
        feeder.start()
        time.sleep(5.0)
        for restarted, other in ((first, second), (second, first)):
            assert feeder.is_alive(), "every restart happens mid-stream"
            assert other.process is not None and other.process.poll() is None
            signalled = time.monotonic()
            stops.append(stop_gracefully(restarted))
            wait_for(
                lambda other=other: rollup_owners(other) == {other.url: [0, 1, 2, 3]},
                60,
                "the other worker owns every partition",
            )
            taken_over = time.monotonic() - signalled
            restarted.start(ready_timeout=120)
            wait_for(shared, 120, "partitions shared again")
            rounds.append((stops[-1].seconds, taken_over, time.monotonic() - signalled))
        feeder.join_checked(180)
        assert_clean(stops, "rolling-restart stops")

        everything = {result.result_id for result in results}
        records, tally = read_scored(settings, everything, 180, guarantee)
        assert_none_missing(settings, everything, tally)
        assert set(tally.copies) == everything
        tally.assert_copies_agree()
        made_by_workers = duplicates_made_by_worker(settings, everything, tally)
        if guarantee == "exactly_once":
            assert made_by_workers == 0, f"{made_by_workers} duplicates made by the workers"
        assert_rollups_count_each_result_once(first, results, golden)
        assert_rollups_count_each_result_once(second, results, golden, timeout=10)
        for worker in (first, second):
            assert not log_alarms(worker), log_alarms(worker)[:3]
        print(
            f"\n[rolling restart {guarantee}] results in {len(results)}, scored records "
            f"{len(records)}, distinct {len(tally.copies)}, lost "
            f"{len(everything - set(tally.copies))}, duplicates {tally.duplicates} (made by "
            f"the workers {made_by_workers}, inputs resent {feeder.resent}); per restart "
            "(stop s, the other owns all s, shared again s after the signal): "
            + ", ".join(f"({s:.1f}, {t:.1f}, {a:.1f})" for s, t, a in rounds)
        )
    finally:
        first.stop()
        second.stop()
