"""The ``scorer`` command's entry point.

``scorer eval`` with a plain command line is read by
:func:`scorer.cli.eval_options.quick_parse` and run without importing click
(start-up is most of a small evaluation's time); everything else, and any
command line that parser is not sure of, goes to the click group
(:mod:`scorer.cli.group`).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["eval"]:
        from scorer.cli.eval_options import quick_parse

        params = quick_parse(args[1:])
        if params is not None:
            from scorer.cli.eval_run import run_eval

            exit_now(run_eval(**params))
    from scorer.cli.group import main as group

    group()


def exit_now(code: int) -> None:
    """End the process with ``code`` once the output is flushed, skipping the
    interpreter's teardown: freeing an evaluation's objects one by one and
    clearing every module took ~9 ms of ``scorer eval``'s ~130 on a 1,000-query run
    (measured), and nothing of eval's is left to run at exit (files it writes
    are closed before it returns). A reader that closed the pipe early ends it
    with code 1, as a write to it would."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = code or 1
    os._exit(code)
