"""scorer.core.stats, written to keep scipy out of start-up, against scipy itself."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from scorer.core.stats import holm, normal_quantile, student_t_sf, t_quantile, wilson_interval

DEGREES = [0.3, 0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 7.3, 10, 19.9, 20, 29, 30, 99, 1000, 9999, 1e5, 1e6]
PROBABILITIES = [1e-9, 1e-6, 0.001, 0.025, 0.3, 0.51, 0.75, 0.9, 0.95, 0.975, 0.99, 0.999]


@pytest.mark.parametrize("p", [*PROBABILITIES, 0.02425, 0.97575, 1 - 1e-12])
def test_normal_quantile_equals_scipy(p: float) -> None:
    assert normal_quantile(p) == pytest.approx(stats.norm.ppf(p), rel=1e-15, abs=1e-15)


@pytest.mark.parametrize("df", DEGREES)
def test_t_quantile_equals_scipy(df: float) -> None:
    # Past 10,000 degrees of freedom the continued fraction of the tail keeps ~13
    # digits (see the next test), so the quantile far out keeps ~11.
    tolerance = 1e-12 if df <= 10_000 else 1e-10
    for p in PROBABILITIES:
        assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=tolerance)


@pytest.mark.parametrize("df", DEGREES)
def test_t_tail_equals_scipy_to_1e_12(df: float) -> None:
    for t in [0.0, 0.1, 0.5, 1.0, 1.96, 2.0, 3.0, 5.0, 10.0, 30.0, -0.3, -2.0, 100.0]:
        assert student_t_sf(t, df) == pytest.approx(stats.t.sf(t, df), abs=1e-12, rel=1e-10)


@settings(max_examples=300)
@given(t=st.floats(-50, 50), df=st.floats(0.5, 5000))
def test_t_tail_equals_scipy_anywhere(t: float, df: float) -> None:
    assert student_t_sf(t, df) == pytest.approx(stats.t.sf(t, df), abs=1e-13, rel=1e-9)


def test_student_t_with_one_degree_is_cauchy() -> None:
    # Closed form P(T > t) = 1/2 - atan(t)/pi, where scipy itself is off for tiny t.
    for t in [1e-8, 0.01, 1.0, 7.0]:
        assert student_t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-15)


@settings(max_examples=300)
@given(mean=st.floats(0.0, 1.0), n=st.floats(0.5, 1e7))
def test_wilson_interval_stays_in_0_1_around_the_mean(mean: float, n: float) -> None:
    low, high = wilson_interval(mean, n)
    assert 0.0 <= low <= mean + 1e-12
    assert mean - 1e-12 <= high <= 1.0


def holm_reference(p_values: list[float]) -> list[float]:
    """Holm's procedure as rejections: the smallest adjusted level that rejects each."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    for rank, index in enumerate(order):
        adjusted[index] = min(1.0, max((m - r) * p_values[order[r]] for r in range(rank + 1)))
    return adjusted


def test_holm_worked_example() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_holm_equals_the_step_down_definition(p_values: list[float]) -> None:
    assert holm(p_values) == pytest.approx(holm_reference(p_values), abs=1e-15)
