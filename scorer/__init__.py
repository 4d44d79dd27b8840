"""Streaming scorer for retrieval quality.

Layers, each knowing only those below it: ``schemas`` (wire contract),
``scorer.metrics`` (pure metric functions), ``scorer.rollup`` (aggregation),
``scorer.io`` (offline readers), ``scorer.kafka`` (local broker, admin),
``scorer.stream`` (the Faust worker), ``scorer.cli`` (entry points).

For notebooks, :func:`evaluate` and :func:`compare_runs` (:mod:`scorer.notebook`),
imported lazily so that ``import scorer`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "compare_runs", "evaluate"]


def evaluate(qrels: Any, run: Any, k: int | list[int] = 10, **options: Any) -> dict[str, Any]:
    """Score a run against qrels (dicts as pytrec_eval/ranx hold them, or pandas
    DataFrames with TREC columns): what ``scorer eval --format json`` prints.
    See :func:`scorer.notebook.evaluate`."""
    from scorer.notebook import evaluate as evaluate_run

    return evaluate_run(qrels, run, k, **options)


def compare_runs(qrels: Any, runs: Any, k: int | list[int] = 10, **options: Any) -> dict[str, Any]:
    """Score several runs (run id -> run, the first the baseline) and compare each
    with the first: paired t and randomization tests, Holm-corrected.
    See :func:`scorer.notebook.compare`. (Not ``scorer.compare``: that name is the
    run API's module, which would shadow a function as soon as it is imported.)"""
    from scorer.notebook import compare

    return compare(qrels, runs, k, **options)
