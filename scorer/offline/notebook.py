"""The Python API for notebooks: ``scorer.evaluate`` and ``scorer.compare_runs``
(:func:`evaluate` and :func:`compare` here).

They take what pytrec_eval and ranx users already hold and return what
``scorer eval --format json`` prints (the same code underneath):

- qrels: ``{query_id: {doc_id: grade}}`` (integer grades), or a pandas DataFrame
  with a query, a doc and a grade column;
- a run: ``{query_id: {doc_id: score}}`` (ordered as trec_eval orders it: score
  descending, ties by doc id descending), or a pandas DataFrame with a query, a
  doc and a score column, and optionally a run column (its values are run ids:
  a frame may hold several runs).

DataFrame columns are found by their usual names (TREC, ir_datasets, PyTerrier,
ranx): query ``qid``/``query_id``/``q_id``/``queryId``; doc ``docno``/``docid``/
``doc_id``/``docId``; grade ``rel``/``relevance``/``label``/``grade``/``score``;
score ``score``; run ``tag``/``run``/``run_id``/``runId``/``name``. pandas is
imported only if a DataFrame is given.

Example::

    import scorer
    qrels = {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    bm25 = {"q1": {"d2": 9.1, "d1": 7.5}, "q2": {"d3": 3.2}}
    dense = {"q1": {"d1": 0.9, "d2": 0.4}, "q2": {"d9": 0.8, "d3": 0.7}}
    scorer.evaluate(qrels, bm25, k=10)["runs"]["run"]["metrics"]["ndcgAt10"]
    scorer.compare_runs(qrels, {"bm25": bm25, "dense": dense})["comparisons"]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from scorer.analysis.defaults import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_SEED
from scorer.io import Golden, JudgedQuery, Retrieval, trec_order
from scorer.offline.evaluation import as_document, evaluate_cutoffs

QUERY_COLUMNS = ("qid", "query_id", "q_id", "queryId")
DOC_COLUMNS = ("docno", "docid", "doc_id", "docId")
GRADE_COLUMNS = ("rel", "relevance", "label", "grade", "score")
SCORE_COLUMNS = ("score",)
RUN_COLUMNS = ("tag", "run", "run_id", "runId", "name")
DEFAULT_RUN_ID = "run"
"""The run id of a run given as a dict (or a DataFrame without a run column) to
:func:`evaluate`."""

Qrels = Mapping[str, Mapping[str, int]] | Any
Run = Mapping[str, Mapping[str, float]] | Any


def evaluate(
    qrels: Qrels,
    run: Run,
    k: int | Sequence[int] = 10,
    *,
    complete: bool = False,
    per_query: bool = False,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """Score ``run`` against ``qrels``: the document ``scorer eval --format json``
    prints (``{"k", "runs": {runId: {"count", "metrics", "ci95", "facets",
    "riskCoverage", "skipped"}}}``, per cutoff when ``k`` is a list; a query's
    highest score is its confidence in ``riskCoverage``, as in a TREC run). A
    DataFrame holding several runs gives their comparisons with the first too
    (``alpha``, ``permutations``, ``seed``).

    Raises ValueError for a grade that is not an integer, a score that is not a
    finite number, or a DataFrame without the columns it needs.
    """
    return _evaluate(
        qrels,
        list(_rankings_of(run, DEFAULT_RUN_ID, by_run_column=True)),
        k,
        complete=complete,
        per_query=per_query,
        alpha=alpha,
        permutations=permutations,
        seed=seed,
    )


def compare(
    qrels: Qrels,
    runs: Mapping[str, Run],
    k: int | Sequence[int] = 10,
    *,
    complete: bool = False,
    per_query: bool = False,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """Score each of ``runs`` (run id -> run; the first is the baseline; the key names
    the run, whatever a DataFrame's run column says) and compare every other with
    it: :func:`evaluate`'s document plus ``"comparisons"`` (paired t-test and paired
    randomization test, Holm-corrected; :mod:`scorer.analysis.significance`).
    """
    if len(runs) < 2:
        raise ValueError("compare needs at least two runs (the first is the baseline)")
    rankings = [
        ranking
        for run_id, run in runs.items()
        for ranking in _rankings_of(run, run_id, by_run_column=False)
    ]
    return _evaluate(
        qrels,
        rankings,
        k,
        complete=complete,
        per_query=per_query,
        alpha=alpha,
        permutations=permutations,
        seed=seed,
    )


def _evaluate(
    qrels: Qrels,
    rankings: list[Retrieval],
    k: int | Sequence[int],
    *,
    complete: bool,
    per_query: bool,
    alpha: float,
    permutations: int,
    seed: int,
) -> dict[str, Any]:
    ks = [k] if isinstance(k, int) else list(k)
    evaluations = evaluate_cutoffs(
        _golden_of(qrels), rankings, ks=ks, complete=complete, per_query=per_query
    )
    for evaluation in evaluations:
        evaluation.compare_runs(alpha=alpha, permutations=permutations, seed=seed)
    return as_document(evaluations)


def _is_data_frame(value: object) -> bool:
    # Told without importing pandas, which only a DataFrame's owner has paid for.
    return type(value).__module__.startswith("pandas") and hasattr(value, "columns")


def _column(frame: Any, names: Sequence[str], what: str, *, required: bool = True) -> str | None:
    for name in names:
        if name in frame.columns:
            return name
    if required:
        raise ValueError(
            f"the DataFrame has no {what} column (one of {', '.join(names)}); "
            f"its columns: {', '.join(map(str, frame.columns))}"
        )
    return None


def _grade(value: Any, query_id: str, doc_id: str) -> int:
    grade = int(value)
    if grade != value:
        raise ValueError(f"query {query_id}, doc {doc_id}: grade {value!r} is not an integer")
    return grade


def _golden_of(qrels: Qrels) -> Golden:
    golden: Golden = {}
    if _is_data_frame(qrels):
        query = _column(qrels, QUERY_COLUMNS, "query")
        doc = _column(qrels, DOC_COLUMNS, "doc")
        grade = _column(qrels, GRADE_COLUMNS, "grade")
        for query_id, doc_id, value in zip(qrels[query], qrels[doc], qrels[grade], strict=True):
            judged = golden.setdefault(str(query_id), JudgedQuery(qrels={}))
            judged.qrels[str(doc_id)] = _grade(value, query_id, doc_id)
        return golden
    for query_id, judgments in qrels.items():
        golden[str(query_id)] = JudgedQuery(
            qrels={
                str(doc_id): _grade(value, query_id, doc_id) for doc_id, value in judgments.items()
            }
        )
    return golden


def _ranking(run_id: str, query_id: str, docs: list[str], scores: list[float]) -> Retrieval:
    for doc_id, value in zip(docs, scores, strict=True):
        if not math.isfinite(value):
            raise ValueError(f"query {query_id}, doc {doc_id}: score is not a finite number")
    # The confidence of risk-coverage: the score ranked first, as in a TREC run.
    confidence = max(scores) if scores else None
    return Retrieval(run_id, query_id, trec_order(docs, scores), confidence=confidence)


def _rankings_of(run: Run, run_id: str, *, by_run_column: bool) -> Iterator[Retrieval]:
    """The rankings of ``run`` in trec_eval's order, named ``run_id``, or with
    ``by_run_column`` by a DataFrame's run column if it has one."""
    if not _is_data_frame(run):
        for query_id, scored in run.items():
            docs = [str(doc_id) for doc_id in scored]
            yield _ranking(run_id, str(query_id), docs, [float(v) for v in scored.values()])
        return
    query = _column(run, QUERY_COLUMNS, "query")
    doc = _column(run, DOC_COLUMNS, "doc")
    score = _column(run, SCORE_COLUMNS, "score")
    tag = _column(run, RUN_COLUMNS, "run", required=False) if by_run_column else None
    tags = run[tag] if tag is not None else [run_id] * len(run)
    lines: dict[tuple[str, str], tuple[list[str], list[float]]] = {}
    for run_name, query_id, doc_id, value in zip(
        tags, run[query], run[doc], run[score], strict=True
    ):
        docs, scores = lines.setdefault((str(run_name), str(query_id)), ([], []))
        docs.append(str(doc_id))
        scores.append(float(value))
    for (run_name, query_id), (docs, scores) in lines.items():
        yield _ranking(run_name, query_id, docs, scores)
