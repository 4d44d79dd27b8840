"""Offline evaluation: judged queries and rankings in, one rollup per run out.

The same :func:`scorer.metrics.score` and :class:`scorer.rollup.RunRollup`
as the streaming worker, so ``scorer eval`` and the live API report the same
numbers in the same shape.

Which queries count (trec_eval's rules, with nothing hidden):

- a ranking whose query has no qrels is skipped and counted
  (``resultsWithoutQrels``);
- a judged query with no ranking in a run is skipped and counted
  (``judgedQueriesNotInRun``), or, with ``complete``, scored as all zeros
  (trec_eval ``-c``) and counted as ``zeroFilled``;
- a judged query with no relevant id (every grade <= 0) is scored: recall,
  nDCG, MRR and hit are 0 by the conventions, as pytrec_eval, ranx and
  ir-measures also score it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scorer.io import Golden, InterleavedRun, Progress, Retrieval, iter_retrievals
from scorer.metrics import Judgments, MetricValues, score
from scorer.rollup import RunRollup

ZERO = MetricValues(recall_at_k=0.0, precision_at_k=0.0, ndcg_at_10=0.0, mrr=0.0, hit_at_k=0)
"""The metrics of an empty ranking: what ``complete`` gives a judged query a run lacks."""


@dataclass(frozen=True, slots=True)
class ScoredRetrieval:
    """The metrics of one ranking (a row of ``--per-query``)."""

    run_id: str
    query_id: str
    result_id: str | None
    values: MetricValues

    def as_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"runId": self.run_id, "queryId": self.query_id}
        if self.result_id is not None:
            row["resultId"] = self.result_id
        row["retrievalMetrics"] = self.values.as_wire()
        return row


@dataclass(slots=True)
class RunEvaluation:
    """The rollup of one run and the counts of what it left out."""

    rollup: RunRollup = field(default_factory=RunRollup)
    judged_queries: set[str] = field(default_factory=set)
    """Judged query ids this run ranked at least once."""
    results_without_qrels: int = 0
    judged_queries_not_in_run: int = 0
    zero_filled: int = 0

    def summary(self) -> dict[str, Any]:
        """:meth:`RunRollup.summary` plus ``skipped`` (and ``zeroFilled`` when complete)."""
        out = self.rollup.summary()
        out["skipped"] = {
            "resultsWithoutQrels": self.results_without_qrels,
            "judgedQueriesNotInRun": self.judged_queries_not_in_run,
        }
        if self.zero_filled:
            out["zeroFilled"] = self.zero_filled
        return out


@dataclass(slots=True)
class Evaluation:
    """Every run of one evaluation, by run id, and the per-query rows if asked for."""

    k: int
    runs: dict[str, RunEvaluation] = field(default_factory=dict)
    results: list[ScoredRetrieval] | None = None

    def as_json(self) -> dict[str, Any]:
        """``{"k", "runs": {runId: summary}}`` plus ``"results"`` when per-query rows were kept."""
        document: dict[str, Any] = {
            "k": self.k,
            "runs": {run_id: self.runs[run_id].summary() for run_id in sorted(self.runs)},
        }
        if self.results is not None:
            document["results"] = [row.as_json() for row in self.results]
        return document


def evaluate(
    golden: Golden,
    retrievals: Iterable[Retrieval],
    *,
    k: int = 10,
    complete: bool = False,
    per_query: bool = False,
) -> Evaluation:
    """Score every ranking against its query's qrels and roll the runs up.

    ``k`` is the cutoff of recall, precision and hit unless a ranking carries its
    own. Facets are the golden set's, overridden key by key by the ranking's.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    evaluation = Evaluation(k=k, results=[] if per_query else None)
    runs = evaluation.runs
    rows = evaluation.results
    judgments_of: dict[str, Judgments] = {}
    for retrieval in retrievals:
        run = runs.get(retrieval.run_id)
        if run is None:
            run = runs[retrieval.run_id] = RunEvaluation()
        query_id = retrieval.query_id
        judged = golden.get(query_id)
        if judged is None:
            run.results_without_qrels += 1
            continue
        judgments = judgments_of.get(query_id)
        if judgments is None:
            judgments = judgments_of[query_id] = Judgments.from_qrels(judged.qrels)
        values = score(retrieval.ranked, judgments, retrieval.k or k)
        facets = judged.facets
        if retrieval.facets:
            facets = {**facets, **retrieval.facets}
        run.rollup.add(values, facets)
        run.judged_queries.add(query_id)
        if rows is not None:
            rows.append(ScoredRetrieval(retrieval.run_id, query_id, retrieval.result_id, values))
    for run_id, run in runs.items():
        missing = [query_id for query_id in golden if query_id not in run.judged_queries]
        if not complete:
            run.judged_queries_not_in_run = len(missing)
            continue
        run.zero_filled = len(missing)
        for query_id in missing:
            run.rollup.add(ZERO, golden[query_id].facets)
            if rows is not None:
                rows.append(ScoredRetrieval(run_id, query_id, None, ZERO))
    return evaluation


def evaluate_run_file(
    golden: Golden,
    path: Path,
    *,
    k: int = 10,
    complete: bool = False,
    per_query: bool = False,
    progress: Progress | None = None,
) -> Evaluation:
    """:func:`evaluate` of the rankings in ``path`` (a TREC run or JSONL results).

    The file is streamed; a TREC run whose queries are not contiguous is read
    again and merged in memory (trec_eval accepts lines in any order).
    Raises :class:`scorer.io.InputError` for a bad file.
    """
    try:
        return evaluate(
            golden, iter_retrievals(path, progress), k=k, complete=complete, per_query=per_query
        )
    except InterleavedRun:
        merged = iter_retrievals(path, progress, merge_blocks=True)
        return evaluate(golden, merged, k=k, complete=complete, per_query=per_query)
