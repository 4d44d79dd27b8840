"""Comparing two runs: the difference of each mean, unpaired and paired.

``delta`` is always ``mean(b) - mean(a)``: positive when run ``b`` scores higher.

- Unpaired: Welch's interval for the difference of two means, from each run's
  count, sum and sum of squares (all results of both runs).
- Paired: over the queries both runs answered, the per-query difference of
  their mean scores; its mean, a Student's t interval, and how many queries
  ``b`` won, lost and tied. Pairing removes the spread between queries (easy
  vs hard), so it detects smaller real differences than the unpaired interval.

``ci95`` intervals are fixed-horizon: valid for one look at a sample size fixed in
advance. Beside each, ``anytime95`` is an anytime-valid confidence sequence
(:mod:`scorer.analysis.anytime`), valid however often it is read while the runs grow:

- unpaired, over every result of either run (live A/B traffic: each request
  goes to one run): each run's mean in a sequence at alpha/2, the difference of
  the two;
- paired, over the queries both runs answered: one observation per query, the
  difference of the two runs' *first* answers, entering when the second of them
  arrives. A query answered again later does not rewrite its observation: a
  sequence is a statement about observations as they arrived, and a value
  changed after it entered would make its past verdicts mean nothing. (The
  fixed-horizon paired columns average every answer, as before.)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from scorer.core.measures import METRIC_NAMES
from scorer.core.rollup import MetricAggregate, t_quantile_975

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any

    import numpy as np

ALPHA = 0.05
"""The default error rate of the anytime-valid intervals (``scorer.analysis.anytime.ALPHA``)."""


def _anytime() -> Any:
    """:mod:`scorer.analysis.anytime`, imported when first needed: it brings numpy, which the
    offline path of small files does without (``scorer eval`` starts in milliseconds)."""
    from scorer.analysis import anytime

    return anytime


def welch_interval(a: MetricAggregate, b: MetricAggregate, index: int) -> list[float] | None:
    """95% interval of ``mean(b) - mean(a)`` for one metric; None when a run has fewer
    than two results (no spread to estimate)."""
    count_a, count_b = a.count_of(index), b.count_of(index)
    if count_a < 2 or count_b < 2:
        return None
    delta = b.sums[index] / count_b - a.sums[index] / count_a
    share_a = a.variance(index) / count_a
    share_b = b.variance(index) / count_b
    standard_error = math.sqrt(share_a + share_b)
    if standard_error == 0.0:
        return [delta, delta]
    df = (share_a + share_b) ** 2 / (share_a**2 / (count_a - 1) + share_b**2 / (count_b - 1))
    half = t_quantile_975(df) * standard_error
    return [delta - half, delta + half]


def anytime_difference(
    a: MetricAggregate, b: MetricAggregate, index: int, alpha: float = ALPHA
) -> list[float] | None:
    """Anytime-valid interval of ``mean(b) - mean(a)`` for one metric over every result
    of each run (None until both have one)."""
    return _anytime().difference_interval(
        (a.count_of(index), a.sums[index], a.sumsqs[index]),
        (b.count_of(index), b.sums[index], b.sumsqs[index]),
        alpha,
    )


def unpaired(a: MetricAggregate, b: MetricAggregate, alpha: float = ALPHA) -> dict[str, Any]:
    means_a, means_b = a.means(), b.means()
    return {
        name: {
            "a": means_a[name],
            "b": means_b[name],
            "delta": means_b[name] - means_a[name],
            "ci95": welch_interval(a, b, index),
            "anytime95": anytime_difference(a, b, index, alpha),
        }
        for index, name in enumerate(METRIC_NAMES)
    }


def first_differences(
    first_a: Mapping[str, Sequence[float]], first_b: Mapping[str, Sequence[float]]
) -> np.ndarray:
    """The paired observations of the anytime sequence: per query both runs answered,
    the difference of their first answers (``[enteredAt, values...]`` each), one row
    per query in the order the pairs completed (the later of the two entries; ties
    by query id)."""
    import numpy as np

    shared = first_a.keys() & first_b.keys()
    order = sorted(shared, key=lambda q: (max(first_a[q][0], first_b[q][0]), q))
    if not order:
        return np.zeros((0, len(METRIC_NAMES)))
    return np.array([first_b[q][1:] for q in order]) - np.array([first_a[q][1:] for q in order])


def paired_anytime(
    first_a: Mapping[str, Sequence[float]],
    first_b: Mapping[str, Sequence[float]],
    alpha: float = ALPHA,
    points: int = 40,
) -> dict[str, Any]:
    """The anytime-valid paired sequence of each metric now (``anytime95``) and as it
    narrowed while the pairs completed (``trajectory``: ``[pairs, lower, upper]``)."""
    import numpy as np

    anytime = _anytime()
    differences = first_differences(first_a, first_b)
    # A query whose entry predates a measure has NaN for it: left out of that one.
    columns = [differences[:, i] for i in range(len(METRIC_NAMES))]
    columns = [c if np.isfinite(c).all() else c[np.isfinite(c)] for c in columns]
    return {
        "anytime95": {
            name: anytime.mean_interval(len(column), column.sum(), np.square(column).sum(), alpha)
            for name, column in zip(METRIC_NAMES, columns, strict=True)
        },
        "trajectory": {
            name: anytime.trajectory(column, points, alpha)
            for name, column in zip(METRIC_NAMES, columns, strict=True)
        },
    }


def paired(
    per_query_a: Mapping[str, Sequence[float]], per_query_b: Mapping[str, Sequence[float]]
) -> dict[str, Any]:
    """Paired comparison over the queries both runs have (per-query mean scores)."""
    shared = sorted(per_query_a.keys() & per_query_b.keys())
    differences = MetricAggregate()
    wins = [0] * len(METRIC_NAMES)
    losses = [0] * len(METRIC_NAMES)
    for query in shared:
        row = [b - a for a, b in zip(per_query_a[query], per_query_b[query], strict=True)]
        if all(map(math.isfinite, row)):
            differences.add(row)
        else:  # an entry from before a measure existed: NaN for it (run_state)
            differences.add_partial(list(itertools.takewhile(math.isfinite, row)))
        for index, difference in enumerate(row):
            wins[index] += difference > 0
            losses[index] += difference < 0
    means, intervals = differences.means(), differences.t_interval95()
    counts = [differences.count_of(index) for index in range(len(METRIC_NAMES))]
    return {
        "queries": len(shared),
        "metrics": {
            name: {
                "delta": means[name] if counts[index] else None,
                "ci95": intervals[name] if counts[index] >= 2 else None,
                "wins": wins[index],
                "losses": losses[index],
                "ties": counts[index] - wins[index] - losses[index],
            }
            for index, name in enumerate(METRIC_NAMES)
        },
    }


def facet_comparisons(
    facets_a: Mapping[str, Mapping[str, MetricAggregate]],
    facets_b: Mapping[str, Mapping[str, MetricAggregate]],
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """Unpaired comparisons per facet value both runs have, each metric's
    ``anytime95`` at ``alpha`` split evenly over the family (every facet value x
    metric compared: Bonferroni), so that the chance of any false "significant"
    among them, however often read, stays at most ``alpha``."""
    cells = [
        (facet, value)
        for facet in sorted(facets_a.keys() & facets_b.keys())
        for value in sorted(facets_a[facet].keys() & facets_b[facet].keys())
    ]
    family = len(cells) * len(METRIC_NAMES)
    each = alpha / family if family else alpha
    compared: dict[str, Any] = {}
    for facet, value in cells:
        a, b = facets_a[facet][value], facets_b[facet][value]
        compared.setdefault(facet, {})[value] = {
            "countA": a.count,
            "countB": b.count,
            "metrics": unpaired(a, b, each),
        }
    return {"family": family, "alphaEach": each, "values": compared}


def compare_runs(
    a: MetricAggregate,
    b: MetricAggregate,
    per_query_a: Mapping[str, Sequence[float]],
    per_query_b: Mapping[str, Sequence[float]],
    first_a: Mapping[str, Sequence[float]] | None = None,
    first_b: Mapping[str, Sequence[float]] | None = None,
    facets_a: Mapping[str, Mapping[str, MetricAggregate]] | None = None,
    facets_b: Mapping[str, Mapping[str, MetricAggregate]] | None = None,
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """The compare endpoint's body (without the run ids). ``first_*``: each query's
    first answer ``[enteredAt, values...]`` (the paired sequence's observations; the
    per-query means stand in, entered at 0, when not given); ``facets_*``: each
    run's aggregates per facet value (for the per-facet comparisons)."""
    if first_a is None:
        first_a = {q: [0.0, *values] for q, values in per_query_a.items()}
    if first_b is None:
        first_b = {q: [0.0, *values] for q, values in per_query_b.items()}
    compared = paired(per_query_a, per_query_b)
    sequence = paired_anytime(first_a, first_b, alpha)
    for name in METRIC_NAMES:
        compared["metrics"][name]["anytime95"] = sequence["anytime95"][name]
    compared["trajectory"] = sequence["trajectory"]
    return {
        "countA": a.count,
        "countB": b.count,
        "alpha": alpha,
        "metrics": unpaired(a, b, alpha),
        "paired": compared,
        "facets": facet_comparisons(facets_a or {}, facets_b or {}, alpha),
    }
