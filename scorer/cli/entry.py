"""The ``scorer`` command's entry point.

``scorer eval`` with a plain command line is read by
:func:`scorer.cli.eval_options.quick_parse` and run without importing click
(start-up is most of a small evaluation's time); everything else, and any
command line that parser is not sure of, goes to the click group
(:mod:`scorer.cli.group`).
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["eval"]:
        from scorer.cli.eval_options import quick_parse

        params = quick_parse(args[1:])
        if params is not None:
            from scorer.cli.eval_run import run_eval

            sys.exit(run_eval(**params))
    from scorer.cli.group import main as group

    group()
