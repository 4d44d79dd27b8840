"""Anytime-valid confidence sequences (scorer.analysis.anytime): coverage at every step of a
large seeded simulation, agreement between the bounds and the tests, widths."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.analysis import anytime


def simulated(streams: int, steps: int, seed: int, mean: float) -> np.ndarray:
    """Paired differences in [-1, 1] shaped like metric differences: many exact ties
    (0), the rest spread around ``mean`` (clipped)."""
    rng = np.random.default_rng(seed)
    spread = np.clip(rng.normal(mean, 0.35, (streams, steps)), -1, 1)
    tied = rng.random((streams, steps)) < 0.3
    values = np.where(tied, 0.0, spread)
    # Centred exactly: the truth is the population mean, whatever clipping did.
    return values - values.mean() + mean


def test_the_sequence_holds_the_true_mean_at_every_step_in_95_percent_of_streams() -> None:
    streams, steps = 2000, 3000
    differences = simulated(streams, steps, seed=20261202, mean=0.0)
    differences = np.clip(differences, -1, 1)
    truth = differences.mean()
    count = np.broadcast_to(np.arange(1, steps + 1, dtype=float), differences.shape)
    totals = np.cumsum(differences, axis=1)
    squares = np.cumsum(differences**2, axis=1)
    excluded = anytime.rejects(count, totals, squares, truth)
    ever = excluded.any(axis=1).mean()
    assert ever <= 0.05, f"the truth left the sequence in {ever:.1%} of streams"
    # A fixed-horizon 95% interval read at every step is the contrast: it excludes the
    # truth at some step in far more streams.
    means = totals / count
    spread = np.sqrt(np.maximum(squares / count - means**2, 0) * count / np.maximum(count - 1, 1))
    t_excluded = (np.abs(means - truth) > 1.96 * spread / np.sqrt(count))[:, 9:]
    assert t_excluded.any(axis=1).mean() > 4 * ever + 0.2


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=300),
    st.floats(-1, 1, allow_nan=False),
)
def test_a_mean_is_outside_the_bounds_exactly_when_the_test_rejects_it(
    values: list[float], mean: float
) -> None:
    data = np.array(values)
    lower, upper = anytime.mean_interval(len(data), data.sum(), (data**2).sum())
    assert -1 <= lower <= upper <= 1
    assert lower <= data.mean() <= upper
    rejected = bool(anytime.rejects(len(data), data.sum(), (data**2).sum(), mean))
    margin = 1e-9
    if mean < lower - margin or mean > upper + margin:
        assert rejected
    elif lower + margin < mean < upper - margin:
        assert not rejected


def test_the_order_of_the_observations_does_not_matter_and_none_gives_nothing() -> None:
    rng = np.random.default_rng(7)
    data = rng.uniform(-1, 1, 500) * 0.3
    shuffled = rng.permutation(data)
    assert anytime.mean_interval(500, data.sum(), (data**2).sum()) == pytest.approx(
        anytime.mean_interval(500, shuffled.sum(), (shuffled**2).sum()), abs=1e-12
    )
    assert anytime.mean_interval(0, 0.0, 0.0) is None
    assert anytime.difference_interval((0, 0, 0), (5, 2.5, 1.5)) is None


@pytest.mark.parametrize("n, at_most", [(1000, 2.05), (10000, 1.85)])
def test_the_price_of_peeking_is_under_2x_a_fixed_horizon_interval(n: int, at_most: float) -> None:
    rng = np.random.default_rng(11)
    ratios = []
    for _ in range(5):
        d = np.clip(rng.normal(0, 0.25, n), -1, 1)
        lower, upper = anytime.mean_interval(n, d.sum(), (d**2).sum())
        ratios.append((upper - lower) / (2 * 1.96 * d.std(ddof=1) / math.sqrt(n)))
    assert 1.0 < float(np.median(ratios)) <= at_most


def test_metrics_in_0_1_map_to_the_same_sequence_and_a_difference_is_the_two_apart() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1, 400)
    b = np.clip(a + 0.2, 0, 1)
    sums = lambda x: (len(x), x.sum(), (x**2).sum())  # noqa: E731
    low, high = anytime.unit_interval(*sums(a))
    y = 2 * a - 1
    y_low, y_high = anytime.mean_interval(len(y), y.sum(), (y**2).sum())
    assert (low, high) == pytest.approx(((y_low + 1) / 2, (y_high + 1) / 2))
    half_a = anytime.unit_interval(*sums(a), alpha=0.025)
    half_b = anytime.unit_interval(*sums(b), alpha=0.025)
    assert anytime.difference_interval(sums(a), sums(b)) == pytest.approx(
        [half_b[0] - half_a[1], half_b[1] - half_a[0]]
    )
    assert anytime.difference_interval(sums(a), sums(b))[0] > 0


def test_the_trajectory_narrows_and_ends_at_the_interval_of_all() -> None:
    rng = np.random.default_rng(5)
    d = np.clip(rng.normal(0.05, 0.3, 2000), -1, 1)
    path = anytime.trajectory(d, points=30)
    sizes = [n for n, _, _ in path]
    assert sizes[0] == 1 and sizes[-1] == 2000 and sizes == sorted(set(sizes))
    widths = [hi - lo for _, lo, hi in path]
    assert widths[-1] < widths[len(widths) // 2] < widths[0]
    assert path[-1][1:] == pytest.approx(anytime.mean_interval(2000, d.sum(), (d**2).sum()))
