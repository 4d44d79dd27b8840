"""Realistic sample traffic: a golden set and retrieval results from a few runs.

Queries carry the facets users slice by (``type``, ``popularity``,
``dynamism``). Each run is a simulated retriever whose quality depends on the
facets (tail and fast-changing questions are harder), and a share of the
traffic asks queries that have no judgments, as production traffic does.
Each ranking carries retriever scores, highest first, whose top score (the
result's confidence for risk–coverage) predicts whether the ranking finds a
relevant chunk: a retriever worth letting abstain. Deterministic for a given
seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas import GoldenQuery, RetrievalResult

TYPES = ("factoid", "list", "comparison", "multi-hop", "how-to")
POPULARITY = ("head", "torso", "tail")
DYNAMISM = ("static", "slow-changing", "fast-changing")
RUNS = {"bm25-v1": 0.45, "hybrid-v2": 0.65, "hybrid-v2-rerank": 0.8}
"""Run id -> base chance of placing a relevant chunk high."""

_DIFFICULTY = {"head": 0.0, "torso": 0.1, "tail": 0.25, "static": 0.0, "slow-changing": 0.05}
_DIFFICULTY |= {"fast-changing": 0.2, "multi-hop": 0.15, "comparison": 0.1}


@dataclass(frozen=True)
class DemoTraffic:
    """A golden set and an endless stream of results over it."""

    golden: list[GoldenQuery]
    unjudged_share: float
    seed: int

    @classmethod
    def generate(
        cls, queries: int = 500, unjudged_share: float = 0.3, seed: int = 7
    ) -> DemoTraffic:
        rng = random.Random(seed)
        golden = []
        for index in range(queries):
            query_id = f"q{index:05d}"
            judged = rng.randint(4, 20)
            qrels = {
                f"{query_id}-c{doc:03d}": rng.choices((0, 1, 2, 3), (40, 30, 20, 10))[0]
                for doc in range(judged)
            }
            facets = {
                "type": rng.choice(TYPES),
                "popularity": rng.choices(POPULARITY, (50, 30, 20))[0],
                "dynamism": rng.choices(DYNAMISM, (60, 30, 10))[0],
            }
            golden.append(GoldenQuery(query_id=query_id, qrels=qrels, facets=facets))
        return cls(golden=golden, unjudged_share=unjudged_share, seed=seed)

    def results(self, limit: int | None = None) -> Iterator[RetrievalResult]:
        """Results round-robin over the runs; ``limit`` None means forever."""
        rng = random.Random(self.seed + 1)
        score_rng = random.Random(self.seed + 2)  # apart, so rankings stay as they were
        runs = list(RUNS.items())
        produced = 0
        while limit is None or produced < limit:
            run_id, skill = runs[produced % len(runs)]
            if rng.random() < self.unjudged_share:
                query_id = f"live-{rng.randrange(10**9):09d}"
                ranked = [f"{query_id}-c{i:03d}" for i in range(10)]
                facets = {"type": rng.choice(TYPES)}
                qrels: dict[str, int] = {}
            else:
                golden = rng.choice(self.golden)
                query_id = golden.query_id
                ranked = _ranking(rng, golden, skill, golden.facets or {})
                facets = None
                qrels = golden.qrels
            yield RetrievalResult(
                result_id=f"{run_id}-{produced:09d}",
                run_id=run_id,
                query_id=query_id,
                ranked=ranked,
                scores=_scores(score_rng, ranked, qrels),
                facets=facets,
                timestamp=datetime.now(UTC),
            )
            produced += 1


def _scores(rng: random.Random, ranked: list[str], qrels: dict[str, int]) -> list[float]:
    """Descending scores for ``ranked``: the top one is a noisy logistic of how early the
    first relevant chunk is (none found: low), rounded to 3 decimals (so some tie)."""
    first = next((rank for rank, doc in enumerate(ranked) if qrels.get(doc, 0) > 0), None)
    signal = -2.0 if first is None else 2.5 - 0.5 * first
    top = round(1.0 / (1.0 + math.exp(-(signal + rng.gauss(0.0, 0.7)))), 3)
    scores = [top]
    for _ in ranked[1:]:
        scores.append(round(scores[-1] * rng.uniform(0.85, 0.99), 6))
    return scores


def _ranking(
    rng: random.Random, golden: GoldenQuery, skill: float, facets: dict[str, str]
) -> list[str]:
    """Ten ids: each relevant chunk lands in the list with a chance set by the run's
    skill minus the facets' difficulty, the rest are distractors, shuffled by skill."""
    chance = max(0.05, skill - sum(_DIFFICULTY.get(v, 0.0) for v in facets.values()))
    by_grade = sorted(golden.qrels.items(), key=lambda item: -item[1])
    found = [doc for doc, grade in by_grade if grade > 0 and rng.random() < chance]
    distractors = [f"{golden.query_id}-x{rng.randrange(1000):03d}" for _ in range(10)]
    ranked = found[:10] + distractors[: 10 - len(found[:10])]
    # A weaker run scrambles its order more.
    for i in range(len(ranked) - 1):
        if rng.random() > chance:
            j = rng.randrange(i, len(ranked))
            ranked[i], ranked[j] = ranked[j], ranked[i]
    return ranked
