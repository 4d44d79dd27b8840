"""The per-query entries' changelog as blocks (scorer.stream.entry_blocks): what is sent,
what is deleted and when, and what a restart reads back."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import orjson
import pytest

from scorer.stream.entry_blocks import (
    PREFIX,
    EntryBlocks,
    block_key,
    is_block_key,
    newest_entries,
    partition_of,
)
from scorer.stream.testing import Pipeline
from tests.unit.test_handlers import assert_changelogs_hold_the_tables, judged, rounds, traffic


def answered(error: Exception | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
    return future


def entry(count: float, tag: str = "") -> list[Any]:
    return [count, 0.5, tag]


def test_a_batch_is_one_record_and_a_replaced_block_goes_once_its_replacement_is_acknowledged() -> (
    None
):
    blocks = EntryBlocks(budget=1_000_000)
    first = blocks.write(0, {"r\x1fq1": entry(1), "r\x1fq2": entry(1)}, 10, lambda key: None)
    assert [(key, orjson.loads(value)) for key, value, _ in first] == [
        (block_key(0, 10), {"r\x1fq1": entry(1), "r\x1fq2": entry(1)})
    ]
    blocks.sent(first[0][2], answered())
    second = blocks.write(0, {"r\x1fq1": entry(2), "r\x1fq2": entry(2)}, 10, lambda key: None)
    assert second[0][0] == block_key(0, 11)  # past the latest: the clock stood still
    assert blocks.deletable(0) == []  # its replacement is not acknowledged yet
    blocks.sent(second[0][2], answered(OSError("broker gone")))
    assert blocks.deletable(0) == []  # nor ever, by this worker: kept
    third = blocks.write(0, {"r\x1fq1": entry(3), "r\x1fq2": entry(3)}, 20, lambda key: None)
    blocks.sent(third[0][2], answered())
    assert blocks.deletable(0) == []  # the failed second one holds the line
    assert len(blocks) == 3


def test_blocks_are_deleted_in_order_of_acknowledgement_per_partition() -> None:
    blocks = EntryBlocks(budget=1_000_000)
    one = blocks.write(1, {"a\x1fq": entry(1)}, 5, lambda key: None)[0]
    other = blocks.write(2, {"b\x1fq": entry(1)}, 5, lambda key: None)[0]
    two = blocks.write(1, {"a\x1fq": entry(2)}, 6, lambda key: None)[0]
    three = blocks.write(1, {"a\x1fq": entry(3)}, 7, lambda key: None)[0]
    blocks.sent(three[2], answered())  # out of order: not yet durable
    assert blocks.deletable(1) == []
    blocks.sent(one[2], answered())
    blocks.sent(two[2], answered())
    assert blocks.deletable(1) == [one[0], two[0]]
    assert blocks.deletable(1) == []  # forgotten once given
    assert blocks.deletable(2) == []
    blocks.sent(other[2], answered())
    assert len(blocks) == 2  # the newest of each partition


def test_a_mostly_replaced_block_has_its_last_entries_written_again_and_dies() -> None:
    blocks = EntryBlocks(budget=1_000_000)
    store = {f"r\x1fq{n}": entry(1) for n in range(8)}
    old = blocks.write(0, store, 1, store.get)[0]
    blocks.sent(old[2], answered())
    changed = {f"r\x1fq{n}": entry(2) for n in range(7)}  # 1 of 8 left: sparse
    store.update(changed)
    newer = blocks.write(0, changed, 2, store.get)[0]
    blocks.sent(newer[2], answered())
    assert orjson.loads(newer[1]) == changed
    last = blocks.write(0, {"s\x1fq": entry(1)}, 3, store.get)[0]
    assert orjson.loads(last[1]) == {"s\x1fq": entry(1), "r\x1fq7": entry(1)}
    assert blocks.deletable(0) == []
    blocks.sent(last[2], answered())
    assert blocks.deletable(0) == [old[0]]


def test_a_batch_larger_than_a_record_is_several_blocks_each_within_the_budget() -> None:
    blocks = EntryBlocks(budget=400)
    entries = {f"run\x1fquery-{n:03}": entry(1, "x" * 20) for n in range(40)}
    written = blocks.write(3, entries, 100, lambda key: None)
    assert len(written) > 4
    assert all(len(value) <= 400 for _, value, _ in written)
    assert [key for key, _, _ in written] == [block_key(3, 100 + n) for n in range(len(written))]
    together: dict[str, Any] = {}
    for _, value, _ in written:
        together.update(orjson.loads(value))
    assert together == entries


def test_a_restart_takes_the_blocks_apart_into_each_keys_highest_count() -> None:
    store: dict[str, Any] = {
        "r\x1fq1": entry(4, "per key, an earlier version"),
        "r\x1fq2": entry(1, "per key, replaced"),
        block_key(0, 7): {"r\x1fq1": entry(3, "old"), "r\x1fq2": entry(2, "b7")},
        block_key(0, 9): {"r\x1fq2": entry(2, "b9, equal: the later"), "r\x1fq3": entry(1)},
        block_key(1, 8): {"s\x1fq1": entry(5, "not owned")},
    }
    standby = newest_entries(store.items())
    assert newest_entries(store.items(), "s\x1f") == {"s\x1fq1": entry(5, "not owned")}
    assert newest_entries(store.items(), "r\x1f") == {
        key: value for key, value in standby.items() if key.startswith("r\x1f")
    }
    blocks = EntryBlocks(budget=1_000_000)
    assert blocks.reindex(store, owned={0}) == 2
    assert store == {
        "r\x1fq1": entry(4, "per key, an earlier version"),
        "r\x1fq2": entry(2, "b9, equal: the later"),
        "r\x1fq3": entry(1),
        block_key(1, 8): {"s\x1fq1": entry(5, "not owned")},
    }
    # What a reader of a store not taken apart (a standby's) gets from it.
    assert standby == {key: value for key, value in store.items() if not is_block_key(key)} | {
        "s\x1fq1": entry(5, "not owned")
    }
    # The block of time 7 holds no newest entry: deleted at once (the others are durable).
    assert blocks.deletable(0) == [block_key(0, 7)]
    # A new block is keyed past the latest found, whatever the clock says.
    store["r\x1fq3"] = entry(2)  # stored by the fold, which writes its block
    assert blocks.write(0, {"r\x1fq3": entry(2)}, 1, store.get)[0][0] == block_key(0, 10)
    # Recovered again while kept (a rebalance): a block known already is not taken for
    # a new one (which would delete it as replaced), nor does it roll an entry back.
    store[block_key(0, 9)] = {"r\x1fq2": entry(2, "b9, equal: the later"), "r\x1fq3": entry(1)}
    assert blocks.reindex(store, owned={0, 1}) == 2
    assert store["r\x1fq3"] == entry(2) and block_key(0, 9) not in store
    assert blocks.deletable(0) == [] and blocks.deletable(1) == []
    assert store["s\x1fq1"] == entry(5, "not owned")  # taken apart now it is owned
    # A partition lost: its entries leave the store, its blocks are left to the new owner.
    blocks.reindex(store, owned={1})
    assert store == {
        "r\x1fq1": entry(4, "per key, an earlier version"),
        "s\x1fq1": entry(5, "not owned"),
    }
    blocks.reindex(store, owned=set())
    assert len(blocks) == 0
    assert partition_of(block_key(12, 5)) == 12
    # A run id may look like a block key: its entries' keys hold the separator.
    assert not is_block_key(f"{PREFIX}0:5\x1fq1") and is_block_key(block_key(0, 5))


def test_with_blocks_a_fold_sends_one_entry_record_per_batch_and_partition() -> None:
    golden, results = traffic(results=60)
    blocks = judged(golden, clock=lambda: 1e6)
    per_key = judged(golden, clock=lambda: 1e6, rollup_entry_blocks=False)
    assert blocks.rollups.blocks is not None and per_key.rollups.blocks is None
    for pipeline in (blocks, per_key):
        pipeline.feed(results)
        pipeline.commit()
        folded = pipeline.fold()
        entries = [o for o in folded if o.topic == "run_queries-changelog"]
        if pipeline is blocks:
            # One record per partition the batch folded, holding each entry it changed.
            assert len(entries) == len({o.partition for o in entries}) > 1
            together = {}
            for output in entries:
                together.update(orjson.loads(output.value))
            assert together == orjson.loads(orjson.dumps(pipeline.tables["run_queries"].data))
        else:
            assert len(entries) == len(pipeline.tables["run_queries"].data)
        rounds(pipeline, results)
        assert_changelogs_hold_the_tables(pipeline)
    assert blocks.tables["run_queries"].data == per_key.tables["run_queries"].data
    for run in {r.run_id for r in results}:
        assert blocks.run(run) == per_key.run(run)
    written = blocks.changelog_writes["run_queries-changelog"]
    assert written * 5 < per_key.changelog_writes["run_queries-changelog"]
    # Each block written once and deleted at most once. Left live per partition: the
    # last round's two blocks, and those whose replacement was acknowledged after the
    # partition's last fold (deleted by its next).
    log = blocks.changelogs["run_queries-changelog"]
    deleted = sum(value is None for value in log.values())
    assert written == len(log) + deleted and deleted > 0
    live = [key for key, value in log.items() if value is not None]
    assert len(live) <= 3 * len({partition_of(orjson.loads(key)) for key in live}) < deleted


@pytest.mark.parametrize(
    "options",
    [
        {"processing_guarantee": "exactly_once"},
        {"store": "rocksdb://"},
        {"rollup_query_marks": False},
    ],
)
def test_entries_go_per_key_where_blocks_cannot_hold(options: dict[str, Any]) -> None:
    golden, results = traffic(results=20)
    pipeline: Pipeline = judged(golden, **options)
    assert pipeline.rollups.blocks is None
    pipeline.feed(results)
    pipeline.settle()
    keys = set(pipeline.changelogs["run_queries-changelog"])
    assert keys == {orjson.dumps(key) for key in pipeline.tables["run_queries"].data}
