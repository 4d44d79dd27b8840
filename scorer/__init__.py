"""Streaming scorer for retrieval quality.

Packages by role, each importing only those listed before it: ``schemas``
(the wire contract, top-level), ``scorer.settings`` (the one configuration
model), ``scorer.core`` (measure registry, metric kernel, mean fold),
``scorer.analysis`` (comparisons, anytime-valid bounds, risk–coverage),
``scorer.io`` (offline readers), ``scorer.offline`` (run files against qrels),
``scorer.kafka`` (local broker, admin, sample traffic), ``scorer.page`` (the
evals page, offline and live), ``scorer.stream`` (the Faust worker) and
``scorer.cli`` (entry points).

For notebooks, :func:`evaluate` and :func:`compare_runs` (:mod:`scorer.offline.notebook`),
imported lazily so that ``import scorer`` stays cheap.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "compare_runs", "evaluate"]


def evaluate(qrels: Any, run: Any, k: int | list[int] = 10, **options: Any) -> dict[str, Any]:
    """Score a run against qrels (dicts as pytrec_eval/ranx hold them, or pandas
    DataFrames with TREC columns): what ``scorer eval --format json`` prints.
    See :func:`scorer.offline.notebook.evaluate`."""
    from scorer.offline.notebook import evaluate as evaluate_run

    return evaluate_run(qrels, run, k, **options)


def compare_runs(qrels: Any, runs: Any, k: int | list[int] = 10, **options: Any) -> dict[str, Any]:
    """Score several runs (run id -> run, the first the baseline) and compare each
    with the first: paired t and randomization tests, Holm-corrected.
    See :func:`scorer.offline.notebook.compare`."""
    from scorer.offline.notebook import compare

    return compare(qrels, runs, k, **options)
