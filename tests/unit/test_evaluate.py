"""Offline evaluation: which queries count, facets, --complete, per-query rows."""

from __future__ import annotations

import pytest

from scorer.io import JudgedQuery, Retrieval
from scorer.offline.evaluation import evaluate

GOLDEN = {
    "q1": JudgedQuery(qrels={"a": 3, "b": 1}, facets={"type": "factoid", "popularity": "head"}),
    "q2": JudgedQuery(qrels={"c": 2}, facets={"type": "multi-hop", "popularity": "tail"}),
    "q3": JudgedQuery(qrels={"d": 0}, facets={"type": "factoid", "popularity": "tail"}),
}


def test_means_are_over_queries_with_qrels_and_a_ranking() -> None:
    retrievals = [
        Retrieval("run", "q1", ["a", "x"]),  # precision@2 = 1/2, recall 1/2
        Retrieval("run", "q3", ["d"]),  # judged, nothing relevant: all zeros, still counted
        Retrieval("run", "q9", ["a"]),  # no qrels: skipped and counted
    ]
    run = evaluate(GOLDEN, retrievals, k=2).runs["run"]
    summary = run.summary()
    assert summary["count"] == 2
    assert summary["metrics"]["precisionAtK"] == pytest.approx((1 / 2 + 0) / 2)
    assert summary["metrics"]["recallAtK"] == pytest.approx((1 / 2 + 0) / 2)
    assert summary["skipped"] == {"resultsWithoutQrels": 1, "judgedQueriesNotInRun": 1}
    assert "zeroFilled" not in summary


def test_complete_counts_judged_queries_missing_from_the_run_as_zeros() -> None:
    retrievals = [Retrieval("run", "q1", ["a", "b"])]
    summary = evaluate(GOLDEN, retrievals, k=2, complete=True).runs["run"].summary()
    assert summary["count"] == 3
    assert summary["metrics"]["recallAtK"] == pytest.approx(1 / 3)
    assert summary["skipped"]["judgedQueriesNotInRun"] == 0
    assert summary["zeroFilled"] == 2
    assert summary["facets"]["popularity"]["tail"]["count"] == 2


def test_complete_matches_trec_eval_minus_c() -> None:
    import pytrec_eval

    # trec_eval -c divides the sum over ranked queries by the number of judged queries.
    qrels = {q: judged.qrels for q, judged in GOLDEN.items()}
    run = {"q1": {"x": 2.0, "a": 1.0}}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    expected = sum(row["recip_rank"] for row in per_query.values()) / len(qrels)
    evaluation = evaluate(GOLDEN, [Retrieval("run", "q1", ["x", "a"])], complete=True)
    assert evaluation.runs["run"].summary()["metrics"]["mrr"] == pytest.approx(expected, abs=1e-12)


def test_result_facets_override_golden_facets_key_by_key() -> None:
    retrieval = Retrieval("run", "q1", ["a"], result_id="r1", facets={"popularity": "tail"})
    facets = evaluate(GOLDEN, [retrieval]).runs["run"].summary()["facets"]
    assert facets == {
        "popularity": {"tail": facets["popularity"]["tail"]},
        "type": {"factoid": facets["type"]["factoid"]},
    }


def test_per_query_rows_carry_ids_and_wire_metrics() -> None:
    retrievals = [
        Retrieval("v1", "q2", [], result_id="r1"),
        Retrieval("v1", "q1", ["b", "a"], result_id="r2"),
    ]
    document = evaluate(GOLDEN, retrievals, k=1, per_query=True, complete=True).as_json()
    assert document["k"] == 1
    assert document["results"][0] == {
        "runId": "v1",
        "queryId": "q2",
        "resultId": "r1",
        "retrievalMetrics": {
            "recallAtK": 0.0,
            "precisionAtK": 0.0,
            "ndcgAt10": 0.0,
            "mrr": 0.0,
            "hitAtK": 0,
        },
        "judgmentMetrics": {"judgedAtK": 0.0, "candidateNdcgAt10": 0.0},
    }
    assert document["results"][1]["retrievalMetrics"]["precisionAtK"] == 1.0
    # ["b", "a"] against a = 3, b = 1 at k = 1: b is judged; both returned, so the
    # best order of the candidates is the ideal one.
    assert document["results"][1]["judgmentMetrics"] == {"judgedAtK": 1.0, "candidateNdcgAt10": 1.0}
    assert document["results"][2] == {
        "runId": "v1",
        "queryId": "q3",
        "retrievalMetrics": document["results"][0]["retrievalMetrics"],
        "judgmentMetrics": document["results"][0]["judgmentMetrics"],
    }


def test_runs_are_rolled_up_separately() -> None:
    retrievals = [Retrieval("bm25", "q1", ["x"]), Retrieval("dense", "q1", ["a"])]
    runs = evaluate(GOLDEN, retrievals).as_json()["runs"]
    assert list(runs) == ["bm25", "dense"]
    assert runs["bm25"]["metrics"]["hitAtK"] == 0
    assert runs["dense"]["metrics"]["hitAtK"] == 1
