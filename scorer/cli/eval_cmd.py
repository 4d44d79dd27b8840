"""``scorer eval QRELS RUN [RUN ...]``: score run files offline, with the numbers of
trec_eval, and compare several runs with paired significance tests.

The click command, built from the options declared in
:mod:`scorer.cli.eval_options`; what it does is :func:`scorer.cli.eval_run.run_eval`.
The ``scorer`` entry point reads a plain command line without click
(:mod:`scorer.cli.entry`); this command answers the rest (help, errors, every
spelling click takes), and serves ``CliRunner`` and ``python -m scorer.cli``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from scorer.cli.eval_options import MAX_PERMUTATIONS, OPTIONS, STDIN, Option, reader


class _Read(click.ParamType):
    """A value read by :func:`scorer.cli.eval_options.reader` (the quick parser reads
    through the same function), its ValueError a usage error."""

    def __init__(self, option: Option, name: str) -> None:
        self.read = reader(option)
        self.name = name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.read(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def _click_type(option: Option) -> Any:
    if option.kind == "cutoffs":
        return _Read(option, "k[,k...]")
    if option.kind == "choice":
        return click.Choice(option.choices)
    if option.kind == "unit":
        return click.FloatRange(0, 1, min_open=True, max_open=True)
    if option.kind == "count":
        return click.IntRange(1, MAX_PERMUTATIONS)
    if option.kind == "int":
        return int
    if option.kind == "file":
        return click.Path(dir_okay=False, writable=True, path_type=str)
    raise ValueError(f"option {option.dest}: no click type for kind {option.kind!r}")


def _click_option(option: Option) -> Any:
    if option.kind == "flag":
        return click.option(*option.flags, option.dest, is_flag=True, help=option.help)
    return click.option(
        *option.flags,
        option.dest,
        type=_click_type(option),
        default=option.default,
        show_default=option.default is not None,
        help=option.help,
    )


def _eval_command(qrels: str, runs: tuple[str, ...], html_path: str | None, **options: Any) -> None:
    """Score each RUN (a TREC run or JSONL results; - reads standard input) against
    QRELS (TREC qrels or a JSONL golden set): recall@k, precision@k, hit@k, MRR and
    nDCG@10 per run and per facet, and their risk-coverage (AURC, E-AURC of misses
    and of nDCG loss, rankings ordered by confidence: a TREC run's top score, a
    JSONL result's confidence or first score).

    Means are over the queries with both qrels and a ranking, as trec_eval's;
    what was skipped is reported. With several runs (several files, or several
    tags in a TREC file) every run is compared with the first, query by query:
    paired t-test and paired randomization test, Holm-corrected.
    """
    if runs.count(STDIN) > 1:
        raise click.UsageError("standard input (-) can be read only once")
    from scorer.cli.eval_run import run_eval

    code = run_eval(qrels=qrels, runs=runs, html_path=html_path, **options)
    if code:
        sys.exit(code)


def _build() -> click.Command:
    command: Any = _eval_command
    for option in reversed(OPTIONS):
        command = _click_option(option)(command)
    command = click.argument("runs", nargs=-1, required=True, metavar="RUN [RUN ...]")(command)
    command = click.argument("qrels", type=click.Path(path_type=str))(command)
    return click.command("eval")(command)


eval_command = _build()
