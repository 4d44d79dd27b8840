"""In-process recovery of a worker whose producer can no longer go on.

Some producer errors say nothing is wrong with the worker, only with where its
producer stands: under exactly_once a transactional producer *fenced* (a newer
producer took its transactional id: the worker was frozen past its session
timeout and its partitions moved, or the broker aborted a transaction that
outlived ``transaction.timeout.ms``), or a send into a transaction that is no
longer open; under either guarantee a record the producer gave up on after a
broker stall (a retriable error, or a delivery timeout). Faust crashes the app
on them and the process exits 1; a supervisor then restarts it and it loses
nothing, but one slow broker becomes a restart storm. Kafka Streams calls the
first kind "task migrated": it drops the tasks, re-initialises the producer and
rejoins, in the same process.

This module decides and records; ``scorer.cli.worker_cmd`` rebuilds. At the first
recoverable error the edge calls :meth:`Recovery.request`: one WARNING line, no
commit and no send from then on (what is open is aborted: the transactions by
the next producer with the same transactional id, the at-least-once batches by
never committing their offsets), and the worker is asked to stop cleanly. The
command then builds a fresh app in the same process, which re-initialises its
producers (fencing and aborting whatever the old ones left open), restores its
tables from their changelogs as committed, and reads the inputs from the
committed offsets. What the old app processed and did not commit is processed
again: under exactly_once no reader saw it (read_committed), under
at-least-once it may be delivered twice, as that guarantee allows.

What is not recovered: authorisation and configuration errors, records too
large for the broker, and any error of the worker's own code; a rebuild would
meet them again, so they stop the worker (exit 1) for its supervisor and its
operator. Nor a worker that keeps needing rebuilds: more than
:attr:`Recovery.budget` in :attr:`Recovery.window` seconds stops it too.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

from aiokafka.errors import (
    IllegalOperation,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    TransactionCoordinatorFenced,
    UnknownProducerId,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

logger = logging.getLogger(__name__)


class TransactionProducerGone(Exception):
    """Under exactly_once: an output's transaction is no longer this app's to write.
    The transactional producer of the input partition that produced it was stopped:
    the partition was revoked while the output waited to be sent (a rollup
    contribution queued before a rebalance whose revoke Faust did not commit, as
    when a worker wakes from a freeze past its session timeout with its membership
    gone). That transaction ended without the output, aborted by the partition's
    new owner, which processes its input again from the committed offset."""


TRANSACTION_LOST: tuple[type[BaseException], ...] = (
    ProducerFenced,
    InvalidProducerEpoch,
    TransactionCoordinatorFenced,
    InvalidProducerIdMapping,
    UnknownProducerId,
    OutOfOrderSequenceNumber,
    IllegalOperation,  # a send or commit after the transaction ended (fenced, aborted)
    TransactionProducerGone,
)
"""Under exactly_once: the transaction this worker had open is gone, its records will
never commit; a new producer with the same transactional id starts clean."""

NOT_RECOVERED = (
    "TopicAuthorizationFailedError",
    "TransactionalIdAuthorizationFailed",
    "GroupAuthorizationFailedError",
    "ClusterAuthorizationFailedError",
    "MessageSizeTooLargeError",
    "RecordTooLargeError",
    "UnsupportedVersionError",
    "InvalidTransactionTimeout",
)
"""aiokafka errors a rebuild would meet again, whatever their ``retriable`` flag says."""


def is_recoverable(
    error: BaseException | None, exactly_once: bool, committing: bool = False
) -> bool:
    """Whether ``error`` is one a fresh app in the same process gets past (see the
    module docstring): a lost transaction under exactly_once, or any broker error of
    a transaction's commit (``committing``: its outcome is unknown, and aiokafka's
    producer may be dead: after a broker stall past the transaction timeout its
    EndTxn answered an error code aiokafka does not know and its sender stopped);
    a producer's retriable error or delivery timeout under either guarantee."""
    if error is None or type(error).__name__ in NOT_RECOVERED:
        return False
    if exactly_once and isinstance(error, TRANSACTION_LOST):
        return True
    if exactly_once and committing and isinstance(error, KafkaError):
        return True
    return isinstance(error, KafkaTimeoutError) or bool(getattr(error, "retriable", False))


class Recovery:
    """Whether the running app asked to be rebuilt, and how often that happened in
    this process (it outlives the apps it rebuilds)."""

    budget = 5
    """The most rebuilds in :attr:`window` seconds; one more stops the worker."""
    window = 600.0

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, exactly_once: bool = False
    ) -> None:
        self.clock = clock
        self.exactly_once = exactly_once
        """The processing guarantee, as the edge reads it everywhere (``install`` sets it
        from its ``EdgeConfig``: one process, one guarantee)."""
        self.requested: str | None = None
        """Why the running app must be rebuilt (``where: error``), or None."""
        self.error: BaseException | None = None
        self.counts: Counter[str] = Counter()
        """Rebuilds so far in this process, by the error's class name."""
        self._times: deque[float] = deque()
        self._stop: Callable[[], None] | None = None

    def stop_with(self, stop: Callable[[], None]) -> None:
        """``stop()`` asks the running worker to stop cleanly (set per worker)."""
        self._stop = stop

    def request(self, error: BaseException, where: str, committing: bool = False) -> bool:
        """At a recoverable ``error`` met ``where`` (``committing``: in a transaction's
        commit): log it once, ask the worker to stop and return True (the caller then
        drops what it was doing); else False and the caller handles the error as
        before."""
        if not is_recoverable(error, self.exactly_once, committing):
            return False
        if self.requested is not None:
            return True
        self.requested = f"{where}: {type(error).__name__}: {error}"
        self.error = error
        logger.warning(
            "Recovering in-process from %s (%s): nothing more is committed or sent by "
            "this app; a new one starts in this process and processes again what was "
            "not committed",
            type(error).__name__,
            where,
        )
        if self._stop is not None:
            self._stop()
        return True

    def should_rebuild(self, crash: BaseException | None) -> bool:
        """After the app stopped: rebuild it (and count one rebuild) when it asked to
        be, or when it crashed on a recoverable error that reached Faust first; not
        when this would be more than :attr:`budget` rebuilds in :attr:`window`."""
        error = self.error if self.requested is not None else crash
        if error is None or not (
            self.requested is not None or is_recoverable(crash, self.exactly_once)
        ):
            return False
        now = self.clock()
        times = self._times
        while times and now - times[0] > self.window:
            times.popleft()
        if len(times) >= self.budget:
            logger.error(
                "Not recovering from %s: %d rebuilds in the last %.0f s; stopping for the "
                "supervisor",
                type(error).__name__,
                len(times),
                self.window,
            )
            return False
        times.append(now)
        self.counts[type(error).__name__] += 1
        return True

    def reset(self) -> None:
        """A new app is about to run: nothing requested yet."""
        self.requested = None
        self.error = None
        self._stop = None

    def readiness_reason(self) -> str | None:
        """Why ``/readyz`` must answer 503 now (a rebuild was requested), or None."""
        if self.requested is None:
            return None
        return f"recovering in-process from {self.requested}"


class RecoveryCollector:
    """``scorer_worker_recoveries_total{reason}``: the rebuilds of this process."""

    def __init__(self, recovery: Recovery) -> None:
        self.recovery = recovery

    def collect(self) -> Iterator[Any]:
        total = CounterMetricFamily(
            "scorer_worker_recoveries",
            "Times the worker rebuilt its Faust app in-process after a recoverable "
            "producer error (a fenced or lost transaction, a delivery timeout), by the "
            "error's class.",
            labels=["reason"],
        )
        for reason, count in sorted(self.recovery.counts.items()):
            total.add_metric([reason], count)
        yield total
        recovering = GaugeMetricFamily(
            "scorer_worker_recovering",
            "1 while the running app stops to be rebuilt in-process.",
        )
        recovering.add_metric([], 0 if self.recovery.requested is None else 1)
        yield recovering
