"""Offline evaluation: judged queries and rankings in, one rollup per run out.

The same :func:`scorer.core.metrics.score` and :class:`scorer.core.rollup.RunRollup`
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

Each run, and each facet value of it, also gets its risk–coverage block
(:mod:`scorer.analysis.risk_coverage`) under ``riskCoverage``: rankings ordered by their
confidence, losses ``miss`` and ``ndcgLoss``. A judged query zero-filled by
``complete`` has no ranking, so no confidence: it counts as ``withoutConfidence``.

Several cutoffs are scored in one pass over the rankings (:func:`evaluate_cutoffs`),
one :class:`Evaluation` each. Each run also keeps its per-query means (a
query's rankings averaged, as a JSONL file may hold several), which pair the
queries of two runs in a comparison (:mod:`scorer.analysis.compare`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain

from scorer.analysis.defaults import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_SEED
from scorer.analysis.risk_coverage import LOSSES, RunRiskCoverage
from scorer.core.measures import MEASURES, each, unrolled
from scorer.core.metrics import NDCG_CUTOFF, Judgments, MetricValues, score
from scorer.core.record import Record
from scorer.core.rollup import RunRollup
from scorer.io import (
    Golden,
    InputError,
    InterleavedRun,
    Progress,
    Retrieval,
    iter_retrievals,
)

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any

    from scorer.io.errors import StrPath

ZERO = MetricValues(*(0 if m.integer else 0.0 for m in MEASURES))
"""The measures of an empty ranking: what ``complete`` gives a judged query a run lacks."""


_add_to_query_sums = unrolled(
    """
def add(sums, values):
    {values}, = values
    {sums}
    sums[-1] += 1
""".format(values=each("v$"), sums=each("sums[$] += v$", "\n    ")),
    "add",
)


class ScoredRetrieval(Record):
    """The metrics of one ranking (a row of ``--per-query``; read-only by convention)."""

    __slots__ = ("run_id", "query_id", "result_id", "values", "confidence")  # noqa: RUF023

    def __init__(
        self,
        run_id: str,
        query_id: str,
        result_id: str | None,
        values: MetricValues,
        confidence: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.query_id = query_id
        self.result_id = result_id
        self.values = values
        self.confidence = confidence

    def as_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"runId": self.run_id, "queryId": self.query_id}
        if self.result_id is not None:
            row["resultId"] = self.result_id
        row.update(self.values.as_wire())
        if self.confidence is not None:
            row["confidence"] = self.confidence
        return row


class RunEvaluation(Record):
    """The rollup of one run and the counts of what it left out."""

    __slots__ = (  # noqa: RUF023  (in field order: the repr shows them so)
        "rollup",
        "risk",
        "judged_queries",  # judged query ids this run ranked at least once
        # Query id -> sums of its metrics over its rankings, then their count (the
        # last item): what :meth:`query_means` averages.
        "per_query",
        "results_without_qrels",
        "judged_queries_not_in_run",
        "zero_filled",
        # Scored rankings that repeat an id among the ids they are scored on (their top
        # ``max(k, 10)``): convention 7 scores them, trec_eval refuses such a run.
        "repeating",
    )

    def __init__(self) -> None:
        self.rollup = RunRollup()
        self.risk = RunRiskCoverage()
        self.judged_queries: set[str] = set()
        self.per_query: dict[str, list[float]] = {}
        self.results_without_qrels = 0
        self.judged_queries_not_in_run = 0
        self.zero_filled = 0
        self.repeating = 0

    def add(
        self,
        query_id: str,
        values: MetricValues,
        facets: dict[str, str] | None,
        confidence: float | None = None,
    ) -> None:
        """Fold in one scored ranking of ``query_id`` (``confidence`` None: it has none)."""
        counted = self.rollup.add(values, facets)
        self.risk.add(confidence, values, counted)
        sums = self.per_query.get(query_id)
        if sums is None:
            self.per_query[query_id] = [*values, 1]
            return
        _add_to_query_sums(sums, values)

    def query_means(self) -> dict[str, list[float]]:
        """Query id -> the mean of each metric over that query's rankings (METRIC_NAMES order)."""
        return {
            query_id: [total / sums[-1] for total in sums[:-1]]
            for query_id, sums in self.per_query.items()
        }

    def summary(self) -> dict[str, Any]:
        """:meth:`RunRollup.summary` plus ``riskCoverage`` (overall and in each facet
        value's entry), ``skipped`` (and ``zeroFilled`` when complete)."""
        out = self.rollup.summary()
        out["riskCoverage"] = self.risk.overall.summary()
        for facet, by_value in out["facets"].items():
            for value, entry in by_value.items():
                entry["riskCoverage"] = self.risk.facets[facet][value].summary()
        out["skipped"] = {
            "resultsWithoutQrels": self.results_without_qrels,
            "judgedQueriesNotInRun": self.judged_queries_not_in_run,
        }
        if self.zero_filled:
            out["zeroFilled"] = self.zero_filled
        out["rankingsRepeatingIds"] = self.repeating
        return out


class Evaluation(Record):
    """Every run of one evaluation, by run id, and the per-query rows if asked for."""

    __slots__ = (  # noqa: RUF023  (in field order: the repr shows them so)
        "k",
        "runs",  # in order of first appearance (the first is the baseline of comparisons)
        "results",
        # compare_with_baseline (scorer.analysis.significance) of the runs, when there
        # are several.
        "comparisons",
    )

    def __init__(
        self,
        k: int,
        runs: dict[str, RunEvaluation] | None = None,
        results: list[ScoredRetrieval] | None = None,
        comparisons: dict[str, Any] | None = None,
    ) -> None:
        self.k = k
        self.runs = {} if runs is None else runs
        self.results = results
        self.comparisons = comparisons

    def as_json(self) -> dict[str, Any]:
        """``{"k", "runs": {runId: summary}}``, plus ``"comparisons"`` when several runs
        were compared and ``"results"`` when per-query rows were kept."""
        document: dict[str, Any] = {
            "k": self.k,
            "runs": {run_id: self.runs[run_id].summary() for run_id in sorted(self.runs)},
        }
        if self.comparisons is not None:
            document["comparisons"] = self.comparisons
        if self.results is not None:
            document["results"] = [row.as_json() for row in self.results]
        return document

    def compare_runs(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        permutations: int = DEFAULT_PERMUTATIONS,
        seed: int = DEFAULT_SEED,
    ) -> None:
        """Set :attr:`comparisons`: every run against the first, when there are several."""
        if len(self.runs) < 2:
            self.comparisons = None
            return
        # Imported here: one run compares nothing, and start-up matters (scorer eval).
        from scorer.analysis.significance import compare_with_baseline

        self.comparisons = compare_with_baseline(
            {run_id: run.query_means() for run_id, run in self.runs.items()},
            list(self.runs),
            alpha=alpha,
            permutations=permutations,
            seed=seed,
        )
        for comparison in self.comparisons["runs"]:
            comparison["riskCoverage"] = _aurc_difference(
                self.runs[comparison["runA"]], self.runs[comparison["runB"]]
            )


def _aurc_difference(a: RunEvaluation, b: RunEvaluation) -> dict[str, Any]:
    """Loss name -> ``{"a", "b", "delta"}``: each run's AURC over all its own rankings
    with a confidence, and ``b - a`` (None where a run has none). Not paired and not
    tested: AURC is not a mean over queries, and two runs' confidences are on scales
    of their own, so the per-query tests do not carry over."""
    curves_a, curves_b = a.risk.overall.curves(), b.risk.overall.curves()
    out: dict[str, Any] = {}
    for name in LOSSES:
        aurc_a, aurc_b = curves_a[name].aurc, curves_b[name].aurc
        delta = None if aurc_a is None or aurc_b is None else aurc_b - aurc_a
        out[name] = {"a": aurc_a, "b": aurc_b, "delta": delta}
    return out


def as_document(evaluations: Sequence[Evaluation]) -> dict[str, Any]:
    """The JSON of ``scorer eval``: with one cutoff, that cutoff's
    :meth:`Evaluation.as_json` (the shape is the same whatever else was asked);
    with several, ``{"k": [cutoffs], "cutoffs": {"<k>": as_json}}``."""
    if len(evaluations) == 1:
        return evaluations[0].as_json()
    return {
        "k": [evaluation.k for evaluation in evaluations],
        "cutoffs": {str(evaluation.k): evaluation.as_json() for evaluation in evaluations},
    }


def combine(sources: Sequence[tuple[str, Sequence[Evaluation]]]) -> list[Evaluation]:
    """One evaluation per cutoff of the runs of several sources (``(name, evaluations
    of its cutoffs)``, all at the same cutoffs), in order of the sources.

    A run id (TREC tag) found in more than one source is renamed ``name:runId``
    in every one of them: users often leave the same tag in every file.
    """
    seen: dict[str, int] = {}
    for _, evaluations in sources:
        for run_id in evaluations[0].runs:
            seen[run_id] = seen.get(run_id, 0) + 1
    combined = [
        Evaluation(k=evaluation.k, results=None if evaluation.results is None else [])
        for evaluation in sources[0][1]
    ]
    for name, evaluations in sources:
        for into, evaluation in zip(combined, evaluations, strict=True):
            renamed = {
                run_id: (f"{name}:{run_id}" if seen[run_id] > 1 else run_id)
                for run_id in evaluation.runs
            }
            for run_id, run in evaluation.runs.items():
                into.runs[renamed[run_id]] = run
            if into.results is not None and evaluation.results is not None:
                into.results.extend(
                    ScoredRetrieval(
                        renamed[row.run_id], row.query_id, row.result_id, row.values, row.confidence
                    )
                    for row in evaluation.results
                )
    return combined


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
    (evaluation,) = evaluate_cutoffs(
        golden, retrievals, ks=[k], complete=complete, per_query=per_query
    )
    return evaluation


def evaluate_cutoffs(
    golden: Golden,
    retrievals: Iterable[Retrieval],
    *,
    ks: Sequence[int],
    complete: bool = False,
    per_query: bool = False,
) -> list[Evaluation]:
    """:func:`evaluate` at each cutoff of ``ks`` (in that order), in one pass over
    ``retrievals``: one :class:`Evaluation` per cutoff."""
    if not ks:
        raise ValueError("at least one cutoff is needed")
    for k in ks:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
    evaluations = [Evaluation(k=k, results=[] if per_query else None) for k in ks]
    cutoffs = [
        (k, evaluation.runs, evaluation.results)
        for k, evaluation in zip(ks, evaluations, strict=True)
    ]
    judgments_of: dict[str, Judgments] = {}
    for retrieval in retrievals:
        query_id = retrieval.query_id
        judged = golden.get(query_id)
        if judged is None:
            for _, runs, _ in cutoffs:
                run = runs.get(retrieval.run_id)
                if run is None:
                    run = runs[retrieval.run_id] = RunEvaluation()
                run.results_without_qrels += 1
            continue
        judgments = judgments_of.get(query_id)
        if judgments is None:
            judgments = judgments_of[query_id] = Judgments.from_qrels(judged.qrels)
        facets = judged.facets
        if retrieval.facets:
            facets = {**facets, **retrieval.facets}
        for k, runs, rows in cutoffs:
            run = runs.get(retrieval.run_id)
            if run is None:
                run = runs[retrieval.run_id] = RunEvaluation()
            cutoff = retrieval.k or k
            values = score(retrieval.ranked, judgments, cutoff)
            # The ids the measures are scored on (MRR and candidate nDCG, which look
            # further, count each id once anyway).
            head = retrieval.ranked[: cutoff if cutoff > NDCG_CUTOFF else NDCG_CUTOFF]
            if len(set(head)) != len(head):
                run.repeating += 1
            run.add(query_id, values, facets, retrieval.confidence)
            run.judged_queries.add(query_id)
            if rows is not None:
                row = ScoredRetrieval(
                    retrieval.run_id, query_id, retrieval.result_id, values, retrieval.confidence
                )
                rows.append(row)
    for evaluation in evaluations:
        _account_for_missing(golden, evaluation, complete)
    return evaluations


def _account_for_missing(golden: Golden, evaluation: Evaluation, complete: bool) -> None:
    """Count the judged queries each run lacks, or score them as zeros when ``complete``."""
    rows = evaluation.results
    for run_id, run in evaluation.runs.items():
        missing = [query_id for query_id in golden if query_id not in run.judged_queries]
        if not complete:
            run.judged_queries_not_in_run = len(missing)
            continue
        run.zero_filled = len(missing)
        for query_id in missing:
            run.add(query_id, ZERO, golden[query_id].facets)
            if rows is not None:
                rows.append(ScoredRetrieval(run_id, query_id, None, ZERO))


def evaluate_run_file(
    golden: Golden,
    path: StrPath,
    *,
    k: int = 10,
    complete: bool = False,
    per_query: bool = False,
    progress: Progress | None = None,
) -> Evaluation:
    """:func:`evaluate` of the rankings in ``path`` (a TREC run or JSONL results).

    Raises :class:`scorer.io.InputError` for a bad file.
    """
    (evaluation,) = evaluate_run_file_cutoffs(
        golden, path, ks=[k], complete=complete, per_query=per_query, progress=progress
    )
    return evaluation


def evaluate_run_file_cutoffs(
    golden: Golden | Callable[[], Golden],
    path: StrPath,
    *,
    ks: Sequence[int],
    complete: bool = False,
    per_query: bool = False,
    progress: Progress | None = None,
) -> list[Evaluation]:
    """:func:`evaluate_cutoffs` of the rankings in ``path`` (a TREC run or JSONL results).

    The file is streamed; a TREC run whose queries are not contiguous is read
    again and merged in memory (trec_eval accepts lines in any order).
    ``golden`` may be a call that gives the judgments (the result of a read of
    the qrels going on in another thread): it is called once the run's first
    ranking is in hand, so that the two files are read at the same time; a bad
    qrels file is still the one reported when both are bad.
    Raises :class:`scorer.io.InputError` for a bad file.
    """
    if callable(golden):
        retrievals, golden = _first_ranking_then(golden, path, progress)
    else:
        retrievals = iter_retrievals(path, progress)
    try:
        return evaluate_cutoffs(golden, retrievals, ks=ks, complete=complete, per_query=per_query)
    except InterleavedRun:
        merged = iter_retrievals(path, progress, merge_blocks=True)
        return evaluate_cutoffs(golden, merged, ks=ks, complete=complete, per_query=per_query)


def _first_ranking_then(
    read_golden: Callable[[], Golden], path: StrPath, progress: Progress | None
) -> tuple[Iterator[Retrieval], Golden]:
    """The rankings of ``path`` and ``read_golden()``, called once the first ranking
    has been read (an :class:`InputError` of the qrels wins over the run's)."""
    try:
        retrievals = iter_retrievals(path, progress)
        first = next(retrievals, None)
    except InputError:
        read_golden()  # a bad qrels file is named first, as when it was read first
        raise
    golden = read_golden()
    return (retrievals if first is None else chain([first], retrievals)), golden
