"""The ``scorer`` command: the entry point (:mod:`scorer.cli.entry`), the click group
(:mod:`scorer.cli.group`, also ``scorer.cli.main``) and a module per subcommand.

``main`` is looked up lazily, so that importing a subcommand's module, or the
entry point, does not import click.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any


def __getattr__(name: str) -> Any:
    if name == "main":
        from scorer.cli.group import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
