"""Which offsets of each input partition the worker has handed to its processing.

Pure bookkeeping, no Faust and no Kafka: the consumer (``faust_edge.consumer``)
tells the ledger where each input partition starts after a seek and which
offset range each fetched batch covers; the ledger answers whether the batch
continues exactly where the last one ended. A batch that starts *after* that
point means records were taken from the client and never handed over (the
start-up loss: prefetched records drained and dropped): it is refused, and the
consumer seeks the partition back to the first offset not handed over.

It also keeps the invariant an operator can alert on, per input partition:
the committed offset never exceeds ``start + accounted``, where ``accounted``
counts the offsets (records, and the transaction markers between them) of
every range handed over since the start. A hole in the processing shows up as
a commit beyond that sum.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class Admission(Enum):
    HAND = "hand"
    """Hand the batch over, from ``Verdict.hand_from`` on."""
    STALE = "stale"
    """Everything in the batch was handed over already (a refetch after a seek back)."""
    HOLE = "hole"
    """The batch starts past the first offset not handed over: refetch from there."""


@dataclass(frozen=True, slots=True)
class Verdict:
    admission: Admission
    offset: int
    """HAND: the first offset to hand over; HOLE: where to seek back to; STALE: the
    batch's end."""


@dataclass(slots=True)
class PartitionLedger:
    start: int
    """Where this worker began reading the partition (the position after its last
    seek to the committed offset or to the reset policy)."""
    expected: int
    """The first offset not handed over yet."""
    accounted: int = 0
    """Offsets handed over since ``start``, summed batch by batch."""
    committed: int | None = None
    """The last offset committed for the partition by this worker."""


class InputLedger:
    """The ledger of every input partition a worker reads."""

    def __init__(self) -> None:
        self.partitions: dict[Hashable, PartitionLedger] = {}
        self.holes = 0
        """Batches refused because they did not continue where the last one ended."""
        self.violations = 0
        """Commits beyond ``start + accounted`` (must stay 0)."""

    def started(self, tp: Hashable, offset: int) -> None:
        """The partition was sought to ``offset``: reading starts again there."""
        self.partitions[tp] = PartitionLedger(start=offset, expected=offset)

    def forget(self, tps: Iterable[Hashable]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)

    def admit(self, tp: Hashable, start: int, end: int) -> Verdict:
        """Whether a fetched batch covering offsets ``[start, end)`` may be handed over."""
        ledger = self.partitions.get(tp)
        if ledger is None:
            # No seek seen (a partition Faust never sought): it starts here.
            self.started(tp, start)
            return Verdict(Admission.HAND, start)
        if start > ledger.expected:
            self.holes += 1
            return Verdict(Admission.HOLE, ledger.expected)
        if end <= ledger.expected:
            return Verdict(Admission.STALE, end)
        return Verdict(Admission.HAND, max(start, ledger.expected))

    def handed(self, tp: Hashable, first: int, end: int) -> None:
        """Offsets ``[first, end)`` were handed over (``first`` from ``admit``)."""
        ledger = self.partitions[tp]
        ledger.accounted += end - first
        ledger.expected = end

    def committing(self, tp: Hashable, offset: int) -> bool:
        """Record a commit of ``offset``; False when it breaks the invariant."""
        ledger = self.partitions.get(tp)
        if ledger is None:
            return True
        ledger.committed = offset
        if offset > ledger.start + ledger.accounted:
            self.violations += 1
            return False
        return True


class LedgerCollector:
    """The ledger as Prometheus series (read at scrape time, nothing per record)."""

    def __init__(self, ledger: InputLedger) -> None:
        self.ledger = ledger

    def describe(self) -> list[Any]:
        return list(self._families())

    def collect(self) -> Iterator[Any]:
        return self._families(self.ledger.partitions)

    def _families(self, partitions: Mapping[Hashable, PartitionLedger] | None = None) -> Any:
        labels = ("topic", "partition")
        start = GaugeMetricFamily(
            "scorer_input_start_offset",
            "Where this worker began reading an input partition (its last seek).",
            labels=labels,
        )
        accounted = GaugeMetricFamily(
            "scorer_input_accounted_offsets",
            "Offsets of an input partition handed to processing since its start "
            "(records and the transaction markers between them).",
            labels=labels,
        )
        committed = GaugeMetricFamily(
            "scorer_input_committed_offset",
            "The offset this worker last committed for an input partition; never more "
            "than start + accounted.",
            labels=labels,
        )
        for tp, ledger in sorted((partitions or {}).items()):
            pair = [tp.topic, str(tp.partition)]
            start.add_metric(pair, ledger.start)
            accounted.add_metric(pair, ledger.accounted)
            if ledger.committed is not None:
                committed.add_metric(pair, ledger.committed)
        holes = CounterMetricFamily(
            "scorer_input_refetched_batches",
            "Fetched batches refused because they skipped offsets not handed over "
            "(sought back and fetched again).",
        )
        holes.add_metric([], self.ledger.holes)
        violations = CounterMetricFamily(
            "scorer_input_commit_violations",
            "Commits past start + accounted offsets of an input partition (must stay 0).",
        )
        violations.add_metric([], self.ledger.violations)
        yield from (start, accounted, committed, holes, violations)
