"""Differential tests: our metrics against pytrec_eval (trec_eval) and ranx on random
qrels and rankings, within 1e-12.

Peers see unique doc ids per ranking and distinct scores (their inputs are
``{doc: score}`` maps, and ranx breaks score ties its own way).
"""

from __future__ import annotations

import warnings

import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st
from ranx import Qrels, Run
from ranx import evaluate as ranx_evaluate

from scorer.core.metrics import retrieval_metrics

POOL = [f"d{i}" for i in range(30)]
TOLERANCE = 1e-12


@st.composite
def query_cases(
    draw: st.DrawFn, grades: st.SearchStrategy[int]
) -> tuple[dict[str, int], list[str]]:
    """One query: qrels over part of the pool, and a ranking of distinct ids
    (judged or not) drawn from the pool."""
    judged = draw(st.lists(st.sampled_from(POOL), unique=True, min_size=1, max_size=15))
    qrels = {doc: draw(grades) for doc in judged}
    ranked = draw(st.lists(st.sampled_from(POOL), unique=True, min_size=1, max_size=25))
    return qrels, ranked


def as_run(ranked: list[str]) -> dict[str, float]:
    """A ranking as peers take it: distinct scores, best first."""
    return {doc: float(len(ranked) - rank) for rank, doc in enumerate(ranked)}


def exponential_gains(qrels: dict[str, int]) -> dict[str, int]:
    """Grades remapped to 2^g - 1 so that trec_eval's linear-gain ndcg_cut is ours."""
    return {doc: (2**grade - 1 if grade > 0 else grade) for doc, grade in qrels.items()}


@settings(max_examples=300, deadline=None)
@given(
    cases=st.lists(query_cases(st.integers(-1, 4)), min_size=1, max_size=6),
    k=st.integers(1, 20),
)
def test_agrees_with_pytrec_eval(cases: list[tuple[dict[str, int], list[str]]], k: int) -> None:
    qrels = {f"q{i}": qrels for i, (qrels, _) in enumerate(cases)}
    run = {f"q{i}": as_run(ranked) for i, (_, ranked) in enumerate(cases)}
    binary = pytrec_eval.RelevanceEvaluator(
        qrels, {f"P_{k}", f"recall_{k}", f"success_{k}", "recip_rank"}
    ).evaluate(run)
    graded = pytrec_eval.RelevanceEvaluator(
        {q: exponential_gains(j) for q, j in qrels.items()}, {"ndcg_cut.10"}
    ).evaluate(run)
    for i, (query_qrels, ranked) in enumerate(cases):
        q = f"q{i}"
        ours = retrieval_metrics(ranked, query_qrels, k)
        assert ours.recall_at_k == pytest.approx(binary[q][f"recall_{k}"], abs=TOLERANCE)
        assert ours.precision_at_k == pytest.approx(binary[q][f"P_{k}"], abs=TOLERANCE)
        assert ours.ndcg_at_10 == pytest.approx(graded[q]["ndcg_cut_10"], abs=TOLERANCE)
        assert ours.mrr == pytest.approx(binary[q]["recip_rank"], abs=TOLERANCE)
        assert ours.hit_at_k == binary[q][f"success_{k}"]


@settings(max_examples=200, deadline=None)
@given(
    cases=st.lists(query_cases(st.integers(0, 3)), min_size=1, max_size=6),
    k=st.integers(1, 20),
)
def test_agrees_with_ranx(cases: list[tuple[dict[str, int], list[str]]], k: int) -> None:
    qrels = {f"q{i}": qrels for i, (qrels, _) in enumerate(cases)}
    run = {f"q{i}": as_run(ranked) for i, (_, ranked) in enumerate(cases)}
    # Same order as MetricValues: recall, precision, nDCG@10, MRR, hit.
    names = [f"recall@{k}", f"precision@{k}", "ndcg_burges@10", "mrr", f"hit_rate@{k}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's type-safety chatter
        peer = ranx_evaluate(Qrels(qrels), Run(run), names, return_mean=False, threads=1)
    for i, (query_qrels, ranked) in enumerate(cases):
        ours = retrieval_metrics(ranked, query_qrels, k)
        expected = [float(peer[name][i]) for name in names]
        assert list(ours)[:5] == pytest.approx(expected, abs=TOLERANCE)  # the seed's five
