"""Synthetic scored results whose confidence predicts their losses, shared by the
risk–coverage sketch's tests and bench/risk_sketch.py."""

from __future__ import annotations

import math
import random

from scorer.core.metrics import MetricValues


def predictive_results(count: int, seed: int, logits: bool) -> list[tuple[float, MetricValues]]:
    """Results whose confidence predicts their losses: a probability in (0, 1), or a
    logit (any sign, spread over many orders of magnitude); 2% exact ties. Only
    hit@k and nDCG@10 are set (the two losses read nothing else)."""
    rng = random.Random(seed)
    results = []
    for _ in range(count):
        chance = rng.random()
        confidence = math.log(chance / (1 - chance)) if logits else chance
        if rng.random() < 0.02:
            confidence = round(confidence, 1)
        hit = int(rng.random() < chance)
        ndcg = min(1.0, chance * rng.random() * 1.5) if hit else 0.0
        results.append((confidence, MetricValues(0.0, 0.0, ndcg, 0.0, hit, 0.0, ndcg)))
    return results
