"""Offline evaluation benchmark: scorer vs the C trec_eval, pytrec_eval and ranx.

    python bench/offline.py --write-docs          # every size below, 3 repetitions
    python bench/offline.py --sizes 20000x100 --repeats 5
    python bench/offline.py --all-peers           # also ranx and ir-measures end to end

For each size (queries x docs per query; default 1,000x100, 20,000x100,
100,000x100 and 7,000x1,000, the MS MARCO dev shape) it generates (once,
deterministic seed) a TREC run and TREC qrels (~10 judgments per query, grades
0..3) under bench/data/, then times, side by side, round robin:

(a) in memory: each tool given its already-built inputs computes the means of
    all five of our metrics (recall@10, P@10, nDCG@10 with exponential gain,
    MRR, hit@10) or the equivalent measures;
(b) end to end: a process per tool from the same two files, start-up included:
    ``scorer eval QRELS RUN --format json``; the C trec_eval 10.0, one call for
    all five on the qrels remapped to gains 2^g - 1 (written once outside the
    timing: trec_eval's nDCG is linear in the grade, and since 2^g - 1 >= 1
    exactly when g >= 1 its binary measures are unchanged); a Python process
    that parses both files with pytrec_eval's parsers and evaluates; peak RSS of
    each.

and a start-up row: the same three on a small run (50 queries x 20 docs), and
``python -c pass`` of the same interpreter, the floor of any Python tool.

The C trec_eval is built (``-O3``; its Makefile's default has no optimisation)
from its source into ~/.cache/scorer-bench/trec_eval
(cloned from GitHub, or archived from the git directory in
``$TREC_EVAL_SRC``, default /work/trec_eval_src); when it cannot be built it
is skipped with a message. Medians over the repetitions; the values are
checked to agree within 1e-12 (trec_eval prints 4 decimals: within 5e-5).
A benchmark, not a test: it prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scorer.core.measures import GROUPS, RETRIEVAL  # noqa: E402
from scorer.core.metrics import Judgments, score  # noqa: E402
from scorer.io import read_golden  # noqa: E402
from scorer.offline.evaluation import evaluate_run_file  # noqa: E402

METRIC_NAMES = tuple(m.wire for m in GROUPS[RETRIEVAL])
"""The seed's five: the measures every peer computes (judged@k and candidate nDCG are ours)."""
from scorer.core.rollup import RunRollup  # noqa: E402

DATA = ROOT / "bench" / "data"
DOCS_FILE = ROOT / "docs" / "benchmarks.md"
SECTION = "## Offline evaluation"
K = 10
SEED = 20240611
TOLERANCE = 1e-12
GAINS = {1: 1, 2: 3, 3: 7}
"""Grade -> exponential gain 2^g - 1, for peers whose nDCG gain is linear."""

Means = dict[str, float]


# -- data ------------------------------------------------------------------------------------


def generate(queries: int, docs: int) -> tuple[Path, Path]:
    """Write (once) a run of ``queries`` x ``docs`` lines and qrels of ~10 judgments a query."""
    DATA.mkdir(parents=True, exist_ok=True)
    run_path = DATA / f"run-{queries}x{docs}.txt"
    qrels_path = DATA / f"qrels-{queries}x{docs}.txt"
    if run_path.exists() and qrels_path.exists():
        return qrels_path, run_path
    rng = random.Random(SEED)
    with run_path.open("w") as run, qrels_path.open("w") as qrels:
        for number in range(queries):
            qid = f"q{number:06d}"
            ranked = [f"d{doc}" for doc in rng.sample(range(10_000_000), docs)]
            run.writelines(
                f"{qid} Q0 {doc} {rank} {docs - rank + rng.random() * 0.9:.6f} bench\n"
                for rank, doc in enumerate(ranked, 1)
            )
            # Judged: 6 of the retrieved (mostly near the top), 4 never retrieved.
            judged = rng.sample(ranked[: min(docs, 30)], min(docs, 6))
            judged += [f"u{rng.randrange(10_000_000)}" for _ in range(4)]
            no_relevant = rng.random() < 0.05
            qrels.writelines(
                f"{qid} 0 {doc} {0 if no_relevant else rng.choice((0, 0, 1, 1, 2, 3))}\n"
                for doc in dict.fromkeys(judged)
            )
    return qrels_path, run_path


# -- the tools --------------------------------------------------------------------------------


def ours_in_memory(
    golden: dict[str, dict[str, int]], rankings: list[tuple[str, list[str]]]
) -> Means:
    rollup = RunRollup()
    for query_id, ranked in rankings:
        rollup.add(score(ranked, Judgments.from_qrels(golden[query_id]), K))
    return rollup.overall.means()


def ours_end_to_end(qrels_path: Path, run_path: Path) -> Means:
    evaluation = evaluate_run_file(read_golden(qrels_path), run_path, k=K)
    (run,) = evaluation.runs.values()
    return run.rollup.overall.means()


def ours_line_reader_end_to_end(qrels_path: Path, run_path: Path) -> Means:
    """:func:`ours_end_to_end` with every chunk read line by line, as before the fast path."""
    from scorer.io import columnar

    fast = columnar.run_blocks, columnar.qrels_runs
    columnar.run_blocks = columnar.qrels_runs = lambda raw: None
    try:
        return ours_end_to_end(qrels_path, run_path)
    finally:
        columnar.run_blocks, columnar.qrels_runs = fast


def pytrec_in_memory(qrels: dict, run: dict) -> Means:
    import pytrec_eval

    binary = pytrec_eval.RelevanceEvaluator(
        qrels, {f"recall_{K}", f"P_{K}", "recip_rank", f"success_{K}"}
    ).evaluate(run)
    remapped = {q: {d: GAINS.get(g, g) for d, g in j.items()} for q, j in qrels.items()}
    graded = pytrec_eval.RelevanceEvaluator(remapped, {"ndcg_cut_10"}).evaluate(run)
    n = len(binary)
    return {
        "recallAtK": sum(r[f"recall_{K}"] for r in binary.values()) / n,
        "precisionAtK": sum(r[f"P_{K}"] for r in binary.values()) / n,
        "ndcgAt10": sum(r["ndcg_cut_10"] for r in graded.values()) / n,
        "mrr": sum(r["recip_rank"] for r in binary.values()) / n,
        "hitAtK": sum(r[f"success_{K}"] for r in binary.values()) / n,
    }


def pytrec_end_to_end(qrels_path: Path, run_path: Path) -> Means:
    import pytrec_eval

    with qrels_path.open() as lines:
        qrels = pytrec_eval.parse_qrel(lines)
    with run_path.open() as lines:
        run = pytrec_eval.parse_run(lines)
    return pytrec_in_memory(qrels, run)


RANX_METRICS = [f"recall@{K}", f"precision@{K}", "ndcg_burges@10", "mrr", f"hit_rate@{K}"]


def ranx_in_memory(qrels: object, run: object) -> Means:
    from ranx import evaluate

    means = evaluate(qrels, run, RANX_METRICS, make_comparable=False)
    return {
        name: float(means[metric]) for name, metric in zip(METRIC_NAMES, RANX_METRICS, strict=True)
    }


def ranx_end_to_end(qrels_path: Path, run_path: Path) -> Means:
    from ranx import Qrels, Run

    return ranx_in_memory(Qrels.from_file(str(qrels_path)), Run.from_file(str(run_path)))


def irm_measures() -> list:
    from ir_measures import RR, P, R, Success, nDCG

    return [R @ K, P @ K, nDCG(gains={0: 0, **GAINS}) @ 10, RR, Success @ K]


def irm_in_memory(qrels: dict, run: dict) -> Means:
    import ir_measures

    measures = irm_measures()
    means = ir_measures.calc_aggregate(measures, qrels, run)
    return {name: means[m] for name, m in zip(METRIC_NAMES, measures, strict=True)}


def irm_end_to_end(qrels_path: Path, run_path: Path) -> Means:
    import ir_measures

    qrels = list(ir_measures.read_trec_qrels(str(qrels_path)))
    run = list(ir_measures.read_trec_run(str(run_path)))
    measures = irm_measures()
    means = ir_measures.calc_aggregate(measures, qrels, run)
    return {name: means[m] for name, m in zip(METRIC_NAMES, measures, strict=True)}


# -- processes (end to end) -------------------------------------------------------------------

CACHE = Path.home() / ".cache" / "scorer-bench"
TREC_EVAL_REPO = "https://github.com/usnistgov/trec_eval"
TREC_EVAL_MEASURES = {
    f"recall_{K}": "recallAtK",
    f"P_{K}": "precisionAtK",
    "ndcg_cut_10": "ndcgAt10",
    "recip_rank": "mrr",
    f"success_{K}": "hitAtK",
}
TREC_EVAL_TOLERANCE = 5e-5
"""trec_eval prints 4 decimals."""
STARTUP_SIZE = (50, 20)
GNU_TIME = "/usr/bin/time"
SCORER = str(Path(sys.executable).with_name("scorer"))
"""The ``scorer`` timed: this interpreter's (``--scorer`` names another, e.g. a plain
install's)."""
FLOOR_PYTHON = sys.executable
"""The interpreter of the ``python -c pass`` floor: the timed scorer's own."""
PYTREC_SCRIPT = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "bench")!r})
from offline import pytrec_end_to_end
from pathlib import Path
print(json.dumps(pytrec_end_to_end(Path(sys.argv[1]), Path(sys.argv[2]))))
"""


def build_trec_eval() -> Path | None:
    """The C trec_eval binary, built once into the cache; None (and why, on stderr)
    when it cannot be."""
    home = CACHE / "trec_eval"
    binary = home / "trec_eval"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(home, ignore_errors=True)
    clone = subprocess.run(
        ["git", "clone", "--quiet", "--depth", "1", TREC_EVAL_REPO, str(home)],
        capture_output=True,
        text=True,
        check=False,
    )
    if clone.returncode != 0:
        source = Path(os.environ.get("TREC_EVAL_SRC", "/work/trec_eval_src"))
        if not source.exists():
            print(
                f"trec_eval skipped: cannot clone {TREC_EVAL_REPO} "
                f"({clone.stderr.strip()}) and no source at {source} (set TREC_EVAL_SRC)",
                file=sys.stderr,
            )
            return None
        home.mkdir(parents=True)
        archive = subprocess.run(
            f"git --git-dir={source} archive HEAD | tar -x -C {home}",
            shell=True,
            capture_output=True,
            text=True,
            check=False,
        )
        if archive.returncode != 0:
            print(f"trec_eval skipped: {archive.stderr.strip()}", file=sys.stderr)
            return None
    # Its Makefile builds without optimisation; -O3 gives the peer its best speed.
    flags = 'CFLAGS=-O3 -I$(H) -Wall -DVERSIONID=\\"$(VERSIONID)\\"'
    made = subprocess.run(
        ["make", "-C", str(home), flags], capture_output=True, text=True, check=False
    )
    if made.returncode != 0 or not binary.exists():
        print(f"trec_eval skipped: make failed: {made.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return binary


def remapped_qrels(qrels_path: Path) -> Path:
    """``qrels_path`` with grades replaced by their exponential gains (trec_eval's
    ndcg_cut is linear in the grade), written once next to it."""
    path = qrels_path.with_name(qrels_path.stem + "-gains.txt")
    if not path.exists():
        with qrels_path.open() as lines, path.open("w") as out:
            for line in lines:
                qid, it, doc, grade = line.split()
                out.write(f"{qid} {it} {doc} {GAINS.get(int(grade), int(grade))}\n")
    return path


def run_process(commands: list[list[str]]) -> tuple[list[str], int]:
    """Run ``commands`` one after the other: their stdouts and the largest peak RSS (KiB).

    The peak is measured by GNU time (``%M``): a child forked from this process
    would report this process's own (large) RSS as its peak.
    """
    outputs, peak = [], 0
    for command in commands:
        with tempfile.TemporaryDirectory() as scratch:
            rss = Path(scratch) / "rss"
            done = subprocess.run(
                [GNU_TIME, "-f", "%M", "-o", str(rss), *command], capture_output=True, check=False
            )
            if done.returncode:
                raise SystemExit(f"{command[0]} failed: {done.stderr.decode()[-500:]}")
            outputs.append(done.stdout.decode())
            peak = max(peak, int(rss.read_text().split()[-1]))
    return outputs, peak


PYTHON_FLOOR = "python -c pass"
"""The start-up row's floor: the interpreter alone, no means to compare."""


def python_pass() -> tuple[Means, int]:
    """The start-up rows' floor: ``python -c pass`` of the timed scorer's interpreter
    (no means; its peak RSS)."""
    _, peak = run_process([[FLOOR_PYTHON, "-c", "pass"]])
    return {}, peak


def process_tools(
    qrels_path: Path, run_path: Path, trec_eval: Path | None, floor: bool = False
) -> dict[str, Callable[[], tuple[Means, int]]]:
    """The end-to-end tools, each a call giving (means, peak RSS in KiB); ``floor``:
    ``python -c pass`` too."""

    def scorer() -> tuple[Means, int]:
        (out,), peak = run_process(
            [[SCORER, "eval", str(qrels_path), str(run_path), "--format", "json"]]
        )
        (run,) = json.loads(out)["runs"].values()
        return run["metrics"], peak

    def pytrec() -> tuple[Means, int]:
        command = [sys.executable, "-c", PYTREC_SCRIPT, str(qrels_path), str(run_path)]
        (out,), peak = run_process([command])
        return json.loads(out), peak

    tools: dict[str, Callable[[], tuple[Means, int]]] = {"scorer": scorer}
    if trec_eval is not None:
        gains = remapped_qrels(qrels_path)

        def c_trec_eval() -> tuple[Means, int]:
            command = [str(trec_eval), "-m", f"recall.{K}", "-m", f"P.{K}", "-m", "recip_rank"]
            command += ["-m", f"success.{K}", "-m", "ndcg_cut.10", str(gains), str(run_path)]
            outputs, peak = run_process([command])
            means: Means = {}
            for line in "".join(outputs).splitlines():
                measure, query, value = line.split()
                if query == "all" and measure in TREC_EVAL_MEASURES:
                    means[TREC_EVAL_MEASURES[measure]] = float(value)
            return means, peak

        tools["trec_eval (C)"] = c_trec_eval
    tools["pytrec_eval"] = pytrec
    if floor:
        tools[PYTHON_FLOOR] = python_pass
    return tools


# -- timing -----------------------------------------------------------------------------------


def timed_round_robin(
    repeats: int, tools: dict[str, Callable[[], object]]
) -> dict[str, tuple[float, object]]:
    """Median wall time of each tool over ``repeats`` rounds, and its last result.

    Each round runs every tool once, so load from other jobs on a shared machine
    falls on all of them alike rather than on whichever ran during a burst.
    """
    times: dict[str, list[float]] = {tool: [] for tool in tools}
    results: dict[str, object] = {}
    for _ in range(repeats):
        for tool, call in tools.items():
            gc.collect()
            start = time.perf_counter()
            results[tool] = call()
            times[tool].append(time.perf_counter() - start)
    return {tool: (statistics.median(times[tool]), results[tool]) for tool in tools}


def check_agreement(label: str, ours: Means, peer: Means, tolerance: float = TOLERANCE) -> float:
    worst = max(abs(ours[name] - peer[name]) for name in METRIC_NAMES)
    if worst > tolerance:
        raise SystemExit(f"{label}: means differ from ours by {worst:.3g}: {peer} vs {ours}")
    return worst


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; pytrec_eval-terrier "
        f"{version('pytrec-eval-terrier')}, ranx {version('ranx')}, "
        f"ir-measures {version('ir-measures')}"
    )


Row = tuple[str, str, str, float, float, int | None]
"""(size, mode, tool, median seconds, max abs diff, peak RSS KiB or None)."""


def parse_size(text: str) -> tuple[int, int]:
    queries, docs = text.lower().split("x")
    return int(queries), int(docs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="1000x100,20000x100,100000x100,7000x1000",
        help="queries x docs per query, comma separated",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all-peers", action="store_true", help="ranx, ir-measures end to end too")
    parser.add_argument("--write-docs", action="store_true", help=f"rewrite '{SECTION}'")
    parser.add_argument(
        "--scorer",
        type=Path,
        help="time this scorer executable (e.g. a plain `pip install .` in a venv of its "
        "own) against its own interpreter's `python -c pass`, instead of this checkout's",
    )
    args = parser.parse_args()
    global SCORER, FLOOR_PYTHON
    if args.scorer is not None:
        SCORER = str(args.scorer)
        FLOOR_PYTHON = str(args.scorer.with_name("python"))
    warnings.simplefilter("ignore")  # numba's type-safety chatter from ranx

    if not Path(GNU_TIME).exists():
        raise SystemExit(f"{GNU_TIME} (GNU time) is needed to measure peak RSS")
    trec_eval = build_trec_eval()
    rows: list[Row] = []
    sizes = [parse_size(size) for size in args.sizes.split(",")]
    if args.scorer is None:
        compile_bytecode()
    rows += measure_examples(repeats=11)
    startup_qrels, startup_run = generate(*STARTUP_SIZE)
    label = f"start-up ({STARTUP_SIZE[0]}x{STARTUP_SIZE[1]})"
    rows += measure_processes(label, startup_qrels, startup_run, trec_eval, args, repeats=7)
    for queries, docs in sizes:
        qrels_path, run_path = generate(queries, docs)
        print(f"data: {qrels_path.name}, {run_path.name}", file=sys.stderr)
        size = f"{queries:,}x{docs:,}"
        rows += measure_in_memory(size, qrels_path, run_path, args)
        rows += measure_processes(size, qrels_path, run_path, trec_eval, args, args.repeats)
    report = render(args, rows, trec_eval is not None)
    print(report)
    if args.write_docs:
        write_section(report)


def compile_bytecode() -> None:
    """Compile the scorer's modules to bytecode, as ``pip install`` does: the
    ``scorer`` timed is then the one users run. (This machine sets
    PYTHONDONTWRITEBYTECODE, so a development checkout would otherwise compile
    every module at every start: about 25 ms of a small run's 60.)"""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "scorer"), str(ROOT / "schemas")],
        check=True,
        stdout=subprocess.DEVNULL,
    )


EXAMPLES = ROOT / "examples"


def measure_examples(repeats: int) -> list[Row]:
    """The start-up row of the examples (two runs of a dozen queries, compared with
    the paired tests): ``scorer eval`` as a user first types it, and ``python -c pass``.
    No peer: trec_eval scores one run per call and compares none."""
    size = "start-up (examples)"
    command = [SCORER, "eval", str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt")]

    def scorer() -> tuple[Means, int]:
        (out,), peak = run_process([command])
        if "runs against bm25-v1" not in out:
            raise SystemExit(f"scorer eval on the examples printed no comparison:\n{out}")
        return {}, peak

    timings = timed_round_robin(repeats, {"scorer": scorer, PYTHON_FLOOR: python_pass})
    rows: list[Row] = []
    for tool, (seconds, (_, peak)) in timings.items():
        rows.append((size, "(b) end to end", tool, seconds, 0.0, peak))
        print(f"{size:12} (b) {tool:16} {seconds:8.3f} s  {peak or 0:>9,} KiB", file=sys.stderr)
    return rows


def measure_in_memory(
    size: str, qrels_path: Path, run_path: Path, args: argparse.Namespace
) -> list[Row]:
    import pytrec_eval
    from ranx import Qrels, Run

    with qrels_path.open() as lines:
        trec_qrels = pytrec_eval.parse_qrel(lines)
    with run_path.open() as lines:
        trec_run = pytrec_eval.parse_run(lines)
    rankings = [(query, list(scores)) for query, scores in trec_run.items()]  # written best first
    ranx_qrels, ranx_run = Qrels.from_dict(trec_qrels), Run.from_dict(trec_run)
    ranx_in_memory(ranx_qrels, ranx_run)  # compile numba kernels before timing
    tools: dict[str, Callable[[], object]] = {
        "scorer": lambda: ours_in_memory(trec_qrels, rankings),
        "pytrec_eval": lambda: pytrec_in_memory(trec_qrels, trec_run),
        "ranx": lambda: ranx_in_memory(ranx_qrels, ranx_run),
    }
    if args.all_peers:
        tools["ir-measures"] = lambda: irm_in_memory(trec_qrels, trec_run)
    timings = timed_round_robin(args.repeats, tools)
    ours = timings["scorer"][1]
    rows: list[Row] = []
    for tool, (seconds, means) in timings.items():
        worst = check_agreement(f"{size} in memory {tool}", ours, means)
        rows.append((size, "(a) in memory", tool, seconds, worst, None))
        print(f"{size:12} (a) {tool:16} {seconds:8.3f} s", file=sys.stderr)
    return rows


def measure_processes(
    size: str,
    qrels_path: Path,
    run_path: Path,
    trec_eval: Path | None,
    args: argparse.Namespace,
    repeats: int,
) -> list[Row]:
    startup = size.startswith("start-up")
    tools: dict[str, Callable[[], object]] = dict(
        process_tools(qrels_path, run_path, trec_eval, floor=startup)
    )
    if args.all_peers and not startup:

        def with_no_rss(call: Callable[[], Means]) -> Callable[[], tuple[Means, None]]:
            return lambda: (call(), None)

        tools["ranx (in process)"] = with_no_rss(lambda: ranx_end_to_end(qrels_path, run_path))
        tools["ir-measures (in process)"] = with_no_rss(
            lambda: irm_end_to_end(qrels_path, run_path)
        )
    timings = timed_round_robin(repeats, tools)
    ours, _ = timings["scorer"][1]
    rows: list[Row] = []
    for tool, (seconds, (means, peak)) in timings.items():
        tolerance = TREC_EVAL_TOLERANCE if tool == "trec_eval (C)" else TOLERANCE
        if tool == PYTHON_FLOOR:
            worst = 0.0
        else:
            worst = check_agreement(f"{size} end to end {tool}", ours, means, tolerance)
        rows.append((size, "(b) end to end", tool, seconds, worst, peak))
        print(f"{size:12} (b) {tool:16} {seconds:8.3f} s  {peak or 0:>9,} KiB", file=sys.stderr)
    return rows


def render(args: argparse.Namespace, rows: list[Row], with_trec_eval: bool) -> str:
    command = f"python bench/offline.py --sizes {args.sizes} --repeats {args.repeats}"
    if args.scorer is not None:
        command += f" --scorer {args.scorer}"
    if args.all_peers:
        command += " --all-peers"
    lines = [
        SECTION,
        "",
        f"`{command}`: TREC runs of queries x docs per query and ~10 judgments per query "
        "(grades 0..3, deterministic seed), generated into `bench/data/`. All five metrics "
        "(recall@10, P@10, nDCG@10 exponential gain, MRR, hit@10) or the peers' equivalent "
        "measures; median wall time of the repetitions, round robin; means checked equal to "
        "ours within 1e-12 (trec_eval: 5e-5, it prints 4 decimals; column max |diff|).",
        "",
        "- (a) in memory: each tool is given its already-built inputs (dicts for pytrec_eval, "
        "`Qrels`/`Run` for ranx, qrels and ranked lists for scorer, which also prepares its "
        "`Judgments` inside the timing).",
        "- (b) end to end: one process per tool from the same two files, start-up included: "
        "`scorer eval QRELS RUN --format json`; the C trec_eval 10.0 built with -O3, one "
        "call for all five on the qrels remapped to gains 2^g-1 (written once outside the "
        "timing; 2^g-1 >= 1 exactly when g >= 1, so recall, P, success and recip_rank are "
        "unchanged); `python -c` parsing both files with pytrec_eval's parsers and "
        "evaluating. Peak RSS of the process.",
        "- start-up: `scorer eval examples/qrels.txt examples/run.txt` (the table of two "
        "runs and their comparison, as a new user first runs it); the same processes as (b) "
        "on a run of 50 queries x 20 docs; and `python -c pass` of the same interpreter. The "
        "scorer's modules are compiled to bytecode first, as `pip install` does.",
        "",
        f"Machine: {machine()}. Two cores shared with other jobs while it ran: absolute times "
        "are noisy, ratios less so.",
        "",
        "| size | mode | tool | median s | peer ÷ scorer | peak RSS MiB | max abs diff |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    if not with_trec_eval:
        lines.insert(-4, "The C trec_eval could not be built here: its rows are missing.\n")
    ours = {(size, mode): seconds for size, mode, tool, seconds, _, _ in rows if tool == "scorer"}
    for size, mode, tool, seconds, worst, peak in rows:
        ratio = seconds / ours[(size, mode)]
        rss = f"{peak / 1024:,.0f}" if peak else ""
        lines.append(
            f"| {size} | {mode} | {tool} | {seconds:.3f} | {ratio:.2f}x | {rss} | {worst:.1e} |"
        )
    lines.append("")
    lines.append("Targets:")
    lines.append("")
    seconds_of = {(size, mode, tool): seconds for size, mode, tool, seconds, _, _ in rows}

    def within_twice(seconds: float, reference: float) -> tuple[str, str]:
        """The ratio of ``seconds`` to ``reference``, and whether it is at most 2x."""
        ratio = seconds / reference
        return f"{ratio:.2f}x", "met" if ratio <= 2.0 else "NOT met"

    for (size, mode), seconds in ours.items():
        if size.startswith("start-up"):
            floor = seconds_of.get((size, mode, PYTHON_FLOOR))
            if floor:
                ratio, verdict = within_twice(seconds, floor)
                lines.append(
                    f"- {size}: scorer answers in {seconds:.3f} s, {ratio} `python -c "
                    f"pass` ({floor:.3f} s); target <= 2x: {verdict}."
                )
            continue
        trec = seconds_of.get((size, mode, "trec_eval (C)"))
        if size.startswith("1,000x") and mode == "(b) end to end" and trec:
            ratio, verdict = within_twice(seconds, trec)
            lines.append(
                f"- {size} {mode}: scorer takes {ratio} one trec_eval call "
                f"({seconds:.3f} s against {trec:.3f} s); target <= 2x: {verdict}."
            )
            continue
        peers = [
            (tool, peer_seconds)
            for s, m, tool, peer_seconds, _, _ in rows
            if (s, m) == (size, mode)
            and tool in ("trec_eval (C)", "pytrec_eval", "ranx")
            and (mode == "(a) in memory" or tool != "ranx")
        ]
        fastest_tool, fastest = min(peers, key=lambda pair: pair[1])
        # In memory: #14's target (that issue ended blocked); end to end: #32's.
        target, issue = (5.0, "#14's ") if mode == "(a) in memory" else (3.0, "")
        speedup = fastest / seconds
        verdict = "met" if speedup >= target else "NOT met"
        lines.append(
            f"- {size} {mode}: scorer is {speedup:.2f}x the fastest peer ({fastest_tool}); "
            f"{issue}target >= {target:g}x: {verdict}."
        )
    lines += ["", NOTES]
    return "\n".join(lines) + "\n"


NOTES = (
    "Where scorer's time goes end to end: a run file of 16 MiB or more is mapped and parsed "
    "in chunks (8, 16, 32, then 64 MiB) by pyarrow's CSV reader (C++, one core, without the "
    "GIL: the next chunk in a background thread while this one is scored, and the qrels read "
    "in another while the first is parsed) and each query's lines are checked "
    "to be in trec_eval's order with vectorised comparisons (a vectorised sort when they are "
    "not); a smaller file is read line by line in Python, which starts faster than importing "
    "pyarrow. What is left in Python is one `str.split` per query to make its docid strings, "
    "the scoring itself (`Judgments.from_qrels` + `score`, as in (a)) and the qrels dicts. "
    "The C trec_eval and pytrec_eval (the same C code) parse and score in C, one core; "
    "the C trec_eval's time grows faster than the number of queries (compare its rows), so "
    "from 20,000 queries on pytrec_eval is as fast or faster.\n\n"
    "Start-up: `scorer eval` with a plain command line is read without click (the entry "
    "point's quick parser, built from the same declared options as the click command, which "
    "answers anything else) and imports neither orjson (a small JSON document is written by "
    "the standard library), significance (one run compares nothing), dataclasses, inspect, "
    "typing nor pathlib: the classes on its path are plain slotted classes "
    "(`scorer.core.record`) and it takes paths as strings. It ends the process once its "
    "output is flushed, without the interpreter's teardown (~9 ms at 1,000x100). The "
    "examples' comparison (11 queries, 10,000 permutations) tallies each of the 2,048 sign "
    "patterns once instead of summing 10,000 permutations (~40 ms less). These rows run "
    "the development install, whose `python -c pass` also loads the editable-install finder "
    "(pathlib, re, enum: ~10 ms). From a plain install the command is a console script, "
    "and which installer wrote it matters (medians of 21 rounds, side by side, "
    "2026-12-04): pip's script (distlib's template) imports `re` before the scorer's first "
    "line, which brings enum, functools and collections with it: `python -c 'import re'` "
    "takes 12.7 ms against `python -c pass` at 8.4 ms, 1.5x the floor before any of the "
    "scorer runs, and `scorer eval` on the examples 20.3 ms (2.4x). uv's script does not "
    "import `re`: 16.2 against 7.5 ms (2.2x). What the scorer adds, ~8 ms, is its modules "
    "and the standard library they need (contextlib, enum, functools, collections: ~2.5 ms "
    "under uv's script, none under pip's, which has them already) and the work (~3 ms). "
    "Taking those four off the path would bring uv's case to about 1.9x and leave pip's "
    "where it is.\n\n"
    "1,000x100 against one trec_eval call: reading the 100,000 run lines in Python takes "
    "~50 ms (decode ~8 ms; split and grouped by `map`/`groupby` ~13 + ~10 ms; 100,000 "
    "`float()` ~10-15 ms), as much as trec_eval's whole call (~50 ms); with the interpreter "
    "(~21 ms), imports (~5 ms), the qrels (~5 ms) and scoring (~13 ms) it is close to 2x, "
    "and which side of it depends on the host: 2.09x on an AMD EPYC host (2026-12-04), "
    "1.84x on an Intel Xeon one (2026-12-05, this table), where trec_eval's call took 72 "
    "against 54 ms and the scorer 133 against 114 ms. Tried and not kept: one `str.split` "
    "of the whole text (22 ms for the split alone), a transposing `zip`, and the qrels "
    "read by `groupby` (slower at 10 lines per query).\n\n"
    "20,000x100: the main thread and the reading thread each spend ~0.5 s of CPU (scoring; "
    "pyarrow's parse and the grouping of 77 MB), plus ~0.17 s of imports, so the scorer "
    "needs both cores where trec_eval needs one: a busy host most likely slows it "
    "more than trec_eval. The same code measured 2.80x (1.020 against 2.860 s) on a busier "
    "hour of 2026-12-06 and 3.47x (0.737 against 2.558 s) later that day; read the margin "
    "over 3x as the host's. More of it needs less CPU per line, not more overlap.\n\n"
    "This run file is grouped by query, as run files usually are. One that is not is read "
    "right but slower: a query's lines within a chunk are grouped by a vectorised hash, "
    "but lines of a query in two chunks make the streaming pass start again with the run "
    "held in memory, merged and ordered in Python. Measured once, not by this script: the "
    "20,000-query run (77 MB) with its lines shuffled took about 6 s end to end, against "
    "1 s grouped and 96 s with the line reader."
)
"""What the numbers mean; kept with the table when the section is regenerated."""


def write_section(report: str) -> None:
    """Replace (or append) this benchmark's section of docs/benchmarks.md, leaving others."""
    text = DOCS_FILE.read_text() if DOCS_FILE.exists() else "# Benchmarks\n"
    start = text.find(SECTION + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + report
    else:
        end = text.find("\n## ", start + len(SECTION))
        tail = text[end + 1 :] if end >= 0 else ""
        text = text[:start] + report + ("\n" + tail if tail else "")
    DOCS_FILE.write_text(text)


if __name__ == "__main__":
    main()
