"""Offline evaluation: a run file against qrels, as ``scorer eval`` and the
notebook functions see it (``evaluation``, ``notebook``).

Reads through :mod:`scorer.io`, scores through :mod:`scorer.core`, compares
through :mod:`scorer.analysis`; the stream never imports it.
"""
