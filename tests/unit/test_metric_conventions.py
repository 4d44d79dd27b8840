"""The seed's worked example and each pinned metric convention (docs/metrics.md), one test each.

Expected values are worked out by hand from the formulas, never taken from our code.
"""

from __future__ import annotations

import math

import pytest

from scorer.core.metrics import (
    MetricValues,
    hit_at_k,
    mrr,
    ndcg_at_10,
    precision_at_k,
    recall_at_k,
    retrieval_metrics,
)
from scorer.io import JudgedQuery, Retrieval
from scorer.offline.evaluation import evaluate
from scorer.settings import Settings

SEED_QRELS = {"A": 3, "B": 2, "C": 1}
SEED_RANKED = ["B", "X", "A", "C"]


def log2(rank: int) -> float:
    return math.log2(rank + 1)


# -- the seed's worked example -------------------------------------------------------------


def test_seed_worked_example_ndcg_at_4_is_0_738() -> None:
    dcg = 3 / log2(1) + 0 / log2(2) + 7 / log2(3) + 1 / log2(4)
    idcg = 7 / log2(1) + 3 / log2(2) + 1 / log2(3)
    values = retrieval_metrics(SEED_RANKED, SEED_QRELS, k=4)
    assert round(values.ndcg_at_10, 3) == 0.738
    assert values.ndcg_at_10 == dcg / idcg
    assert round(dcg, 3) == 6.931
    assert round(idcg, 3) == 9.393


def test_seed_worked_example_binary_metrics() -> None:
    values = retrieval_metrics(SEED_RANKED, SEED_QRELS, k=4)
    assert values.recall_at_k == 1.0
    assert values.precision_at_k == 0.75
    assert values.hit_at_k == 1
    assert values.mrr == 1.0


def test_seed_worked_example_on_the_wire() -> None:
    wire = retrieval_metrics(SEED_RANKED, SEED_QRELS, k=4).as_wire()["retrievalMetrics"]
    assert list(wire) == ["recallAtK", "precisionAtK", "ndcgAt10", "mrr", "hitAtK"]
    assert wire["recallAtK"] == 1.0
    assert wire["precisionAtK"] == 0.75
    assert wire["hitAtK"] == 1
    assert wire["mrr"] == 1.0


# -- conventions 1..10 ---------------------------------------------------------------------


def test_convention_1_relevant_means_grade_at_least_1() -> None:
    qrels = {"neg": -1, "zero": 0, "one": 1}
    ranked = ["neg", "zero", "unjudged", "one"]
    values = retrieval_metrics(ranked, qrels, k=4)
    assert values.precision_at_k == 1 / 4
    assert values.recall_at_k == 1.0
    assert values.mrr == 1 / 4
    assert values.ndcg_at_10 == (1 / log2(4)) / (1 / log2(1))


def test_convention_2_ndcg_exponential_gain_idcg_from_all_judged_cut_at_10() -> None:
    # 12 relevant ids, only two retrieved: IDCG counts the ten best judged grades,
    # retrieved or not; grade 4 gains 15 (2^4 - 1).
    qrels = {f"d{i}": 1 for i in range(10)} | {"top": 4, "two": 2}
    ranked = ["two", "x", "top"]
    dcg = 3 / log2(1) + 15 / log2(3)
    ideal = [15, 3] + [1] * 8
    idcg = sum(gain / log2(rank) for rank, gain in enumerate(ideal, 1))
    assert ndcg_at_10(ranked, qrels) == dcg / idcg
    # nDCG stays @10 whatever k is, and is 0 when nothing is relevant.
    assert retrieval_metrics(ranked, qrels, k=1).ndcg_at_10 == dcg / idcg
    assert ndcg_at_10(ranked, {"two": 0}) == 0.0
    eleventh = [f"n{i}" for i in range(10)] + ["top"]
    assert ndcg_at_10(eleventh, {"top": 3}) == 0.0


def test_convention_3_precision_divides_by_k_even_for_short_lists() -> None:
    assert precision_at_k(["a"], {"a": 2}, k=10) == 1 / 10
    assert precision_at_k([], {"a": 2}, k=5) == 0.0


def test_convention_4_recall_is_0_without_relevant_ids() -> None:
    assert recall_at_k(["a", "b"], {"a": 0, "b": -2}, k=10) == 0.0
    assert recall_at_k(["a"], {}, k=10) == 0.0


def test_convention_5_hit_is_0_or_1() -> None:
    assert hit_at_k(["a", "b", "c"], {"a": 3, "b": 3, "c": 3}, k=3) == 1
    assert hit_at_k(["x", "a"], {"a": 3}, k=1) == 0
    assert isinstance(hit_at_k(["a"], {"a": 1}, k=1), int)


def test_convention_6_mrr_has_no_cutoff() -> None:
    ranked = [f"n{i}" for i in range(40)] + ["rel"]
    assert mrr(ranked, {"rel": 1}) == 1 / 41
    values = retrieval_metrics(ranked, {"rel": 1}, k=5)
    assert values.mrr == 1 / 41
    assert values.hit_at_k == 0
    assert mrr(["x"], {"rel": 1}) == 0.0


def test_convention_7_repeated_id_keeps_its_slot_but_earns_nothing() -> None:
    qrels = {"a": 3, "b": 1}
    values = retrieval_metrics(["a", "a", "b"], qrels, k=3)
    assert values.precision_at_k == 2 / 3
    assert values.recall_at_k == 1.0
    # b sits at rank 3: the repeat of a took rank 2.
    dcg = 7 / log2(1) + 1 / log2(3)
    idcg = 7 / log2(1) + 1 / log2(2)
    assert values.ndcg_at_10 == dcg / idcg
    assert retrieval_metrics(["a", "a"], {"a": 1}, k=2).precision_at_k == 1 / 2


def test_convention_8_k_is_the_default_unless_the_result_sets_its_own() -> None:
    assert Settings.model_fields["default_retrieval_k"].default == 10
    golden = {"q": JudgedQuery(qrels={"a": 1, "b": 1})}
    ranked = ["x", "a", "b"]
    default = evaluate(golden, [Retrieval("run", "q", ranked, result_id="r1")])
    own = evaluate(golden, [Retrieval("run", "q", ranked, result_id="r2", k=2)])
    assert default.runs["run"].rollup.overall.means()["precisionAtK"] == 2 / 10
    assert own.runs["run"].rollup.overall.means()["precisionAtK"] == 1 / 2
    assert own.runs["run"].rollup.overall.means()["recallAtK"] == 1 / 2


def test_convention_9_worked_example_exact() -> None:
    assert retrieval_metrics(SEED_RANKED, SEED_QRELS, k=4) == MetricValues(
        recall_at_k=1.0,
        precision_at_k=0.75,
        ndcg_at_10=(3 + 7 / 2 + 1 / math.log2(5)) / (7 + 3 / math.log2(3) + 1 / 2),
        mrr=1.0,
        hit_at_k=1,
        judged_at_k=0.75,  # X is the one unjudged slot of four
        candidate_ndcg_at_10=1.0,  # A, B, C all returned: reordered, they are the ideal
    )


def test_convention_10_agrees_with_trec_eval_ranx_and_ir_measures() -> None:
    import ir_measures
    import pytrec_eval
    from ir_measures import RR, P, R, Success, nDCG
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    qrels = {"q1": {"A": 3, "B": 2, "C": 1, "D": 0}, "q2": {"E": 1, "F": 3}}
    ranked = {"q1": ["B", "X", "A", "C", "D"], "q2": ["Y", "Z", "F"]}
    run = {
        q: {doc: float(len(docs) - i) for i, doc in enumerate(docs)} for q, docs in ranked.items()
    }
    k = 2
    ours = {q: retrieval_metrics(ranked[q], qrels[q], k) for q in qrels}

    remapped = {
        q: {d: {1: 1, 2: 3, 3: 7}.get(g, g) for d, g in j.items()} for q, j in qrels.items()
    }
    trec = pytrec_eval.RelevanceEvaluator(
        qrels, {f"P_{k}", f"recall_{k}", f"success_{k}", "recip_rank"}
    )
    trec_ndcg = pytrec_eval.RelevanceEvaluator(remapped, {"ndcg_cut_10"})
    by_trec = trec.evaluate(run)
    ndcg_trec = trec_ndcg.evaluate(run)

    # Both peers' measures listed in METRIC_NAMES order.
    ranx_names = [f"recall@{k}", f"precision@{k}", "ndcg_burges@10", "mrr", f"hit_rate@{k}"]
    by_ranx = ranx_evaluate(Qrels(qrels), Run(run), ranx_names, return_mean=False)

    measures = [R @ k, P @ k, nDCG(gains={0: 0, 1: 1, 2: 3, 3: 7}) @ 10, RR, Success @ k]
    irm_qrels = [ir_measures.Qrel(q, d, g) for q, j in qrels.items() for d, g in j.items()]
    irm_run = [ir_measures.ScoredDoc(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    by_irm = {
        (m.query_id, str(m.measure)): m.value
        for m in ir_measures.iter_calc(measures, irm_qrels, irm_run)
    }

    for index, q in enumerate(sorted(qrels)):
        values = ours[q]
        assert values.ndcg_at_10 == pytest.approx(ndcg_trec[q]["ndcg_cut_10"], abs=1e-12)
        assert values.precision_at_k == pytest.approx(by_trec[q][f"P_{k}"], abs=1e-12)
        assert values.recall_at_k == pytest.approx(by_trec[q][f"recall_{k}"], abs=1e-12)
        assert values.hit_at_k == by_trec[q][f"success_{k}"]
        assert values.mrr == pytest.approx(by_trec[q]["recip_rank"], abs=1e-12)
        ranx_row = [by_ranx[name][index] for name in ranx_names]
        assert list(values)[:5] == pytest.approx(ranx_row, abs=1e-12)  # the seed's five
        irm_row = [by_irm[(q, str(m))] for m in measures]
        assert list(values)[:5] == pytest.approx(irm_row, abs=1e-12)
