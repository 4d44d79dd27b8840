"""Aggregation of metric values: counts, sums, sums of squares, means and 95%
confidence intervals, overall and per facet value.

Every metric lies in [0, 1], and so does every interval: Wilson's score
interval (Wilson 1927), which for hit@k (0 or 1) is exactly that, and for the
other metrics is taken with the effective sample size
``n_eff = m (1 - m) / (s^2 / n)`` (mean ``m``, variance ``s^2`` of the values
with divisor ``n``), the design-effect form of Korn & Graubard (1998). For 0/1
values ``n_eff = n``; for values spread less than 0/1 values of the same mean
(always, in [0, 1]), ``n_eff >= n`` and the interval narrows accordingly. It
needs only the count, sum and sum of squares this module keeps.

One definition serves both paths: ``scorer eval`` folds a run file into a
:class:`RunRollup`, and the streaming worker keeps one per run id in a
changelog-backed table (:meth:`RunRollup.to_state` / :meth:`from_state`).
Sums merge exactly across partitions and restarts, which means and running
variances would not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from scorer.core.measures import METRIC_NAMES, each, unrolled
from scorer.core.metrics import compiled
from scorer.core.record import Record
from scorer.core.stats import t_quantile_975, wilson_interval

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any

MAX_FACET_VALUES_PER_RUN = 200
"""Distinct values kept per facet and run; later ones are counted under ``other``
(the same rule for ``scorer eval`` and the run API)."""
OTHER_FACET_VALUE = "other"

__all__ = ["MetricAggregate", "RunRollup", "bounded_interval", "t_quantile_975"]


def bounded_interval(count: int, total: float, total_of_squares: float) -> list[float]:
    """The 95% interval of the mean of ``count`` values in [0, 1] from their sum and
    sum of squares: Wilson's, with the effective sample size (module docstring).

    Inside [0, 1] whatever the values. With fewer than two values, the mean itself.
    All values equal to 0 (or all 1) give Wilson's interval of 0 (or n) successes
    in n; all equal to some m strictly inside (0, 1) give ``[m, m]`` (no spread).
    """
    if count == 0:
        return [0.0, 0.0]
    mean = total / count
    if count < 2:
        return [mean, mean]
    mean = min(1.0, max(0.0, mean))  # rounding of the sum must not leave [0, 1]
    spread = mean * (1.0 - mean)
    variance = max(0.0, total_of_squares / count - mean * mean)
    if spread == 0.0:
        effective = float(count)
    elif variance == 0.0:
        return [mean, mean]
    else:
        effective = spread * count / variance
    low, high = wilson_interval(mean, effective)
    return [low, high]


_N = len(METRIC_NAMES)

_add = unrolled(
    """
def add(self, values):
    "Fold in the measures of one result (in METRIC_NAMES order)."
    self.count += 1
    sums, sumsqs = self.sums, self.sumsqs
    {values}, = values
    {sums}
    {squares}
""".format(
        values=each("v$"),
        sums=each("sums[$] += v$", "\n    "),
        squares=each("sumsqs[$] += v$ * v$", "\n    "),
    ),
    "add",
)


class MetricAggregate(Record):
    """Count, sums and sums of squares of every measure over some results."""

    __slots__ = (
        "count",
        "sums",
        "sumsqs",
        # Per slot, results folded in without that measure (a state or a row written
        # before the measure existed, ``RunRollup.add``); None when there are none.
        "unseen",
    )

    def __init__(
        self,
        count: int = 0,
        sums: list[float] | None = None,
        sumsqs: list[float] | None = None,
        unseen: list[int] | None = None,
    ) -> None:
        self.count = count
        self.sums = [0.0] * _N if sums is None else sums
        self.sumsqs = [0.0] * _N if sumsqs is None else sumsqs
        self.unseen = unseen

    # Straight-line code from the registry (``scorer.core.measures.unrolled``): the worker
    # folds every result into a run's overall aggregate and one per facet value.
    add = _add

    def add_partial(self, values: Sequence[float]) -> None:
        """:meth:`add` of a result made before the last measures existed (fewer values
        than slots): it counts as unseen for those, not as zeros."""
        self.add([*values, *([0.0] * (_N - len(values)))])
        self.mark_unseen(range(len(values), _N))

    def mark_unseen(self, slots: Iterable[int]) -> None:
        """Count the last result folded in as lacking the measures at ``slots``."""
        unseen = self.unseen or [0] * _N
        for index in slots:
            unseen[index] += 1
        self.unseen = unseen

    def count_of(self, index: int) -> int:
        """How many results have the measure at ``index``."""
        return self.count - self.unseen[index] if self.unseen else self.count

    def merge(self, other: MetricAggregate) -> None:
        self.count += other.count
        for i in range(_N):
            self.sums[i] += other.sums[i]
            self.sumsqs[i] += other.sumsqs[i]
        if other.unseen:
            mine = self.unseen or [0] * _N
            self.unseen = [a + b for a, b in zip(mine, other.unseen, strict=True)]

    def means(self) -> dict[str, float]:
        """Mean of each measure over the results that have it (0.0 with none)."""
        return {
            name: (s / n if (n := self.count_of(index)) else 0.0)
            for index, (name, s) in enumerate(zip(METRIC_NAMES, self.sums, strict=True))
        }

    def ci95(self) -> dict[str, list[float]]:
        """95% confidence interval ``[low, high]`` of each mean, inside [0, 1]
        (:func:`bounded_interval`); the mean itself with fewer than two results."""
        return {
            name: bounded_interval(self.count_of(index), s, sq)
            for index, (name, s, sq) in enumerate(
                zip(METRIC_NAMES, self.sums, self.sumsqs, strict=True)
            )
        }

    def t_interval95(self) -> dict[str, list[float]]:
        """95% Student's t interval ``[low, high]`` of each mean, for values that are
        not bounded to [0, 1] (paired differences); the mean itself with fewer than
        two results (no spread to estimate)."""
        out: dict[str, list[float]] = {}
        for index, (name, s) in enumerate(zip(METRIC_NAMES, self.sums, strict=True)):
            n = self.count_of(index)
            mean = s / n if n else 0.0
            if n < 2:
                out[name] = [mean, mean]
                continue
            half = t_quantile_975(n - 1) * math.sqrt(self.variance(index) / n)
            out[name] = [mean - half, mean + half]
        return out

    def variance(self, index: int) -> float:
        """Sample variance of the measure at ``index`` (0.0 with fewer than two results)."""
        n = self.count_of(index)
        if n < 2:
            return 0.0
        s, sq = self.sums[index], self.sumsqs[index]
        return max(0.0, (sq - s * s / n) / (n - 1))

    def summary(self) -> dict[str, Any]:
        """``{"count", "metrics": means, "ci95": intervals}``: the wire shape of an aggregate."""
        return {"count": self.count, "metrics": self.means(), "ci95": self.ci95()}

    def to_state(self) -> list[Any]:
        """``[count, sums, sumsqs]``, and ``unseen`` fourth when some results lack a measure."""
        state: list[Any] = [self.count, list(self.sums), list(self.sumsqs)]
        if self.unseen:
            state.append(list(self.unseen))
        return state

    @classmethod
    def from_state(cls, state: Sequence[Any]) -> MetricAggregate:
        """A stored aggregate; one stored before a measure existed has fewer sums, and
        all its results count as unseen for the measures it lacks."""
        count, sums, sumsqs, *rest = state
        aggregate = cls(
            count=int(count), sums=[float(x) for x in sums], sumsqs=[float(x) for x in sumsqs]
        )
        unseen = [int(x) for x in rest[0]] if rest else None
        if len(sums) < _N:
            missing = _N - len(sums)
            aggregate.sums += [0.0] * missing
            aggregate.sumsqs += [0.0] * missing
            unseen = (unseen or [0] * len(sums)) + [int(count)] * missing
        aggregate.unseen = unseen
        return aggregate


_rollup_add = compiled("rollup_add")
"""The compiled :meth:`RunRollup.add` (``scorer/core/_kernel.c``): the same lookups and
sums, done before anything is counted; NotImplemented for what it does not take (a
subclass, a list that is not all floats, values that are not floats or ints), which the
Python below then folds. None where the kernel is not built."""


class RunRollup(Record):
    """The metrics of one run, overall and per facet value."""

    __slots__ = ("overall", "facets")  # noqa: RUF023  (field order)

    def __init__(
        self,
        overall: MetricAggregate | None = None,
        facets: dict[str, dict[str, MetricAggregate]] | None = None,
    ) -> None:
        self.overall = MetricAggregate() if overall is None else overall
        self.facets = {} if facets is None else facets

    def add(
        self, values: Sequence[float], facets: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """Fold in one result's metrics under the overall total and each of its facet
        values; returns the facets as counted (a value past the run's first
        ``MAX_FACET_VALUES_PER_RUN`` of its facet is counted as ``other``). A result
        with fewer values than slots (made before a measure existed) lacks the rest
        (:meth:`MetricAggregate.add_partial`)."""
        if len(values) != _N:
            return self._add_partial(values, facets)
        if _rollup_add is not None:
            counted = _rollup_add(
                self.overall, self.facets, values, facets, MAX_FACET_VALUES_PER_RUN,
                OTHER_FACET_VALUE, MetricAggregate,
            )  # fmt: skip
            if counted is not NotImplemented:
                return counted
        self.overall.add(values)
        counted: dict[str, str] = {}
        if facets:
            for facet, value in facets.items():
                by_value = self.facets.get(facet)
                if by_value is None:
                    by_value = self.facets[facet] = {}
                aggregate = by_value.get(value)
                if aggregate is None:
                    if len(by_value) >= MAX_FACET_VALUES_PER_RUN:
                        value = OTHER_FACET_VALUE
                        aggregate = by_value.get(value)
                    if aggregate is None:
                        aggregate = by_value[value] = MetricAggregate()
                aggregate.add(values)
                counted[facet] = value
        return counted

    def _add_partial(
        self, values: Sequence[float], facets: Mapping[str, str] | None
    ) -> dict[str, str]:
        counted = self.add([*values, *([0.0] * (_N - len(values)))], facets)
        for aggregate in (self.overall, *(self.facets[f][v] for f, v in counted.items())):
            aggregate.mark_unseen(range(len(values), _N))
        return counted

    def merge(self, other: RunRollup) -> None:
        self.overall.merge(other.overall)
        for facet, by_value in other.facets.items():
            mine = self.facets.setdefault(facet, {})
            for value, aggregate in by_value.items():
                mine.setdefault(value, MetricAggregate()).merge(aggregate)

    def summary(self) -> dict[str, Any]:
        """The run's JSON shape, shared by ``scorer eval --format json`` and the API:
        ``{"count", "metrics", "ci95", "facets": {facet: {value: {"count", "metrics", "ci95"}}}}``.
        """
        out = self.overall.summary()
        out["facets"] = {
            facet: {value: agg.summary() for value, agg in sorted(by_value.items())}
            for facet, by_value in sorted(self.facets.items())
        }
        return out

    def to_state(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_state(),
            "facets": {
                facet: {value: agg.to_state() for value, agg in by_value.items()}
                for facet, by_value in self.facets.items()
            },
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RunRollup:
        return cls(
            overall=MetricAggregate.from_state(state["overall"]),
            facets={
                facet: {value: MetricAggregate.from_state(agg) for value, agg in by_value.items()}
                for facet, by_value in state.get("facets", {}).items()
            },
        )
