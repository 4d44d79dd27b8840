"""Demo traffic: rankings carry scores whose top one predicts a miss, so the demo's
risk–coverage numbers are those of a retriever worth letting abstain."""

from __future__ import annotations

from scorer.analysis.risk_coverage import RiskCoverage
from scorer.core.metrics import retrieval_metrics
from scorer.kafka.demo import RUNS, DemoTraffic


def test_every_ranking_has_descending_scores_one_per_id() -> None:
    demo = DemoTraffic.generate(queries=50, unjudged_share=0.3, seed=1)
    for result in demo.results(limit=300):
        assert result.scores is not None
        assert len(result.scores) == len(result.ranked)
        assert result.scores == sorted(result.scores, reverse=True)
        assert 0.0 < result.top_confidence() < 1.0


def test_the_confidence_predicts_misses_for_every_run() -> None:
    demo = DemoTraffic.generate(queries=300, unjudged_share=0.0, seed=7)
    golden = {query.query_id: query.qrels for query in demo.golden}
    blocks = {run: RiskCoverage() for run in RUNS}
    for result in demo.results(limit=9_000):
        values = retrieval_metrics(result.ranked, golden[result.query_id], 10)
        blocks[result.run_id].add(result.top_confidence(), values)
    for run, block in blocks.items():
        summary = block.summary()
        assert summary["withConfidence"] == 3_000, run
        miss, ndcg_loss = summary["miss"], summary["ndcgLoss"]
        assert 0.0 < miss["eAurc"] < 0.35 * miss["aurc"], run
        assert 0.0 < ndcg_loss["eAurc"] < 0.6 * ndcg_loss["aurc"], run
