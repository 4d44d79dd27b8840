"""Properties every ranking and qrels must satisfy, on random inputs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.core.metrics import Judgments, retrieval_metrics, score

ids = st.sampled_from([f"d{i}" for i in range(25)])
qrels_strategy = st.dictionaries(ids, st.integers(-2, 5), max_size=15)
ranked_strategy = st.lists(ids, max_size=40)  # repeats allowed: convention 7 applies
k_strategy = st.integers(1, 30)


@settings(max_examples=400)
@given(ranked=ranked_strategy, qrels=qrels_strategy, k=k_strategy)
def test_every_metric_is_within_0_and_1(ranked: list[str], qrels: dict[str, int], k: int) -> None:
    values = retrieval_metrics(ranked, qrels, k)
    assert all(0.0 <= value <= 1.0 for value in values)
    assert values.hit_at_k in (0, 1)


@settings(max_examples=300)
@given(qrels=qrels_strategy, noise=st.lists(st.sampled_from(["x1", "x2", "x3"]), max_size=5))
def test_ideal_ranking_has_ndcg_1(qrels: dict[str, int], noise: list[str]) -> None:
    ideal = sorted((doc for doc, grade in qrels.items() if grade >= 1), key=lambda d: -qrels[d])
    values = retrieval_metrics(ideal + noise, qrels, 10)
    if ideal:
        assert abs(values.ndcg_at_10 - 1.0) < 1e-12
        assert values.mrr == 1.0
    else:
        assert values.ndcg_at_10 == 0.0


@settings(max_examples=300)
@given(
    ranked=st.lists(ids, unique=True, max_size=30),
    qrels=qrels_strategy,
    k=k_strategy,
    data=st.data(),
)
def test_order_of_non_relevant_ids_does_not_change_recall(
    ranked: list[str], qrels: dict[str, int], k: int, data: st.DataObject
) -> None:
    relevant_slots = [i for i, doc in enumerate(ranked) if qrels.get(doc, 0) >= 1]
    others = [doc for doc in ranked if qrels.get(doc, 0) < 1]
    shuffled = data.draw(st.permutations(others))
    reordered = list(ranked)
    other_slots = [i for i in range(len(ranked)) if i not in relevant_slots]
    for slot, doc in zip(other_slots, shuffled, strict=True):
        reordered[slot] = doc
    before = retrieval_metrics(ranked, qrels, k)
    after = retrieval_metrics(reordered, qrels, k)
    assert after.recall_at_k == before.recall_at_k
    # Every measure but judged@k (a grade-0 id is judged, an absent one is not).
    assert after._replace(judged_at_k=0.0) == before._replace(judged_at_k=0.0)


@settings(max_examples=200)
@given(ranked=ranked_strategy, qrels=qrels_strategy, k=k_strategy)
def test_prepared_judgments_score_like_raw_qrels(
    ranked: list[str], qrels: dict[str, int], k: int
) -> None:
    judgments = Judgments.from_qrels(qrels)
    assert score(ranked, judgments, k) == retrieval_metrics(ranked, qrels, k)
    assert score(ranked, judgments, k) == score(ranked, judgments, k)


@settings(max_examples=200)
@given(ranked=ranked_strategy, qrels=qrels_strategy, k=k_strategy)
def test_recall_and_precision_agree_on_hits(
    ranked: list[str], qrels: dict[str, int], k: int
) -> None:
    values = retrieval_metrics(ranked, qrels, k)
    n_relevant = sum(1 for grade in qrels.values() if grade >= 1)
    hits = round(values.precision_at_k * k)
    assert values.recall_at_k == (hits / n_relevant if n_relevant else 0.0)
    assert values.hit_at_k == (1 if hits else 0)
