"""``python -m scorer.cli``: the same as the ``scorer`` command."""

from scorer.cli import main

main()
