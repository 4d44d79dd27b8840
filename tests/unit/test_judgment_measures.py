"""judged@k and candidate nDCG@10 (issue #34): against an independent implementation
written here (repeats, empty rankings, short lists, k > returned, grades 0 and -1),
against ir-measures' ``Judged@k``, and the seed's worked example."""

from __future__ import annotations

import math

import ir_measures
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.core.metrics import Judgments, retrieval_metrics, score

SEED_QRELS = {"A": 3, "B": 2, "C": 1}
SEED_RANKED = ["B", "X", "A", "C"]


def judged_reference(ranked: list[str], qrels: dict[str, int], k: int) -> float:
    """Share of the slots the ranking fills in its top k whose id is judged (any grade)."""
    slots = ranked[:k]
    if not slots:
        return 0.0
    return sum(1 for doc in slots if doc in qrels) / len(slots)


def _dcg(grades: list[int]) -> float:
    return sum((2**g - 1) / math.log2(rank + 2) for rank, g in enumerate(grades[:10]) if g > 0)


def candidate_reference(ranked: list[str], qrels: dict[str, int]) -> float:
    """nDCG@10 of the distinct returned ids, best grade first, over the ideal DCG."""
    distinct = list(dict.fromkeys(ranked))
    reordered = sorted((qrels.get(doc, 0) for doc in distinct), reverse=True)
    ideal = _dcg(sorted(qrels.values(), reverse=True))
    return _dcg(reordered) / ideal if ideal > 0 else 0.0


docs = st.sampled_from([f"d{i}" for i in range(12)])
qrels_strategy = st.dictionaries(docs, st.integers(-1, 3), max_size=10)
ranked_strategy = st.lists(docs, max_size=25)  # repeats, empty and short lists


@settings(max_examples=500, deadline=None)
@given(ranked=ranked_strategy, qrels=qrels_strategy, k=st.integers(1, 30))
def test_both_equal_the_reference(ranked: list[str], qrels: dict[str, int], k: int) -> None:
    values = retrieval_metrics(ranked, qrels, k)
    assert values.judged_at_k == pytest.approx(judged_reference(ranked, qrels, k), abs=1e-12)
    expected = candidate_reference(ranked, qrels)
    assert values.candidate_ndcg_at_10 == pytest.approx(expected, abs=1e-12)
    assert values.ndcg_at_10 <= values.candidate_ndcg_at_10 + 1e-12
    assert 0.0 <= values.judged_at_k <= 1.0 and 0.0 <= values.candidate_ndcg_at_10 <= 1.0


def test_edge_cases_by_hand() -> None:
    qrels = {"a": 2, "z": 0, "n": -1}
    # Empty ranking: 0 for both.
    empty = retrieval_metrics([], qrels, 10)
    assert (empty.judged_at_k, empty.candidate_ndcg_at_10) == (0.0, 0.0)
    # k > returned: the slots are the 3 returned; grades 0 and -1 are judged.
    short = retrieval_metrics(["z", "x", "n"], qrels, 10)
    assert short.judged_at_k == 2 / 3
    assert short.candidate_ndcg_at_10 == 0.0  # "a" never returned
    # A repeated judged id is judged in every slot it takes; a candidate once.
    repeated = retrieval_metrics(["x", "a", "a", "a"], qrels, 4)
    assert repeated.judged_at_k == 3 / 4
    assert repeated.candidate_ndcg_at_10 == 1.0
    # A relevant id found only below the top max(k, 10) is still a candidate.
    deep = retrieval_metrics([f"x{i}" for i in range(30)] + ["a"], qrels, 5)
    assert (deep.judged_at_k, deep.ndcg_at_10, deep.candidate_ndcg_at_10) == (0.0, 0.0, 1.0)
    assert deep.mrr == 1 / 31
    # Nothing relevant judged: candidate nDCG 0 (as nDCG), judged@k still counts.
    nothing = retrieval_metrics(["z", "n"], {"z": 0, "n": -1}, 2)
    assert (nothing.judged_at_k, nothing.candidate_ndcg_at_10) == (1.0, 0.0)


def test_the_seed_worked_example() -> None:
    values = retrieval_metrics(SEED_RANKED, SEED_QRELS, k=4)
    assert values.judged_at_k == 0.75
    assert values.candidate_ndcg_at_10 == 1.0
    # The gap is ordering loss (a reranker's job); 1 - candidate is the first stage's.
    assert values.candidate_ndcg_at_10 - values.ndcg_at_10 == pytest.approx(1 - 0.73787203840)
    # Reordered by grade the same candidates score the candidate nDCG as plain nDCG.
    assert retrieval_metrics(["A", "B", "C", "X"], SEED_QRELS, 4).ndcg_at_10 == 1.0


def test_a_table_entry_without_the_other_judged_ids_counts_only_relevant_ones() -> None:
    full = Judgments.from_qrels({"a": 1, "z": 0})
    older = Judgments(grades=full.grades, n_relevant=full.n_relevant, ideal_dcg=full.ideal_dcg)
    assert score(["a", "z"], full, 2).judged_at_k == 1.0
    assert score(["a", "z"], older, 2).judged_at_k == 0.5


@settings(max_examples=200, deadline=None)
@given(
    qrels=st.dictionaries(docs, st.integers(-1, 3), min_size=1, max_size=10),
    ranked=st.lists(docs, min_size=1, max_size=12, unique=True),
    k=st.integers(1, 15),
)
def test_judged_at_k_equals_ir_measures(qrels: dict[str, int], ranked: list[str], k: int) -> None:
    """Distinct ids and strictly decreasing scores: no ties at the cut (ir-measures
    breaks score ties by docid ascending, we by docid descending as trec_eval)."""
    run = [ir_measures.ScoredDoc("q", doc, float(len(ranked) - i)) for i, doc in enumerate(ranked)]
    judged = [ir_measures.Qrel("q", doc, grade) for doc, grade in qrels.items()]
    (peer,) = ir_measures.iter_calc([ir_measures.Judged @ k], judged, run)
    assert retrieval_metrics(ranked, qrels, k).judged_at_k == pytest.approx(peer.value, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(ranked=st.lists(docs, min_size=1, max_size=25), qrels=qrels_strategy, k=st.integers(1, 12))
def test_a_joined_ranking_scores_as_its_list(
    ranked: list[str], qrels: dict[str, int], k: int
) -> None:
    """``scorer eval``'s rankings stay joined text (``JoinedRanking``); the candidates
    below the top are found in it without splitting: the same numbers as the list."""
    from scorer.io.runs import JoinedRanking

    judgments = Judgments.from_qrels(qrels)
    assert score(JoinedRanking("\n".join(ranked)), judgments, k) == score(ranked, judgments, k)
