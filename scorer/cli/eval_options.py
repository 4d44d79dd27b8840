"""The options of ``scorer eval``, declared once.

Two parsers are built from :data:`OPTIONS`: the click command
(:mod:`scorer.cli.eval_cmd`, with its help, its errors and every spelling
click takes), and :func:`quick_parse`, which the ``scorer`` entry point tries
first so that a plain ``scorer eval QRELS RUN [options]`` starts without
importing click (about 14 ms of the ~60 ms it takes end to end on a small run;
a tuning loop runs it hundreds of times).

:func:`quick_parse` reads only the plain spellings (``--k 10``, ``--k=10``,
``-c``, ``--format json``, options before, between or after the positional
arguments) and answers None for anything else: a help request, an unknown or
combined option, a value it does not accept, ``--``, ``--html``, standard input
given twice. Then click parses the whole command line and gives its usual
answer, so an error is worded the same whichever parser met it. A unit test
checks the two agree on every command line :func:`quick_parse` accepts.

Imports nothing beyond the standard library's already loaded modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scorer.analysis.defaults import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_SEED
from scorer.core.record import Record

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_K = 10
"""The streaming scorer's default cutoff (``Settings.default_retrieval_k``; a unit
test keeps them equal), written here so that start-up does not import settings."""

MAX_K = 1000
"""``schemas.events.MAX_K`` (a unit test keeps them equal), written here so that
start-up does not import pydantic."""

MAX_PERMUTATIONS = 10_000_000

FORMATS = ("table", "json")

STDIN = "-"
"""A run read from standard input."""


def parse_cutoffs(text: str) -> list[int]:
    """``10`` or ``10,100,1000``: distinct cutoffs in 1..MAX_K, in the order given;
    ValueError saying what is wrong otherwise."""
    cutoffs: list[int] = []
    for part in text.split(","):
        try:
            k = int(part)
        except ValueError:
            raise ValueError(f"{part!r} is not an integer (give e.g. 10 or 10,100,1000)") from None
        if not 1 <= k <= MAX_K:
            raise ValueError(f"{k} is not in 1..{MAX_K}")
        if k in cutoffs:
            raise ValueError(f"{k} is given twice")
        cutoffs.append(k)
    return cutoffs


class Option(Record):
    """One option of ``scorer eval``.

    ``kind`` is how its value is read: ``flag`` (no value), ``cutoffs``
    (:func:`parse_cutoffs`), ``choice`` (one of ``choices``), ``unit`` (a float
    strictly between 0 and 1), ``count`` (an int in 1..MAX_PERMUTATIONS), ``int``,
    ``file`` (a path to write). ``quick``: :func:`quick_parse` reads it (else its
    presence hands the command line to click).
    """

    __slots__ = ("dest", "flags", "kind", "default", "help", "choices", "quick")  # noqa: RUF023

    def __init__(
        self,
        dest: str,
        flags: tuple[str, ...],
        kind: str,
        default: Any,
        help: str | None = None,
        choices: tuple[str, ...] = (),
        quick: bool = True,
    ) -> None:
        self.dest = dest
        self.flags = flags
        self.kind = kind
        self.default = default
        self.help = help
        self.choices = choices
        self.quick = quick


OPTIONS: tuple[Option, ...] = (
    Option(
        "ks",
        ("--k",),
        "cutoffs",
        str(DEFAULT_K),
        "Cutoff(s) of recall, precision and hit, e.g. 10,100,1000 (a JSONL result's own "
        "k wins). nDCG is @10, MRR uncut.",
    ),
    Option(
        "complete",
        ("-c", "--complete"),
        "flag",
        False,
        "Score judged queries missing from a run as zeros (trec_eval -c).",
    ),
    Option(
        "per_query",
        ("-q", "--per-query"),
        "flag",
        False,
        "Also print the metrics of every ranking (trec_eval -q).",
    ),
    Option("output_format", ("--format",), "choice", "table", None, FORMATS),
    Option(
        "alpha",
        ("--alpha",),
        "unit",
        DEFAULT_ALPHA,
        "Significance level of the comparisons with the first run (Holm-corrected p < alpha).",
    ),
    Option(
        "permutations",
        ("--permutations",),
        "count",
        DEFAULT_PERMUTATIONS,
        "Permutations of the paired randomization test.",
    ),
    Option(
        "seed", ("--seed",), "int", DEFAULT_SEED, "Seed of the randomization test's sign flips."
    ),
    Option(
        "html_path",
        ("--html",),
        "file",
        None,
        "Also write the evals page showing this evaluation (the --format json document) "
        "to this file: one self-contained HTML file, readable offline.",
        quick=False,
    ),
)


def _unit(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise ValueError(f"{value} is not strictly between 0 and 1")
    return value


def _count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_PERMUTATIONS:
        raise ValueError(f"{value} is not in 1..{MAX_PERMUTATIONS}")
    return value


def _choice(option: Option) -> Callable[[str], str]:
    def read(text: str) -> str:
        if text not in option.choices:
            raise ValueError(f"{text!r} is not one of {', '.join(option.choices)}")
        return text

    return read


def reader(option: Option) -> Callable[[str], Any]:
    """How a value of ``option`` is read: ValueError for a value it refuses (the
    click command reads through the same functions)."""
    if option.kind == "choice":
        return _choice(option)
    readers: dict[str, Callable[[str], Any]] = {
        "cutoffs": parse_cutoffs,
        "unit": _unit,
        "count": _count,
        "int": int,
        "file": str,
    }
    return readers[option.kind]


_BY_FLAG = {flag: option for option in OPTIONS for flag in option.flags}


def quick_parse(args: Sequence[str]) -> dict[str, Any] | None:
    """The parameters of ``scorer eval`` (``args`` after the word ``eval``), as the
    click command would give them to its function, or None when this parser is
    not sure: then click reads the command line."""
    values: dict[str, Any] = {}
    positional: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == STDIN or not arg.startswith("-"):
            positional.append(arg)
            continue
        flag, equals, inline = arg.partition("=")
        option = _BY_FLAG.get(flag)
        if option is None or not option.quick:
            return None
        if option.kind == "flag":
            if equals:
                return None
            values[option.dest] = True
            continue
        if equals:
            text = inline
        elif index < len(args) and not args[index].startswith("-"):
            text = args[index]
            index += 1
        else:
            return None
        try:
            values[option.dest] = reader(option)(text)
        except ValueError:
            return None
    if len(positional) < 2 or positional[1:].count(STDIN) > 1:
        return None
    params: dict[str, Any] = {"qrels": positional[0], "runs": tuple(positional[1:])}
    for option in OPTIONS:
        if option.dest not in values:
            default = option.default
            values[option.dest] = reader(option)(default) if option.kind == "cutoffs" else default
        params[option.dest] = values[option.dest]
    return params
