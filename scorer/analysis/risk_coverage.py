"""Risk–coverage of retrieval (selective retrieval): AURC, optimal AURC, E-AURC.

If the system answered only when retrieval was confident, what share of the
traffic would it serve (coverage) and how often would retrieval fail on it
(selective risk)? Pinned in docs/metrics.md ("Risk–coverage"); Geifman & El-Yaniv
(2017) for selective risk, Geifman, Uziel & El-Yaniv (2019) for AURC and E-AURC.

For the ``n`` results that have a confidence, sorted by confidence, highest
first, with loss ``l_j`` in [0, 1]:

- coverage ``c = i / n`` and selective risk ``r(i) = (l_1 + ... + l_i) / i``;
- **ties by expectation**: results of equal confidence are one group, and at
  any ``i`` inside a group the losses counted from it are ``(i - results
  before the group) x (the group's mean loss)``, the mean over every order of
  the group, so no input order changes a number;
- ``AURC = (1/n) x (r(1) + ... + r(n))``; the **optimal AURC** is the same with
  the losses sorted ascending (a confidence that orders them perfectly);
  ``E-AURC = AURC - optimal AURC``. All in [0, 1]; lower is better.

Two losses per result: ``miss = 1 - hitAtK`` and ``ndcgLoss = 1 - ndcgAt10``.
A result without a confidence is counted (``withoutConfidence``) and left out.

Exact up to floating point, and the same in any input order: every loss is
kept; the loss sums grow one loss at a time in confidence order, except inside
a tie group of unequal losses, whose sum is ``math.fsum`` (correctly rounded);
the sum of the ``r(i)`` is ``math.fsum`` too. A confidence that sorts the
losses perfectly goes through the very operations of the optimum, so its
E-AURC is exactly 0. AURC >= optimal AURC holds mathematically; rounding could
put AURC an ulp under an optimum within rounding of it, so E-AURC is clamped
at 0, and every value at [0, 1].
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate, compress, islice
from operator import eq, truediv

from scorer.core.metrics import MetricValues
from scorer.core.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LOSSES = ("miss", "ndcgLoss")
"""Wire names of the two losses, in the order :meth:`RiskCoverage.add` takes them."""

CURVE_STEPS = 100
"""The curve has a point at the first result and at every 1/CURVE_STEPS of
coverage: at most CURVE_STEPS + 1 points (every point when n <= CURVE_STEPS)."""


def curve_positions(n: int, steps: int = CURVE_STEPS) -> list[int]:
    """The ``i`` (1..n) at which the curve is reported: 1, and the smallest ``i``
    with ``i / n >= j / steps`` for ``j = 1..steps``; all of 1..n when ``n <= steps``."""
    if n <= 0:
        return []
    return sorted({1, *(-(-j * n // steps) for j in range(1, steps + 1))})


def losses_of(values: MetricValues) -> tuple[int, float]:
    """The two losses of one scored result, in :data:`LOSSES` order:
    ``miss = 1 - hitAtK`` and ``ndcgLoss = 1 - ndcgAt10``."""
    return 1 - values.hit_at_k, 1.0 - values.ndcg_at_10


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))


def _prefix_sums(confidences: Sequence[float], losses: Sequence[float]) -> list[float]:
    """``S(1..n)``: the expected loss sum of the ``i`` most confident results, ties
    by expectation.

    Losses are added one at a time in confidence order, except inside a tie group
    of unequal losses, where ``S`` grows by the group's mean (its sum by
    ``math.fsum``, so in any input order). A group of equal losses is walked one
    loss at a time (its mean is that loss), the way the optimum walks equal
    losses: a confidence that sorts the losses perfectly then goes through the
    very same floating-point operations as the optimum, and E-AURC is exactly 0.
    """
    order = sorted(range(len(confidences)), key=confidences.__getitem__, reverse=True)
    ranked = [confidences[index] for index in order]
    # i where ranked[i] == ranked[i + 1]: few, as ties are
    ties = list(compress(range(len(ranked) - 1), map(eq, ranked, islice(ranked, 1, None))))
    if not ties:
        return list(accumulate(losses[index] for index in order))  # no ties: the usual case
    in_order = [losses[index] for index in order]
    sums: list[float] = []
    counted = 0.0  # loss sum of the results before ``done``
    done = 0
    for start, end in _tie_groups(ties):
        group = in_order[start:end]
        if min(group) == max(group):
            continue  # walked one loss at a time with the results around it
        # One loss at a time up to the group (each step as accumulate's from counted),
        sums.extend(islice(accumulate(in_order[done:start], initial=counted), 1, None))
        if start > done:
            counted = sums[-1]
        # then the group by its mean.
        total = math.fsum(group)
        mean = total / len(group)
        sums.extend(counted + inside * mean for inside in range(1, len(group) + 1))
        counted += total
        done = end
    sums.extend(islice(accumulate(in_order[done:], initial=counted), 1, None))
    return sums


def _tie_groups(ties: list[int]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of equal ranked confidences, from the ``i`` where
    ``ranked[i] == ranked[i + 1]`` (ascending)."""
    start = previous = ties[0]
    for i in islice(ties, 1, None):
        if i != previous + 1:
            yield start, previous + 2
            start = i
        previous = i
    yield start, previous + 2


def _area(sums: list[float], positions: Sequence[int]) -> tuple[float, list[list[float]]]:
    """``(AURC, [[coverage, risk] at each i of positions])`` from the prefix sums
    ``S(1..n)``; ``positions`` ascending, within 1..n."""
    n = len(sums)
    risks = list(map(truediv, sums, range(1, n + 1)))
    curve = [[i / n, _unit(risks[i - 1])] for i in positions]
    return _unit(math.fsum(risks) / n), curve


class LossCurve(Record):
    """AURC, optimal AURC, E-AURC and the curve of one loss (None when n is 0)."""

    __slots__ = ("aurc", "optimal_aurc", "e_aurc", "curve")  # noqa: RUF023  (field order)

    def __init__(
        self,
        aurc: float | None,
        optimal_aurc: float | None,
        e_aurc: float | None,
        curve: list[list[float]],
    ) -> None:
        self.aurc = aurc
        self.optimal_aurc = optimal_aurc
        self.e_aurc = e_aurc
        self.curve = curve

    def as_json(self) -> dict[str, Any]:
        return {
            "aurc": self.aurc,
            "optimalAurc": self.optimal_aurc,
            "eAurc": self.e_aurc,
            "curve": self.curve,
        }


def loss_curve(confidences: Sequence[float], losses: Sequence[float]) -> LossCurve:
    """The risk–coverage of ``losses`` (each in [0, 1]) ranked by ``confidences``
    (parallel, finite), with ties by expectation (module docstring).

    The same numbers whatever the order of the pairs. Empty input gives None
    values and an empty curve.
    """
    n = len(confidences)
    if n != len(losses):
        raise ValueError(f"{n} confidences but {len(losses)} losses")
    if n == 0:
        return LossCurve(None, None, None, [])
    positions = curve_positions(n)
    aurc, curve = _area(_prefix_sums(confidences, losses), positions)
    optimal, _ = _area(list(accumulate(sorted(losses))), ())
    return LossCurve(aurc, optimal, max(0.0, aurc - optimal), curve)


class RiskCoverage(Record):
    """The confidences and losses of some results, for their risk–coverage block.

    Keeps every result with a confidence (17 bytes each: the exact optimal AURC
    needs every loss) and counts those without.
    """

    __slots__ = (  # noqa: RUF023  (in field order: the repr shows them so)
        "confidences",
        "misses",
        "ndcg_losses",
        "without_confidence",
        "_curves",  # the curves until the next add (neither compared nor shown)
    )

    def __init__(
        self,
        confidences: array[float] | None = None,
        misses: bytearray | None = None,
        ndcg_losses: array[float] | None = None,
        without_confidence: int = 0,
    ) -> None:
        self.confidences = array("d") if confidences is None else confidences
        self.misses = bytearray() if misses is None else misses
        self.ndcg_losses = array("d") if ndcg_losses is None else ndcg_losses
        self.without_confidence = without_confidence
        self._curves: dict[str, LossCurve] | None = None

    def add(self, confidence: float | None, values: MetricValues) -> None:
        """Fold in one scored result: ``miss = 1 - hitAtK``, ``ndcgLoss = 1 - ndcgAt10``."""
        self._curves = None
        if confidence is None:
            self.without_confidence += 1
            return
        miss, ndcg_loss = losses_of(values)
        self.confidences.append(confidence)
        self.misses.append(miss)
        self.ndcg_losses.append(ndcg_loss)

    def curves(self) -> dict[str, LossCurve]:
        """Loss name -> its :class:`LossCurve` (computed once until the next :meth:`add`)."""
        if self._curves is None:
            self._curves = {
                "miss": loss_curve(self.confidences, self.misses),
                "ndcgLoss": loss_curve(self.confidences, self.ndcg_losses),
            }
        return self._curves

    def summary(self) -> dict[str, Any]:
        """``{"withConfidence", "withoutConfidence", "miss": {"aurc", "optimalAurc",
        "eAurc", "curve": [[coverage, risk], ...]}, "ndcgLoss": {...}}``."""
        block: dict[str, Any] = {
            "withConfidence": len(self.confidences),
            "withoutConfidence": self.without_confidence,
        }
        for name, curve in self.curves().items():
            block[name] = curve.as_json()
        return block


class RunRiskCoverage(Record):
    """A run's risk–coverage, overall and per facet value (as
    :class:`scorer.core.rollup.RunRollup`)."""

    __slots__ = ("overall", "facets")  # noqa: RUF023  (field order)

    def __init__(
        self,
        overall: RiskCoverage | None = None,
        facets: dict[str, dict[str, RiskCoverage]] | None = None,
    ) -> None:
        self.overall = RiskCoverage() if overall is None else overall
        self.facets = {} if facets is None else facets

    def add(
        self, confidence: float | None, values: MetricValues, facets: Mapping[str, str] | None
    ) -> None:
        """Fold in one scored result under the overall block and each of its facet values."""
        self.overall.add(confidence, values)
        if facets:
            for facet, value in facets.items():
                by_value = self.facets.setdefault(facet, {})
                block = by_value.get(value)
                if block is None:
                    block = by_value[value] = RiskCoverage()
                block.add(confidence, values)
