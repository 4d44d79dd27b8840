"""Live comparisons read continuously: anytime95 against a fixed-horizon ci95.

    python bench/anytime.py --write-docs            # 10,000 streams x 10,000 reads
    python bench/anytime.py --streams 1000 --steps 2000

Paired differences of nDCG@10 are drawn from the demo's retrievers: per golden
query, two independent answers of the same retriever (an A/A pair), scored with
the project's metric code; the pool is centred so that its mean is exactly 0.
Each stream is a run pair compared after *every* query (the page re-reads the
compare endpoint every 3 s while results arrive). Printed, as a table:

- A/A: the share of streams ever called different within 10,000 reads, by the
  anytime-valid sequence (``scorer.analysis.anytime``, the endpoint's ``anytime95``) and
  by the fixed-horizon paired 95% interval (``ci95``, from the 10th read on);
- true gains of 0.02 and 0.05 (the pool shifted, clipped to [-1, 1], its mean
  measured): the median number of queries until ``anytime95`` excludes 0, the
  share found within the horizon, and the size a fixed-horizon test planned for
  80% power needs ((z_0.975 + z_0.8)^2 sigma^2 / delta^2): the price of peeking;
- the width of ``anytime95`` over that of ``ci95`` at 100, 1,000 and 10,000
  observations (medians over streams).

The plot (docs/img/anytime.png) shows the A/A share called different by each
interval against the number of reads. A benchmark, not a test: nothing is timed.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stream import write_section  # noqa: E402
from scorer.analysis import anytime  # noqa: E402
from scorer.core.metrics import score  # noqa: E402
from scorer.kafka.demo import RUNS, DemoTraffic, _ranking  # noqa: E402
from scorer.stream.events import golden_entry, judgments_of  # noqa: E402

Z_975, Z_80 = 1.959964, 0.841621
WIDTH_AT = (100, 1000, 10_000)


def aa_pool(size: int, seed: int) -> np.ndarray:
    """nDCG@10 differences of two answers of the same demo retriever to one query."""
    rng = random.Random(seed)
    traffic = DemoTraffic.generate(queries=2000, seed=seed)
    entries = {}
    differences = []
    skills = list(RUNS.values())
    while len(differences) < size:
        golden = rng.choice(traffic.golden)
        entry = entries.get(golden.query_id)
        if entry is None:
            entry = entries[golden.query_id] = judgments_of(golden_entry(golden))
        skill = rng.choice(skills)
        facets = golden.facets or {}
        a = score(_ranking(rng, golden, skill, facets), entry, 10).ndcg_at_10
        b = score(_ranking(rng, golden, skill, facets), entry, 10).ndcg_at_10
        differences.append(b - a)
    pool = np.array(differences)
    return pool - pool.mean()


def streams_of(pool: np.ndarray, streams: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    return pool[rng.integers(0, len(pool), (streams, steps))]


def sums(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps = values.shape[1]
    count = np.broadcast_to(np.arange(1, steps + 1, dtype=float), values.shape)
    return count, np.cumsum(values, axis=1), np.cumsum(values**2, axis=1)


def fixed_excludes(count: np.ndarray, totals: np.ndarray, squares: np.ndarray, truth: float):
    """Whether the paired Student/normal 95% interval excludes ``truth`` at each read."""
    means = totals / count
    variance = np.maximum(squares / count - means**2, 0) * count / np.maximum(count - 1, 1)
    return np.abs(means - truth) > Z_975 * np.sqrt(variance / count)


def run(streams: int, steps: int, seed: int, chunk: int = 200) -> dict:
    rng = np.random.default_rng(seed)
    pool = aa_pool(50_000, seed)
    sigma = float(pool.std())
    ever_any = np.zeros(steps)
    ever_fixed = np.zeros(steps)
    done = 0
    while done < streams:
        n = min(chunk, streams - done)
        count, totals, squares = sums(streams_of(pool, n, steps, rng))
        any_first = anytime.rejects(count, totals, squares, 0.0)
        fixed_first = fixed_excludes(count, totals, squares, 0.0)
        fixed_first[:, :9] = False  # from the 10th read on
        ever_any += np.maximum.accumulate(any_first, axis=1).sum(axis=0)
        ever_fixed += np.maximum.accumulate(fixed_first, axis=1).sum(axis=0)
        done += n
    figures = {
        "pool": len(pool),
        "sigma": sigma,
        "streams": streams,
        "steps": steps,
        "aa_anytime": ever_any / streams,
        "aa_fixed": ever_fixed / streams,
        "gains": {},
        "widths": {},
    }
    gain_streams = max(200, streams // 10)
    for gain in (0.02, 0.05):
        shifted = np.clip(pool + gain, -1, 1)
        truth = float(shifted.mean())
        found_at = []
        for start in range(0, gain_streams, chunk):
            n = min(chunk, gain_streams - start)
            count, totals, squares = sums(streams_of(shifted, n, steps, rng))
            excluded = anytime.rejects(count, totals, squares, 0.0) & (totals > 0)
            first = np.where(excluded.any(axis=1), excluded.argmax(axis=1) + 1, steps + 1)
            found_at.extend(first.tolist())
        found = np.array(found_at)
        planned = (Z_975 + Z_80) ** 2 * float(shifted.var()) / truth**2
        figures["gains"][gain] = {
            "truth": truth,
            "median": float(np.median(found)) if (found <= steps).mean() >= 0.5 else None,
            "found": float((found <= steps).mean()),
            "planned": planned,
        }
    for n_at in WIDTH_AT:
        if n_at > steps:
            continue
        values = streams_of(pool, 500, n_at, rng)
        count = np.full(500, float(n_at))
        totals, squares = values.sum(axis=1), (values**2).sum(axis=1)
        lower, upper = anytime.bounds(count, totals, squares)
        fixed = 2 * Z_975 * values.std(axis=1, ddof=1) / math.sqrt(n_at)
        figures["widths"][n_at] = float(np.median((upper - lower) / fixed))
    return figures


def report(f: dict) -> str:
    steps = f["steps"]
    reads = [r for r in (10, 100, 1000, 10_000) if r <= steps]
    lines = [
        f"{f['streams']:,} A/A streams of paired nDCG@10 differences (the demo's retrievers, "
        f"two answers per query; spread {f['sigma']:.3f}), each read after every one of "
        f"{steps:,} queries; alpha 0.05.",
        "",
        "| A/A: share ever called different by read | "
        + " | ".join(f"{r:,}" for r in reads)
        + " |",
        "|---|" + "---:|" * len(reads),
        "| anytime95 (target: at most 0.05) | "
        + " | ".join(f"{f['aa_anytime'][r - 1]:.4f}" for r in reads)
        + " |",
        "| fixed-horizon ci95 (from the 10th read) | "
        + " | ".join(f"{f['aa_fixed'][r - 1]:.4f}" for r in reads)
        + " |",
        "",
        "| true gain in nDCG@10 | found within the horizon | median queries to find "
        "(anytime95) | fixed-horizon size for 80% power | ratio |",
        "|---:|---:|---:|---:|---:|",
    ]
    for gain, g in f["gains"].items():
        median = "not within horizon" if g["median"] is None else f"{g['median']:,.0f}"
        ratio = "" if g["median"] is None else f"{g['median'] / g['planned']:.2f}x"
        lines.append(
            f"| {gain} ({g['truth']:.4f} after clipping) | {g['found']:.1%} | {median} | "
            f"{g['planned']:,.0f} | {ratio} |"
        )
    lines += [
        "",
        "| observations | " + " | ".join(f"{n:,}" for n in f["widths"]) + " |",
        "|---|" + "---:|" * len(f["widths"]),
        "| width of anytime95 / ci95 (target at most 2x at 1,000 and 10,000) | "
        + " | ".join(f"{w:.2f}x" for w in f["widths"].values())
        + " |",
    ]
    return "\n".join(lines)


def plot(f: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reads = np.arange(1, f["steps"] + 1)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(reads, f["aa_fixed"], label="fixed-horizon ci95, read after every query")
    ax.plot(reads, f["aa_anytime"], label="anytime95, read after every query")
    ax.axhline(0.05, color="grey", linestyle="--", linewidth=1, label="alpha = 0.05")
    ax.set_xscale("log")
    ax.set_xlabel("reads (paired queries so far)")
    ax.set_ylabel("A/A pairs ever called different")
    ax.set_ylim(0, max(0.6, float(f["aa_fixed"].max()) + 0.05))
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"{f['streams']:,} A/A run pairs, nDCG@10", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    figures = run(args.streams, args.steps, args.seed)
    text = report(figures)
    print(text)
    if args.write_docs:
        command = "python bench/anytime.py --write-docs"
        write_section(
            ROOT / "docs" / "benchmarks.md",
            "Live comparisons: anytime95 against ci95",
            f"`{command}` (seed {args.seed}):\n\n{text}\n\n![A/A pairs called different]"
            "(img/anytime.png)",
        )
        plot(figures, ROOT / "docs" / "img" / "anytime.png")


if __name__ == "__main__":
    main()
