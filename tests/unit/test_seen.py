"""The dedupe window's compact index (scorer.stream.seen) against a plain dict model:
the same answers through adds, renewals, merges, expiry and rebuilds from the table,
every stored format of earlier versions read back, and its memory per id."""

from __future__ import annotations

import random
import tracemalloc

import orjson
import pytest

from scorer.stream import seen
from scorer.stream.run_state import SeenEntry
from scorer.stream.seen import Block, SeenIndex, decode_block, encode_block, key_hash


class Model:
    """What the index must answer, kept the obvious way: per key its newest entry and
    the block holding it; blocks expire whole, per partition, in the order written."""

    def __init__(self) -> None:
        self.blocks: list[tuple[int, str, float, dict[str, SeenEntry]]] = []
        self.dead: set[str] = set()

    def add(self, partition: int, key: str, seen_at: float, entries: dict) -> None:
        self.blocks.append((partition, key, seen_at, dict(entries)))

    def expired(self, partition: int, before: float) -> list[str]:
        keys = [
            key
            for p, key, seen_at, _ in self.blocks
            if p == partition and key not in self.dead and seen_at < before
        ]
        self.dead.update(keys)
        return keys

    def get(self, seen_key: str, partitions: set[int] | None = None) -> SeenEntry | None:
        found = None
        for p, key, _, entries in self.blocks:
            if (
                key not in self.dead
                and seen_key in entries
                and (partitions is None or p in partitions)
            ):
                found = entries[seen_key]
        return found


@pytest.mark.parametrize("seed", range(6))
def test_the_index_answers_as_a_dict_would_through_merges_expiry_and_rebuilds(seed: int) -> None:
    rng = random.Random(seed)
    index, model = SeenIndex(), Model()
    index.MIN_MERGE = rng.choice([1, 3, 50])  # merges often, at odd sizes
    table: dict[str, bytes] = {}
    # A run's entries are in one rollup partition (the rollup topic is keyed by run).
    keys = {p: [f"run-{p}{n % 2}\x1fres-{n}" for n in range(200)] for p in (0, 1)}
    clock = 0.0
    for step in range(120):
        clock += rng.uniform(0.5, 3.0)
        partition = rng.randrange(2)
        batch = {
            key: SeenEntry(
                f"results/{rng.randrange(4)}",
                rng.randrange(10**12),
                rng.randrange(3),
                clock,
                partition,
            )
            # Some keys come again: renewals.
            for key in rng.sample(keys[partition], rng.randrange(1, 30))
        }
        key = f"{partition}:{step}:1"
        table[key] = index.add(partition, key, clock, batch)
        model.add(partition, key, clock, batch)
        if rng.random() < 0.2:
            cut = clock - rng.uniform(5, 40)
            for p in (0, 1):
                expired = index.expired(p, cut)
                assert expired == model.expired(p, cut)
                for gone in expired:
                    del table[gone]
        if rng.random() < 0.1:  # a recovery: rebuilt from what the table holds
            index = SeenIndex()
            index.MIN_MERGE = rng.choice([1, 3, 50])
            index.rebuild(table.items())
        probes = rng.sample(keys[0] + keys[1], 40)
        for probe in probes:
            assert index.get(probe) == model.get(probe), (seed, step, probe)
        expected = {probe: model.get(probe) for probe in probes}
        assert index.get_many(probes) == {k: v for k, v in expected.items() if v is not None}
    owned = {1}
    rebuilt = SeenIndex()
    rebuilt.rebuild(table.items(), owned)
    for probe in keys[0] + keys[1]:
        assert rebuilt.get(probe) == model.get(probe, owned)


def test_a_block_is_thirty_bytes_an_entry_and_decodes_to_what_was_written() -> None:
    entries = {
        f"run\x1fr{n}": SeenEntry(f"results/{n % 2}", 2**40 + n, n % 3, 12.5, 7) for n in range(100)
    }
    value = encode_block(12.5, 7, entries)
    assert value[0] == seen.BLOCK_VERSION
    assert len(value) == seen.block_size(["results/0", "results/1"], 100) == 13 + 2 * 11 + 4 + 3000
    block = Block(value)
    assert (block.seen_at, block.partition, block.streams) == (12.5, 7, ["results/0", "results/1"])
    for seen_key, entry in entries.items():
        assert block.find(*key_hash(seen_key)) == entry
    assert block.find(*key_hash("run\x1fr100")) is None
    assert decode_block("any", value) is value  # binary blocks are shared, not copied


def test_records_of_every_earlier_format_are_read_as_blocks() -> None:
    version_0 = ["results/0", 5, 1, 10.0, 2]  # one entry under its seen key
    version_1 = [11.0, 2, [["run\x1fr2", "results/1", 6, 0], ["run\x1fr3", "results/1", 7, 0]]]
    table = {
        "run\x1fr1": orjson.dumps(version_0),  # as the raw table now reads them
        "2:6:1": orjson.dumps(version_1),
        "2:8:1": version_1,  # as the JSON table of those versions decoded them
    }
    index = SeenIndex()
    index.rebuild(table.items())
    assert index.get("run\x1fr1") == SeenEntry("results/0", 5, 1, 10.0, 2)
    assert index.get("run\x1fr2") == SeenEntry("results/1", 6, 0, 11.0, 2)
    assert index.get("run\x1fr3") == SeenEntry("results/1", 7, 0, 11.0, 2)
    assert index.expired(2, 10.5) == ["run\x1fr1"] and index.get("run\x1fr1") is None
    with pytest.raises(ValueError, match="unknown version 9"):
        Block(bytes([9]) + encode_block(1.0, 0, {})[1:])


def test_the_window_holds_at_most_64_bytes_per_id_table_included() -> None:
    """The index and the table's values together (what a worker keeps per resultId in
    the window), measured with tracemalloc at 200,000 ids in 400 blocks."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        index, table = SeenIndex(), {}
        for block in range(400):
            entries = {
                f"hybrid-v2-rerank\x1fres-{block:05d}-{n:04d}": SeenEntry(
                    f"results/{n % 6}", block * 500 + n, 0, 1000.0 + block, block % 6
                )
                for n in range(500)
            }
            key = f"{block % 6}:{block * 500}:{block}"
            table[key] = index.add(block % 6, key, 1000.0 + block, entries)
        del entries
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(index) == 200_000
    print(f"\n{held / 200_000:.1f} bytes per id")
    assert held / 200_000 <= 64, f"{held / 200_000:.1f} bytes per id"


def test_expired_blocks_leave_nothing_behind() -> None:
    """A worker adds a block per folded batch for days: what it keeps per block is
    dropped with the block (the index held a slot per block ever written before)."""
    index = SeenIndex()
    for n in range(2000):
        entries = {
            f"run\x1fr{n}-{i}": SeenEntry("results/0", n * 3 + i, 0, float(n), 0) for i in range(3)
        }
        index.add(0, f"0:{n}:1", float(n), entries)
        index.expired(0, float(n - 10))
    assert len(index._blocks) == len(index._order[0]) == 11
    assert len(index) == 33
    assert index.get("run\x1fr1999-2") == SeenEntry("results/0", 5999, 0, 1999.0, 0)
    assert index.get("run\x1fr1000-2") is None
