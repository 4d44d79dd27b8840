"""The ``scorer`` entry point's quick reading of ``scorer eval`` against click's:
on every command line the quick parser accepts, both give the command the same
parameters; what it refuses, click answers. And the plain command lines users
type are read quickly, without importing click."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.cli.eval_cmd import eval_command
from scorer.cli.eval_options import OPTIONS, quick_parse

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def click_params(args: list[str]) -> dict[str, Any] | None:
    """The parameters click gives the eval command for ``args``, or None for a usage
    error (or a help request)."""
    try:
        context = eval_command.make_context("eval", list(args), resilient_parsing=False)
    except (SystemExit, Exception):  # click.exceptions.Exit, UsageError, BadParameter
        return None
    return dict(context.params)


PLAIN = [
    ["qrels.txt", "run.txt"],
    ["qrels.txt", "run.txt", "other.txt", "--format", "json"],
    ["--format=json", "qrels.txt", "run.txt"],
    ["qrels.txt", "run.txt", "--k", "5,10,100", "-c", "-q"],
    ["qrels.txt", "-", "--complete", "--per-query", "--k=1000"],
    ["qrels.txt", "run.txt", "--alpha", "0.01", "--permutations", "500", "--seed", "7"],
    ["qrels.txt", "run.txt", "--seed=-3", "--alpha=1e-3"],
    ["qrels.txt", "run.txt", "--k", "5", "--k", "20"],
]


@pytest.mark.parametrize("args", PLAIN)
def test_plain_command_lines_are_read_quickly_as_click_reads_them(args: list[str]) -> None:
    quick = quick_parse(args)
    assert quick is not None
    assert quick == click_params(args)


REFUSED = [
    ["qrels.txt"],  # no run
    [],
    ["--help"],
    ["qrels.txt", "run.txt", "-h"],
    ["qrels.txt", "run.txt", "-cq"],  # combined short flags
    ["qrels.txt", "run.txt", "--k", "0"],
    ["qrels.txt", "run.txt", "--k", "10,10"],
    ["qrels.txt", "run.txt", "--k"],
    ["qrels.txt", "run.txt", "--format", "JSON"],
    ["qrels.txt", "run.txt", "--alpha", "1"],
    ["qrels.txt", "run.txt", "--alpha", "nan"],
    ["qrels.txt", "run.txt", "--permutations", "0"],
    ["qrels.txt", "run.txt", "--seed", "1.5"],
    ["qrels.txt", "run.txt", "--complete=yes"],
    ["qrels.txt", "run.txt", "--html", "page.html"],  # left to click's path checks
    ["qrels.txt", "-", "-"],  # standard input twice
    ["qrels.txt", "--", "-run.txt"],
    ["qrels.txt", "run.txt", "--per"],  # no abbreviations
]


@pytest.mark.parametrize("args", REFUSED)
def test_what_the_quick_parser_is_not_sure_of_goes_to_click(args: list[str]) -> None:
    assert quick_parse(args) is None


TOKENS = st.sampled_from(
    [
        "qrels.txt", "run.txt", "b.txt", "-", "--", "", "-x", "--k", "--k=10", "--k=3,5",
        "10", "5,10", "0", "10,10", "1001", "x", "-c", "-q", "-cq", "--complete",
        "--per-query", "--complete=1", "--format", "--format=json", "json", "table", "JSON",
        "--alpha", "--alpha=0.5", "0.05", "1", "nan", "-0.5", "--permutations", "100",
        "10000001", "--seed", "--seed=-1", "-7", "1_000", " 3", "--html", "--help", "-h",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(TOKENS, max_size=9))
def test_whatever_the_quick_parser_accepts_click_reads_the_same(args: list[str]) -> None:
    quick = quick_parse(args)
    if quick is not None:
        assert quick == click_params(args)


def test_every_option_is_declared_once_with_a_kind_both_parsers_read() -> None:
    flags = [flag for option in OPTIONS for flag in option.flags]
    assert len(flags) == len(set(flags))
    declared = {param.name for param in eval_command.params}
    assert declared == {"qrels", "runs", *(option.dest for option in OPTIONS)}


def test_the_entry_point_scores_a_small_run_without_click_or_orjson() -> None:
    """The entry point as the console script runs it (it ends the process itself,
    skipping the interpreter's teardown): what ``-X importtime`` lists is what it
    imported, and it prints what the click command prints."""
    script = (
        "import sys\n"
        "sys.argv = ['scorer', 'eval', sys.argv[1], sys.argv[2], '--format', 'json']\n"
        "from scorer.cli.entry import main\n"
        "main()\n"
        "raise SystemExit(99)  # not reached: main ends the process\n"
    )
    # Without site (-S), as nothing of a plain install's start imports pathlib; the
    # scorer from this checkout.
    completed = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", script, str(EXAMPLES / "qrels.txt"),
         str(EXAMPLES / "run.txt")],
        capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(EXAMPLES.parent)},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in completed.stderr.splitlines()}
    assert "scorer.cli.eval_run" in imported  # the listing is real
    heavy = {"click", "orjson", "pyarrow", "numpy", "pydantic", "rich"}
    heavy |= {"dataclasses", "inspect", "typing", "pathlib"}  # scorer.core.record
    assert heavy & imported == set()
    via_click = subprocess.run(
        [sys.executable, "-m", "scorer.cli", "eval", "--format", "json", "--html", "/dev/null",
         str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert completed.stdout == via_click.stdout
    assert completed.stdout.startswith("{")


def test_the_entry_point_flushes_before_it_ends_the_process(tmp_path: Path) -> None:
    """Output redirected to a file (block-buffered) is written whole, and a bad
    input still exits 2 with its one-line message."""
    out = tmp_path / "out.json"
    with out.open("w") as file:
        done = subprocess.run(
            [sys.executable, "-c", "from scorer.cli.entry import main; main()", "eval",
             str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt"), "--format", "json"],
            stdout=file, stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["k"] == 10
    bad = subprocess.run(
        [sys.executable, "-c", "from scorer.cli.entry import main; main()", "eval",
         str(EXAMPLES / "run.txt"), str(EXAMPLES / "run.txt")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "run.txt" in bad.stderr


def test_a_small_document_is_written_as_orjson_writes_it_and_a_nan_as_null() -> None:
    import orjson

    from scorer.cli.eval_run import dumps_document

    document = {
        "k": 10,
        "runs": {"é-run": {"mean": 0.1 + 0.2, "tiny": 1.5e-7, "big": 12345678901234567890}},
        "none": None,
        "list": [True, False, 0, -0.0],
    }
    small = dumps_document(document, large=False)
    assert orjson.loads(small) == document
    assert small == orjson.dumps(document, option=orjson.OPT_INDENT_2).decode().replace(
        "1.5e-7", "1.5e-07"
    )
    with_nan = dumps_document({"x": float("nan"), "y": [float("inf")]}, large=False)
    assert orjson.loads(with_nan) == {"x": None, "y": [None]}
