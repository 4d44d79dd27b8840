"""How one worker's cost per result grows with the ranked lists, the runs and the facets.

    python bench/stream_growth.py --write-docs        # 20,000 results a point, 3 repetitions

The worker's own handlers (the results handler, the rollup flush and fold:
``scorer.stream.testing.Pipeline``, on memory tables, no broker) fed as a worker
is fed: batches of 500 results of one partition, each followed by the rollup
flush and the fold of what it sent. One knob moves at a time from the base point
(100 ids a list, 10 runs, 50 values of the facet ``type``, 1,000 judged queries of
20 judgments). CPU per result is the process time of the handlers over the
results, the collector settled as the worker settles it once its tables are
recovered (``scorer.stream.collector``); the Kafka client's own cost per record
(fetch, produce) is not in it (``bench/stream.py`` measures the whole worker) and
does not depend on these knobs but through the bytes of a list.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stream import write_section
from schemas import GoldenQuery, RetrievalResult
from scorer.stream.collector import settle_after_recovery
from scorer.stream.testing import Pipeline, Record

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
PLOT = DOCS.parent / "img" / "stream-growth.png"
HEADING = "Streaming: how cost grows"
BASE = {"ids": 100, "runs": 10, "facet_values": 50}
POINTS = [
    ("ids", [10, 100, 1000]),
    ("runs", [1, 10, 100, 1000]),
    ("facet_values", [1, 50, 200]),
]
QUERIES = 1000
BATCH = 500
STAMP = datetime(2026, 12, 3, tzinfo=UTC)


def traffic(
    results: int, ids: int, runs: int, facet_values: int, seed: int = 7
) -> tuple[list[GoldenQuery], list[RetrievalResult]]:
    rng = random.Random(seed)
    golden = [
        GoldenQuery(
            query_id=f"q{n:05d}",
            qrels={f"q{n:05d}-d{j:02d}": rng.choice([0, 1, 1, 2, 3]) for j in range(20)},
            facets={"type": f"t{n % facet_values:03d}", "popularity": ("head", "tail")[n % 2]},
        )
        for n in range(QUERIES)
    ]
    stream = []
    for n in range(results):
        query = golden[rng.randrange(QUERIES)]
        judged = list(query.qrels)
        ranked = [
            judged[i] if i < len(judged) and rng.random() < 0.5 else f"{query.query_id}-x{i:04d}"
            for i in range(ids)
        ]
        stream.append(
            RetrievalResult(
                result_id=f"r{n:07d}",
                run_id=f"run-{n % runs:04d}",
                query_id=query.query_id,
                ranked=list(dict.fromkeys(ranked)),
                timestamp=STAMP,
            )
        )
    return golden, stream


def measure(results: list[RetrievalResult], golden: list[GoldenQuery]) -> dict[str, float]:
    pipeline = Pipeline(partitions=1)
    for query in golden:
        pipeline.judge(query)
    # The collector as the worker runs it once its tables are recovered (unfrozen, the
    # fold's figures included collections over the tables: ~30 µs a result, not ~19).
    gc.collect()
    settle_after_recovery()
    # As they come off the wire: the encoding is the producer's, not the worker's.
    records = [Record(0, r.query_id.encode(), r.to_json_bytes()) for r in results]
    handle = fold = 0.0
    wall = time.perf_counter()
    for start in range(0, len(records), BATCH):
        began = time.process_time()
        pipeline.feed(records[start : start + BATCH], partition=0)
        pipeline.commit()
        middle = time.process_time()
        pipeline.fold()
        handle += middle - began
        fold += time.process_time() - middle
    wall = time.perf_counter() - wall
    gc.unfreeze()  # the next point starts from its own tables
    counted = sum(pipeline.run(run)["count"] for run in {r.run_id for r in results})
    assert counted == len(results), (counted, len(results))
    n = len(results)
    return {"rate": n / wall, "cpu": (handle + fold) / n, "handle": handle / n, "fold": fold / n}


def plot(rows: list[tuple[str, int, dict[str, float]]], path: Path) -> None:
    """One panel per knob (log x): the results handler's and the fold's µs per result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(POINTS), figsize=(12, 3.6), sharey=True)
    for ax, (knob, _) in zip(axes, POINTS, strict=True):
        points = [(value, f) for k, value, f in rows if k == knob]
        xs = [value for value, _ in points]
        for key, label in (("handle", "results handler"), ("fold", "rollup fold")):
            ax.plot(xs, [f[key] * 1e6 for _, f in points], marker="o", label=label)
        ax.plot(xs, [f["cpu"] * 1e6 for _, f in points], marker="o", color="black", label="both")
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:,}" for x in xs])
        ax.set_xlabel(knob.replace("_", " "))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("CPU µs per result")
    axes[0].legend(fontsize=8)
    fig.suptitle("One worker's handlers: cost per result as one knob moves from the base point")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows = []
    for knob, values in POINTS:
        for value in values:
            point = {**BASE, knob: value}
            golden, results = traffic(args.results, **point)
            runs = [measure(results, golden) for _ in range(args.repeats)]
            figures = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            rows.append((knob, value, figures))
            print(f"{knob}={value}: {figures}", file=sys.stderr)
    lines = [
        f"`python bench/stream_growth.py` ({args.results:,} results a point, medians of "
        f"{args.repeats}; base point {BASE['ids']} ids a list, {BASE['runs']} runs, "
        f"{BASE['facet_values']} facet values, {QUERIES:,} judged queries; the handlers "
        "only, no broker):",
        "",
        "| knob | value | results/s | CPU µs/result | results handler µs | rollup fold µs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for knob, value, f in rows:
        lines.append(
            f"| {knob.replace('_', ' ')} | {value:,} | {f['rate']:,.0f} | {f['cpu'] * 1e6:.1f} "
            f"| {f['handle'] * 1e6:.1f} | {f['fold'] * 1e6:.1f} |"
        )
    lines += ["", "![cost per result against each knob](img/stream-growth.png)"]
    report = "\n".join(lines)
    print(report)
    if args.write_docs:
        plot(rows, PLOT)
        write_section(DOCS, HEADING, report)


if __name__ == "__main__":
    main()
