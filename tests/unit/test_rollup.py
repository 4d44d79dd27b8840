"""Rollups: means, 95% intervals against scipy's Student t, merges and state round trips."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from scorer.metrics import METRIC_NAMES
from scorer.rollup import MetricAggregate, RunRollup

unit = st.floats(0.0, 1.0, allow_nan=False)
rows = st.lists(st.tuples(unit, unit, unit, unit, st.integers(0, 1)), min_size=0, max_size=40)
facet_values = st.sampled_from(["head", "torso", "tail"])


def aggregate_of(values: list[tuple[float, ...]]) -> MetricAggregate:
    aggregate = MetricAggregate()
    for row in values:
        aggregate.add(row)
    return aggregate


@settings(max_examples=200)
@given(values=rows)
def test_means_are_arithmetic_means(values: list[tuple[float, ...]]) -> None:
    means = aggregate_of(values).means()
    for index, name in enumerate(METRIC_NAMES):
        column = [row[index] for row in values]
        expected = statistics.fmean(column) if column else 0.0
        assert means[name] == pytest.approx(expected, abs=1e-12)


@settings(max_examples=200)
@given(values=rows.filter(lambda r: len(r) >= 2))
def test_ci95_matches_scipy_student_t(values: list[tuple[float, ...]]) -> None:
    intervals = aggregate_of(values).ci95()
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
    aggregate = aggregate_of([(0.5, 0.25, 1.0, 0.0, 1)])
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
