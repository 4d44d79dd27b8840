"""A/B of the offline scoring path: this checkout against another, side by side.

    python bench/ab_offline.py --baseline /work/main            # 20,000 x 100, 7 reps
    python bench/ab_offline.py --baseline DIR --size 7000x1000 --reps 5

Each repetition runs, for each checkout in turn (the order alternates), a process
that imports that checkout's ``scorer`` and times on the same files (bench/offline.py's
generated run and qrels):

- ``kernel``: ``score`` + ``RunRollup.add`` over every ranking, inputs in memory;
- ``eval``: ``evaluate_run_file`` from the two files (parsing included).

It prints the medians per checkout and the ratio this / baseline (below 1: faster).
A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys, time
from scorer.core.metrics import Judgments, score
from scorer.core.rollup import RunRollup
from scorer.offline.evaluation import evaluate_run_file
from scorer.io import read_golden
import pytrec_eval
from pathlib import Path
qrels_path, run_path = Path(sys.argv[1]), Path(sys.argv[2])
with open(qrels_path) as lines:
    golden = pytrec_eval.parse_qrel(lines)
with open(run_path) as lines:
    run = pytrec_eval.parse_run(lines)
rankings = [(q, list(s)) for q, s in run.items()]
judgments = {q: Judgments.from_qrels(j) for q, j in golden.items()}
start = time.perf_counter()
rollup = RunRollup()
for query, ranked in rankings:
    rollup.add(score(ranked, judgments[query], 10))
kernel = time.perf_counter() - start
start = time.perf_counter()
evaluate_run_file(read_golden(qrels_path), run_path, k=10)
end_to_end = time.perf_counter() - start
print(json.dumps({"kernel": kernel, "eval": end_to_end}))
"""


def timed(checkout: Path, qrels: Path, run: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(qrels), str(run)],
        cwd=checkout,
        env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise SystemExit(f"{checkout}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--size", default="20000x100", help="queries x docs per query")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.offline import generate

    queries, docs = (int(part) for part in args.size.split("x"))
    qrels, run = generate(queries, docs)
    checkouts = {"this": ROOT, "baseline": args.baseline.resolve()}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"kernel": [], "eval": []} for name in checkouts
    }
    for rep in range(args.reps):
        order = list(checkouts) if rep % 2 == 0 else list(reversed(checkouts))
        for name in order:
            for stage, seconds in timed(checkouts[name], qrels, run).items():
                samples[name][stage].append(seconds)
    print(f"{args.size}, {args.reps} repetitions, medians (seconds)")
    print(f"{'stage':<8} {'baseline':>10} {'this':>10} {'this/baseline':>14}")
    for stage in ("kernel", "eval"):
        base = statistics.median(samples["baseline"][stage])
        this = statistics.median(samples["this"][stage])
        print(f"{stage:<8} {base:>10.3f} {this:>10.3f} {this / base:>14.3f}")


if __name__ == "__main__":
    main()
