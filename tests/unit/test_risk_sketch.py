"""scorer.analysis.risk_sketch: the live risk–coverage of a run in bounded state, against the
exact offline block (scorer.analysis.risk_coverage) on the same results."""

from __future__ import annotations

import math
from fractions import Fraction

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.analysis.risk_coverage import CURVE_STEPS, RiskCoverage
from scorer.analysis.risk_sketch import (
    LOSS_BINS,
    MAX_BUCKETS,
    RELATIVE_ACCURACY,
    RiskSketch,
    bucket_key,
    harmonic_span,
)
from scorer.analysis.synthetic import predictive_results
from scorer.core.metrics import MetricValues

finite = st.floats(allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=0.0, max_value=1.0)


def values(hit: int, ndcg: float) -> MetricValues:
    return MetricValues(
        recall_at_k=0.0,
        precision_at_k=0.0,
        ndcg_at_10=ndcg,
        mrr=0.0,
        hit_at_k=hit,
        judged_at_k=0.0,
        candidate_ndcg_at_10=ndcg,
    )


def both(results: list[tuple[float | None, MetricValues]]) -> tuple[RiskSketch, RiskCoverage]:
    """The sketch and the exact offline block of the same results."""
    sketch, exact = RiskSketch(), RiskCoverage()
    for confidence, scored in results:
        sketch.add(confidence, scored)
        exact.add(confidence, scored)
    return sketch, exact


def assert_close(got, expected, tolerance: float) -> None:
    """Deep equality, floats within ``tolerance``."""
    if isinstance(expected, dict):
        assert set(got) == set(expected)
        for key in expected:
            assert_close(got[key], expected[key], tolerance)
    elif isinstance(expected, list):
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_close(g, e, tolerance)
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, abs=tolerance)
    else:
        assert got == expected


def test_the_worked_example_of_the_design() -> None:
    # docs/metrics.md (Risk–coverage): confidences [0.9, 0.8, 0.8, 0.1], misses [0, 1, 0, 1].
    results = [
        (c, values(1 - m, 1.0 - m)) for c, m in zip((0.9, 0.8, 0.8, 0.1), (0, 1, 0, 1), strict=True)
    ]
    sketch, exact = both([*results, (None, values(1, 1.0))])
    block = sketch.summary()
    assert (block["withConfidence"], block["withoutConfidence"]) == (4, 1)
    for name in ("miss", "ndcgLoss"):
        assert block[name]["aurc"] == pytest.approx(0.2708333333333333, abs=1e-15)
        assert block[name]["optimalAurc"] == pytest.approx(0.2083333333333333, abs=1e-15)
        assert block[name]["eAurc"] == pytest.approx(0.0625, abs=1e-15)
        assert block[name]["curve"] == [[0.25, 0.0], [0.5, 0.25], [0.75, 1 / 3], [1.0, 0.5]]
    assert_close(block, exact.summary(), 1e-15)
    # 0.9, 0.8 and 0.1 are three buckets: the bounds allow any order inside each (the
    # 0.8 pair: r(2) in [0, 1/2], r(3) = 1/3), and the optimum is exact.
    bounds = sketch.bounds()
    assert bounds["buckets"] == 3
    assert bounds["aurcWithin"]["miss"] == pytest.approx(
        [(1 / 3 + 1 / 2) / 4, (1 / 2 + 1 / 3 + 1 / 2) / 4]
    )
    assert bounds["optimalAurcWithin"]["miss"] == pytest.approx([0.2083333333333333] * 2)


def test_no_result_with_a_confidence_gives_nulls() -> None:
    sketch = RiskSketch()
    sketch.add(None, values(0, 0.0))
    block = sketch.summary()
    assert block["withConfidence"] == 0
    assert block["withoutConfidence"] == 1
    assert block["miss"] == {"aurc": None, "optimalAurc": None, "eAurc": None, "curve": []}
    assert sketch.bounds()["aurcWithin"] == {"miss": None, "ndcgLoss": None}


def test_confidences_within_the_relative_accuracy_share_a_bucket_of_their_sign() -> None:
    assert bucket_key(1.0) == bucket_key(1.0 - RELATIVE_ACCURACY)
    assert bucket_key(1.0) < bucket_key(1.0 + 3 * RELATIVE_ACCURACY)
    assert bucket_key(-1.0) == -bucket_key(1.0)
    assert bucket_key(-1e-300) < bucket_key(0.0) == bucket_key(-0.0) < bucket_key(5e-324)
    assert bucket_key(-1.7e308) < bucket_key(-1.0) < bucket_key(1.0) < bucket_key(1.7e308)


@given(finite, finite)
def test_bucket_keys_sort_like_the_confidences(x: float, y: float) -> None:
    low, high = sorted((x, y))
    assert bucket_key(low) <= bucket_key(high)


@pytest.mark.parametrize(
    ("a", "b"), [(0, 1), (0, 64), (0, 65), (3, 1000), (64, 200), (10**6, 10**7)]
)
def test_harmonic_spans_match_the_exact_sum(a: int, b: int) -> None:
    if b - a <= 2000:
        exact = float(sum((Fraction(1, i) for i in range(a + 1, b + 1)), Fraction(0)))
    else:
        exact = math.fsum(1.0 / i for i in range(a + 1, b + 1))
    assert harmonic_span(a, b) == pytest.approx(exact, rel=1e-14)


result = st.tuples(
    st.sampled_from([0.9, 0.5, 0.5001, -2.0, 0.0, 7.0]), st.integers(0, 1), unit
).map(lambda t: (t[0], values(t[1], t[2] if t[1] else 0.0)))


@given(st.lists(result, min_size=1, max_size=40), st.randoms())
def test_ties_in_any_input_order_give_the_same_numbers(results, rng) -> None:
    shuffled = list(results)
    rng.shuffle(shuffled)
    forward, backward = RiskSketch(), RiskSketch()
    for confidence, scored in results:
        forward.add(confidence, scored)
    for confidence, scored in shuffled:
        backward.add(confidence, scored)
    # Miss sums are integers: equal; ndcgLoss sums may differ in the last bit.
    assert forward.summary()["miss"] == backward.summary()["miss"]
    assert_close(backward.summary(), forward.summary(), 1e-12)


@given(st.lists(st.tuples(finite, st.integers(0, 1), unit), min_size=1, max_size=60))
def test_aurc_is_at_least_optimal_and_both_lie_in_the_unit_interval(rows) -> None:
    sketch = RiskSketch()
    for confidence, hit, ndcg in rows:
        sketch.add(confidence, values(hit, ndcg))
    for name in ("miss", "ndcgLoss"):
        curve = sketch.summary()[name]
        assert 0.0 <= curve["optimalAurc"] <= curve["aurc"] <= 1.0
        assert curve["eAurc"] == pytest.approx(curve["aurc"] - curve["optimalAurc"], abs=1e-15)
        assert all(0.0 <= risk <= 1.0 for _, risk in curve["curve"])


@given(st.lists(unit, min_size=1, max_size=60), st.randoms())
def test_e_aurc_is_zero_when_confidence_sorts_the_losses_perfectly(ndcgs, rng) -> None:
    # Each distinct loss gets a confidence of its own bucket (a factor 2 apart), the
    # lower the loss the higher; a miss is a ranking with nDCG 0.
    losses = sorted({1.0 - ndcg for ndcg in ndcgs})
    confidence = {loss: 2.0**-rank for rank, loss in enumerate(losses)}
    rows = [(confidence[1.0 - ndcg], values(int(1.0 - ndcg < 1.0), ndcg)) for ndcg in ndcgs]
    rng.shuffle(rows)
    sketch = RiskSketch()
    for row in rows:
        sketch.add(*row)
    block = sketch.summary()
    # Zero up to rounding: the area is summed per bucket here and per bin there.
    assert block["miss"]["eAurc"] == pytest.approx(0.0, abs=1e-15)
    assert block["ndcgLoss"]["eAurc"] == pytest.approx(0.0, abs=1e-15)


@settings(max_examples=200)
@given(st.lists(st.tuples(finite, st.integers(0, 1), unit), min_size=1, max_size=80))
def test_the_exact_values_lie_within_the_bounds_of_the_sketch(rows) -> None:
    sketch, exact = both([(c, values(hit, ndcg)) for c, hit, ndcg in rows])
    bounds = sketch.bounds()
    for name, curve in exact.curves().items():
        low, high = bounds["aurcWithin"][name]
        assert low - 1e-12 <= curve.aurc <= high + 1e-12
        low, high = bounds["optimalAurcWithin"][name]
        assert low - 1e-12 <= curve.optimal_aurc <= high + 1e-12
        assert high - low <= 1 / LOSS_BINS + 1e-12


@pytest.mark.parametrize("logits", [False, True], ids=["probabilities", "logits"])
def test_ten_thousand_results_match_the_exact_offline_values_within_the_bound(logits) -> None:
    sketch, exact = both(predictive_results(10_000, seed=15, logits=logits))
    block, truth, bounds = sketch.summary(), exact.summary(), sketch.bounds()
    assert block["withConfidence"] == truth["withConfidence"] == 10_000
    for name in ("miss", "ndcgLoss"):
        low, high = bounds["aurcWithin"][name]
        assert low <= truth[name]["aurc"] <= high
        # Measured (docs/metrics.md): far inside the worst case.
        assert abs(block[name]["aurc"] - truth[name]["aurc"]) < 0.002
        assert high - low < 0.05
        assert abs(block[name]["optimalAurc"] - truth[name]["optimalAurc"]) < 1 / LOSS_BINS
        assert abs(block[name]["eAurc"] - truth[name]["eAurc"]) < 0.002
        # A predictive confidence: E-AURC well below AURC.
        assert block[name]["eAurc"] < 0.7 * block[name]["aurc"]
        # Same coverages; risks close once a few buckets are in.
        assert [c for c, _ in block[name]["curve"]] == [c for c, _ in truth[name]["curve"]]
        assert len(block[name]["curve"]) == CURVE_STEPS + 1
        for (coverage, risk), (_, true_risk) in zip(
            block[name]["curve"], truth[name]["curve"], strict=True
        ):
            if coverage >= 0.05:
                assert risk == pytest.approx(true_risk, abs=0.01)
    assert block["miss"]["optimalAurc"] == pytest.approx(truth["miss"]["optimalAurc"], abs=1e-14)
    assert bounds["buckets"] <= MAX_BUCKETS
    # Logits span more than 512 buckets: those nearest 0 are folded into zero's.
    assert (bounds["zeroWidth"] > 0) is logits


def test_buckets_are_capped_by_folding_those_nearest_zero_in_any_order() -> None:
    # 400 positive and 400 negative buckets, 100 results at exactly 0.
    confidences = [sign * 1.1**power for power in range(-200, 200) for sign in (1, -1)]
    rows = [(c, values(i % 2, 0.5)) for i, c in enumerate([*confidences, *[0.0] * 100])]
    forward, backward = RiskSketch(), RiskSketch()
    for row in rows:
        forward.add(*row)
    for row in reversed(rows):
        backward.add(*row)
    assert forward.to_state() == backward.to_state()
    # 801 buckets; both signs of a magnitude fold together, so 145 magnitudes (the
    # smallest, 1.1**-200 to 1.1**-56) go into zero's bucket: 511 buckets remain.
    assert len(forward.buckets) == 511 <= MAX_BUCKETS
    assert forward.buckets[0][0] == 100 + 2 * 145
    assert forward.folded == bucket_key(1.1**-56)
    assert forward.with_confidence == 900
    assert forward.bounds()["zeroWidth"] == pytest.approx(1.1**-56, rel=2 * RELATIVE_ACCURACY)


def test_two_sketches_merged_equal_one_sketch_of_all_the_results() -> None:
    rows = predictive_results(3_000, seed=3, logits=True)
    whole, left, right = RiskSketch(), RiskSketch(), RiskSketch()
    for index, row in enumerate(rows):
        whole.add(*row)
        (left if index % 3 else right).add(*row)
    left.add(None, values(0, 0.0))
    whole.add(None, values(0, 0.0))
    left.merge(right)
    assert left.folded == whole.folded is not None
    assert sorted(left.buckets) == sorted(whole.buckets)
    assert_close(left.summary(), whole.summary(), 1e-12)


def test_the_state_round_trips_through_json() -> None:
    sketch, _ = both([*predictive_results(10_000, seed=8, logits=True), (None, values(0, 0.0))])
    state = orjson.loads(orjson.dumps(sketch.to_state()))
    again = RiskSketch.from_state(state)
    assert again.to_state() == sketch.to_state()
    assert again.summary() == sketch.summary()
    assert again.folded == sketch.folded is not None
    assert RiskSketch.from_state(None).summary()["withConfidence"] == 0
