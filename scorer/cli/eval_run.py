"""What ``scorer eval`` does once its command line is read (by click, or by the
entry point's quick parser, :mod:`scorer.cli.eval_options`): read, score,
compare, print. Nothing here imports click.

Exit codes: 0 scored; 2 a bad input (the message on stderr is one line,
``file:line: what is wrong``).

Start-up matters here (issue 14: a tuning loop runs this hundreds of times):
only the reader and the scoring are imported up front; significance when runs
are compared, orjson for JSONL and large JSON documents, rich when a progress
bar is drawn, pyarrow when a file is large enough for the columnar reader,
pydantic for JSONL, numpy for a large comparison's randomization test. scipy never.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

from scorer.analysis.risk_coverage import LOSSES
from scorer.cli.eval_options import STDIN
from scorer.core.measures import MEASURES, METRIC_NAMES
from scorer.io import Golden, InputError, file_size, read_golden
from scorer.io import Progress as ProgressCallback
from scorer.io.detect import gc_paused
from scorer.io.runs import COLUMNAR_MIN_BYTES
from scorer.offline.evaluation import (
    Evaluation,
    as_document,
    combine,
    evaluate_run_file_cutoffs,
)

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any

    from scorer.io.errors import StrPath

PROGRESS_MIN_BYTES = 16 << 20
"""Run files smaller than this are scored before a progress bar would be seen."""

STDIN_NAME = "<stdin>"
"""How a run read from standard input is named in messages."""


def say(text: str, err: bool = False) -> None:
    """``text`` and a newline on standard output (or error), flushed."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def dumps_document(document: dict[str, Any], large: bool) -> str:
    """The JSON document, indented by two: by the standard library for a small one
    (importing orjson costs ~11 ms, more than it saves there), by orjson for a
    ``large`` one or one the standard library would not write as strict JSON (a
    NaN or an infinity, which orjson writes as null)."""
    if not large:
        import json

        try:
            return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
        except ValueError:
            pass
    import orjson

    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


def run_eval(
    qrels: StrPath,
    runs: Sequence[str],
    ks: list[int],
    complete: bool,
    per_query: bool,
    output_format: str,
    alpha: float,
    permutations: int,
    seed: int,
    html_path: StrPath | None,
) -> int:
    """Score each run file against ``qrels`` and print the evaluation; the exit code."""
    try:
        # Reading and scoring make millions of objects and no cycles: the
        # collector's passes over them cost ~10% (measured).
        with gc_paused(), ExitStack() as stack:
            # A run big enough for pyarrow pays its import for the qrels too.
            columnar = any(run != STDIN and file_size(run) >= COLUMNAR_MIN_BYTES for run in runs)
            golden: Golden | Callable[[], Golden]
            if columnar:
                # Read in a thread while the first run's first chunk is parsed
                # (pyarrow parses without the GIL); the runs take it when they
                # need it (see evaluate_run_file_cutoffs).
                from concurrent.futures import ThreadPoolExecutor

                pool = stack.enter_context(
                    ThreadPoolExecutor(1, thread_name_prefix="scorer-qrels-reader")
                )
                golden = pool.submit(read_golden, qrels, columnar=True).result
            else:
                golden = read_golden(qrels)
            sources: list[tuple[str, list[Evaluation]]] = []
            for run in runs:
                name = STDIN_NAME if run == STDIN else run
                with _run_file(run) as path, _progress_bar(path) as progress:
                    evaluations = evaluate_run_file_cutoffs(
                        golden,
                        path,
                        ks=ks,
                        complete=complete,
                        per_query=per_query,
                        progress=progress,
                    )
                sources.append((name, evaluations))
    except InputError as error:
        say(str(error), err=True)
        return 2
    evaluations = combine(sources)
    _warn_about_runs_sharing_no_query(qrels, sources)
    _warn_about_repeated_ids(sources)
    for evaluation in evaluations:
        evaluation.compare_runs(alpha=alpha, permutations=permutations, seed=seed)
    if output_format == "json":
        document = as_document(evaluations)
        say(dumps_document(document, large=per_query))
    else:
        _print_tables(evaluations)
    if html_path is not None:
        return _write_page(html_path, as_document(evaluations))
    return 0


def _write_page(path: StrPath, document: dict[str, Any]) -> int:
    """The evals page with ``document`` embedded (scorer/page)."""
    from scorer.page import page_html

    try:
        with open(path, "w", encoding="utf-8") as page:
            page.write(page_html(document))
    except OSError as failure:
        say(f"cannot write the HTML report {path}: {failure.strerror}", err=True)
        return 2
    say(f"wrote {path}", err=True)
    return 0


@contextmanager
def _run_file(run: str) -> Iterator[str]:
    """The path of ``run``; standard input is first spooled to a temporary file
    (the readers detect a format from the first line, then read the file again),
    and its messages name it ``<stdin>``."""
    if run != STDIN:
        yield run
        return
    import shutil
    import tempfile

    with ExitStack() as stack:
        spool = stack.enter_context(tempfile.NamedTemporaryFile(prefix="scorer-stdin-"))
        shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        spool.flush()
        try:
            yield spool.name
        except InputError as error:
            raise InputError(STDIN_NAME, error.reason, error.line) from None


def _warn_about_repeated_ids(sources: Sequence[tuple[str, Sequence[Evaluation]]]) -> None:
    """One line on stderr per run with rankings that repeat an id where it is scored:
    trec_eval refuses such a run, the scorer scores it by convention 7."""
    for name, evaluations in sources:
        for run_id, run in evaluations[0].runs.items():
            if run.repeating:
                say(
                    f"warning: run {run_id} ({name}): {run.repeating} rankings repeat an id "
                    f"in their top max(k, 10); each repeat keeps its rank and earns nothing "
                    "(docs/metrics.md, convention 7); trec_eval refuses such a run",
                    err=True,
                )


def _warn_about_runs_sharing_no_query(
    qrels: StrPath, sources: Sequence[tuple[str, Sequence[Evaluation]]]
) -> None:
    """One line on stderr per run that shares no query id with the qrels: its
    means are over nothing (or only zeros with -c), which is almost always two
    files that do not belong together."""
    for name, evaluations in sources:
        for run_id, run in evaluations[0].runs.items():
            if run.judged_queries:
                continue
            say(
                f"warning: run {run_id} ({name}) shares no query id with {qrels}: "
                f"none of its {run.results_without_qrels} rankings was scored; "
                "check that the qrels and the run belong together (same topics, same ids)",
                err=True,
            )


@contextmanager
def _progress_bar(path: StrPath) -> Iterator[ProgressCallback | None]:
    """A progress callback drawing a bar on stderr, or None when it would not be seen
    (stderr is not a terminal, or the file is small)."""
    if file_size(path) < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    console = Console(stderr=True)
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(f"scoring {os.path.basename(path)}", total=file_size(path))
        yield lambda done: bar.update(task, completed=done)


_HEADINGS = tuple(m.heading for m in MEASURES)
_T_MARK = "*"
_RANDOMIZATION_MARK = "†"


class TextTable:
    """A plain aligned text table: a title, a header, rows, and rules between sections.

    Written here rather than drawn with rich: importing rich costs more start-up
    time (~30-60 ms) than a tuning loop should pay for a few lines of text.
    """

    def __init__(self, title: str, headings: Sequence[str], right: Sequence[bool]) -> None:
        self.title = title
        self.headings = list(headings)
        self.right = list(right)
        self.rows: list[list[str] | None] = []  # None: a rule

    def add_row(self, *cells: str, end_section: bool = False) -> None:
        self.rows.append(list(cells))
        if end_section:
            self.rows.append(None)

    def render(self) -> str:
        widths = [len(heading) for heading in self.headings]
        for row in self.rows:
            for index, cell in enumerate(row or ()):
                widths[index] = max(widths[index], len(cell))
        rule = "  ".join("-" * width for width in widths)

        def line(cells: Sequence[str]) -> str:
            return "  ".join(
                cell.rjust(width) if right else cell.ljust(width)
                for cell, width, right in zip(cells, widths, self.right, strict=True)
            ).rstrip()

        lines = [self.title, line(self.headings), rule]
        lines += [rule if row is None else line(row) for row in self.rows]
        if lines[-1] == rule:
            lines.pop()
        return "\n".join(lines)


def _print_tables(evaluations: Sequence[Evaluation]) -> None:
    blocks: list[str] = []
    for evaluation in evaluations:
        blocks += _run_tables(evaluation)
        if evaluation.comparisons is not None:
            blocks.append(_comparison_table(evaluation))
    for evaluation in evaluations:
        if evaluation.results is not None:
            blocks.append(_per_query_table(evaluation))
    say("\n\n".join(blocks))


def _run_tables(evaluation: Evaluation) -> list[str]:
    blocks = []
    for run_id, run in evaluation.runs.items():
        summary = run.summary()
        table = TextTable(
            f"run {run_id}  (k={evaluation.k}; mean [95% interval])",
            ["facet", "value", "n", *_HEADINGS],
            [False, False, True, *[True] * len(_HEADINGS)],
        )
        table.add_row("all", "", *_cells(summary), end_section=True)
        for facet, by_value in summary["facets"].items():
            for value, aggregate in by_value.items():
                table.add_row(facet, value, *_cells(aggregate))
        blocks.append(table.render() + "\n" + _skipped_line(summary) + "\n" + _risk_line(summary))
    return blocks


def _comparison_table(evaluation: Evaluation) -> str:
    comparisons = evaluation.comparisons
    assert comparisons is not None
    table = TextTable(
        f"runs against {comparisons['baseline']}  (k={evaluation.k}; "
        "mean over paired queries, difference)",
        ["run", "queries", *_HEADINGS],
        [False, True, *[True] * len(_HEADINGS)],
    )
    for comparison in comparisons["runs"]:
        cells = [comparison["runB"], str(comparison["queries"])]
        for name in METRIC_NAMES:
            entry = comparison["metrics"][name]
            if entry["b"] is None:
                cells.append("-")
                continue
            marks = (_T_MARK if entry["tTest"]["significant"] else " ") + (
                _RANDOMIZATION_MARK if entry["randomization"]["significant"] else " "
            )
            cells.append(f"{entry['b']:.4f} ({entry['delta']:+.4f}){marks}")
        table.add_row(*cells)
    legend = (
        f"{_T_MARK} paired t-test, {_RANDOMIZATION_MARK} paired randomization test "
        f"({comparisons['permutations']:,} permutations, seed {comparisons['seed']}): "
        f"Holm-corrected p < {comparisons['alpha']:g} over the {len(comparisons['runs'])} "
        "comparison(s) with the baseline"
    )
    aurc_lines = [_aurc_difference_line(comparison) for comparison in comparisons["runs"]]
    return "\n".join([table.render(), legend, *aurc_lines])


def _per_query_table(evaluation: Evaluation) -> str:
    assert evaluation.results is not None
    table = TextTable(
        f"per query (k={evaluation.k})",
        ["run", "query", "result", *_HEADINGS],
        [False, False, False, *[True] * len(_HEADINGS)],
    )
    for row in evaluation.results:
        table.add_row(
            row.run_id,
            row.query_id,
            row.result_id or "",
            *(f"{value:.4f}" for value in row.values),
        )
    return table.render()


def _cells(aggregate: dict[str, Any]) -> list[str]:
    cells = [str(aggregate["count"])]
    for name in METRIC_NAMES:
        mean = aggregate["metrics"][name]
        low, high = aggregate["ci95"][name]
        # The interval itself, not a half-width: Wilson's is not symmetric about the mean.
        cells.append(f"{mean:.4f} [{low:.3f}, {high:.3f}]")
    return cells


def _risk_line(summary: dict[str, Any]) -> str:
    """One line of the run's risk–coverage: AURC and E-AURC of both losses, and counts."""
    block = summary["riskCoverage"]
    if not block["withConfidence"]:
        return f"risk-coverage: no ranking has a confidence ({block['withoutConfidence']} without)"
    losses = ", ".join(
        f"{name} {block[name]['aurc']:.4f} (E-AURC {block[name]['eAurc']:.4f})" for name in LOSSES
    )
    return (
        f"risk-coverage: AURC {losses}; {block['withConfidence']} rankings with a confidence, "
        f"{block['withoutConfidence']} without"
    )


def _aurc_difference_line(comparison: dict[str, Any]) -> str:
    """A candidate's AURC minus the baseline's, per loss (a difference, not a test)."""
    differences = ", ".join(
        f"{name} {entry['b']:.4f} ({entry['delta']:+.4f})"
        if entry["delta"] is not None
        else f"{name} -"
        for name, entry in comparison["riskCoverage"].items()
    )
    return (
        f"AURC of {comparison['runB']} (difference with {comparison['runA']}; each run over its "
        f"own rankings, lower is better, not tested): {differences}"
    )


def _skipped_line(summary: dict[str, Any]) -> str:
    skipped = summary["skipped"]
    line = (
        f"skipped: {skipped['resultsWithoutQrels']} rankings without qrels, "
        f"{skipped['judgedQueriesNotInRun']} judged queries not in the run"
    )
    if "zeroFilled" in summary:
        line += f"; scored as zeros (--complete): {summary['zeroFilled']} judged queries"
    return line
