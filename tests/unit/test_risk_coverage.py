"""scorer.analysis.risk_coverage: docs/metrics.md's worked example, ties by expectation in any
input order, the properties of AURC, and a differential test against a naive
implementation that averages the plain AURC over every order of each tie group,
in exact fractions."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import pairwise, permutations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.analysis.risk_coverage import (
    CURVE_STEPS,
    RiskCoverage,
    RunRiskCoverage,
    curve_positions,
    loss_curve,
)
from scorer.core.metrics import MetricValues

# docs/metrics.md, "Risk–coverage": confidences [0.9, 0.8, 0.8, 0.1], misses [0, 1, 0, 1].
EXAMPLE_CONFIDENCES = [0.9, 0.8, 0.8, 0.1]
EXAMPLE_MISSES = [0.0, 1.0, 0.0, 1.0]


def naive_aurc(confidences: list[float], losses: list[float]) -> tuple[Fraction, Fraction]:
    """(AURC, optimal AURC) in exact fractions: the plain AURC (no ties) averaged over
    every order of the results that sorts the confidences highest first."""
    n = len(losses)
    exact = [Fraction(loss) for loss in losses]

    def plain(order: tuple[int, ...]) -> Fraction:
        total, running = Fraction(0), Fraction(0)
        for i, index in enumerate(order, 1):
            running += exact[index]
            total += running / i
        return total / n

    orders = [
        order
        for order in permutations(range(n))
        if all(confidences[a] >= confidences[b] for a, b in pairwise(order))
    ]
    aurc = sum((plain(order) for order in orders), Fraction(0)) / len(orders)
    ascending = tuple(sorted(range(n), key=exact.__getitem__))
    return aurc, plain(ascending)


def naive_risks(confidences: list[float], losses: list[float]) -> list[Fraction]:
    """r(1..n) by expectation over every confidence-sorted order, in exact fractions."""
    n = len(losses)
    orders = [
        order
        for order in permutations(range(n))
        if all(confidences[a] >= confidences[b] for a, b in pairwise(order))
    ]
    return [
        sum((sum(Fraction(losses[j]) for j in order[:i]) / i for order in orders), Fraction(0))
        / len(orders)
        for i in range(1, n + 1)
    ]


def test_the_worked_example_of_the_design() -> None:
    result = loss_curve(EXAMPLE_CONFIDENCES, EXAMPLE_MISSES)
    assert result.aurc == pytest.approx(0.2708333333333333, abs=1e-15)
    assert result.optimal_aurc == pytest.approx(0.2083333333333333, abs=1e-15)
    assert result.e_aurc == 0.0625
    assert result.curve == [[0.25, 0.0], [0.5, 0.25], [0.75, 1 / 3], [1.0, 0.5]]
    assert naive_aurc(EXAMPLE_CONFIDENCES, EXAMPLE_MISSES) == (Fraction(13, 48), Fraction(5, 24))


def test_the_worked_example_as_a_block_counts_results_without_confidence() -> None:
    block = RiskCoverage()
    for confidence, miss in zip(EXAMPLE_CONFIDENCES, EXAMPLE_MISSES, strict=True):
        ndcg = 0.0 if miss else 1.0
        block.add(confidence, MetricValues(0.0, 0.0, ndcg, 0.0, int(1 - miss), 0.0, ndcg))
    block.add(None, MetricValues(0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0))
    summary = block.summary()
    assert summary["withConfidence"] == 4
    assert summary["withoutConfidence"] == 1
    assert summary["miss"]["eAurc"] == 0.0625
    assert summary["ndcgLoss"] == summary["miss"]
    assert set(summary["miss"]) == {"aurc", "optimalAurc", "eAurc", "curve"}


def test_no_result_with_a_confidence_gives_nulls() -> None:
    block = RiskCoverage()
    block.add(None, MetricValues(1.0, 1.0, 1.0, 1.0, 1, 1.0, 1.0))
    assert block.summary() == {
        "withConfidence": 0,
        "withoutConfidence": 1,
        "miss": {"aurc": None, "optimalAurc": None, "eAurc": None, "curve": []},
        "ndcgLoss": {"aurc": None, "optimalAurc": None, "eAurc": None, "curve": []},
    }


def test_a_run_keeps_one_block_per_facet_value() -> None:
    run = RunRiskCoverage()
    hit, miss = (
        MetricValues(1.0, 1.0, 1.0, 1.0, 1, 1.0, 1.0),
        MetricValues(0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0),
    )
    run.add(0.9, hit, {"type": "factoid"})
    run.add(0.5, miss, {"type": "howto"})
    run.add(0.1, miss, {"type": "factoid"})
    assert run.overall.summary()["withConfidence"] == 3
    factoid = run.facets["type"]["factoid"].summary()
    assert factoid["miss"]["aurc"] == pytest.approx((0 + 0.5) / 2)
    assert factoid["miss"]["eAurc"] == 0.0
    assert run.facets["type"]["howto"].summary()["miss"]["aurc"] == 1.0


def test_a_constant_confidence_is_one_tie_group_whose_risk_is_the_mean_loss() -> None:
    # Every prefix of one tie group has the group's mean as its expected risk.
    result = loss_curve([0.5] * 4, [1.0, 0.0, 0.0, 1.0])
    assert result.aurc == 0.5
    assert [risk for _, risk in result.curve] == [0.5, 0.5, 0.5, 0.5]
    assert result.optimal_aurc == pytest.approx((0 + 0 + 1 / 3 + 1 / 2) / 4)


def test_curve_points_are_bounded_and_reach_each_percent_of_coverage() -> None:
    assert curve_positions(0) == []
    assert curve_positions(4) == [1, 2, 3, 4]
    assert curve_positions(CURVE_STEPS) == list(range(1, CURVE_STEPS + 1))
    positions = curve_positions(250)
    assert len(positions) == CURVE_STEPS + 1
    assert positions[:4] == [1, 3, 5, 8]  # 1, then the first i with i/250 >= 1%, 2%, 3%
    assert positions[-1] == 250
    n = 1000
    confidences = [float(i % 37) for i in range(n)]
    losses = [float(i % 3 == 0) for i in range(n)]
    curve = loss_curve(confidences, losses).curve
    assert len(curve) == CURVE_STEPS + 1
    assert curve[0][0] == 1 / n
    assert [coverage for coverage, _ in curve[1:]] == [j / 100 for j in range(1, 101)]


losses_strategy = st.one_of(
    st.sampled_from([0.0, 1.0]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
)
pairs_strategy = st.lists(
    st.tuples(st.sampled_from([0.9, 0.5, 0.5000000001, 0.1, -0.0, 0.0, -3.0]), losses_strategy),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(pairs=pairs_strategy)
def test_matches_a_naive_average_over_every_order_of_the_ties(
    pairs: list[tuple[float, float]],
) -> None:
    confidences = [confidence for confidence, _ in pairs]
    losses = [loss for _, loss in pairs]
    result = loss_curve(confidences, losses)
    aurc, optimal = naive_aurc(confidences, losses)
    assert result.aurc == pytest.approx(float(aurc), abs=1e-12)
    assert result.optimal_aurc == pytest.approx(float(optimal), abs=1e-12)
    assert result.e_aurc == pytest.approx(float(aurc - optimal), abs=1e-12)
    risks = naive_risks(confidences, losses)
    assert [coverage for coverage, _ in result.curve] == [i / len(pairs) for i in range(1, 7)][
        : len(pairs)
    ]
    for (_, risk), expected in zip(result.curve, risks, strict=True):
        assert risk == pytest.approx(float(expected), abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 5), losses_strategy), min_size=1, max_size=60),
    data=st.data(),
)
def test_any_input_order_gives_the_same_numbers(
    pairs: list[tuple[int, float]], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(pairs))
    first = loss_curve([float(c) for c, _ in pairs], [loss for _, loss in pairs])
    second = loss_curve([float(c) for c, _ in shuffled], [loss for _, loss in shuffled])
    assert first == second


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.floats(-1e6, 1e6), losses_strategy), min_size=1, max_size=80))
def test_aurc_is_at_least_optimal_and_both_lie_in_the_unit_interval(
    pairs: list[tuple[float, float]],
) -> None:
    result = loss_curve([c for c, _ in pairs], [loss for _, loss in pairs])
    assert result.aurc is not None and result.optimal_aurc is not None
    assert 0.0 <= result.optimal_aurc <= 1.0
    assert 0.0 <= result.aurc <= 1.0
    # Mathematically AURC >= optimal; in floating point within rounding, and E-AURC >= 0.
    assert result.aurc >= result.optimal_aurc - 1e-12
    assert result.e_aurc == max(0.0, result.aurc - result.optimal_aurc)
    assert all(0.0 <= risk <= 1.0 for _, risk in result.curve)


@settings(max_examples=200, deadline=None)
@given(losses=st.lists(losses_strategy, min_size=1, max_size=80))
def test_e_aurc_is_zero_when_confidence_sorts_the_losses_perfectly(losses: list[float]) -> None:
    # The lowest loss gets the highest confidence; equal losses share a confidence.
    tied = loss_curve([-loss for loss in losses], losses)
    assert tied.e_aurc == 0.0
    assert tied.aurc == tied.optimal_aurc
    distinct = loss_curve([-float(rank) for rank in range(len(losses))], sorted(losses))
    assert distinct.e_aurc == 0.0
    assert distinct.aurc == tied.aurc


def test_a_confidence_that_orders_losses_backwards_is_worst() -> None:
    losses = [0.0, 0.0, 1.0, 1.0]
    backwards = loss_curve([0.1, 0.2, 0.8, 0.9], losses)
    assert backwards.aurc == pytest.approx((1 + 1 + 2 / 3 + 1 / 2) / 4)
    assert backwards.e_aurc == pytest.approx(backwards.aurc - (0 + 0 + 1 / 3 + 1 / 2) / 4)
    assert math.isclose(loss_curve([0.5] * 4, losses).aurc or 0.0, 0.5)


def test_confidences_and_losses_must_be_parallel() -> None:
    with pytest.raises(ValueError, match="2 confidences but 1 losses"):
        loss_curve([0.1, 0.2], [0.0])


def walked_group_by_group(confidences: list[float], losses: list[float]) -> list[float]:
    """The prefix sums as the module docstring words them, one tie group at a time:
    a group of equal losses one loss at a time, any other by its mean."""
    groups: dict[float, list[float]] = {}
    for confidence, loss in sorted(
        zip(confidences, losses, strict=True), key=lambda pair: pair[0], reverse=True
    ):
        groups.setdefault(confidence, []).append(loss)
    sums: list[float] = []
    counted = 0.0
    for group in groups.values():
        if len(set(group)) == 1:
            for loss in group:
                counted += loss
                sums.append(counted)
            continue
        total = math.fsum(group)
        sums.extend(counted + inside * (total / len(group)) for inside in range(1, len(group) + 1))
        counted += total
    return sums


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 8), st.sampled_from([0.0, 1.0, 0.25, 1 / 3, 0.7])),
        min_size=1,
        max_size=80,
    )
)
def test_prefix_sums_are_those_of_the_walk_group_by_group_to_the_last_bit(
    pairs: list[tuple[int, float]],
) -> None:
    # Runs of the results between tie groups of unequal losses are summed in one
    # stretch: the same floating-point operations as group by group.
    from scorer.analysis.risk_coverage import _prefix_sums

    confidences = [float(confidence) for confidence, _ in pairs]
    losses = [loss for _, loss in pairs]
    expected = walked_group_by_group(confidences, losses)
    got = _prefix_sums(confidences, losses)
    assert [value.hex() for value in got] == [value.hex() for value in expected]
