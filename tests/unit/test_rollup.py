"""Rollups: means, 95% intervals inside [0, 1] (Wilson, effective sample size), the
Student t interval of differences against scipy, merges and state round trips."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from scorer.core.metrics import METRIC_NAMES
from scorer.core.rollup import MetricAggregate, RunRollup, bounded_interval

unit = st.floats(0.0, 1.0, allow_nan=False)
rows = st.lists(
    st.tuples(unit, unit, unit, unit, st.integers(0, 1), unit, unit), min_size=0, max_size=40
)
facet_values = st.sampled_from(["head", "torso", "tail"])


def aggregate_of(values: list[tuple[float, ...]]) -> MetricAggregate:
    """The aggregate of ``values``; a row shorter than the measures is padded with 0."""
    aggregate = MetricAggregate()
    for row in values:
        aggregate.add([*row, *[0.0] * (len(METRIC_NAMES) - len(row))])
    return aggregate


@settings(max_examples=200)
@given(values=rows)
def test_means_are_arithmetic_means(values: list[tuple[float, ...]]) -> None:
    means = aggregate_of(values).means()
    for index, name in enumerate(METRIC_NAMES):
        column = [row[index] for row in values]
        expected = statistics.fmean(column) if column else 0.0
        assert means[name] == pytest.approx(expected, abs=1e-12)


def wilson(successes: float, n: float) -> tuple[float, float]:
    """Wilson's score interval in its textbook form, z from scipy."""
    z = stats.norm.ppf(0.975)
    p = successes / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


@settings(max_examples=300)
@given(values=rows)
def test_ci95_never_leaves_0_1_and_holds_the_mean(values: list[tuple[float, ...]]) -> None:
    aggregate = aggregate_of(values)
    means, intervals = aggregate.means(), aggregate.ci95()
    for name in METRIC_NAMES:
        low, high = intervals[name]
        assert 0.0 <= low <= high <= 1.0
        assert low - 1e-12 <= means[name] <= high + 1e-12


@settings(max_examples=200)
@given(hits=st.lists(st.integers(0, 1), min_size=2, max_size=200))
def test_hit_interval_is_wilsons(hits: list[int]) -> None:
    aggregate = aggregate_of([(0.0, 0.0, 0.0, 0.0, hit) for hit in hits])
    expected = wilson(sum(hits), len(hits))
    assert aggregate.ci95()["hitAtK"] == pytest.approx(list(expected), abs=1e-12)


@settings(max_examples=200)
@given(values=st.lists(unit, min_size=2, max_size=60))
def test_graded_interval_is_wilsons_at_the_effective_sample_size(values: list[float]) -> None:
    mean = statistics.fmean(values)
    variance = statistics.pvariance(values)
    # Where the spread is all rounding the effective size is ill-conditioned: skip.
    if not (1e-9 < mean < 1 - 1e-9 and variance > 1e-9):
        return
    effective = mean * (1 - mean) * len(values) / variance
    expected = wilson(mean * effective, effective)
    interval = bounded_interval(len(values), math.fsum(values), math.fsum(v * v for v in values))
    assert interval == pytest.approx(list(expected), abs=1e-9)


def test_ci95_exact_values_where_the_t_interval_left_0_1() -> None:
    # Four recall values: the t interval was [-0.226, 1.226] (issue 13).
    four = aggregate_of([(v, 0.0, 0.0, 0.0, 0) for v in (0.0, 1.0, 1.0, 0.0)])
    # 0/1 values of mean 0.5: n_eff = n = 4, Wilson's 2 of 4.
    assert four.ci95()["recallAtK"] == pytest.approx([0.15003898915214867, 0.8499610108478513])
    assert four.ci95()["recallAtK"] == pytest.approx(list(wilson(2, 4)), abs=1e-15)
    # hit@k of 40 results, all hits: the t interval was [1, 1]; Wilson's is [n/(n+z^2), 1].
    all_hits = aggregate_of([(0.0, 0.0, 0.0, 0.0, 1)] * 40)
    z = stats.norm.ppf(0.975)
    assert all_hits.ci95()["hitAtK"] == pytest.approx([40 / (40 + z * z), 1.0], abs=1e-15)
    # All results equal inside (0, 1): no spread, the mean itself.
    assert aggregate_of([(0.5, 0.25, 0.3, 0.2, 1)] * 3).ci95()["precisionAtK"] == [0.25, 0.25]
    # Nothing relevant found anywhere: Wilson's 0 of n.
    nothing = aggregate_of([(0.0, 0.0, 0.0, 0.0, 0)] * 10)
    assert nothing.ci95()["ndcgAt10"] == pytest.approx([0.0, z * z / (10 + z * z)], abs=1e-15)


@settings(max_examples=200)
@given(
    values=st.lists(st.tuples(*[st.floats(-1.0, 1.0)] * len(METRIC_NAMES)), min_size=2, max_size=40)
)
def test_t_interval_of_differences_matches_scipy_student_t(
    values: list[tuple[float, ...]],
) -> None:
    intervals = aggregate_of(values).t_interval95()
    n = len(values)
    for index, name in enumerate(METRIC_NAMES):
        column = [row[index] for row in values]
        mean = statistics.fmean(column)
        half = stats.t.ppf(0.975, n - 1) * statistics.stdev(column) / math.sqrt(n)
        low, high = intervals[name]
        # Sums of squares lose about sqrt(machine epsilon) of a zero spread to
        # cancellation (sumsq - sum^2/n): 1e-7 is that, not a loose check.
        assert low == pytest.approx(mean - half, abs=1e-7)
        assert high == pytest.approx(mean + half, abs=1e-7)


def test_ci95_of_a_single_result_is_the_value_itself() -> None:
    aggregate = aggregate_of([(0.5, 0.25, 1.0, 0.0, 1, 1.0, 1.0)])
    assert aggregate.ci95()["recallAtK"] == [0.5, 0.5]
    assert MetricAggregate().means()["mrr"] == 0.0


@settings(max_examples=100)
@given(
    first=st.lists(st.tuples(rows.filter(bool).map(lambda r: r[0]), facet_values), max_size=20),
    second=st.lists(st.tuples(rows.filter(bool).map(lambda r: r[0]), facet_values), max_size=20),
)
def test_merge_equals_adding_everything(
    first: list[tuple[tuple[float, ...], str]], second: list[tuple[tuple[float, ...], str]]
) -> None:
    left, right, everything = RunRollup(), RunRollup(), RunRollup()
    for part, rollup in ((first, left), (second, right)):
        for values, popularity in part:
            rollup.add(values, {"popularity": popularity})
            everything.add(values, {"popularity": popularity})
    left.merge(right)
    merged, expected = left.summary(), everything.summary()
    assert merged["count"] == expected["count"] == len(first) + len(second)
    assert merged["facets"].keys() == expected["facets"].keys()
    for name in METRIC_NAMES:
        assert merged["metrics"][name] == pytest.approx(expected["metrics"][name], abs=1e-12)
    for value, aggregate in expected["facets"].get("popularity", {}).items():
        assert merged["facets"]["popularity"][value]["count"] == aggregate["count"]


def test_state_round_trip_gives_the_same_summary() -> None:
    import orjson

    rollup = RunRollup()
    rollup.add((1.0, 0.3, 0.7378, 1.0, 1), {"type": "factoid", "popularity": "head"})
    rollup.add((0.0, 0.0, 0.0, 0.0, 0), {"type": "multi-hop"})
    rollup.add((0.5, 0.2, 0.4, 0.5, 1), None)
    state = orjson.loads(orjson.dumps(rollup.to_state()))
    assert RunRollup.from_state(state).summary() == rollup.summary()
    summary = rollup.summary()
    assert summary["count"] == 3
    assert summary["facets"]["type"]["factoid"]["count"] == 1
    assert summary["metrics"]["precisionAtK"] == pytest.approx(0.5 / 3, abs=1e-15)
