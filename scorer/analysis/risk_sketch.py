"""Risk–coverage of a live run in bounded state: a sketch of the confidences.

The offline block (:mod:`scorer.analysis.risk_coverage`) keeps every result; a run in
the streaming worker keeps this instead, in its rollup state, and answers the
same JSON block (:meth:`RiskSketch.summary`) from it. Definitions (confidence,
losses, ties by expectation, AURC, optimal AURC, E-AURC) are docs/metrics.md's
("Risk–coverage") and the losses are :func:`scorer.analysis.risk_coverage.losses_of`.

**Confidence buckets** (DDSketch-style, Masson, Rim & Lee 2019): a confidence
``x`` goes to the bucket ``ceil(log|x| / log(gamma))`` of its sign (zero has a
bucket of its own), ``gamma = (1 + a) / (1 - a)`` with relative accuracy
``a = RELATIVE_ACCURACY``: ``2 gamma^i / (gamma + 1)`` is within ``a x`` of
every confidence ``x`` of bucket ``i``. A bucket holds the count of its results and the sums
of their two losses, and **is a tie group**: inside it, losses count by the
bucket's mean loss, as docs/metrics.md's ties do. At most ``MAX_BUCKETS`` buckets:
beyond, the buckets nearest zero are folded into zero's (both signs at once,
the smallest magnitude first), so the state stays bounded whatever the
confidences: relative accuracy is cheap far from zero and dear near it (a
logit or a score around 0 spans many orders of magnitude that rank few
results). Which buckets are folded depends only on the set of buckets seen,
not on the order of the results; ``bounds()["zeroWidth"]`` says how far from 0
confidences count as 0.

**Optimal AURC**. For ``miss`` (0 or 1) it is exact from the totals: the optimum
puts every hit before every miss. For ``ndcgLoss`` a histogram of the losses
(``LOSS_BINS`` bins of equal width on [0, 1], each with count and sum) stands for
the sorted losses, each bin a tie group: exact when each bin holds a single
loss value (0 and 1, a perfect and a missed ranking, always do), otherwise
above the exact optimum by less than ``1 / LOSS_BINS``. It is capped at the
sketch's AURC, which is at least the exact optimum (it is the mean AURC over
the orders inside buckets): so AURC >= optimal AURC, and a confidence that
orders the losses perfectly at the buckets' resolution has E-AURC 0.

**The bound.** Losses lie in [0, 1], so from the buckets alone the exact AURC
lies in an interval :meth:`RiskSketch.bounds` computes (inside a bucket of
``c`` results with loss sum ``L``, the ``k`` counted first sum to between
``max(0, L - (c - k))`` and ``min(k, L)``); and the exact optimal ``ndcgLoss``
AURC between the least the histogram allows (inside a bin ``[low, high]`` the
``k`` smallest losses sum to at least ``max(k * low, sum - (count - k) * high)``)
and its ties-in-bins value. The API serves both intervals beside the block. They are
worst cases (every result ordered against its confidence inside its bucket);
the measured difference on random results is far smaller (docs/metrics.md).

The area sums ``r(i)`` over a bucket in closed form with harmonic numbers, so
answering costs the number of buckets, not of results.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scorer.analysis.risk_coverage import LOSSES, LossCurve, curve_positions, losses_of
from scorer.core.metrics import MetricValues

RELATIVE_ACCURACY = 0.01
MAX_BUCKETS = 512
LOSS_BINS = 100
_LOG_GAMMA = math.log((1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY))
_KEY_OFFSET = 40_000
"""Added to a bucket index (-37,220 for the smallest subnormal, 35,490 for the largest
float) so that the signed key orders buckets as their confidences: higher is more confident."""
_DIRECT_TERMS = 64


def bucket_key(confidence: float) -> int:
    """The bucket of a finite confidence, as an integer that sorts like the confidences."""
    if confidence == 0:
        return 0
    key = math.ceil(math.log(abs(confidence)) / _LOG_GAMMA) + _KEY_OFFSET
    return key if confidence > 0 else -key


def _bucket_top(magnitude: int) -> float:
    """The largest confidence magnitude of the buckets ``magnitude`` (either sign)."""
    return math.exp((magnitude - _KEY_OFFSET) * _LOG_GAMMA)


def _bin_range(index: int, mean: float) -> tuple[float, float]:
    """The loss range of a bin, widened to its mean against rounding."""
    return min(index / LOSS_BINS, mean), max((index + 1) / LOSS_BINS, mean)


def _harmonic_tail(n: int) -> float:
    """``H(n) - log(n) - Euler's gamma``, its asymptotic series (error < 1e-15 for n >= 64)."""
    inverse_square = 1.0 / (n * n)
    return 0.5 / n - inverse_square * (1 / 12 - inverse_square * (1 / 120 - inverse_square / 252))


def harmonic_span(a: int, b: int) -> float:
    """``1/(a+1) + ... + 1/b`` (0 when ``b <= a``)."""
    if b <= a:
        return 0.0
    if b - a <= _DIRECT_TERMS:
        return math.fsum(1.0 / i for i in range(a + 1, b + 1))
    if a < _DIRECT_TERMS:
        return harmonic_span(a, _DIRECT_TERMS) + harmonic_span(_DIRECT_TERMS, b)
    return math.log1p((b - a) / a) + _harmonic_tail(b) - _harmonic_tail(a)


def _linear_span(before: int, k1: int, k2: int, base: float, slope: float) -> float:
    """``sum over k = k1+1..k2 of (base + slope * k) / (before + k)``: the risks of the
    positions ``before + k`` when the first ``before + k`` losses sum to ``base + slope * k``."""
    return (base - slope * before) * harmonic_span(before + k1, before + k2) + slope * (k2 - k1)


def _split(count: int, at: float) -> int:
    return min(count, max(0, math.floor(at)))


@dataclass(frozen=True, slots=True)
class _Group:
    """Results ranked together: their count and loss sum (and loss range, for bins)."""

    count: int
    loss: float
    low: float = 0.0
    high: float = 1.0


def _tie_area(groups: Iterable[_Group]) -> float:
    """``r(1) + ... + r(n)`` with each group a tie group (its mean loss at every step)."""
    total = before = 0
    counted = 0.0
    for group in groups:
        total += _linear_span(before, 0, group.count, counted, group.loss / group.count)
        before += group.count
        counted += group.loss
    return total


def _bounded_area(groups: Iterable[_Group], low: bool) -> float:
    """``r(1) + ... + r(n)`` with the ``k`` first losses of each group summing to their
    least (``low``) or most possible given its count, sum and range."""
    total = before = 0
    counted = 0.0
    for g in groups:
        c, loss = g.count, g.loss
        width = g.high - g.low
        if width <= 0:
            total += _linear_span(before, 0, c, counted, g.low)
        elif low:  # max(k * low, L - (c - k) * high)
            j = _split(c, (c * g.high - loss) / width)
            total += _linear_span(before, 0, j, counted, g.low)
            total += _linear_span(before, j, c, counted + loss - c * g.high, g.high)
        else:  # min(k * high, L - (c - k) * low)
            j = _split(c, (loss - c * g.low) / width)
            total += _linear_span(before, 0, j, counted, g.high)
            total += _linear_span(before, j, c, counted + loss - c * g.low, g.low)
        before += c
        counted += loss
    return total


def _tie_curve(groups: Sequence[_Group], positions: Sequence[int], n: int) -> list[list[float]]:
    """``[[i / n, r(i)]]`` at ``positions`` (ascending), each group a tie group."""
    curve = []
    index = before = 0
    counted = 0.0
    for group in groups:
        end = before + group.count
        mean = group.loss / group.count
        while index < len(positions) and positions[index] <= end:
            i = positions[index]
            curve.append([i / n, _unit((counted + (i - before) * mean) / i)])
            index += 1
        before = end
        counted += group.loss
    return curve


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))


@dataclass(slots=True)
class RiskSketch:
    """A run's risk–coverage in bounded state (module docstring).

    ``buckets``: bucket key -> ``[count, miss sum, ndcgLoss sum]``; ``loss_bins``:
    ndcgLoss bin -> ``[count, sum]``; ``folded``: once buckets were folded,
    the largest magnitude ``abs(key)`` folded into the zero bucket (keys of that
    magnitude or less go to it).
    """

    buckets: dict[int, list[Any]] = field(default_factory=dict)
    loss_bins: dict[int, list[Any]] = field(default_factory=dict)
    without_confidence: int = 0
    folded: int | None = None
    max_buckets: int = MAX_BUCKETS

    def add(self, confidence: float | None, values: MetricValues) -> None:
        """Fold in one scored result (``confidence`` None: counted as without one)."""
        if confidence is None:
            self.without_confidence += 1
            return
        miss, ndcg_loss = losses_of(values)
        self._add_to_bucket(bucket_key(confidence), 1, int(miss), ndcg_loss)
        self._add_to_bin(min(LOSS_BINS - 1, max(0, int(ndcg_loss * LOSS_BINS))), 1, ndcg_loss)
        self._collapse()

    def _add_to_bucket(self, key: int, count: int, misses: int, ndcg_loss: float) -> None:
        if self.folded is not None and abs(key) <= self.folded:
            key = 0
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [count, misses, ndcg_loss]
        else:
            bucket[0] += count
            bucket[1] += misses
            bucket[2] += ndcg_loss

    def _add_to_bin(self, index: int, count: int, total: float) -> None:
        held = self.loss_bins.get(index)
        if held is None:
            self.loss_bins[index] = [count, total]
        else:
            held[0] += count
            held[1] += total

    def _collapse(self) -> None:
        """Fold the buckets nearest zero into zero's until at most ``max_buckets`` remain."""
        if len(self.buckets) <= self.max_buckets:
            return
        kept = len(self.buckets) + (0 not in self.buckets)
        for magnitude in sorted({abs(key) for key in self.buckets if key}):
            kept -= (magnitude in self.buckets) + (-magnitude in self.buckets)
            if kept <= self.max_buckets:
                break
        self._fold(magnitude)

    def _fold(self, magnitude: int) -> None:
        """Fold every bucket of ``magnitude`` or less into the zero bucket, now and on."""
        self.folded = magnitude
        for key in [key for key in self.buckets if key and abs(key) <= magnitude]:
            self._add_to_bucket(0, *self.buckets.pop(key))

    def merge(self, other: RiskSketch) -> None:
        """Fold in another sketch (of other results) with the same bucket cap."""
        if other.folded is not None and (self.folded is None or other.folded > self.folded):
            self._fold(other.folded)
        for key, (count, misses, ndcg_loss) in other.buckets.items():
            self._add_to_bucket(key, count, misses, ndcg_loss)
        for index, (count, total) in other.loss_bins.items():
            self._add_to_bin(index, count, total)
        self.without_confidence += other.without_confidence
        self._collapse()

    @property
    def with_confidence(self) -> int:
        return sum(bucket[0] for bucket in self.buckets.values())

    def _groups(self) -> dict[str, list[_Group]]:
        """Per loss, the buckets as tie groups, most confident first."""
        ordered = [self.buckets[key] for key in sorted(self.buckets, reverse=True)]
        return {
            "miss": [_Group(count, misses) for count, misses, _ in ordered],
            "ndcgLoss": [_Group(count, ndcg_loss) for count, _, ndcg_loss in ordered],
        }

    def _optimal_groups(self) -> dict[str, list[_Group]]:
        """Per loss, the losses sorted ascending: hits then misses; the ndcgLoss bins."""
        n = self.with_confidence
        misses = sum(bucket[1] for bucket in self.buckets.values())
        return {
            "miss": [
                g for g in (_Group(n - misses, 0, 0, 0), _Group(misses, misses, 1, 1)) if g.count
            ],
            "ndcgLoss": [
                _Group(count, total, *_bin_range(index, total / count))
                for index, (count, total) in sorted(self.loss_bins.items())
            ],
        }

    def curves(self) -> dict[str, LossCurve]:
        """Loss name -> its :class:`LossCurve` from the sketch (None values when empty)."""
        n = self.with_confidence
        if n == 0:
            return {name: LossCurve(None, None, None, []) for name in LOSSES}
        positions = curve_positions(n)
        optimal_groups = self._optimal_groups()
        curves = {}
        for name, groups in self._groups().items():
            aurc = _unit(_tie_area(groups) / n)
            optimal = min(_unit(_tie_area(optimal_groups[name]) / n), aurc)
            curves[name] = LossCurve(
                aurc, optimal, max(0.0, aurc - optimal), _tie_curve(groups, positions, n)
            )
        return curves

    def summary(self) -> dict[str, Any]:
        """The offline block's shape
        (:meth:`scorer.analysis.risk_coverage.RiskCoverage.summary`)."""
        block: dict[str, Any] = {
            "withConfidence": self.with_confidence,
            "withoutConfidence": self.without_confidence,
        }
        for name, curve in self.curves().items():
            block[name] = curve.as_json()
        return block

    def bounds(self) -> dict[str, Any]:
        """Where the exact values lie, from the sketch alone, and its size:
        ``{"relativeAccuracy", "buckets", "maxBuckets", "lossBins", "zeroWidth",
        "aurcWithin": {loss: [low, high]}, "optimalAurcWithin": {loss: [low, high]}}``
        (intervals None when there is no result with a confidence). ``zeroWidth``:
        confidences closer to 0 than this share zero's bucket (0.0 until buckets
        were folded)."""
        n = self.with_confidence
        out: dict[str, Any] = {
            "relativeAccuracy": RELATIVE_ACCURACY,
            "buckets": len(self.buckets),
            "maxBuckets": self.max_buckets,
            "lossBins": LOSS_BINS,
            "zeroWidth": 0.0 if self.folded is None else _bucket_top(self.folded),
            "aurcWithin": dict.fromkeys(LOSSES),
            "optimalAurcWithin": dict.fromkeys(LOSSES),
        }
        if n == 0:
            return out
        optimal_groups = self._optimal_groups()
        for name, groups in self._groups().items():
            out["aurcWithin"][name] = [
                _unit(_bounded_area(groups, low=True) / n),
                _unit(_bounded_area(groups, low=False) / n),
            ]
            out["optimalAurcWithin"][name] = [
                _unit(_bounded_area(optimal_groups[name], low=True) / n),
                _unit(_tie_area(optimal_groups[name]) / n),
            ]
        return out

    def to_state(self) -> dict[str, Any]:
        """JSON-ready state, buckets and bins in key order."""
        return {
            "buckets": [[key, *self.buckets[key]] for key in sorted(self.buckets)],
            "lossBins": [[index, *self.loss_bins[index]] for index in sorted(self.loss_bins)],
            "withoutConfidence": self.without_confidence,
            "folded": self.folded,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> RiskSketch:
        """The sketch of :meth:`to_state` (an empty one for None: a run state from before
        the sketch existed)."""
        if state is None:
            return cls()
        return cls(
            buckets={int(key): [int(c), int(m), float(s)] for key, c, m, s in state["buckets"]},
            loss_bins={int(index): [int(c), float(s)] for index, c, s in state["lossBins"]},
            without_confidence=int(state["withoutConfidence"]),
            folded=state["folded"],
        )
