"""A worker's first start with a backlog: every result waiting for it is scored once.

The set-up that lost results (../shared/research/startup-loss): a golden set
already in the qrels table and its changelog (so table recovery runs at
start), the worker stopped, results arriving meanwhile, and the worker's group
with no committed offset on the results topic. Faust's recovery then emptied
the fetch's partition set in place, aiokafka read that as "all partitions",
and the first prefetched batch of every results partition was dropped and
committed past (scorer.stream.faust_edge.consumer has the guards).

The loss was a race, so the test repeats: ``STARTUP_TEST_ROUNDS`` rounds per
processing mode (1 in CI; 10 per mode were run by hand, see docs/operations.md).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from scorer.kafka.topics import ensure_topics
from tests.integration.test_reliability import (
    SESSION_TIMEOUT,
    Feeder,
    assert_none_missing,
    duplicates_made_by_worker,
    golden_and_results,
    keyed,
    load_golden,
    read_scored,
)
from tests.support.kafka import settings_for
from tests.support.worker import Worker

pytestmark = pytest.mark.integration

ROUNDS = int(os.environ.get("STARTUP_TEST_ROUNDS", "1"))
BACKLOG = int(os.environ.get("STARTUP_TEST_BACKLOG", "4000"))
"""A few fetches per partition: the first one of each was lost (100,000 for the burst
runs of the hot-path issue, docs/operations.md)."""


def assert_ledger_holds(worker: Worker, topic: str, partitions: int) -> None:
    """Per input partition, the committed offset is within what the worker handed over."""
    for partition in map(str, range(partitions)):
        labels = {"topic": topic, "partition": partition}
        start = worker.metric("scorer_input_start_offset", labels)
        accounted = worker.metric("scorer_input_accounted_offsets", labels)
        committed = worker.metric("scorer_input_committed_offset", labels)
        assert committed <= start + accounted, (partition, start, accounted, committed)
    assert worker.metric("scorer_input_commit_violations_total") == 0


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_first_start_with_a_backlog_scores_every_waiting_result_once(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    for round_ in range(ROUNDS):
        workdir = tmp_path / f"round-{round_}"
        workdir.mkdir()
        settings = settings_for(
            kafka_bootstrap,
            workdir,
            partitions=4,
            processing_guarantee=guarantee,
            broker_session_timeout=SESSION_TIMEOUT,
        )
        ensure_topics(settings)
        golden, results = golden_and_results(
            f"start{round_}", queries=200, results=BACKLOG, seed=round_
        )
        worker = Worker(settings, workdir).start()
        try:
            load_golden(settings, worker, golden)
        finally:
            worker.stop(signal.SIGTERM)
        # The backlog arrives while no worker runs; the group never read the topic.
        feeder = Feeder(settings, keyed(settings.results_topic, results), rate=50_000)
        feeder.start()
        feeder.join_checked(60 + BACKLOG / 1000)

        worker = Worker(settings, workdir).start()
        try:
            everything = {result.result_id for result in results}
            _, tally = read_scored(settings, everything, 120 + BACKLOG / 500, guarantee)
            assert_none_missing(settings, everything, tally, f" (round {round_}, {guarantee})")
            assert duplicates_made_by_worker(settings, everything, tally) == 0
            assert worker.metric("scorer_inputs_total", {"topic": "results"}) == len(everything)
            assert_ledger_holds(worker, settings.results_topic, settings.partitions)
            print(f"\n[startup {guarantee}] round {round_}: {len(tally.copies)}/{BACKLOG} scored")
        finally:
            worker.stop(signal.SIGTERM)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_three_workers_starting_together_keep_the_ledger_on_every_input(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    """Three workers started at once on a fresh topic set, qrels and results arriving
    while they join (rebalances one after the other): no commit passes what a worker
    handed over, on any input partition (the qrels agent's once raised the ledger's
    alarm at such a start: its events were booked after the hand-over), and no worker
    logs the alarm, or any ERROR, CRITICAL or traceback (an operator alerting on ERROR
    lines is not paged by a deploy)."""
    for round_ in range(ROUNDS + 1):
        workdir = tmp_path / f"three-{round_}"
        workdir.mkdir()
        settings = settings_for(
            kafka_bootstrap, workdir, partitions=4, processing_guarantee=guarantee,
            broker_session_timeout=SESSION_TIMEOUT,
        )  # fmt: skip
        ensure_topics(settings)
        golden, results = golden_and_results(f"three{round_}", queries=120, results=600, seed=9)
        workers = [Worker(settings, workdir).launch() for _ in range(3)]
        try:
            load = Feeder(settings, keyed(settings.qrels_topic, golden), rate=400)
            load.start()
            for worker in workers:
                worker.wait_ready(120)
            load.join_checked(60)
            feeder = Feeder(settings, keyed(settings.results_topic, results), rate=2000)
            feeder.start()
            feeder.join_checked(60)
            everything = {result.result_id for result in results}
            _, tally = read_scored(settings, everything, 120, guarantee)
            assert_none_missing(settings, everything, tally, f" (round {round_}, {guarantee})")
            for worker in workers:
                for topic in (settings.results_topic, settings.qrels_topic):
                    assert_ledger_holds(worker, topic, settings.partitions)  # 0s where not owned
        finally:
            for worker in workers:
                worker.stop(signal.SIGTERM)
        for worker in workers:
            log = worker.log.read_text()
            assert "past what this worker handed over" not in log
            alarming = [
                line for line in log.splitlines()
                if "[ERROR]" in line or "[CRITICAL]" in line or line.startswith("Traceback")
            ]  # fmt: skip
            assert not alarming, "\n".join(line[:300] for line in alarming[:10])


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_first_start_creates_the_internal_topics_as_faust_would_and_logs_no_error(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str
) -> None:
    """On a fresh app id the worker creates its changelogs and its parking timer topic
    before Faust starts (Faust's consumer otherwise asked for them before the broker
    showed them, and aiokafka logged ``[ERROR] Topic ... not found in cluster
    metadata`` at every first start), with the partitions, replication and cleanup
    policy Faust gives them; the start and the stop log no ERROR, CRITICAL or
    traceback."""
    from scorer.kafka.topics import describe_topics

    settings = settings_for(kafka_bootstrap, tmp_path, partitions=3, processing_guarantee=guarantee)
    ensure_topics(settings)
    worker = Worker(settings, tmp_path).start(120)
    try:
        tables = ["qrels", "parked", "rollups", "run_queries", "rollup_seen"]
        names = [f"{settings.app_id}-{table}-changelog" for table in tables]
        expiry = f"{settings.app_id}-parking-expiry"
        reports = {report.name: report for report in describe_topics(settings, [*names, expiry])}
        for name in names:
            assert reports[name].exists and reports[name].cleanup_policy == "compact", name
            assert len(reports[name].partitions) == 3, name
        assert reports[expiry].exists and reports[expiry].cleanup_policy == "delete"
        assert len(reports[expiry].partitions) == 3
    finally:
        worker.stop(signal.SIGTERM)
    assert worker.process is not None and worker.process.returncode == 0
    log = worker.log.read_text(errors="replace")
    said = [line for line in log.splitlines() if "created its internal topics" in line]
    assert said and all(name in said[0] for name in [*names, expiry]), said
    alarming = [
        line for line in log.splitlines()
        if "[ERROR]" in line or "[CRITICAL]" in line or line.startswith("Traceback")
    ]  # fmt: skip
    assert not alarming, "\n".join(line[:300] for line in alarming[:10])
