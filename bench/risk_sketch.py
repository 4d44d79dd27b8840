"""The live risk–coverage sketch against the exact offline block, and its state size.

    python bench/risk_sketch.py                 # 10,000 results per row
    python bench/risk_sketch.py --results 100000

For each kind of confidence (a probability, a logit spread over many orders of
magnitude, and each run of the demo traffic) it feeds the same results to
:class:`scorer.analysis.risk_sketch.RiskSketch` and to the exact
:class:`scorer.analysis.risk_coverage.RiskCoverage`, and prints, per loss, the exact
AURC, the sketch's difference from it, the width of the interval the sketch
certifies (the worst case), and the difference of the optimal AURC. Then the
bytes of the sketch's JSON state, and of the whole run state the worker writes
to the rollups changelog once per run per batch (with and without the sketch),
built by :class:`scorer.stream.run_state.RunBatch` from the demo's contributions.
A measurement, not a test: it prints tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scorer.analysis.risk_coverage import LOSSES, RiskCoverage  # noqa: E402
from scorer.analysis.risk_sketch import RiskSketch  # noqa: E402
from scorer.analysis.synthetic import predictive_results  # noqa: E402
from scorer.core.metrics import MetricValues, retrieval_metrics  # noqa: E402
from scorer.kafka.demo import RUNS, DemoTraffic  # noqa: E402
from scorer.stream.run_state import RunBatch  # noqa: E402
from scorer.stream.stored import RollupRow  # noqa: E402


def demo_results(count: int) -> dict[str, list[tuple[float | None, MetricValues, str, str]]]:
    """``count`` demo results per run: (confidence, metrics, resultId, queryId)."""
    demo = DemoTraffic.generate(queries=2_000, unjudged_share=0.0, seed=7)
    golden = {query.query_id: query for query in demo.golden}
    by_run: dict[str, list[tuple[float | None, MetricValues, str, str]]] = {run: [] for run in RUNS}
    for result in demo.results(limit=count * len(RUNS)):
        values = retrieval_metrics(result.ranked, golden[result.query_id].qrels, 10)
        by_run[result.run_id].append(
            (result.top_confidence(), values, result.result_id, result.query_id)
        )
    return by_run


def compare(name: str, rows) -> list[str]:
    sketch, exact = RiskSketch(), RiskCoverage()
    for confidence, values in rows:
        sketch.add(confidence, values)
        exact.add(confidence, values)
    got, want, bounds = sketch.summary(), exact.summary(), sketch.bounds()
    lines = []
    for loss in LOSSES:
        low, high = bounds["aurcWithin"][loss]
        lines.append(
            f"{name:<24} {loss:<9} {want[loss]['aurc']:>8.4f} "
            f"{got[loss]['aurc'] - want[loss]['aurc']:>+11.2e} {high - low:>10.4f} "
            f"{got[loss]['optimalAurc'] - want[loss]['optimalAurc']:>+11.2e} "
            f"{got[loss]['eAurc'] - want[loss]['eAurc']:>+11.2e} {bounds['buckets']:>7} "
            f"{len(orjson.dumps(sketch.to_state())):>7}"
        )
    return lines


def run_state_bytes(rows) -> tuple[int, int, int]:
    """(run state bytes, its sketch's bytes, contributions) after folding ``rows`` of one
    run the way the rollup agent does, facets included."""
    states: dict[bytes, dict] = {}
    batch = RunBatch(states.get, lambda key: None, max_queries=10_000)
    facets = ("factoid", "list", "comparison")
    for offset, (confidence, values, result_id, query_id) in enumerate(rows):
        item = RollupRow(
            "results",
            offset % 4,
            offset,
            0,
            result_id,
            query_id,
            list(values),
            {"type": facets[offset % 3], "popularity": "head"},
            confidence,
        )
        batch.add_row(b"run", item)
    state = batch.finish("2026-11-30T23:59:59+00:00")[b"run"]
    return len(orjson.dumps(state)), len(orjson.dumps(state["risk"])), len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=10_000, help="results per row")
    count = parser.parse_args().results
    print(f"sketch vs exact on {count:,} results (differences: sketch - exact)\n")
    head = (
        f"{'confidence':<24} {'loss':<9} {'AURC':>8} {'AURC diff':>11} {'certified':>10} "
        f"{'opt. diff':>11} {'E-AURC diff':>11} {'buckets':>7} {'bytes':>7}"
    )
    print(head)
    print("-" * len(head))
    for line in compare("probability", predictive_results(count, 15, logits=False)):
        print(line)
    for line in compare("logit", predictive_results(count, 15, logits=True)):
        print(line)
    by_run = demo_results(count)
    for run, rows in by_run.items():
        for line in compare(f"demo {run}", [(c, v) for c, v, _, _ in rows]):
            print(line)
    print("\nrun state written to the rollups changelog once per run per batch\n")
    head = f"{'run':<24} {'results':>8} {'state bytes':>12} {'of which sketch':>16}"
    print(head)
    print("-" * len(head))
    for run, rows in by_run.items():
        total, sketch, results = run_state_bytes(rows)
        print(f"{run:<24} {results:>8,} {total:>12,} {sketch:>16,}")


if __name__ == "__main__":
    main()
