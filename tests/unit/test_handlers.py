"""The results handler, the qrels release and the rollup fold, run without a broker
(``scorer.stream.testing.Pipeline``): the join, parking, dead letters and the fold,
through redeliveries, resends, crashes and lost table writes. Every run document is
checked against the scored records themselves, each result once."""

from __future__ import annotations

import copy
import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import GoldenQuery, RetrievalResult
from scorer.core.metrics import retrieval_metrics
from scorer.kafka.demo import DemoTraffic
from scorer.stream.entry_blocks import newest_entries
from scorer.stream.outputs import _encode
from scorer.stream.run_state import split_marks
from scorer.stream.seen import Block
from scorer.stream.stored import decode_parked
from scorer.stream.testing import Pipeline, Record

WIRE = ("recallAtK", "precisionAtK", "ndcgAt10", "mrr", "hitAtK")


def traffic(results: int = 90, seed: int = 5) -> tuple[list[GoldenQuery], list[RetrievalResult]]:
    demo = DemoTraffic.generate(queries=25, unjudged_share=0.0, seed=seed)
    return demo.golden, list(demo.results(limit=results))


def judged(golden: list[GoldenQuery], **options: Any) -> Pipeline:
    """A pipeline whose qrels table holds ``golden``."""
    pipeline = Pipeline(**options)
    for query in golden:
        pipeline.judge(query)
    return pipeline


def expected_runs(pipeline: Pipeline, results: list[RetrievalResult]) -> dict[str, dict]:
    """Per run: the count of its distinct results and the mean of each metric over
    them, from the scored records (the first copy of each resultId)."""
    first: dict[str, dict] = {}
    for scored in pipeline.scored():
        first.setdefault(scored["resultId"], scored)
    wanted = {result.result_id for result in results}
    runs: dict[str, list[dict]] = {}
    for result_id, scored in first.items():
        if result_id in wanted:
            runs.setdefault(scored["runId"], []).append(scored["retrievalMetrics"])
    return {
        run: {
            "count": len(values),
            "metrics": {name: math.fsum(v[name] for v in values) / len(values) for name in WIRE},
        }
        for run, values in runs.items()
    }


def assert_runs_count_each_result_once(pipeline: Pipeline, results: list[RetrievalResult]) -> None:
    expected = expected_runs(pipeline, results)
    assert {r.run_id for r in results} == set(expected)
    for run, want in expected.items():
        document = pipeline.run(run)
        assert document is not None, run
        assert document["count"] == want["count"], run
        for name in WIRE:
            assert document["metrics"][name] == pytest.approx(want["metrics"][name], abs=1e-12)


def test_results_are_joined_with_their_qrels_scored_and_counted_once() -> None:
    golden, results = traffic()
    pipeline = judged(golden)
    pipeline.feed(results)
    pipeline.settle()
    qrels = {query.query_id: query.qrels for query in golden}
    scored = {record["resultId"]: record for record in pipeline.scored()}
    assert set(scored) == {result.result_id for result in results}
    for result in results:
        metrics = retrieval_metrics(
            result.ranked, qrels[result.query_id], scored[result.result_id]["k"]
        )
        assert scored[result.result_id]["retrievalMetrics"]["ndcgAt10"] == pytest.approx(
            metrics.ndcg_at_10, abs=1e-12
        )
    assert_runs_count_each_result_once(pipeline, results)
    assert sum(pipeline.run(run)["count"] for run in {r.run_id for r in results}) == len(results)


def test_results_before_their_qrels_are_parked_then_released_and_counted_once() -> None:
    golden, results = traffic()
    pipeline = Pipeline()
    assert pipeline.feed(results[:40]) != []  # the parked table's writes
    assert pipeline.scored() == [] and pipeline.parked.value == 40
    parked = pipeline.tables["parked"].data.values()
    assert sum(len(decode_parked(stored)) for stored in parked) == 40
    for query in golden:
        pipeline.judge(query)
    assert pipeline.parked.value == 0 and pipeline.tables["parked"].data == {}
    pipeline.feed(results[40:])  # their qrels are in: scored at once
    pipeline.settle()
    assert len(pipeline.scored()) == len(results)
    assert_runs_count_each_result_once(pipeline, results)


def test_a_bad_record_is_one_dead_letter_with_its_reason_and_the_rest_is_scored() -> None:
    golden, results = traffic(results=10)
    pipeline = judged(golden)
    good = results[0]
    wrong_key = Record(0, b"not-" + good.query_id.encode(), results[1].to_json_bytes())
    pipeline.feed([good, Record(0, good.query_id.encode(), b"{not json"), wrong_key])
    pipeline.feed(results[2:])
    letters = pipeline.deadletters()
    assert len(letters) == 2
    reasons = [dict(letter.headers)["x-scorer-error-class"] for letter in letters]
    assert reasons == [b"InvalidJson", b"KeyMismatch"] and letters[0].value == b"{not json"
    assert dict(letters[1].headers)["x-scorer-source-offset"] == b"2"  # where it came from
    assert {r["resultId"] for r in pipeline.scored()} == {
        r.result_id for r in results if r is not results[1]
    }
    pipeline.settle()
    assert_runs_count_each_result_once(pipeline, [r for r in results if r is not results[1]])


def test_a_redelivered_batch_is_scored_again_but_counted_once() -> None:
    golden, results = traffic()
    pipeline = judged(golden)
    pipeline.feed(results)
    pipeline.settle()
    for partition in range(pipeline.settings.partitions):
        pipeline.redeliver(partition, start=3)  # the offsets from 3 on were not committed
    pipeline.settle()
    assert len(pipeline.scored()) > len(results)  # at-least-once: scored twice
    assert_runs_count_each_result_once(pipeline, results)
    assert pipeline.telemetry.rollup_duplicates._value.get() > 0


def test_a_crash_before_the_flush_loses_nothing_once_the_inputs_come_again() -> None:
    golden, results = traffic()
    pipeline = judged(golden)
    pipeline.feed(results[:50])
    pipeline.settle()
    pipeline.feed(results[50:])  # scored, contributions pending, then the crash
    pipeline.crash()
    assert pipeline.scoring.pending.size == 0
    for partition in range(pipeline.settings.partitions):
        pipeline.redeliver(partition)  # nothing past the last commit was committed
    pipeline.settle()
    assert_runs_count_each_result_once(pipeline, results)


def test_results_their_producer_sent_twice_count_once_across_a_restart() -> None:
    golden, results = traffic()
    pipeline = judged(golden)
    pipeline.feed(results)
    pipeline.settle()
    pipeline.crash()  # the dedupe window is rebuilt from its table
    pipeline.feed(results[:30])  # the same resultIds at new offsets
    pipeline.settle()
    assert pipeline.telemetry.rollup_resent._value.get() == 30
    assert_runs_count_each_result_once(pipeline, results)


def test_a_seen_entry_whose_run_state_write_was_lost_does_not_block_the_recount() -> None:
    golden, results = traffic()
    pipeline = judged(golden)
    pipeline.feed(results)
    pipeline.commit()
    before = pipeline.snapshot()
    pipeline.fold()
    # The crash: the dedupe blocks reached the changelog, the run states did not.
    pipeline.lose_writes(before, ["rollups", "run_queries"])
    pipeline.crash()
    for partition in range(pipeline.settings.partitions):
        pipeline.refold(partition)  # the rollup topic's offsets were not committed
    assert_runs_count_each_result_once(pipeline, results)


@pytest.mark.parametrize(
    "lost",
    [
        ["rollups"],
        ["run_queries"],
        ["rollup_seen"],
        ["rollups", "rollup_seen"],
        ["run_queries", "rollup_seen"],
    ],
)
def test_a_fold_whose_table_writes_were_partly_lost_is_mended_by_its_redelivery(
    lost: list[str],
) -> None:
    """At-least-once: each table's changelog is a topic partition of its own, so a crash
    can keep some of a fold's writes and lose the others. The fold of the redelivered
    batch mends what was lost: each query's entry (the paired comparisons' means and
    first answers), the runs' tracked queries and changed qrels, and the dedupe window
    hold each result once, as if nothing had been lost. (The clock stands still: an
    entry made again is entered at the time of the fold that makes it.)"""
    golden, results = traffic()
    pipeline = judged(golden, clock=lambda: 1_000_000.0)
    pipeline.feed(results[:45])
    pipeline.settle()
    for query in golden:  # new qrels: the later results are scored against them
        changed = {doc: (grade + 1) % 4 for doc, grade in query.qrels.items()}
        pipeline.judge(query.model_copy(update={"qrels": changed}))
    pipeline.feed(results[45:])
    pipeline.commit()
    before = pipeline.snapshot()
    pipeline.fold()
    runs = {result.run_id for result in results}
    want = {run: {**pipeline.run(run), "updatedAt": None} for run in runs}
    assert sum(document["changedQrels"] for document in want.values()) > 0
    want_entries = copy.deepcopy(pipeline.tables["run_queries"].data)
    pipeline.lose_writes(before, lost)
    pipeline.crash()
    for partition in range(pipeline.settings.partitions):
        pipeline.refold(partition)
    assert pipeline.tables["run_queries"].data == want_entries
    assert {run: {**pipeline.run(run), "updatedAt": None} for run in runs} == want
    pipeline.feed(results[45:75])  # resent by their producer: still caught
    pipeline.settle()
    assert pipeline.telemetry.rollup_resent._value.get() == 30
    assert pipeline.tables["run_queries"].data == want_entries


def test_entries_written_without_marks_fold_on_exactly_once_marks_are_turned_on() -> None:
    """A rolling upgrade: entries written with ``rollup_query_marks`` off (as an earlier
    version writes them) are taken to hold what their run state holds, so a redelivery
    after the switch counts nothing twice, and later results fold as they would have."""
    golden, results = traffic()
    clock = lambda: 1_000_000.0  # noqa: E731
    upgraded = judged(golden, clock=clock, rollup_query_marks=False)
    upgraded.feed(results[:45])
    upgraded.settle()
    assert all(split_marks(e)[1] is None for e in upgraded.tables["run_queries"].data.values())
    upgraded.settings = upgraded.settings.model_copy(update={"rollup_query_marks": True})
    upgraded.crash()
    for partition in range(upgraded.settings.partitions):
        upgraded.refold(partition)  # all of it again: nothing counts twice
    upgraded.feed(results[45:])
    upgraded.settle()
    always = judged(golden, clock=clock)
    always.feed(results)
    always.settle()
    for pipeline in (upgraded, always):
        assert_runs_count_each_result_once(pipeline, results)
    numbers = [
        {key: split_marks(entry)[0] for key, entry in pipeline.tables["run_queries"].data.items()}
        for pipeline in (upgraded, always)
    ]
    assert numbers[0] == numbers[1]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(st.data())
def test_every_result_counts_once_whatever_a_crash_keeps_of_each_tables_writes(
    data: st.DataObject,
) -> None:
    """At-least-once, through the handlers: results (some before their qrels: parked,
    then released), folds, commits and crashes in any order. A crash loses each table's
    writes since the last commit, or keeps them, table by table (each changelog is a
    topic partition of its own), and loses or keeps the rollup records sent since; the
    inputs and the rollup topic come again from the last commit (written behind, the run
    states' and entries' writes since the last commit are lost always). In the end every run
    counts each result once, and so does each query's entry."""
    golden, results = traffic(results=40, seed=data.draw(st.integers(0, 50), label="seed"))
    late = {query.query_id for query in golden[::3]}  # judged only later: results park
    pipeline = judged(
        [q for q in golden if q.query_id not in late],
        clock=lambda: 1e6,
        rollup_write_behind=data.draw(st.booleans(), label="written behind"),
        rollup_entry_blocks=data.draw(st.booleans(), label="entries in blocks"),
    )
    waiting = [q for q in golden if q.query_id in late]
    rollup = pipeline.settings.rollup_topic
    fed = 0

    def committed() -> dict[str, Any]:
        pipeline.commit()  # pending contributions go before every offset commit
        return {
            "tables": pipeline.snapshot(),
            "results": {p: len(log) for p, log in pipeline.topics[RESULTS].items()},
            "folded": dict(pipeline._folded),
            "rollup": {p: len(log) for p, log in pipeline.topics.get(rollup, {}).items()},
        }

    RESULTS = pipeline.settings.results_topic
    pipeline.topics.setdefault(RESULTS, {})
    last = committed()
    while fed < len(results) or waiting:
        step = data.draw(
            st.sampled_from(["feed", "feed", "flush", "fold", "fold", "commit", "crash", "judge"])
        )
        if step == "feed" and fed < len(results):
            n = data.draw(st.integers(1, 8))
            pipeline.feed(results[fed : fed + n])
            fed += n
        elif step == "flush":
            pipeline.commit()  # the flush rule: the contributions go, no offset commits
        elif step == "fold":
            pipeline.fold()
        elif step == "commit":
            last = committed()
        elif step == "judge" and waiting:
            pipeline.judge(waiting.pop(0))
            last = committed()
        elif step == "crash":
            for name in pipeline.tables:
                if data.draw(st.booleans(), label=f"{name} writes lost"):
                    pipeline.lose_writes(last["tables"], [name])
            if data.draw(st.booleans(), label="rollup records lost"):
                for p, log in pipeline.topics.get(rollup, {}).items():
                    del log[last["rollup"].get(p, 0) :]
            pipeline.crash()
            pipeline._folded = dict(last["folded"])
            for p in list(pipeline.topics[RESULTS]):
                pipeline.redeliver(p, last["results"].get(p, 0))
    pipeline.settle()
    assert_runs_count_each_result_once(pipeline, results)
    want: dict[str, set[str]] = {}
    for result in results:
        want.setdefault(f"{result.run_id}\x1f{result.query_id}", set()).add(result.result_id)
    entries = pipeline.tables["run_queries"].data
    assert {key: entry[0] for key, entry in entries.items()} == {
        key: float(len(ids)) for key, ids in want.items()
    }
    pipeline.commit()
    assert_changelogs_hold_the_tables(pipeline)


def assert_changelogs_hold_the_tables(pipeline: Pipeline) -> None:
    """What a worker recovering the run states and per-query entries would read (each
    key's last changelog record) is what the tables hold."""
    for name in ("rollups", "run_queries"):
        table = pipeline.tables[name]
        written = pipeline.changelogs.get(table.changelog, {})
        recovered = {key: value for key, value in written.items() if value is not None}
        if name == "run_queries" and pipeline.rollups.blocks is not None:
            # Blocks, taken apart as a restart does.
            stored = newest_entries(
                (orjson.loads(key), orjson.loads(value)) for key, value in recovered.items()
            )
            assert stored == orjson.loads(orjson.dumps(table.data))
            continue
        assert recovered == {_encode(key): _encode(value) for key, value in table.data.items()}


def rounds(pipeline: Pipeline, results: list[RetrievalResult], times: int = 3) -> None:
    """The same queries again and again: ``results`` fed ``times`` times (new resultIds
    each time), each time folded in two batches per partition, then committed."""
    for n in range(times):
        again = [r.model_copy(update={"result_id": f"{r.result_id}-{n}"}) for r in results]
        half = len(again) // 2
        for part in (again[:half], again[half:]):
            pipeline.feed(part)
            pipeline.flush()
            pipeline.fold()
        pipeline.commit()


def test_written_behind_each_key_goes_to_the_changelog_once_per_commit() -> None:
    """At-least-once on a memory store: a run state or a query's entry changed by several
    batches between two commits is one changelog record at the commit, its newest
    value; with the write-behind off, one per batch. The runs and entries are the same
    either way, and after a commit the changelogs hold what the tables hold."""
    golden, results = traffic(results=60)
    behind = judged(golden, clock=lambda: 1e6, rollup_write_behind=True, rollup_entry_blocks=False)
    every_batch = judged(golden, clock=lambda: 1e6, rollup_entry_blocks=False)
    assert behind.rollups.write_behind and not every_batch.rollups.write_behind
    for pipeline in (behind, every_batch):
        pipeline.feed(results[:30])
        pipeline.settle()
        # Stored at once (the API reads the tables), not yet written out:
        unsent = pipeline.rollups.unsent()
        assert pipeline.telemetry.registry.get_sample_value("scorer_rollup_unsent_writes") == sum(
            len(keys) for keys in unsent.values()
        )
        if pipeline is behind:
            assert len(unsent["run_queries"]) == len({(r.run_id, r.query_id) for r in results[:30]})
            assert set(unsent["run_queries"]) <= set(pipeline.tables["run_queries"].data)
        else:
            assert unsent == {"rollups": [], "run_queries": []}
        pipeline.commit()
        rounds(pipeline, results)
        assert pipeline.rollups.unsent() == {"rollups": [], "run_queries": []}
        assert pipeline.telemetry.registry.get_sample_value("scorer_rollup_unsent_writes") == 0
        assert_changelogs_hold_the_tables(pipeline)

    for run in {r.run_id for r in results}:
        assert behind.run(run) | {"updatedAt": None} == every_batch.run(run) | {"updatedAt": None}
    assert behind.tables["run_queries"].data == every_batch.tables["run_queries"].data
    # Written behind: each key once per commit that follows a change of it.
    keys = {(r.run_id, r.query_id) for r in results}
    first = {(r.run_id, r.query_id) for r in results[:30]}
    assert behind.changelog_writes["run_queries-changelog"] == len(first) + 3 * len(keys)
    runs = {r.run_id for r in results}
    assert behind.changelog_writes["rollups-changelog"] == len(
        {r.run_id for r in results[:30]}
    ) + 3 * len(runs)
    # With every batch: a key once per batch that changed it (two batches a round).
    halves = (results[:30], results[30:])
    assert every_batch.changelog_writes["run_queries-changelog"] == len(first) + 3 * sum(
        len({(r.run_id, r.query_id) for r in half}) for half in halves
    )
    assert every_batch.changelog_writes["rollups-changelog"] == len(
        {r.run_id for r in results[:30]}
    ) + 3 * sum(len({r.run_id for r in half}) for half in halves)


def test_a_crash_loses_the_writes_behind_with_their_offsets_and_they_are_folded_again() -> None:
    golden, results = traffic(results=60)
    behind = judged(golden, clock=lambda: 1e6, rollup_write_behind=True, rollup_entry_blocks=False)
    reference = judged(golden, clock=lambda: 1e6, rollup_entry_blocks=False)
    for pipeline in (behind, reference):
        pipeline.feed(results[:30])
        pipeline.settle()
        pipeline.commit()
        pipeline.feed(results[30:])
        pipeline.flush()
        pipeline.fold()  # folded and stored; the rollup offsets not committed
    runs = {r.run_id for r in results}
    counted = {run: behind.run(run)["count"] for run in runs}
    assert counted == {run: reference.run(run)["count"] for run in runs}
    assert sum(counted.values()) == 60
    behind.crash()
    # What the changelogs hold: the first 30 results, and their entries.
    assert sum(behind.run(run)["count"] for run in runs if behind.run(run)) == 30
    assert sum(entry[0] for entry in behind.tables["run_queries"].data.values()) == 30
    behind.fold()  # the rollup records from the last committed offset, again
    behind.commit()
    reference.commit()
    for run in runs:
        assert behind.run(run) == reference.run(run)
    entries = [p.tables["run_queries"].data for p in (behind, reference)]
    assert [{key: split_marks(e)[0] for key, e in data.items()} for data in entries] == [
        {key: split_marks(e)[0] for key, e in entries[1].items()}
    ] * 2
    assert_changelogs_hold_the_tables(behind)


@pytest.mark.parametrize(
    "options",
    [
        {"processing_guarantee": "exactly_once"},
        {"store": "rocksdb://"},
        {"rollup_query_marks": False},
    ],
)
def test_write_behind_where_it_cannot_hold_is_refused_with_a_warning(
    options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    golden, results = traffic(results=20)
    with caplog.at_level("WARNING", logger="scorer.stream.rollups"):
        pipeline = judged(golden, rollup_write_behind=True, **options)
    assert not pipeline.rollups.write_behind
    assert "SCORER_ROLLUP_WRITE_BEHIND is set but has no effect" in caplog.text
    pipeline.feed(results)
    pipeline.settle()  # written with every batch: nothing waits for the commit
    assert pipeline.rollups.unsent() == {"rollups": [], "run_queries": []}
    assert_changelogs_hold_the_tables(pipeline)


def test_the_writes_behind_of_a_partition_this_worker_lost_are_left_to_its_new_owner() -> None:
    golden, results = traffic(results=30)
    pipeline = judged(
        golden, clock=lambda: 1e6, rollup_write_behind=True, rollup_entry_blocks=False
    )
    pipeline.feed(results)
    pipeline.settle()
    fold = pipeline.rollups
    partitions = {where for where, keys in fold._unsent.items() if keys}
    assert len({partition for partition, _ in partitions}) > 1
    kept = min(partition for partition, _ in partitions)
    written = fold.write_out(owned={kept})  # the commit of a revoke: only what it owns
    assert written and {output.partition for output in written} == {kept}
    assert fold.unsent() == {"rollups": [], "run_queries": []}
    pipeline.feed([r.model_copy(update={"result_id": r.result_id + "-2"}) for r in results])
    pipeline.settle()
    assert fold.unsent()["run_queries"]
    fold.reindex([], owned={kept})  # recovered after a rebalance
    assert {partition for partition, _ in fold._unsent} == {kept}
    assert fold.telemetry.registry.get_sample_value("scorer_rollup_unsent_writes") == sum(
        len(keys) for keys in fold._unsent.values()
    )


def test_after_the_dedupe_window_a_resend_counts_again() -> None:
    now = [1_000_000.0]
    golden, results = traffic(results=30)
    pipeline = judged(golden, clock=lambda: now[0], rollup_dedupe_seconds=60.0)
    pipeline.feed(results)
    pipeline.settle()
    now[0] += 16.0  # the first sweep is due a quarter window after the first fold
    pipeline.feed(results[:1])
    pipeline.settle()
    assert pipeline.telemetry.rollup_resent._value.get() == 1
    now[0] += 61.0  # past the window: the blocks are swept, the resultIds forgotten
    pipeline.feed(results[1:2])
    pipeline.settle()
    swept = pipeline.homes.of(results[1].run_id.encode())
    kept = [Block(v) for v in pipeline.tables["rollup_seen"].data.values()]
    assert [b.seen_at for b in kept if b.partition == swept] == [now[0]]  # the new block only
    run = results[1].run_id
    counted = sum(1 for r in results if r.run_id == run) + 1
    assert pipeline.run(run)["count"] == counted


def test_the_run_document_is_what_the_run_api_serves() -> None:
    golden, results = traffic(results=12)
    pipeline = judged(golden)
    pipeline.feed(results)
    pipeline.settle()
    document = pipeline.run(results[0].run_id)
    assert document is not None
    assert orjson.loads(orjson.dumps(document))["runId"] == results[0].run_id
    assert document["pairedQueries"]["tracked"] == len(
        {r.query_id for r in results if r.run_id == results[0].run_id}
    )
    assert pipeline.run("no-such-run") is None
