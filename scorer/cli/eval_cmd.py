"""``scorer eval QRELS RUN``: score a run file offline, with the numbers of trec_eval.

Exit codes: 0 scored; 2 a bad input (the message on stderr is one line,
``file:line: what is wrong``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
from rich.table import Table

from schemas.events import MAX_K
from scorer.evaluation import Evaluation, evaluate_run_file
from scorer.io import InputError, file_size, read_golden
from scorer.io import Progress as ProgressCallback
from scorer.metrics import METRIC_NAMES
from scorer.settings import Settings

DEFAULT_K: int = Settings.model_fields["default_retrieval_k"].default
"""The streaming scorer's default cutoff, so both paths agree without configuration."""

PROGRESS_MIN_BYTES = 16 << 20
"""Run files smaller than this are scored before a progress bar would be seen."""


@click.command("eval")
@click.argument("qrels", type=click.Path(path_type=Path))
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--k",
    "k",
    type=click.IntRange(1, MAX_K),
    default=DEFAULT_K,
    show_default=True,
    help="Cutoff of recall, precision and hit (a JSONL result's own k wins). nDCG is @10.",
)
@click.option(
    "--complete",
    is_flag=True,
    help="Score judged queries missing from a run as zeros (trec_eval -c).",
)
@click.option("--per-query", is_flag=True, help="Also print the metrics of every ranking.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
)
def eval_command(
    qrels: Path, run: Path, k: int, complete: bool, per_query: bool, output_format: str
) -> None:
    """Score RUN (a TREC run or JSONL results) against QRELS (TREC qrels or a JSONL
    golden set): recall@k, precision@k, hit@k, MRR and nDCG@10 per run and per facet.

    Means are over the queries with both qrels and a ranking, as trec_eval's;
    what was skipped is reported.
    """
    try:
        golden = read_golden(qrels)
        with _progress_bar(run) as progress:
            evaluation = evaluate_run_file(
                golden, run, k=k, complete=complete, per_query=per_query, progress=progress
            )
    except InputError as error:
        click.echo(str(error), err=True)
        sys.exit(2)
    if output_format == "json":
        click.echo(orjson.dumps(evaluation.as_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        _print_tables(evaluation)


@contextmanager
def _progress_bar(path: Path) -> Iterator[ProgressCallback | None]:
    """A progress callback drawing a bar on stderr, or None when it would not be seen
    (stderr is not a terminal, or the file is small)."""
    size = file_size(path)
    console = Console(stderr=True)
    if size < PROGRESS_MIN_BYTES or not console.is_terminal:
        yield None
        return
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(f"scoring {path.name}", total=size)
        yield lambda done: bar.update(task, completed=done)


_HEADINGS = ("recall@k", "P@k", "nDCG@10", "MRR", "hit@k")


def _print_tables(evaluation: Evaluation) -> None:
    console = Console(width=None if sys.stdout.isatty() else 120)
    for run_id, run in sorted(evaluation.runs.items()):
        summary = run.summary()
        table = Table(
            title=f"run {escape(run_id)}  (k={evaluation.k}; mean ± 95% CI half-width)",
            title_justify="left",
        )
        table.add_column("facet")
        table.add_column("value")
        table.add_column("n", justify="right")
        for heading in _HEADINGS:
            table.add_column(heading, justify="right")
        table.add_row("all", "", *_cells(summary), end_section=True)
        for facet, by_value in summary["facets"].items():
            for value, aggregate in by_value.items():
                table.add_row(escape(facet), escape(value), *_cells(aggregate))
        console.print(table)
        console.print(_skipped_line(summary))
        console.print()
    if evaluation.results is not None:
        rows = Table(title="per query", title_justify="left")
        for heading in ("run", "query", "result"):
            rows.add_column(heading)
        for heading in _HEADINGS:
            rows.add_column(heading, justify="right")
        for row in evaluation.results:
            rows.add_row(
                escape(row.run_id),
                escape(row.query_id),
                escape(row.result_id or ""),
                *(f"{value:.4f}" for value in row.values),
            )
        console.print(rows)


def _cells(aggregate: dict[str, Any]) -> list[str]:
    cells = [str(aggregate["count"])]
    for name in METRIC_NAMES:
        mean = aggregate["metrics"][name]
        low, high = aggregate["ci95"][name]
        cells.append(f"{mean:.4f} ±{(high - low) / 2:.4f}")
    return cells


def _skipped_line(summary: dict[str, Any]) -> str:
    skipped = summary["skipped"]
    line = (
        f"skipped: {skipped['resultsWithoutQrels']} rankings without qrels, "
        f"{skipped['judgedQueriesNotInRun']} judged queries not in the run"
    )
    if "zeroFilled" in summary:
        line += f"; scored as zeros (--complete): {summary['zeroFilled']} judged queries"
    return line
