"""Comparing two runs: the difference of each mean, unpaired and paired.

``delta`` is always ``mean(b) - mean(a)``: positive when run ``b`` scores higher.

- Unpaired: Welch's interval for the difference of two means, from each run's
  count, sum and sum of squares (all results of both runs).
- Paired: over the queries both runs answered, the per-query difference of
  their mean scores; its mean, a Student's t interval, and how many queries
  ``b`` won, lost and tied. Pairing removes the spread between queries (easy
  vs hard), so it detects smaller real differences than the unpaired interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scorer.metrics import METRIC_NAMES
from scorer.rollup import MetricAggregate, t_quantile_975


def welch_interval(a: MetricAggregate, b: MetricAggregate, index: int) -> list[float] | None:
    """95% interval of ``mean(b) - mean(a)`` for one metric; None when a run has fewer
    than two results (no spread to estimate)."""
    if a.count < 2 or b.count < 2:
        return None
    delta = b.sums[index] / b.count - a.sums[index] / a.count
    share_a = a.variance(index) / a.count
    share_b = b.variance(index) / b.count
    standard_error = math.sqrt(share_a + share_b)
    if standard_error == 0.0:
        return [delta, delta]
    df = (share_a + share_b) ** 2 / (share_a**2 / (a.count - 1) + share_b**2 / (b.count - 1))
    half = t_quantile_975(df) * standard_error
    return [delta - half, delta + half]


def unpaired(a: MetricAggregate, b: MetricAggregate) -> dict[str, Any]:
    means_a, means_b = a.means(), b.means()
    return {
        name: {
            "a": means_a[name],
            "b": means_b[name],
            "delta": means_b[name] - means_a[name],
            "ci95": welch_interval(a, b, index),
        }
        for index, name in enumerate(METRIC_NAMES)
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
        differences.add(row)
        for index, difference in enumerate(row):
            wins[index] += difference > 0
            losses[index] += difference < 0
    means, intervals = differences.means(), differences.t_interval95()
    return {
        "queries": len(shared),
        "metrics": {
            name: {
                "delta": means[name] if shared else None,
                "ci95": intervals[name] if len(shared) >= 2 else None,
                "wins": wins[index],
                "losses": losses[index],
                "ties": len(shared) - wins[index] - losses[index],
            }
            for index, name in enumerate(METRIC_NAMES)
        },
    }


def compare_runs(
    a: MetricAggregate,
    b: MetricAggregate,
    per_query_a: Mapping[str, Sequence[float]],
    per_query_b: Mapping[str, Sequence[float]],
) -> dict[str, Any]:
    """The compare endpoint's body (without the run ids)."""
    return {
        "countA": a.count,
        "countB": b.count,
        "metrics": unpaired(a, b),
        "paired": paired(per_query_a, per_query_b),
    }
