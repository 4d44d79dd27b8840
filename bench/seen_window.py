"""The rollups' dedupe window: memory per resultId and time per operation.

    python bench/seen_window.py --write-docs     # 100k, 500k and 1.5M ids, 3 repetitions

Side by side in one process: the window as the worker keeps it
(``scorer.stream.seen``: binary blocks in the table, sorted hash arrays in the
index) and the layout it replaced (a dict of per-id tuples, the table's blocks
as JSON lists of ``[seenKey, stream, offset, seq]``), fed the same blocks of 500
entries (a rollup batch). Memory is what tracemalloc sees held by the index and
the table's values together after the last block; times are medians of the
repetitions, without tracemalloc.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stream import write_section
from scorer.stream.run_state import SeenEntry
from scorer.stream.seen import SeenIndex

BLOCK = 500
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADING = "Dedupe window: memory per id"
READING = """Per id, the index keeps 20 bytes (the two halves of the hash, a block number)
and the table's block 30 (the hash, the input position, the stream); the rest
is per block. The fold looks a batch up at once (`get_many`, the column the
worker uses) and adds one block per batch; a hit (a resend, rare) reads its
entry back from the block. The dict layout held the key string, a tuple and
the table's JSON row per id."""


class DictWindow:
    """The layout the compact window replaced, kept here as the reference."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[str, int, int, float, int]] = {}
        self.blocks: dict[int, deque[tuple[float, str, list[str]]]] = {}

    def add(self, partition: int, key: str, seen_at: float, entries: dict) -> list:
        self.entries.update((k, tuple(e)) for k, e in entries.items())
        self.blocks.setdefault(partition, deque()).append((seen_at, key, list(entries)))
        return [seen_at, partition, [(k, e.stream, e.offset, e.seq) for k, e in entries.items()]]

    def get(self, seen_key: str) -> SeenEntry | None:
        stored = self.entries.get(seen_key)
        return None if stored is None else SeenEntry._make(stored)


def block_of(number: int) -> dict[str, SeenEntry]:
    return {
        f"hybrid-v2-rerank\x1fres-{number:07d}-{n:03d}": SeenEntry(
            f"results/{n % 6}", number * BLOCK + n, 0, 1000.0 + number, number % 6
        )
        for n in range(BLOCK)
    }


def fill(window, ids: int) -> dict[str, object]:
    table = {}
    for number in range(ids // BLOCK):
        key = f"{number % 6}:{number * BLOCK}:{number}"
        table[key] = window.add(number % 6, key, 1000.0 + number, block_of(number))
    return table


def memory_per_id(make: Callable[[], object], ids: int) -> float:
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        window = make()
        table = fill(window, ids)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del window, table
    return held / ids


def timings(make: Callable[[], object], ids: int) -> dict[str, float]:
    window = make()
    started = time.perf_counter()
    table = fill(window, ids)
    add = (time.perf_counter() - started) / ids
    hits = [
        k for number in range(0, ids // BLOCK, max(1, ids // BLOCK // 40)) for k in block_of(number)
    ]
    misses = [f"other-run\x1fres-{n}" for n in range(len(hits))]
    started = time.perf_counter()
    found = sum(window.get(k) is not None for k in hits)
    hit = (time.perf_counter() - started) / len(hits)
    started = time.perf_counter()
    found_miss = sum(window.get(k) is not None for k in misses)
    miss = (time.perf_counter() - started) / len(misses)
    assert found == len(hits) and found_miss == 0
    figures = {"add": add, "hit": hit, "miss": miss}
    if isinstance(window, SeenIndex):
        started = time.perf_counter()
        assert not window.get_many(misses)
        figures["many"] = (time.perf_counter() - started) / len(misses)
    if isinstance(window, SeenIndex):
        started = time.perf_counter()
        rebuilt = SeenIndex()
        rebuilt.rebuild(table.items())
        figures["rebuild"] = time.perf_counter() - started
        started = time.perf_counter()
        rebuilt.expired(0, 1000.0 + ids // BLOCK / 2)
        figures["sweep"] = time.perf_counter() - started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", default="100000,500000,1500000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows = []
    for ids in (int(n) for n in args.ids.split(",")):
        measured = {}
        for name, make in (
            ("compact (seen.py)", SeenIndex),
            ("dict of tuples (before)", DictWindow),
        ):
            memory = [memory_per_id(make, ids) for _ in range(args.repeats)]
            times = [timings(make, ids) for _ in range(args.repeats)]
            measured[name] = (
                statistics.median(memory),
                {k: statistics.median(t[k] for t in times) for k in times[0]},
            )
            print(f"{ids:,} {name}: {measured[name]}", file=sys.stderr)
        rows.append((ids, measured))
    lines = [
        "`python bench/seen_window.py` (blocks of 500 entries, medians of "
        f"{args.repeats}; memory: the index and the table's values, tracemalloc):",
        "",
        "| ids in the window | layout | bytes per id | add µs/id | get hit µs | get miss µs "
        "| batch get miss µs | rebuild s | sweep of half ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for ids, measured in rows:
        for name, (memory, t) in measured.items():
            rebuild = f"{t['rebuild']:.2f}" if "rebuild" in t else "-"
            sweep = f"{t['sweep'] * 1e3:.0f}" if "sweep" in t else "-"
            many = f"{t['many'] * 1e6:.2f}" if "many" in t else "-"
            lines.append(
                f"| {ids:,} | {name} | {memory:.0f} | {t['add'] * 1e6:.2f} | {t['hit'] * 1e6:.2f} "
                f"| {t['miss'] * 1e6:.2f} | {many} | {rebuild} | {sweep} |"
            )
    target = all(m["compact (seen.py)"][0] <= 64 for _, m in rows)
    lines += [
        "",
        f"Target at most 64 bytes per id: {'met' if target else 'NOT met'}.",
        "",
        READING,
    ]
    report = "\n".join(lines)
    print(report)
    if args.write_docs:
        write_section(DOCS, HEADING, report)


if __name__ == "__main__":
    main()
