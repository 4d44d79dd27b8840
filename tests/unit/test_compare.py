"""Comparing two runs (scorer.analysis.compare): Welch's interval and the paired interval
against scipy, the win/loss/tie counts against a plain count, and the edge cases
(too few results or shared queries for an interval)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats

from scorer.analysis import anytime
from scorer.analysis.compare import (
    anytime_difference,
    compare_runs,
    facet_comparisons,
    first_differences,
    paired,
    unpaired,
    welch_interval,
)
from scorer.core.metrics import METRIC_NAMES
from scorer.core.rollup import MetricAggregate

N = len(METRIC_NAMES)


def aggregate(rows: list[list[float]]) -> MetricAggregate:
    folded = MetricAggregate()
    for row in rows:
        folded.add(row)
    return folded


def random_rows(rng: random.Random, n: int, shift: float) -> list[list[float]]:
    return [[min(1.0, max(0.0, rng.random() + shift)) for _ in METRIC_NAMES] for _ in range(n)]


def test_welch_interval_equals_scipy() -> None:
    rng = random.Random(11)
    rows_a, rows_b = random_rows(rng, 40, 0.0), random_rows(rng, 65, 0.1)
    a, b = aggregate(rows_a), aggregate(rows_b)
    for index in range(len(METRIC_NAMES)):
        column_a = [row[index] for row in rows_a]
        column_b = [row[index] for row in rows_b]
        expected = stats.ttest_ind(column_b, column_a, equal_var=False).confidence_interval(0.95)
        low, high = welch_interval(a, b, index)
        assert low == pytest.approx(expected.low, abs=1e-9)
        assert high == pytest.approx(expected.high, abs=1e-9)


def test_unpaired_reports_each_mean_and_their_difference() -> None:
    a = aggregate([[0.2] * N, [0.4] * N])
    b = aggregate([[0.5] * N, [0.7] * N, [0.9] * N])
    body = unpaired(a, b)
    assert set(body) == set(METRIC_NAMES)
    recall = body["recallAtK"]
    assert recall["a"] == pytest.approx(0.3)
    assert recall["b"] == pytest.approx(0.7)
    assert recall["delta"] == pytest.approx(0.4)
    low, high = recall["ci95"]
    assert low < 0.4 < high


def test_no_interval_without_two_results_in_each_run() -> None:
    a = aggregate([[0.5] * N])
    b = aggregate([[0.5] * N, [0.7] * N])
    assert welch_interval(a, b, 0) is None
    assert unpaired(a, b)["mrr"]["ci95"] is None


def test_identical_runs_have_a_zero_width_interval() -> None:
    a = aggregate([[0.5] * N, [0.5] * N])
    assert welch_interval(a, a, 0) == [0.0, 0.0]


def test_paired_interval_equals_scipy_and_counts_wins_losses_ties() -> None:
    rng = random.Random(5)
    queries = [f"q{i}" for i in range(50)]
    per_query_a = {q: [round(rng.random(), 1) for _ in METRIC_NAMES] for q in queries}
    per_query_b = {
        q: [round(min(1.0, value + rng.choice([-0.1, 0.0, 0.2])), 1) for value in values]
        for q, values in per_query_a.items()
    }
    per_query_a["only-a"] = [0.0] * len(METRIC_NAMES)  # not shared: left out
    body = paired(per_query_a, per_query_b)
    assert body["queries"] == len(queries)
    for index, name in enumerate(METRIC_NAMES):
        differences = [per_query_b[q][index] - per_query_a[q][index] for q in queries]
        result = body["metrics"][name]
        expected = stats.ttest_rel(
            [per_query_b[q][index] for q in queries], [per_query_a[q][index] for q in queries]
        ).confidence_interval(0.95)
        assert result["delta"] == pytest.approx(sum(differences) / len(differences), abs=1e-12)
        assert result["ci95"][0] == pytest.approx(expected.low, abs=1e-9)
        assert result["ci95"][1] == pytest.approx(expected.high, abs=1e-9)
        assert result["wins"] == sum(d > 0 for d in differences)
        assert result["losses"] == sum(d < 0 for d in differences)
        assert result["ties"] == sum(d == 0 for d in differences)


def test_paired_without_shared_queries_has_no_delta() -> None:
    body = paired({"q1": [1.0] * N}, {"q2": [0.0] * N})
    assert body["queries"] == 0
    assert body["metrics"]["ndcgAt10"] == {
        "delta": None,
        "ci95": None,
        "wins": 0,
        "losses": 0,
        "ties": 0,
    }


def test_one_shared_query_has_a_delta_but_no_interval() -> None:
    body = paired({"q1": [0.25] * N}, {"q1": [0.75] * N})
    assert body["metrics"]["hitAtK"]["delta"] == pytest.approx(0.5)
    assert body["metrics"]["hitAtK"]["ci95"] is None
    assert body["metrics"]["hitAtK"]["wins"] == 1


def test_compare_runs_body() -> None:
    a = aggregate([[0.1] * N, [0.3] * N])
    b = aggregate([[0.6] * N, [0.8] * N, [1.0] * N])
    body = compare_runs(a, b, {"q": [0.2] * N}, {"q": [0.8] * N})
    assert body["countA"] == 2
    assert body["countB"] == 3
    assert body["metrics"] == unpaired(a, b)
    fixed = paired({"q": [0.2] * N}, {"q": [0.8] * N})
    for name, block in body["paired"]["metrics"].items():
        assert {k: v for k, v in block.items() if k != "anytime95"} == fixed["metrics"][name]
        # One pair, 0.6 apart: the sequence cannot exclude 0 yet, but holds 0.6.
        low, high = block["anytime95"]
        assert low <= 0 < 0.6 <= high
    assert body["paired"]["trajectory"]["ndcgAt10"][-1][0] == 1
    assert body["facets"] == {"family": 0, "alphaEach": 0.05, "values": {}}


def test_an_aa_pair_read_after_every_query_is_called_different_less_often_than_alpha() -> None:
    # 400 A/A pairs of runs, each compared after every one of 300 queries: the paired
    # anytime interval excludes 0 at some read in at most 5% of them; the fixed-
    # horizon paired interval, read the same way, far more often.
    rng = np.random.default_rng(2026)
    ever_anytime = ever_fixed = 0
    for _ in range(400):
        ndcg = rng.uniform(0, 1, 300)
        a = np.clip(ndcg + rng.normal(0, 0.15, 300), 0, 1)
        b = np.clip(ndcg + rng.normal(0, 0.15, 300), 0, 1)
        d = b - a
        n = np.arange(1, 301)
        totals, squares = np.cumsum(d), np.cumsum(d * d)
        ever_anytime += bool(anytime.rejects(n, totals, squares, 0.0)[4:].any())
        means = totals / n
        sd = np.sqrt(np.maximum(squares / n - means**2, 0) * n / np.maximum(n - 1, 1))
        ever_fixed += bool((np.abs(means) > 1.96 * sd / np.sqrt(n))[4:].any())
    assert ever_anytime / 400 <= 0.05
    assert ever_fixed / 400 >= 0.2


def test_the_paired_sequence_takes_first_answers_in_the_order_the_pairs_completed() -> None:
    first_a = {"q1": [5.0, *[0.2] * N], "q2": [1.0, *[0.4] * N], "only-a": [0.0, *[1.0] * N]}
    first_b = {"q1": [2.0, *[0.9] * N], "q2": [7.0, *[0.4] * N]}
    d = first_differences(first_a, first_b)
    # q1 completes at 5 (its later entry), q2 at 7.
    assert d[:, 2].tolist() == pytest.approx([0.7, 0.0])
    body = compare_runs(
        aggregate([[0.3] * N]), aggregate([[0.6] * N]),
        {"q1": [0.5] * N, "q2": [0.5] * N}, {"q1": [0.5] * N, "q2": [0.5] * N},
        first_a, first_b,
    )  # fmt: skip
    assert body["paired"]["metrics"]["ndcgAt10"]["delta"] == 0.0  # means: fixed horizon
    assert body["paired"]["trajectory"]["ndcgAt10"][0][0] == 1
    assert body["paired"]["metrics"]["ndcgAt10"]["anytime95"] == pytest.approx(
        anytime.mean_interval(2, 0.7, 0.49)
    )


def test_facet_comparisons_split_alpha_over_every_value_and_metric() -> None:
    a = {"type": {"faq": aggregate([[0.2] * N] * 50), "howto": aggregate([[0.5] * N] * 3)}}
    b = {"type": {"faq": aggregate([[0.9] * N] * 50), "news": aggregate([[0.5] * N])}}
    facets = facet_comparisons(a, b)
    # One facet value both runs have, times every measure.
    assert facets["family"] == N and facets["alphaEach"] == pytest.approx(0.05 / N)
    faq = facets["values"]["type"]["faq"]
    assert (faq["countA"], faq["countB"]) == (50, 50)
    assert faq["metrics"]["ndcgAt10"]["anytime95"] == anytime_difference(
        a["type"]["faq"], b["type"]["faq"], 2, 0.05 / N
    )
    assert 0 < faq["metrics"]["ndcgAt10"]["anytime95"][0] < 0.7  # found, at 50 results each
