"""``python -m scorer.cli``: the same as the ``scorer`` command."""

from scorer.cli.entry import main

main()
