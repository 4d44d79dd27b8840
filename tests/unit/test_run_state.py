"""Run rollups folded from scored records (scorer.stream.run_state), without Kafka:
each result counts once whether its record is redelivered (same position) or
its producer sent it twice (same resultId, new position), and a ``seen`` entry
whose run-state write was lost in a crash does not block the recount."""

from __future__ import annotations

import copy
import gc
import math
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.core.metrics import METRIC_NAMES
from scorer.stream import run_state
from scorer.stream.run_state import PendingRollups, RunBatch
from scorer.stream.seen import Block, SeenIndex, key_hash, split_entries
from scorer.stream.stored import (
    RollupRow,
    SourcePosition,
    decode_rollup_record,
    decode_run_state,
    encode_rollup_records,
    new_run_state,
)

Placed = Callable[[SourcePosition], RollupRow]


def record(result_id: str, ndcg: float, query: str = "q1") -> Placed:
    """A scored result's contribution, placed at the position it is given."""
    values = [1.0, 0.5, ndcg, 1.0, 1.0]  # METRIC_NAMES order: recall, precision, ndcg, mrr, hit
    return lambda position: RollupRow(*position, result_id, query, values, {"type": "faq"})


def rows_of(value: bytes) -> list[RollupRow]:
    """The rows of a rollup record, named."""
    return [RollupRow(*row) for row in decode_rollup_record(value)]


class Tables:
    """Dict-backed stand-ins for the three tables, written the way the agent writes them."""

    def __init__(self) -> None:
        self.rollups: dict[bytes, dict[str, Any]] = {}
        self.queries: dict[str, list[float]] = {}
        self.seen: dict[str, run_state.SeenEntry] = {}

    def batch(self, now: float = 1000.0, dedupe: bool = True, **options: Any) -> RunBatch:
        return RunBatch(
            self.rollups.get,
            self.queries.get,
            max_queries=100,
            load_seen=self.seen.get if dedupe else None,
            partition=3,
            now=now,
            **options,
        )

    def fold(
        self,
        records: list[tuple[Placed, SourcePosition]],
        now: float = 1000.0,
        **kwargs: Any,
    ) -> RunBatch:
        batch = self.batch(now, **kwargs)
        for make, position in records:
            batch.add_row(b"run-a", make(position))
        self.queries.update(batch.queries)
        self.seen.update(batch.seen)
        # Through JSON, as the table's changelog would keep them.
        for key, state in batch.finish("t").items():
            self.rollups[key] = orjson.loads(orjson.dumps(state))
        return batch

    def count(self) -> int:
        return run_state.run_document("run-a", self.rollups[b"run-a"], 100)["count"]

    def ndcg(self) -> float:
        return run_state.run_document("run-a", self.rollups[b"run-a"], 100)["metrics"]["ndcgAt10"]


def at(offset: int, partition: int = 0, seq: int = 0) -> SourcePosition:
    return SourcePosition("results", partition, offset, seq)


def test_a_redelivered_record_is_dropped_by_the_watermark() -> None:
    tables = Tables()
    tables.fold([(record("r1", 0.2), at(5)), (record("r2", 0.4), at(6))])
    again = tables.fold([(record("r2", 0.4), at(6)), (record("r3", 0.9), at(7))])
    assert (again.duplicates, again.resent) == (1, 0)
    assert tables.count() == 3
    assert tables.ndcg() == pytest.approx((0.2 + 0.4 + 0.9) / 3)


@pytest.mark.parametrize("same_batch", [True, False])
def test_a_result_its_producer_sent_twice_counts_once(same_batch: bool) -> None:
    tables = Tables()
    first = [(record("r1", 0.2), at(5)), (record("r2", 0.4), at(6))]
    resend = [(record("r1", 0.2), at(9)), (record("r4", 1.0), at(10))]
    if same_batch:
        batches = [tables.fold(first + resend)]
    else:
        batches = [tables.fold(first), tables.fold(resend)]
    assert sum(b.resent for b in batches) == 1
    assert tables.count() == 3
    assert tables.ndcg() == pytest.approx((0.2 + 0.4 + 1.0) / 3)
    # The resend's own redelivery is dropped too (the watermark moved past it).
    again = tables.fold([(record("r1", 0.2), at(9))])
    assert (again.duplicates, again.resent) == (1, 0)
    assert tables.count() == 3


def test_a_resend_from_another_input_partition_counts_once() -> None:
    tables = Tables()
    tables.fold([(record("r1", 0.2), at(5, partition=0))])
    batch = tables.fold([(record("r1", 0.2), at(2, partition=1))])
    assert batch.resent == 1 and tables.count() == 1


def test_the_same_result_id_in_two_runs_counts_in_each() -> None:
    tables = Tables()
    batch = tables.batch()
    assert batch.add_row(b"run-a", record("r1", 0.2)(at(1)))
    assert batch.add_row(b"run-b", record("r1", 0.3)(at(2)))
    assert batch.resent == 0 and len(batch.seen) == 2


def test_a_seen_entry_whose_run_state_was_lost_does_not_block_the_recount() -> None:
    """A crash wrote the ``seen`` entries of a batch but not its run state (separate
    changelog records): the redelivered records must count, once."""
    tables = Tables()
    tables.fold([(record("r1", 0.2), at(5))])
    before_crash = {key: orjson.loads(orjson.dumps(v)) for key, v in tables.rollups.items()}
    tables.fold([(record("r2", 0.4), at(6)), (record("r3", 0.6), at(7))])
    tables.rollups = before_crash  # the run-state write of the second batch was lost
    assert tables.count() == 1 and "run-a\x1fr2" in tables.seen
    batch = tables.fold([(record("r2", 0.4), at(6)), (record("r3", 0.6), at(7))])
    assert (batch.duplicates, batch.resent) == (0, 0)
    assert tables.count() == 3
    assert tables.ndcg() == pytest.approx((0.2 + 0.4 + 0.6) / 3)


def test_seen_entries_name_where_and_when_they_were_counted() -> None:
    tables = Tables()
    tables.fold([(record("r1", 0.2), at(5, partition=2, seq=1))], now=1234.5)
    assert tables.seen == {
        "run-a\x1fr1": run_state.SeenEntry(
            stream="results/2", offset=5, seq=1, seen_at=1234.5, partition=3
        )
    }


def expired(entries: dict[str, Any], before: float, partition: int = 0) -> list[str]:
    """What a fresh index (a worker just started) finds due in the table ``entries``."""
    index = SeenIndex()
    index.rebuild(entries.items(), {partition})
    return index.expired(partition, before)


def test_expired_seen_entries_are_the_ones_recorded_before_the_cut() -> None:
    # Entries in the per-result format of earlier versions: one-entry blocks.
    entries = {"a": ["results/0", 1, 0, 10.0, 0], "b": ["results/0", 2, 0, 20.0, 0]}
    assert expired(entries, before=15.0) == ["a"]
    assert expired(entries, before=10.0) == []
    assert expired(entries, before=25.0, partition=1) == []


def test_pending_contributions_are_due_at_the_size_or_the_age_limit() -> None:
    pending = run_state.PendingRollups()
    assert not pending.due(now=100.0, max_size=2, max_seconds=0.2)  # nothing pending
    pending.add_row(b"run-a", record("r1", 0.2)(at(1)), now=10.0)
    assert not pending.due(now=10.1, max_size=2, max_seconds=0.2)
    assert pending.due(now=10.25, max_size=2, max_seconds=0.2)
    pending.add_row(b"run-a", record("r2", 0.3)(at(2)), now=10.1)
    assert pending.due(now=10.1, max_size=2, max_seconds=0.2)


def test_after_the_window_a_resend_counts_again() -> None:
    """The check is bounded in time: once its ``seen`` entry is forgotten, a resend
    is indistinguishable from a new result (documented, SCORER_ROLLUP_DEDUPE_SECONDS)."""
    tables = Tables()
    tables.fold([(record("r1", 0.2), at(5))], now=0.0)
    for key in expired(tables.seen, before=900.0, partition=3):  # Tables folds on 3
        del tables.seen[key]
    batch = tables.fold([(record("r1", 0.2), at(9))], now=901.0)
    assert batch.resent == 0 and tables.count() == 2


def test_with_the_check_off_nothing_is_remembered() -> None:
    tables = Tables()
    first = tables.fold([(record("r1", 0.2), at(5))], dedupe=False)
    second = tables.fold([(record("r1", 0.2), at(9))], dedupe=False)
    assert first.seen == {} and second.resent == 0 and tables.count() == 2


def test_the_metric_order_of_contributions_is_that_of_the_metrics_module() -> None:
    assert METRIC_NAMES.index("ndcgAt10") == 2


def test_pending_contributions_go_out_one_record_per_input_partition_and_run() -> None:
    pending = PendingRollups()
    items = [
        (b"run-a", record("r1", 0.1)(at(5, partition=0))),
        (b"run-b", record("r2", 0.2)(at(6, partition=0))),
        (b"run-a", record("r3", 0.3)(at(1, partition=1))),
        (b"run-a", record("r4", 0.4)(at(7, partition=0, seq=2))),
    ]
    for now, (run_key, item) in enumerate(items, start=10):
        pending.add_row(run_key, item, now=float(now))
    assert (pending.size, pending.since) == (4, 10.0)
    records = pending.drain()
    assert pending.size == 0 and pending.drain() == []
    by_group = {(source.partition, key): rows_of(v) for source, key, v in records}
    assert set(by_group) == {(0, b"run-a"), (0, b"run-b"), (1, b"run-a")}
    # In input order within a record, and each record is sent as of its first input.
    assert [c.result_id for c in by_group[0, b"run-a"]] == ["r1", "r4"]
    assert by_group[0, b"run-a"] == [items[0][1], items[3][1]]
    sources = {(source.partition, key): source for source, key, _ in records}
    assert sources[0, b"run-a"] == at(5, partition=0)


def test_contributions_survive_the_wire_unchanged() -> None:
    item = RollupRow("qrels", 2, 41, 3, "r\u00e9", "q", [0.1] * 5, {"t": "x"}, 0.5, "ab12")
    pending = PendingRollups()
    pending.add_row(b"run", item)
    [(_, _, raw)] = pending.drain()
    assert rows_of(raw) == [item]


def test_seen_entries_expire_a_block_at_a_time_in_the_order_written() -> None:
    table: dict[str, Any] = {
        "a": ["results/0", 1, 0, 10.0, 0],  # an entry of the per-result format
        "0:7:1": [12.0, 0, [["run\x1fr2", "results/0", 2, 0]]],  # a block
        "1:3:1": [12.0, 1, [["run\x1fr9", "results/1", 1, 0]]],  # another partition's
    }
    index = SeenIndex()
    index.rebuild(table.items(), {0})  # this worker owns rollup partition 0
    assert index.get("a") == run_state.SeenEntry("results/0", 1, 0, 10.0, 0)
    assert index.get("run\x1fr2") == run_state.SeenEntry("results/0", 2, 0, 12.0, 0)
    assert index.get("run\x1fr9") is None
    assert index.expired(0, 11.0) == ["a"] and index.get("a") is None
    renewed = run_state.SeenEntry("results/0", 3, 0, 40.0, 0)
    for key, seen_at, batch in (
        ("0:9:2", 20.0, {"run\x1fr3": run_state.SeenEntry("results/0", 2, 1, 20.0, 0)}),
        ("0:9:3", 30.0, {"run\x1fr4": run_state.SeenEntry("results/0", 2, 2, 30.0, 0)}),
        ("0:9:4", 40.0, {"run\x1fr3": renewed}),
    ):
        table[key] = index.add(0, key, seen_at, batch)
    assert index.expired(0, 35.0) == ["0:7:1", "0:9:2", "0:9:3"]
    assert index.get("run\x1fr3") == renewed and index.get("run\x1fr4") is None
    assert len(index) == 1
    # A rebalance gave this worker partition 1 too: rebuilt from the table, the
    # expired blocks included (the worker deletes them from the table as it expires them).
    index.rebuild(table.items(), {0, 1})
    assert index.get("run\x1fr9") is not None and index.get("run\x1fr3") == renewed
    assert index.expired(0, 45.0) == ["a", "0:7:1", "0:9:2", "0:9:3", "0:9:4"]
    assert index.expired(1, 45.0) == ["1:3:1"] and len(index) == 0


def test_a_block_read_back_from_the_changelog_gives_the_same_entries() -> None:
    tables = Tables()
    batch = tables.fold([(record("r1", 0.2), at(5)), (record("r2", 0.4), at(6))], now=77.0)
    live = SeenIndex()
    value = live.add(3, "3:0:1", 77.0, batch.seen)
    assert isinstance(value, bytes) and len(value) < 100  # 30 bytes an entry, a header
    block = Block(value)
    assert (block.seen_at, block.partition) == (77.0, 3)
    for seen_key, entry in batch.seen.items():
        assert block.find(*key_hash(seen_key)) == entry
    recovered = SeenIndex()
    recovered.rebuild({"3:0:1": value}.items())
    for seen_key in ("run-a\x1fr1", "run-a\x1fr2"):
        assert recovered.get(seen_key) == live.get(seen_key) == batch.seen[seen_key]
    assert recovered.get("run-a\x1fr3") is None


def test_a_contribution_carries_its_confidence() -> None:
    item = RollupRow(*at(4), "r1", "q", [1.0, 0.1, 0.5, 1.0, 1], {}, confidence=-0.25)
    [value] = encode_rollup_records([item])
    assert rows_of(value) == [item] and item.position == at(4)


def confident(result_id: str, confidence: float | None, hit: int, ndcg: float) -> Placed:
    values = [float(hit), 0.1, ndcg, float(hit), hit]
    return lambda position: RollupRow(*position, result_id, "q", values, {}, confidence)


def test_the_run_state_keeps_the_risk_coverage_of_each_result_once() -> None:
    # docs/metrics.md's worked example, one record redelivered and one resent by its producer.
    example = [
        confident("r1", 0.9, 1, 1.0),
        confident("r2", 0.8, 0, 0.0),
        confident("r3", 0.8, 1, 1.0),
        confident("r4", 0.1, 0, 0.0),
        confident("r5", None, 1, 1.0),
    ]
    tables = Tables()
    tables.fold([(make, at(offset)) for offset, make in enumerate(example[:3])])
    tables.fold([(example[2], at(2)), (example[3], at(3)), (example[4], at(4))])
    tables.fold([(example[0], at(9))])
    document = run_state.risk_document("run-a", tables.rollups[b"run-a"])
    assert document["runId"] == "run-a"
    assert document["updatedAt"] == "t"
    assert (document["withConfidence"], document["withoutConfidence"]) == (4, 1)
    for name in ("miss", "ndcgLoss"):
        assert document[name]["aurc"] == pytest.approx(0.2708333333333333, abs=1e-15)
        assert document[name]["optimalAurc"] == pytest.approx(0.2083333333333333, abs=1e-15)
        assert document[name]["eAurc"] == pytest.approx(0.0625, abs=1e-15)
    assert document["sketch"]["buckets"] == 3
    assert tables.count() == 5


def test_a_run_state_from_before_the_sketch_gets_an_empty_one() -> None:
    tables = Tables()
    tables.fold([(confident("r1", 0.5, 1, 1.0), at(0))])
    # As an earlier version stored it: untagged, without the sketch.
    del tables.rollups[b"run-a"]["risk"], tables.rollups[b"run-a"]["v"]
    old = decode_run_state(tables.rollups[b"run-a"])
    assert run_state.risk_document("run-a", old)["withConfidence"] == 0
    tables.fold([(confident("r2", 0.5, 0, 0.0), at(1))])
    document = run_state.risk_document("run-a", tables.rollups[b"run-a"])
    assert (document["withConfidence"], document["miss"]["aurc"]) == (1, 1.0)
    assert tables.count() == 2


def test_the_facet_cap_is_the_same_offline_and_live() -> None:
    """One rule in the shared rollup: past 200 values of a facet in a run, the rest
    count under ``other``, in ``scorer eval``'s document as in the run API's."""
    from scorer.core.metrics import MetricValues
    from scorer.core.rollup import MAX_FACET_VALUES_PER_RUN
    from scorer.offline.evaluation import RunEvaluation

    n = MAX_FACET_VALUES_PER_RUN + 25
    values = MetricValues(1.0, 0.5, 0.25, 1.0, 1, 1.0, 0.5)
    offline = RunEvaluation()
    tables = Tables()
    batch = tables.batch()
    for i in range(n):
        facets = {"type": f"t{i:03d}", "kind": "one"}
        offline.add(f"q{i}", values, facets, confidence=0.5)
        item = RollupRow(*at(i), f"r{i}", f"q{i}", list(values), facets)
        batch.add_row(b"run-a", item)
    for key, state in batch.finish("t").items():
        tables.rollups[key] = orjson.loads(orjson.dumps(state))
    offline_facets = offline.summary()["facets"]
    live_facets = run_state.run_document("run-a", tables.rollups[b"run-a"], 100)["facets"]
    for facets in (offline_facets, live_facets):
        assert len(facets["type"]) == MAX_FACET_VALUES_PER_RUN + 1
        assert facets["type"]["other"]["count"] == n - MAX_FACET_VALUES_PER_RUN
        assert facets["type"]["t000"]["count"] == 1
        assert "t210" not in facets["type"]
        assert facets["kind"]["one"]["count"] == n
    assert {facet: set(by_value) for facet, by_value in offline_facets.items()} == {
        facet: set(by_value) for facet, by_value in live_facets.items()
    }
    # The risk-coverage block offline follows the same facet values.
    other = offline_facets["type"]["other"]["riskCoverage"]
    assert other["withConfidence"] == n - MAX_FACET_VALUES_PER_RUN


def test_the_seen_window_holds_nothing_the_garbage_collector_walks() -> None:
    # One entry per result for the whole window: tracked objects there made every
    # full collection walk them all (120-220 ms pauses at 16,000 results/s).
    index = SeenIndex()
    gc.collect()
    before = len(gc.get_objects())
    for block in range(30):
        entries = {
            f"run\x1fr{block}-{n}": run_state.SeenEntry("results/0", n, 0, 20.0, 0)
            for n in range(1000)
        }
        index.add(0, f"0:{block}:1", 20.0 + block, entries)
    del entries
    gc.collect()
    assert len(index) == 30_000
    assert len(gc.get_objects()) - before < 200  # per block, not per entry
    assert index.get("run\x1fr7-7") == run_state.SeenEntry("results/0", 7, 0, 27.0, 0)


# ---------------------------------------------------------------- the pipeline, end to end


def ndcg_of(result_id: str) -> float:
    """A result's score: the same whenever it is scored (its qrels do not change)."""
    return (sum(map(ord, result_id)) % 97) / 96


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_result_counts_once_under_any_interleaving_of_batches_flushes_and_crashes(
    data: st.DataObject,
) -> None:
    """At-least-once, simulated whole: input partitions scored in batches, their
    contributions pending until a flush (every commit flushes first), crashes that lose
    what is pending and redeliver from the last commit, producer resends (the same
    resultId at a later offset, from any partition), and the rollup side folding the
    topic in batches of any size with redeliveries of its own. The rollup topic
    carries each flush's records in the order drained (the send path keeps call
    order: test_sending.py), interleaving the input partitions in any way."""
    inputs = data.draw(st.integers(1, 3), label="input partitions")
    streams: list[list[str]] = []
    for p in range(inputs):
        stream: list[str] = []
        for offset in range(data.draw(st.integers(0, 10))):
            earlier = [rid for s in [*streams, stream] for rid in s]
            if earlier and data.draw(st.integers(0, 3)) == 0:
                stream.append(data.draw(st.sampled_from(earlier)))  # a producer's resend
            else:
                stream.append(f"r{p}-{offset}")
        streams.append(stream)

    pending = PendingRollups()
    topic: list[bytes] = []
    committed = [0] * inputs
    position = [0] * inputs

    def flush() -> None:
        topic.extend(value for _, _, value in pending.drain())

    while any(position[p] < len(streams[p]) for p in range(inputs)):
        step = data.draw(st.sampled_from(["score", "score", "score", "flush", "commit", "crash"]))
        if step == "score":
            unread = [p for p in range(inputs) if position[p] < len(streams[p])]
            p = data.draw(st.sampled_from(unread))
            for _ in range(data.draw(st.integers(1, 3))):
                if position[p] == len(streams[p]):
                    break
                rid = streams[p][position[p]]
                values = [1.0, 0.5, ndcg_of(rid), 1.0, 1.0, 1.0, 1.0]  # every measure
                row = RollupRow("results", p, position[p], 0, rid, "q1", values, {})
                pending.add_row(b"run-a", row)
                position[p] += 1
        elif step == "flush":
            flush()
        elif step == "commit":
            flush()
            committed = list(position)
        else:  # the worker dies: what is pending is lost, the input is read again
            pending.drain()
            position = list(committed)
    flush()

    tables = Tables()
    folded = 0
    committed_fold = 0
    stored = {name: {} for name in ("rollups", "queries", "seen")}  # at committed_fold
    while folded < len(topic):
        size = data.draw(st.integers(1, 4))
        batch = tables.batch(dedupe=True, query_marks=True)
        for value in topic[folded : folded + size]:
            for row in decode_rollup_record(value):
                batch.add_row(b"run-a", row)
        # Through JSON, as the tables' changelogs keep them.
        tables.queries.update(orjson.loads(orjson.dumps(batch.queries)))
        tables.seen.update(batch.seen)
        for key, state in batch.finish("t").items():
            tables.rollups[key] = orjson.loads(orjson.dumps(state))
        folded += size
        step = data.draw(st.sampled_from(["next", "next", "next", "commit", "crash"]))
        if step == "commit":
            committed_fold = folded
            stored = {name: copy.deepcopy(getattr(tables, name)) for name in stored}
        elif step == "crash":
            # The fold's input comes again from its last commit, and the fold's table
            # writes since then reached their changelogs table by table, or did not
            # (at-least-once: each table's changelog is a topic partition of its own).
            folded = committed_fold
            for name in stored:
                if data.draw(st.booleans(), label=f"{name} writes lost"):
                    setattr(tables, name, copy.deepcopy(stored[name]))

    distinct = {rid for stream in streams for rid in stream}
    if not distinct:
        assert b"run-a" not in tables.rollups
        return
    assert tables.count() == len(distinct)
    assert tables.ndcg() == pytest.approx(sum(map(ndcg_of, distinct)) / len(distinct))
    # The query's entry (the paired comparisons') counts each result once too.
    entry = tables.queries[run_state.query_key("run-a", "q1")]
    assert entry[0] == len(distinct)
    assert run_state.query_means(entry)[2] == pytest.approx(
        sum(map(ndcg_of, distinct)) / len(distinct)
    )
    assert decode_run_state(tables.rollups[b"run-a"])["queries"] == 1


def long_contribution(offset: int) -> RollupRow:
    """A contribution at the schema's bounds: 256-character ids, 32 facets (16 of the
    golden set, 16 of the result) of 64-character keys and 128-character values."""
    facets = {f"{i:02d}" + "k" * 62: "v" * 128 for i in range(32)}
    return RollupRow(
        "retrieval.results", 1, offset, 0, f"{offset:0256d}", "q" * 256,
        [0.25] * 5, facets, 0.5, "f" * 16,
    )  # fmt: skip


def test_a_group_too_large_for_one_record_is_split_in_input_order_and_folds_the_same() -> None:
    from scorer.stream import limits

    limit = 1_048_588
    whole, split = PendingRollups(), PendingRollups()
    items = [long_contribution(offset) for offset in range(999)]  # 500 + 499 pending at most
    for item in items:
        whole.add_row(b"run-a", item)
        split.add_row(b"run-a", item)
    [(_, _, one)] = whole.drain()
    assert len(one) > 6_000_000  # what was sent as one record before
    records = split.drain(limit)
    assert len(records) == 7
    budget = limit - limits.SIZE_MARGIN
    assert all(limits.record_size(b"run-a", value, []) <= budget for _, _, value in records)
    assert {source for source, _, _ in records} == {items[0].position}
    decoded = [row for _, _, value in records for row in rows_of(value)]
    assert decoded == items

    def fold(values: list[bytes]) -> dict[str, Any]:
        batch = RunBatch(lambda key: None, lambda key: None, max_queries=10)
        for value in values:
            for row in decode_rollup_record(value):
                batch.add_row(b"run-a", row)
        return batch.finish("t")[b"run-a"]

    assert fold([value for _, _, value in records]) == fold([one])


def test_a_contribution_at_the_schemas_bounds_fits_the_smallest_request_size() -> None:
    """SCORER_PRODUCER_MAX_REQUEST_SIZE is at least 65,536: any one contribution fits."""
    from scorer.stream import limits

    row = long_contribution(10**12)._replace(
        result_id="\x01" * 256,  # escaped in JSON as \u0001: 6 bytes a character
        query_id="\x01" * 256,
        facets={f"{i:02d}" + "\x01" * 62: "\x01" * 128 for i in range(32)},
    )
    assert len(orjson.dumps(row, default=list)) > 39_000
    [value] = encode_rollup_records([row], b"r" * 256, 65_536)
    assert limits.record_size(b"r" * 256, value, []) <= 65_536 - limits.SIZE_MARGIN
    assert rows_of(value) == [row]


def test_a_batchs_seen_entries_are_stored_in_blocks_that_fit_a_record() -> None:
    entries = {
        run_state.query_key("r" * 256, f"{n:05d}" + "x" * 250): run_state.SeenEntry(
            f"results-{n % 3}/{'p' * 200}", n, 0, 10.0, 1
        )
        for n in range(5000)
    }
    index = SeenIndex()
    blocks = split_entries(entries, 20_000)
    assert len(blocks) > 1
    assert [key for block in blocks for key in block] == list(entries)
    for n, block in enumerate(blocks):
        stored = index.add(1, f"1:0:{n}", 10.0, block)
        assert len(stored) <= 20_000
    assert len(index) == 5000
    for seen_key in list(entries)[::97]:
        assert index.get(seen_key) == entries[seen_key]
    assert split_entries({}, 1000) == [{}]


def test_a_querys_first_answer_is_kept_through_later_answers_and_redeliveries() -> None:
    tables = Tables()
    tables.fold([(record("r1", 0.2), at(5))], now=100.0)
    tables.fold([(record("r1", 0.2), at(5)), (record("r2", 0.9), at(6))], now=200.0)
    entry = tables.queries[run_state.query_key("run-a", "q1")]
    assert run_state.query_means(entry)[2] == pytest.approx((0.2 + 0.9) / 2)
    entered, *first = run_state.query_first(entry)
    assert entered == 100.0 and first[2] == 0.2  # the later answer did not rewrite it
    # An entry of the earlier format (no first answer kept) takes its mean, entered at 0.
    # It predates judged@k and candidate nDCG too: NaN there (left out of the paired
    # comparisons of those two), whatever is folded in later.
    old = [2.0, 2.0, 1.0, 1.1, 2.0, 2.0]
    first = run_state.query_first(old)
    assert first[:6] == [0.0, 1.0, 0.5, 0.55, 1.0, 1.0] and all(map(math.isnan, first[6:]))
    folded = run_state.fold_query(old, [1.0] * 7, 300.0)
    assert folded[:6] == [3.0, 3.0, 2.0, 2.1, 3.0, 3.0] and all(map(math.isnan, folded[6:8]))
    assert folded[8:14] == [0.0, 1.0, 0.5, 0.55, 1.0, 1.0] and all(map(math.isnan, folded[14:]))
    # Five measures with the first answer kept (12 items).
    five = [2.0, 2.0, 1.0, 1.1, 2.0, 2.0, 50.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    means = run_state.query_means(five)
    assert means[:5] == [1.0, 0.5, 0.55, 1.0, 1.0] and all(map(math.isnan, means[5:]))
    assert run_state.query_first(five)[:6] == [50.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def test_an_entry_missing_a_measure_folds_on_once_read_back_from_the_changelog() -> None:
    """A result scored before a measure existed leaves NaN in its query's entry, which
    the changelog's JSON stores as null: read back (a restart), the entry still folds
    the next result and answers the paired comparisons (it crashed the fold before)."""
    tables = Tables()
    tables.fold([(record("r1", 0.2), at(5))])  # five measures: no judged@k, no candidate
    tables.queries = orjson.loads(orjson.dumps(tables.queries))
    key = run_state.query_key("run-a", "q1")
    assert tables.queries[key][6:8] == [None, None]
    every = [1.0, 0.5, 0.9, 1.0, 1.0, 0.7, 0.8]
    tables.fold([(lambda position: RollupRow(*position, "r2", "q1", every, {}), at(6))])
    entry = tables.queries[key]
    means = run_state.query_means(entry)
    assert means[:5] == pytest.approx([1.0, 0.5, (0.2 + 0.9) / 2, 1.0, 1.0])
    assert all(map(math.isnan, means[5:]))  # left out of those two comparisons
    first = run_state.query_first(orjson.loads(orjson.dumps(entry)))
    assert first[3] == 0.2 and all(map(math.isnan, first[6:]))


def test_a_runs_trend_keeps_a_bounded_bucket_history_counted_once() -> None:
    tables = Tables()

    def fold(records: list, now: float) -> None:
        tables.fold(records, now=now, history_seconds=60.0, history_buckets=3)

    fold([(record("r1", 0.2), at(1)), (record("r2", 0.4), at(2))], now=1000.0)
    fold([(record("r3", 0.9), at(3))], now=1010.0)  # the same minute
    fold([(record("r3", 0.9), at(3))], now=1070.0)  # redelivered: not counted again
    fold([(record("r4", 0.5), at(4))], now=1090.0)
    assert run_state.trend_of(tables.rollups[b"run-a"]) == [
        [960.0, pytest.approx(0.5), 3.0],
        [1080.0, 0.5, 1.0],
    ]
    for n, now in enumerate((1200.0, 1300.0, 1400.0)):
        fold([(record(f"late{n}", 1.0), at(10 + n))], now=now)
    trend = run_state.trend_of(tables.rollups[b"run-a"])
    assert [start for start, _, _ in trend] == [1200.0, 1260.0, 1380.0]  # the newest 3
    assert run_state.trend_of(new_run_state()) == []


def test_a_run_counts_the_results_scored_against_qrels_that_have_since_changed() -> None:
    def judged(result_id: str, fingerprint: str, query: str = "q1") -> Placed:
        placed = record(result_id, 0.5, query)
        return lambda position: placed(position)._replace(fingerprint=fingerprint)

    a, b = "a1b2c3d4e5f60718", "ffee00112233aabb"
    tables = Tables()
    tables.fold([(judged(f"r{n}", a), at(n)) for n in range(3)])
    tables.fold([(judged("other", b, query="q2"), at(3))])  # another query's own qrels
    assert tables.rollups[b"run-a"]["changedQrels"] == 0
    tables.fold([(judged("r3", b), at(4))])  # q1's golden set changed: its 3 earlier results
    assert tables.rollups[b"run-a"]["changedQrels"] == 3
    tables.fold([(judged("r4", b), at(5)), (judged("r3", b), at(4))])  # redelivery: no change
    assert tables.rollups[b"run-a"]["changedQrels"] == 3
    tables.fold([(judged("r5", a), at(6))])  # changed back: the 2 scored against b
    assert tables.rollups[b"run-a"]["changedQrels"] == 5
    entry = tables.queries[run_state.query_key("run-a", "q1")]
    assert entry[0] == 6.0 and run_state.query_means(entry)[2] == 0.5
    assert run_state.query_first(entry)[1:6] == [1.0, 0.5, 0.5, 1.0, 1.0]
    assert run_state.run_document("run-a", tables.rollups[b"run-a"], 100)["changedQrels"] == 5
    # Rows keep the fingerprint through the wire.
    row = judged("r9", a)(at(9))
    assert rows_of(encode_rollup_records([row])[0])[0].fingerprint == a


@pytest.mark.parametrize("seed", range(4))
def test_runs_kept_decoded_between_batches_fold_exactly_as_runs_decoded_afresh(seed: int) -> None:
    """``RunBatch.decoded``: a run whose stored state is the object the last batch wrote
    is not decoded again. Folded batch after batch (redeliveries among them), the runs
    equal those of a fold that decodes every state from its JSON each time."""
    import random

    rng = random.Random(seed)
    cached_table: dict[bytes, dict[str, Any]] = {}  # the objects, as a memory store keeps them
    json_table: dict[bytes, dict[str, Any]] = {}
    decoded: dict[bytes, Any] = {}
    queries_a: dict[str, list[float]] = {}
    queries_b: dict[str, list[float]] = {}
    offset = 0
    for _ in range(30):
        rows = []
        for _ in range(rng.randrange(1, 40)):
            if offset and rng.random() < 0.2:  # a redelivery of an earlier position
                position = at(rng.randrange(offset))
            else:
                position, offset = at(offset), offset + 1
            run = f"run-{rng.randrange(5)}".encode()
            values = [rng.random() for _ in METRIC_NAMES]
            facets = {"type": f"t{rng.randrange(4)}", "popularity": rng.choice(["head", "tail"])}
            item = RollupRow(
                *position, f"r{position.offset}", f"q{rng.randrange(9)}", values, facets
            )
            rows.append((run, item))
        a = RunBatch(cached_table.get, queries_a.get, 100, decoded=decoded, now=1.0)
        b = RunBatch(json_table.get, queries_b.get, 100, now=1.0)
        for run, item in rows:
            assert a.add_row(run, item) == b.add_row(run, item)
        queries_a.update(a.queries)
        queries_b.update(b.queries)
        cached_table.update(a.finish("t"))
        for key, state in b.finish("t").items():
            json_table[key] = orjson.loads(orjson.dumps(state))
    assert set(cached_table) == set(json_table) == set(decoded)  # every run kept decoded
    for key in cached_table:
        run_id = key.decode()
        left = run_state.run_document(run_id, orjson.loads(orjson.dumps(cached_table[key])), 100)
        right = run_state.run_document(run_id, json_table[key], 100)
        assert left == right


@pytest.mark.parametrize("seed", range(10))
def test_query_entries_equal_an_independent_model_through_redeliveries_and_qrels_changes(
    seed: int,
) -> None:
    """Each tracked query's entry, folded batch after batch with redeliveries, repeated
    queries within a batch, several input partitions and qrels that change and change
    back, holds what a plain model of its results says: the count, the sum of each
    measure, the first answer and when it was folded, the current golden set and how
    many results were scored against it (from the first result that carries qrels);
    and the run counts the results scored against qrels that have since changed.
    (Entries go through JSON between batches, as the changelog keeps them.)"""
    import random

    rng = random.Random(seed)
    tables = Tables()
    model: dict[str, dict[str, Any]] = {}
    fingerprints = {q: rng.choice(["a1b2c3d4e5f60718", "ffee00112233aabb"]) for q in "abcd"}
    changed_total = 0
    next_offset = [0, 0]
    for n in range(25):
        now = 1000.0 + n
        batch = tables.batch(now, dedupe=False, query_marks=True)
        for _ in range(rng.randrange(1, 12)):
            partition = rng.randrange(2)
            redelivered = next_offset[partition] > 0 and rng.random() < 0.2
            if redelivered:  # a position folded before, at or below the watermark
                offset = rng.randrange(next_offset[partition])
            else:
                offset = next_offset[partition]
                next_offset[partition] += 1
            if rng.random() < 0.1:  # a query's qrels change (or change back)
                changing = rng.choice("abcd")
                fingerprints[changing] = rng.choice(["a1b2c3d4e5f60718", "ffee00112233aabb"])
            # A position always carries the same result (as a redelivery does).
            prng = random.Random(f"{seed}:{partition}/{offset}")
            values = [prng.random() for _ in METRIC_NAMES]
            query = prng.choice("abcd")
            # Rows of an earlier version carry no fingerprint: the golden set is kept.
            fingerprint = fingerprints[query] if prng.random() < 0.8 else None
            row = RollupRow("results", partition, offset, 0, f"r{partition}-{offset}", query,
                            values, {}, None, fingerprint)  # fmt: skip
            if redelivered:
                assert batch.add_row(b"run-a", row) is False
                continue
            assert batch.add_row(b"run-a", row) is True
            entry = model.setdefault(query, {"count": 0, "sums": [0.0] * len(values)})
            if not entry["count"]:
                entry["first"] = [now, *values]
            entry["count"] += 1
            entry["sums"] = [s + v for s, v in zip(entry["sums"], values, strict=True)]
            if fingerprint is not None and entry.get("golden") == fingerprint:
                entry["scored"] += 1
            elif fingerprint is not None:
                changed_total += entry.get("scored", 0)
                entry["golden"], entry["scored"] = fingerprint, 1
        tables.queries.update(orjson.loads(orjson.dumps(batch.queries)))
        for key, state in batch.finish("t").items():
            tables.rollups[key] = orjson.loads(orjson.dumps(state))
    assert model
    for query, expected in model.items():
        entry = tables.queries[run_state.query_key("run-a", query)]
        numbers, marks = run_state.split_marks(entry)
        assert marks is not None
        assert numbers[0] == expected["count"]
        assert run_state.query_means(entry) == pytest.approx(
            [s / expected["count"] for s in expected["sums"]]
        )
        assert run_state.query_first(entry) == expected["first"]
        if "golden" in expected:
            # The golden set as the entry holds it: its fingerprint's first 52 bits.
            golden = [float(int(expected["golden"][:13], 16)), expected["scored"]]
            assert numbers[-2:] == golden
        else:
            assert len(numbers) == 2 + 2 * len(METRIC_NAMES)
    state = decode_run_state(tables.rollups[b"run-a"])
    assert state["queries"] == len(model)
    assert state["changedQrels"] == changed_total


# Every per-query entry layout a release has written (sums of the first ``measures``
# measures): the changelog keeps them, and the reader tells them apart by length.
WRITTEN_LAYOUTS = [
    # (measures, first answers kept, golden set, marks)
    (5, False, False, False),  # count and five sums
    (5, True, False, False),
    (6, True, False, False),
    (7, True, False, False),
    (7, True, True, False),  # 2026-12-03: the golden set
    (7, True, False, True),  # 2026-12-05: marks (rows without qrels)
    (7, True, True, True),
]


@pytest.mark.parametrize("layout", WRITTEN_LAYOUTS)
def test_every_per_query_layout_ever_written_is_read_as_what_it_is(
    layout: tuple[int, bool, bool, bool],
) -> None:
    """An entry is read by its length. Each layout written so far, with distinct
    numbers, gives back its own count, means and first answer, NaN for the measures it
    lacks, and folds one more result onto those numbers. Adding a measure makes the
    current lengths those of an older layout (with an eighth measure, 2 + 2 * 8 = 18
    items is also a seven-measure entry with its golden set): this test then fails
    until the layouts are told apart some other way."""
    measures, firsts, golden, marked = layout
    count = 4.0
    sums = [float(10 + m) for m in range(measures)]
    first = [float(20 + m) / 100 for m in range(measures)]
    entry: list[Any] = [count, *sums]
    if firsts:
        entry += [7.5, *first]
    if golden:
        entry += [123.0, 3.0]
    if marked:
        entry.append({"at": {"results/0": [9, 0]}, "new": ["results/0", 1, 0]})
    means = run_state.query_means(entry)
    assert means[:measures] == [s / count for s in sums]
    assert all(map(math.isnan, means[measures:])) and len(means) == len(METRIC_NAMES)
    expected_first = [7.5, *first] if firsts else [0.0, *(s / count for s in sums)]
    got_first = run_state.query_first(entry)
    assert got_first[: 1 + measures] == expected_first
    assert all(map(math.isnan, got_first[1 + measures :]))
    assert len(got_first) == 1 + len(METRIC_NAMES)
    values = [1.0] * len(METRIC_NAMES)
    folded = run_state.fold_query(run_state.split_marks(entry)[0], values, 99.0)
    assert folded[0] == count + 1
    assert folded[1 : 1 + measures] == [s + 1.0 for s in sums]
    assert all(map(math.isnan, folded[1 + measures : 1 + len(METRIC_NAMES)]))


def test_a_golden_mark_is_the_fingerprints_first_52_bits_and_the_cache_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``golden_mark`` keeps the marks it parsed (a fingerprint recurs with every result
    of its query); past its bound the cache starts afresh, with the same answers."""
    monkeypatch.setattr(run_state, "_MAX_GOLDEN_MARKS", 8)
    monkeypatch.setattr(run_state, "_golden_marks", {})
    fingerprints = [f"{n * 0x9E3779B97F4A7C15 % (1 << 64):016x}" for n in range(1, 30)]
    for _ in range(2):
        for fingerprint in fingerprints:
            mark = run_state.golden_mark(fingerprint)
            assert mark == int(fingerprint, 16) >> 12 and mark == int(mark)
            assert len(run_state._golden_marks) <= 8
    assert run_state.golden_mark("ffffffffffffffff") == float((1 << 52) - 1)  # exact in a float
