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
counts the offsets (records, and the transaction markers between them) of the
contiguous range handed over since the start. A commit of records that were
never handed over to processing shows up as a commit beyond that sum.
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
    """Where this worker began reading the partition in this assignment."""
    expected: int
    """The next offset to hand over (moves back when the partition is sought back)."""
    high: int
    """The end of the contiguous range ``[start, high)`` handed over so far."""
    committed: int | None = None
    """The last offset committed for the partition by this worker."""

    @property
    def accounted(self) -> int:
        """Offsets handed over since ``start`` (records and the markers between them)."""
        return self.high - self.start


class InputLedger:
    """The ledger of every input partition a worker reads."""

    def __init__(self) -> None:
        self.partitions: dict[Hashable, PartitionLedger] = {}
        self.holes = 0
        """Batches refused because they did not continue where the last one ended."""
        self.violations = 0
        """Commits beyond ``start + accounted`` (must stay 0)."""

    def started(self, tp: Hashable, offset: int) -> None:
        """The partition was sought to ``offset``: reading goes on from there.

        A seek back into the range already handed over (to the committed offset
        after a rebalance) keeps the range: those offsets were handed over once.
        Anywhere else (a first seek, or forward past the range: another worker
        committed further) the range starts again at ``offset``."""
        ledger = self.partitions.get(tp)
        if ledger is not None and ledger.start <= offset <= ledger.high:
            ledger.expected = offset
            return
        self.partitions[tp] = PartitionLedger(start=offset, expected=offset, high=offset)

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
        """Offsets ``[first, end)`` were handed over (``first`` from ``admit``).

        A partition a revoke forgot while its batch was in hand (under exactly_once
        the batch is still booked, and committed by the revoke's commit) is not
        tracked again: its next seek starts it afresh. (Looked up, it raised KeyError
        in the drain loop and crashed the worker mid-rebalance.)"""
        ledger = self.partitions.get(tp)
        if ledger is None:
            return
        ledger.expected = end
        if first <= ledger.high:
            ledger.high = max(ledger.high, end)

    def committing(self, tp: Hashable, offset: int) -> bool:
        """Record a commit of ``offset``; False when it breaks the invariant."""
        ledger = self.partitions.get(tp)
        if ledger is None:
            return True
        ledger.committed = offset
        if offset > ledger.high:
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
