"""The worker's Kafka consumer: Faust's aiokafka consumer with the start-up guards.

Installed through Faust's class hook (``app.transport.Consumer``); everything
else about the consumer (the group, Faust's assignor, table recovery, the
commit timer, transactions) is Faust's. What changes:

- **The fetch takes a snapshot of the active partitions.** Faust hands the
  consumer thread its *live* set of active partitions; when table recovery
  ends Faust empties that set in place, and aiokafka reads an empty set as
  "every partition", so an in-flight fetch drained the prefetched input batches
  and moved their positions past them. Here the set is copied when the fetch
  is asked for, and an empty set fetches nothing (:class:`GuardedConsumerThread`).
- **A fetched batch never moves a position it did not hand over.** The fetch
  returns, per partition, the records *and* the offset range they cover
  (:func:`fetch_batches`). A batch of a partition that is not active any more,
  or that arrives while the flow is stopped or after a new generation, or whose
  delivery stops half way, is sought back to its first undelivered offset
  instead of being dropped. Every batch of an input partition must continue
  where the last one ended (:class:`~scorer.stream.faust_edge.ledger.InputLedger`):
  a batch that starts later is refused and refetched.
- **The seek after an assignment is real.** aiokafka's ``seek_to_committed``
  does nothing for a partition with no committed offset (or offset 0), so the
  position stayed wherever earlier fetches left it. Here such an input
  partition is reset as ``auto_offset_reset`` says (:meth:`perform_seek`).
- **Commits never pass a head gap.** Faust checks the first acked offset
  against the committed one only when a committed offset exists; here the
  start of the partition (the position after the seek) stands in for it.

The broker fetch wait is a setting (Faust hardcodes 1.5 s, which stalls a
consumer behind fetches of idle partitions).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from time import monotonic
from typing import Any, NamedTuple, Protocol

from aiokafka.consumer.fetcher import FetchResult
from aiokafka.errors import ConsumerStoppedError, CorruptRecordException, UnsupportedCodecError
from aiokafka.structs import TopicPartition
from faust.events import Event
from faust.streams import _current_event
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP
from mode import Service

from scorer.stream.collector import settle_after_recovery, settle_before_recovery
from scorer.stream.faust_edge.ledger import Admission, InputLedger
from scorer.stream.faust_edge.recovery import Recovery, TransactionProducerGone, is_recoverable
from scorer.stream.faust_edge.resume import HoldsInputsUntilSeeked
from scorer.stream.faust_edge.sending import Appender
from scorer.stream.faust_edge.stopping import CommitsOnceAtStop, GracefulStop
from scorer.stream.faust_edge.transactions import from_start_when_unknown, log_seeks
from scorer.stream.faust_edge.wiring import edge_of
from scorer.stream.outputs import Output

logger = logging.getLogger(__name__)


class FetchedBatch(NamedTuple):
    """The records of one partition from one fetch, and the offsets they cover:
    ``[start, end)`` includes transaction markers and aborted records the client
    skipped, so consecutive batches of a partition touch (``end == next start``)."""

    records: list[Any]
    start: int
    end: int


def split_batch(batch: FetchedBatch, size: int) -> list[FetchedBatch]:
    """``batch`` as consecutive batches of at most ``size`` records that touch: the
    first starts where ``batch`` starts, each ends where the next one's first record
    is, and the last ends where ``batch`` ends (markers and skipped records stay
    inside the range of the record after them)."""
    records = batch.records
    if len(records) <= size:
        return [batch]
    parts = []
    start = batch.start
    for first in range(0, len(records), size):
        chunk = records[first : first + size]
        end = records[first + size].offset if first + size < len(records) else batch.end
        parts.append(FetchedBatch(chunk, start, end))
        start = end
    return parts


def delivery_order(
    batches: Mapping[TP, FetchedBatch], size: int | None, background: set[str]
) -> list[tuple[TP, FetchedBatch]]:
    """The order in which a fetch's batches are handed over: the batches of the
    foreground topics split into parts of at most ``size`` records (None: whole) and
    taken round robin across partitions, so that no partition's records wait for a
    whole batch of another; then the background topics' batches, whole."""
    foreground = [(tp, b) for tp, b in batches.items() if tp.topic not in background]
    queues = [
        [(tp, part) for part in (split_batch(batch, size) if size else [batch])]
        for tp, batch in foreground
    ]
    ordered = [item for turn in itertools.zip_longest(*queues) for item in turn if item]
    ordered.extend((tp, b) for tp, b in batches.items() if tp.topic in background)
    return ordered


class BatchHandler(Protocol):
    """Handles one partition's fetched records in one synchronous pass: decode, join,
    score, and return what to send. Table writes made inside reach the changelog
    partition of ``tp`` (``faust.current_event()`` is set to the batch's last record)."""

    def __call__(self, tp: TP, records: list[Any]) -> list[Output]: ...


class BatchGate(Protocol):
    """What the batch path shares with the exactly_once transactions (the no-op
    :class:`OpenGate` under at-least-once)."""

    lock: contextlib.AbstractAsyncContextManager[Any]
    """Held while a batch is handled, sent and booked; every commit takes it."""
    holds_commits: bool
    """Whether the lock is real: a commit (a revoke's too) waits for the batch in hand."""

    def transactional_id(self, tp: TP) -> str | None: ...

    def first_unprocessed(self, tp: TP) -> int | None:
        """The first offset of ``tp`` not yet in its open transaction (None: any)."""

    def processed(self, tp: TP, offset: int) -> None:
        """The records of ``tp`` up to ``offset`` were sent in its open transaction."""

    async def end_transactions(self) -> bool:
        """Commit and end what the open transactions hold that Faust's commit left
        open; True if anything was committed."""


class Deliveries:
    """The outcome of every record the worker sends (batch outputs and agent outputs,
    under either guarantee): a record the producer gave up on is logged and kept, and
    no commit happens after it (``GuardedConsumer.undelivered_stops_commit``).

    The delivery futures are kept and looked at when :attr:`error` is read (before
    every commit, once the producer has flushed) rather than each given a done
    callback: a callback is one more handle scheduled and run on the event loop per
    record sent, two per scored result. Done futures are also dropped whenever the
    list has doubled, so it stays about as long as what is in flight."""

    PRUNE_AT = 10_000

    def __init__(self, recovery: Recovery | None = None) -> None:
        self.recovery = recovery
        self._error: BaseException | None = None
        self._pending: list[Any] = []
        self._prune_at = self.PRUNE_AT

    def watch(self, future: Any) -> None:
        """Watch the delivery future of one record."""
        pending = self._pending
        pending.append(future)
        if len(pending) >= self._prune_at:
            self._check()
            self._prune_at = max(self.PRUNE_AT, 2 * len(self._pending))

    @property
    def error(self) -> BaseException | None:
        """The first delivery failure seen so far (None: every finished record was
        delivered)."""
        self._check()
        return self._error

    def _check(self) -> None:
        in_flight = []
        for future in self._pending:
            if not future.done():
                in_flight.append(future)
            elif future.cancelled() or future.exception() is not None:
                error = future.exception() if not future.cancelled() else asyncio.CancelledError()
                recovery = self.recovery
                if recovery is not None and is_recoverable(error, recovery.exactly_once):
                    # Not an operator's problem: the app is rebuilt (recovery's WARNING).
                    logger.info("A record was not delivered: %r", error)
                else:
                    logger.error("A record was not delivered: %r", error)
                if self._error is None:
                    self._error = error
        self._pending = in_flight


class OpenGate:
    """At-least-once: no transaction to join, and no lock: a batch's offsets are booked
    in one synchronous step after its outputs were sent, so a commit (which flushes
    the producer first) never sees a batch's offsets without its outputs."""

    holds_commits = False

    def __init__(self) -> None:
        self.lock = contextlib.nullcontext()

    def transactional_id(self, tp: TP) -> str | None:
        return None

    def first_unprocessed(self, tp: TP) -> int | None:
        return None

    def processed(self, tp: TP, offset: int) -> None:
        pass

    async def end_transactions(self) -> bool:
        return False


UNDECODABLE = (UnsupportedCodecError, CorruptRecordException)
"""What a fetched record batch raises when it is read and cannot be decoded."""


def stop_undecodable(
    fetcher: Any, tp: Any, start: int, error: Exception | None, undecodable: dict[Any, str]
) -> None:
    """Stop reading ``tp``, whose batch at ``start`` cannot be decoded: its buffered
    result is dropped and the partition paused here (so the fetcher does not fetch the
    same batch again and again), its position left at ``start``; the other partitions
    go on. Said once per partition, in one line, with what to do (``error`` None: the
    partition was stopped before and came back; it is paused again, nothing said)."""
    del fetcher._records[tp]
    fetcher._notify(fetcher._wait_consume_future)
    fetcher._subscriptions.pause(tp)
    if error is not None and tp not in undecodable:
        # aiokafka's errors put their class name in front of str(); the message alone.
        undecodable[tp] = str(error.args[0]) if error.args else type(error).__name__
        logger.error(
            "%s/%s: the record batch at offset %s cannot be decoded (%s: %s); this "
            "partition is stopped at %s, the others go on. A codec library missing: "
            "`pip install cramjam` (snappy, lz4, zstd), then restart the worker",
            tp.topic, tp.partition, start, type(error).__name__, undecodable[tp], start,
        )  # fmt: skip


async def fetch_batches(
    fetcher: Any,
    partitions: frozenset[Any] | None,
    timeout: float,
    max_records: int | None,
    undecodable: dict[Any, str] | None = None,
) -> dict[Any, FetchedBatch]:
    """aiokafka's ``Fetcher.fetched_records`` for the partitions in ``partitions`` only
    (None: every assigned partition; an empty set is never passed), returning each
    partition's position before and after its records. Runs in the consumer thread.

    A partition whose batch cannot be decoded (:data:`UNDECODABLE`) is stopped and
    kept in ``undecodable`` with the reason (:func:`stop_undecodable`), instead of
    crashing the worker on every restart; one stopped before is paused again when
    it comes back (Faust resumes the partitions it paused itself)."""
    subscriptions = fetcher._subscriptions
    if undecodable is None:
        undecodable = {}
    while True:
        if subscriptions.reassignment_in_progress:
            await subscriptions.wait_for_assignment()
        started = monotonic()
        batches: dict[Any, FetchedBatch] = {}
        for tp in list(fetcher._records):
            if partitions is not None and tp not in partitions:
                if not subscriptions.is_assigned(tp):
                    del fetcher._records[tp]
                continue
            result = fetcher._records[tp]
            if type(result) is not FetchResult:  # a fetch error of this partition
                if batches:
                    return batches
                del fetcher._records[tp]
                fetcher._notify(fetcher._wait_consume_future)
                result.check_raise()
            if not result.check_assignment(tp):  # revoked, paused or sought elsewhere
                del fetcher._records[tp]
                fetcher._notify(fetcher._wait_consume_future)
                continue
            start = result._partition_records.next_fetch_offset
            if tp in undecodable:
                stop_undecodable(fetcher, tp, start, None, undecodable)  # paused again
                continue
            try:
                records = result.getall(max_records)
            except UNDECODABLE as error:
                stop_undecodable(fetcher, tp, start, error, undecodable)
                continue
            end = result._assignment.state_value(tp).position
            if not result.has_more():
                del fetcher._records[tp]
                fetcher._notify(fetcher._wait_consume_future)
            if records or end > start:
                batches[tp] = FetchedBatch(records, start, end)
            if max_records is not None:
                max_records -= len(records)
                if max_records <= 0:
                    break
        if batches or not timeout:
            return batches
        waiter = fetcher._create_fetch_waiter()
        done, pending = await asyncio.wait([waiter], timeout=timeout)
        if not done or fetcher._closed:
            for future in pending:
                future.cancel()
            return {}
        if waiter.done():
            waiter.result()  # raises an authorization error
        timeout = max(0.0, timeout - (monotonic() - started))


class GuardedConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread: snapshot fetches, a configurable broker fetch wait,
    inputs read ``read_committed``, partitions that cannot be decoded stopped alone."""

    fetch_max_wait_ms = 1500
    """Set by the guarded consumer from the edge's config (Faust's fixed value here)."""
    undecodable: dict[Any, str]
    """Set by the guarded consumer: the edge's partitions stopped on a batch that
    cannot be decoded, with the reason (:func:`fetch_batches`)."""
    exactly_once = False
    """Set by the guarded consumer: table recovery then reads changelog ends from the
    broker (:meth:`_highwaters`)."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Faust passes 1500 ms; aiokafka reads the attribute when the consumer starts.
        consumer._fetch_max_wait_ms = self.fetch_max_wait_ms
        # Faust reads read_committed only under exactly_once; a user's transactional
        # producer aborts under either mode, and an aborted result must never be
        # scored. Non-transactional partitions (the changelogs under at-least-once)
        # read the same either way: their last stable offset is their high watermark.
        consumer._isolation_level = "read_committed"
        return consumer

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        """Under exactly_once, changelog ends for table recovery from the broker, not
        from the consumer's fetch cache (under at-least-once Faust already does)."""
        if self.exactly_once:
            return await self._ensure_consumer().end_offsets(list(partitions))
        return await super()._highwaters(partitions)

    async def getmany(  # type: ignore[override]
        self, active_partitions: set[TP] | None, timeout: float
    ) -> dict[Any, FetchedBatch]:
        # Copied here, on the event loop, before the request crosses to the thread:
        # Faust changes the set it passed while the fetch waits.
        partitions = None if active_partitions is None else frozenset(active_partitions)
        if partitions is not None and not partitions:
            return {}
        consumer = self._ensure_consumer()
        return await self.call_thread(
            self._fetch_batches,
            consumer,
            partitions,
            timeout=timeout,
            max_records=consumer._max_poll_records,
        )

    async def _fetch_batches(
        self,
        consumer: Any,
        partitions: frozenset[Any] | None,
        timeout: float,
        max_records: int | None,
    ) -> dict[Any, FetchedBatch]:
        if not self.consumer.flow_active:
            return {}
        fetcher = consumer._fetcher
        if consumer._closed or fetcher._closed:
            raise ConsumerStoppedError()
        with fetcher._subscriptions.fetch_context():
            return await fetch_batches(fetcher, partitions, timeout, max_records, self.undecodable)

    async def seek_back(self, offsets: Mapping[TP, int]) -> None:
        """Seek assigned partitions to ``offsets`` in the consumer thread (revoked
        ones are left alone: their next owner starts from the committed offset)."""
        await self.call_thread(self._seek_back, offsets)

    async def _seek_back(self, offsets: Mapping[TP, int]) -> None:
        consumer = self._ensure_consumer()
        assigned = consumer.assignment()
        for tp, offset in offsets.items():
            if tp in assigned:
                consumer.seek(TopicPartition(tp.topic, tp.partition), offset)

    async def reset_and_positions(
        self, reset: Iterable[TP], partitions: Iterable[TP]
    ) -> tuple[dict[TP, int], dict[TP, int]]:
        """Reset ``reset`` as ``auto_offset_reset`` says, then the positions of
        ``partitions``; and the partitions of ``reset`` that do have a committed offset
        when asked again (sought to it instead: see :meth:`_confirmed_unset`)."""
        return await self.call_thread(self._reset_and_positions, list(reset), list(partitions))

    async def _reset_and_positions(
        self, reset: list[TP], partitions: list[TP]
    ) -> tuple[dict[TP, int], dict[TP, int]]:
        consumer = self._ensure_consumer()
        assigned = consumer.assignment()
        reset = [TopicPartition(tp.topic, tp.partition) for tp in reset if tp in assigned]
        found = await self._confirmed_unset(consumer, reset) if reset else {}
        for tp, offset in found.items():
            consumer.seek(TopicPartition(tp.topic, tp.partition), offset)
        reset = [tp for tp in reset if tp not in found]
        if reset:
            if self.app.conf.consumer_auto_offset_reset == "latest":
                await consumer.seek_to_end(*reset)
            else:
                await consumer.seek_to_beginning(*reset)
        positions = {}
        for tp in partitions:
            if tp in assigned:
                positions[tp] = await consumer.position(TopicPartition(tp.topic, tp.partition))
        return positions, found

    UNSET_CONFIRMATIONS = 3
    """How many more times a partition without a committed offset is asked about."""
    UNSET_CONFIRMATION_SECONDS = 1.0

    async def _confirmed_unset(self, consumer: Any, partitions: list[Any]) -> dict[TP, int]:
        """The partitions of ``partitions`` that have a committed offset after all.

        Right after the broker was frozen (a long GC pause, a network partition), the
        group coordinator (Kafka 4.1) answered "no committed offset" for input
        partitions whose offsets it had committed seconds before. Reset to the
        earliest offset, the worker processed them again from the start, and under
        exactly_once committed every result of those partitions a second time
        (tests/integration/test_churn.py: 250 duplicates read_committed, the range
        committed before). A partition is only reset once the coordinator has said
        it has no committed offset several times, a second apart; a fresh topic pays
        that wait once. An empty partition is not asked about: read from its start, it
        repeats nothing."""
        found: dict[TP, int] = {}
        starts = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        pending = [tp for tp in partitions if ends.get(tp, 0) > starts.get(tp, 0)]
        for _ in range(self.UNSET_CONFIRMATIONS if pending else 0):
            await asyncio.sleep(self.UNSET_CONFIRMATION_SECONDS)
            for tp in list(pending):
                offset = await consumer.committed(tp)
                if offset is not None and offset >= 0:
                    found[TP(tp.topic, tp.partition)] = offset
                    pending.remove(tp)
            if not pending:
                break
        return found


class GuardedConsumer(CommitsOnceAtStop, HoldsInputsUntilSeeked, AIOKafkaConsumer):
    """Faust's aiokafka consumer with the start-up guards (see the module docstring)."""

    # What follows is read from the edge installed on the app (``faust_edge.install``)
    # when Faust builds the consumer (:meth:`__init__`).
    ledger: InputLedger
    batch_handlers: dict[str, BatchHandler]
    """Topic name -> the handler of its fetched batches (``faust_edge.Edge.route``)."""
    batch_max_records: int | None
    """The most records of a foreground topic handed to its handler at once (None: a
    fetched batch whole)."""
    background_topics: set[str]
    """Batch topics whose outputs no reader waits for (``Edge.route(background=True)``):
    handed over after the others in each pass, and left out of :meth:`_caught_up`."""
    gate: BatchGate
    """The transactions under exactly_once, an :class:`OpenGate` otherwise."""
    before_commit: list[Callable[[], Awaitable[None]]]
    """Run at the start of every commit, between two batches or events."""
    caught_up_commit_seconds: float | None = None
    """Under exactly_once: once the input partitions (but the background topics') are
    read to their ends, a booked batch is committed at once, at most once per this
    many seconds (None: only Faust's commit timer). See :meth:`_caught_up_commits`."""
    caught_up_lag = 0
    """With :attr:`caught_up_commit_seconds`: an input partition at most this many
    records from its end as of its last fetch response counts as read to its end (see
    :meth:`_caught_up`)."""
    stop_barrier: GracefulStop | None = None
    """Under exactly_once: the stop barrier the transactional sends respect."""
    recovery: Recovery
    """Where a recoverable producer error is reported; once it is, nothing more is
    handed over, sent or committed."""
    _deliveries: Deliveries | None = None
    _appender: Appender | None = None
    _transaction_appenders: dict[str, Appender] | None = None
    _send_lock: asyncio.Lock | None = None
    _booked_since_commit = False
    _last_commit_started = 0.0
    _commit_wanted: asyncio.Event | None = None

    @property
    def deliveries(self) -> Deliveries:
        """The outcome of every record this consumer's worker sends."""
        if self._deliveries is None:
            self._deliveries = Deliveries(self.recovery)
        return self._deliveries

    def __init__(self, transport: Any, *args: Any, **kwargs: Any) -> None:
        """Faust's consumer, given the edge's parts; the exactly_once fixes are in place
        before its first rebalance."""
        super().__init__(transport, *args, **kwargs)
        edge = edge_of(self.app)
        self.ledger = edge.ledger
        self.batch_handlers = edge.batch_handlers
        self.background_topics = edge.background_topics
        self.before_commit = edge.before_commits
        self.batch_max_records = edge.config.batch_max_records
        # Faust's count from its own setting (broker_commit_every), the edge's instead:
        # None turns it off, which Faust's setting cannot express.
        self._commit_every = edge.config.commit_every_records
        self.gc_thresholds = edge.config.gc_thresholds
        settle_before_recovery(self.gc_thresholds)  # the tables are recovered next
        self.recovery = edge.recovery
        self.graceful_stop = edge.stop
        exactly_once = edge.config.exactly_once
        # Faust runs transactions only in a worker (``app.in_transaction``, read here
        # and nowhere else: it is cached on its first read).
        if bool(self.app.in_transaction) != exactly_once:
            raise RuntimeError(
                f"the edge is configured for exactly_once={exactly_once}, but Faust's "
                f"app.in_transaction is {self.app.in_transaction} (a consumer made "
                "outside a worker?)"
            )
        if exactly_once:
            self.gate = edge.transactions
            self.stop_barrier = edge.stop
            edge.transactions.stop_revoked_producers(self.transactions)
            if edge.config.caught_up_commit_seconds > 0:
                self.caught_up_commit_seconds = edge.config.caught_up_commit_seconds
                self.caught_up_lag = edge.config.caught_up_lag_records
        else:
            self.gate = OpenGate()

    def _new_consumer_thread(self) -> GuardedConsumerThread:
        # Called from Faust's __init__, before ours has read the edge.
        edge = edge_of(self.app)
        thread = GuardedConsumerThread(self, loop=self.loop, beacon=self.beacon)
        thread.fetch_max_wait_ms = edge.config.fetch_max_wait_ms
        thread.undecodable = edge.undecodable
        thread.exactly_once = edge.config.exactly_once
        return thread

    # ---------------------------------------------------------------- seeks

    def _input_partitions(self) -> set[TP]:
        return {tp for tp in self.assignment() if not self._is_changelog_tp(tp)}

    async def perform_seek(self) -> None:
        """Faust's seek to the committed offsets, made real for input partitions with
        no committed offset (reset per ``auto_offset_reset``) or offset 0; then each
        input partition's ledger starts at its position."""
        await super().perform_seek()
        # The tables were just recovered: their entries live as long as the worker.
        settle_after_recovery(self.gc_thresholds)
        inputs = self._input_partitions()
        unset = {tp for tp in inputs if not self._committed_offset.get(tp)}
        if not inputs:
            return
        positions, found = await self._thread.reset_and_positions(unset, inputs)
        if found:
            logger.warning(
                "The group coordinator first answered no committed offset, then one: "
                "sought to %s (not reset to the %s offset)",
                ", ".join(f"{tp.topic}/{tp.partition}={o}" for tp, o in sorted(found.items())),
                self.app.conf.consumer_auto_offset_reset,
            )
            for tp, offset in found.items():
                self._committed_offset[tp] = offset
            unset -= set(found)
        for tp, position in positions.items():
            if tp in unset:
                # Faust keeps None for "no committed offset": the reset position is
                # what a commit must not pass a gap after.
                self._read_offset[tp] = position or None
            self.ledger.started(tp, position)
        if unset:
            logger.info(
                "No committed offset: reset to the %s offset %s",
                self.app.conf.consumer_auto_offset_reset,
                ", ".join(f"{tp.topic}/{tp.partition}={positions.get(tp)}" for tp in sorted(unset)),
            )

    async def seek_to_committed(self) -> Mapping[TP, int]:
        """Faust's seek to the committed offsets, logged under exactly_once beside the
        first event each partition hands over (``Transactions.events``): the evidence
        needed when a restart loses or repeats events."""
        offsets = await super().seek_to_committed()
        if self.recovery.exactly_once:
            log_seeks(offsets)
        return offsets

    async def seek_wait(self, partitions: Mapping[TP, int | None]) -> Any:
        """Under exactly_once, table recovery seeks a changelog partition without a
        start offset to its start instead of crashing (:func:`from_start_when_unknown`)."""
        if self.recovery.exactly_once:
            partitions = from_start_when_unknown(partitions)
        return await super().seek_wait(partitions)

    async def seek(self, partition: TP, offset: int) -> None:
        await super().seek(partition, offset)
        if not self._is_changelog_tp(partition):
            self.ledger.started(partition, offset)

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        self.ledger.forget(revoked)
        await super().on_partitions_revoked(revoked)

    # ---------------------------------------------------------------- commits

    async def commit(self, *args: Any, **kwargs: Any) -> bool:
        """Faust's commit, between two batches (or events, under exactly_once), after
        the ``before_commit`` hooks.

        When Faust ends the transactions (``commit_and_end_transactions``: a revoke,
        a stop), it commits only those with offsets in its acked lists; the gate then
        commits every other open transaction that holds processed records, so that
        none crosses a rebalance open. One that did would be the undoing of a kept
        partition's table: Faust re-reads its changelog up to the last stable offset
        (from the start, for a memory store), which reverts the tables to the last
        commit, while the records of that transaction are not processed again."""
        recovery = self.recovery
        async with self.gate.lock:
            if recovery.requested is not None:
                return False
            self._last_commit_started = monotonic()
            try:
                if not await self._run_before_commit():
                    return False
                committed = await super().commit(*args, **kwargs)
                if kwargs.get("start_new_transaction", True) is False:
                    committed = await self.gate.end_transactions() or committed
            except Exception as error:
                if recovery.request(error, "commit", committing=True):
                    return False
                raise
            return committed and recovery.requested is None

    HOOK_ROUNDS = 5
    """Rounds of the ``before_commit`` hooks a commit tries (:meth:`_run_before_commit`)."""

    async def _run_before_commit(self) -> bool:
        """The ``before_commit`` hooks, again while a batch was booked as they ran; False
        when one still was after :attr:`HOOK_ROUNDS` rounds (this commit is skipped).

        A hook sends what the batches booked so far left pending (contributions, writes
        behind). Under at-least-once nothing holds the batch path while it waits for
        its send, so a batch can be handled and booked meanwhile; its offsets would be
        in this commit and what it left pending would not. A round in which no batch
        was booked ends with nothing pending from a booked batch, and nothing runs
        between its end and Faust's choice of the offsets (no await in between)."""
        for _ in range(self.HOOK_ROUNDS):
            # Everything booked so far is in this commit's offsets.
            self._booked_since_commit = False
            for hook in self.before_commit:
                await hook()
            if not self._booked_since_commit:
                return True
        logger.info("Commit skipped: batches kept arriving while pending outputs were sent")
        self._booked_since_commit = True
        return False

    def ack(self, message: Any) -> bool:
        """Faust's ack, but under at-least-once not of a message of an earlier
        generation: an agent's event still in hand when a rebalance began is acked when
        it is done, by then in the new generation, whose reading started at the
        committed offset. Booked, it would let the next commit pass offsets this
        generation never handed over (the ledger's alarm, "past what this worker
        handed over": seen on the parking-expiry topic); not booked, the event is
        read again from the committed offset, as at-least-once allows. (Under
        exactly_once no event is in hand across a rebalance: ``Transactions``.)"""
        generation = message.generation_id
        if (
            generation is not None
            and generation != self.app.consumer_generation_id
            and not self.gate.holds_commits
        ):
            message.acked = True
            self._unacked_messages.discard(message)  # no stop waits for it (wait_empty)
            return False
        return super().ack(message)

    def _new_offset(self, tp: TP) -> int | None:
        acked = self._acked[tp]
        ledger = self.ledger.partitions.get(tp)
        # Faust checks the head only against a committed offset; with none, the
        # start stands in (the same one-offset slack as Faust's check, for a
        # transaction marker at the start).
        if (
            acked
            and ledger is not None
            and not self._committed_offset[tp]
            and min(acked) - ledger.start > 1
        ):
            return None
        return super()._new_offset(tp)

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        for tp, offset in offsets.items():
            if not self.ledger.committing(tp, offset):
                ledger = self.ledger.partitions[tp]
                logger.error(
                    "Committing %s/%s at %s, past what this worker handed over "
                    "(start %s + %s offsets): records were lost",
                    tp.topic,
                    tp.partition,
                    offset,
                    ledger.start,
                    ledger.accounted,
                )
        return await super()._commit_offsets(offsets, start_new_transaction)

    # ---------------------------------------------------------------- delivery

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover (needs a broker)
        """Faust's drain loop over :func:`fetch_batches`: each batch goes through
        :meth:`_deliver`; what is not handed over is sought back."""
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        set_flag, unset_flag = self.diag.set_flag, self.diag.unset_flag
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                batches, _ = await self._wait_next_records(1.0)
                await self.sleep(0)
                if not batches or self.should_stop:
                    unset_flag(CONSUMER_FETCHING)
                    continue
                if not self.flow_active:
                    # As Faust: a fetch that returns while the flow is stopped seeks
                    # every partition back to its committed offset.
                    try:
                        await self.perform_seek()
                    except Exception as error:
                        logger.warning("Seek while the flow is stopped failed: %r", error)
                    unset_flag(CONSUMER_FETCHING)
                    continue
                await self._deliver_all(batches)
                self._signal_if_caught_up()
                unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                logger.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                logger.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as error:
            logger.exception("Drain messages raised: %r", error)
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)

    async def _deliver_all(self, batches: Mapping[TP, FetchedBatch]) -> None:
        """Hand the batches over in :func:`delivery_order` (a rollup fold takes
        milliseconds a partition: the results fetched with it go first), yielding to
        the event loop after each so that the producer sends what it produced while
        the next one is handled; seek back what was not handed. Once a part of a
        partition is not handed over, its later parts are not either."""
        app = self.app
        generation_id = app.consumer_generation_id
        refetch: dict[TP, int] = {}
        ordered = delivery_order(batches, self.batch_max_records, self.background_topics)
        for n, (tp, batch) in enumerate(ordered):
            if tp in refetch:
                continue
            if n:
                await asyncio.sleep(0)
            active = self._active_partitions
            if (
                self.recovery.requested is not None
                or not self.flow_active
                or app.consumer_generation_id != generation_id
                or not (active is None or tp in active or tp in self._buffered_partitions)
            ):
                refetch[tp] = batch.start
                continue
            tracked = not self._is_changelog_tp(tp)
            hand_from = batch.start
            if tracked:
                verdict = self.ledger.admit(tp, batch.start, batch.end)
                if verdict.admission is Admission.STALE:
                    continue
                if verdict.admission is Admission.HOLE:
                    logger.warning(
                        "%s/%s: fetched from %s but %s was not handed over yet: refetching",
                        tp.topic,
                        tp.partition,
                        batch.start,
                        verdict.offset,
                    )
                    refetch[tp] = verdict.offset
                    continue
                hand_from = verdict.offset
            handler = self.batch_handlers.get(tp.topic)
            if not tracked:
                stopped_at = await self._deliver_changelog(tp, batch, generation_id)
            elif handler is None:
                stopped_at = await self._deliver(tp, batch, hand_from, generation_id, tracked)
            else:
                stopped_at = await self._deliver_batch(
                    tp, batch, hand_from, generation_id, handler, tracked
                )
            if stopped_at is not None:
                refetch[tp] = stopped_at
        if refetch:
            logger.debug("Seeking back batches not handed over: %r", refetch)
            await self._thread.seek_back(refetch)

    async def _deliver(
        self, tp: TP, batch: FetchedBatch, hand_from: int, generation_id: int, tracked: bool
    ) -> int | None:
        """Faust's per-message delivery (conductor, stream queues, agents) of the
        batch's records from ``hand_from`` on; returns the offset of the first record
        not handed over when the flow stopped or the generation changed, else None.
        The ledger (``tracked``) learns of each record as it is handed over, before
        any commit can include it."""
        app = self.app
        ledger = self.ledger
        handed_to = hand_from
        callback = self.callback
        to_message = self._to_message
        read_offset = self._read_offset
        acks_enabled = app.topics.acks_enabled_for(tp.topic)
        for n, record in enumerate(batch.records):
            offset = record.offset
            if offset < hand_from:
                continue
            if not self.flow_active or app.consumer_generation_id != generation_id:
                if tracked:
                    ledger.handed(tp, handed_to, offset)
                return offset
            if n and not n % 100:
                await asyncio.sleep(0)
            r_offset = read_offset[tp]
            if r_offset is not None and offset < r_offset:
                continue
            if offset - (r_offset or 0) > 1 and r_offset and acks_enabled:
                await self._add_gap(tp, r_offset + 1, offset)
            if self._commit_every is not None and self._n_acked >= self._commit_every:
                self._n_acked = 0
                await self.commit()
            if tracked:
                # Before the hand-over, not after: once in the stream's queue the event
                # can be processed, acked and committed (a caught-up commit under
                # exactly_once) before this loop runs again; booked after, that commit
                # looked like one past what was handed over (the ledger's false alarm).
                ledger.handed(tp, handed_to, offset + 1)
                handed_to = offset + 1
            await self.wait_first(callback(to_message(tp, record)), self.suspend_flow.wait())
            read_offset[tp] = offset
        if tracked:
            ledger.handed(tp, handed_to, batch.end)
        return None

    async def _deliver_changelog(
        self, tp: TP, batch: FetchedBatch, generation_id: int
    ) -> int | None:
        """A changelog batch for table recovery (or a standby), applied to its table in
        one step instead of one queued event at a time (Faust's recovery loop spends
        ~0.5 ms a record on its bookkeeping): every record but the last is decoded and
        applied here, and recovery's offsets moved past them; the last one takes
        Faust's path, so that its recovery loop sees the progress and ends recovery
        when the changelog is read. Anything Faust's loop holds is applied first, so
        the writes keep their order."""
        recovery = self.app.tables.recovery
        if tp in recovery.active_tps:
            offsets, received = recovery.active_offsets, recovery._active_events_received_at
        elif tp in recovery.standby_tps:
            offsets, received = recovery.standby_offsets, recovery._standby_events_received_at
        else:
            return await self._deliver(tp, batch, batch.start, generation_id, False)
        seen = offsets.get(tp)
        records = [r for r in batch.records if seen is None or r.offset > seen]
        if len(records) > 1:
            queue = self.app.tables.changelog_queue
            while not queue.empty():  # Faust's loop takes what it was given first
                await asyncio.sleep(0.001)
            if not self.flow_active or self.app.consumer_generation_id != generation_id:
                return records[0].offset
            recovery.flush_buffers()
            table = recovery.tp_to_table[tp]
            decode = table.changelog_topic.decode
            to_message = self._to_message
            events = [
                await decode(to_message(tp, record), propagate=True) for record in records[:-1]
            ]
            table.apply_changelog_batch(events)
            offsets[tp] = records[-2].offset
            received[tp] = monotonic()
            self._read_offset[tp] = records[-2].offset
        tail = FetchedBatch(records[-1:], records[-1].offset if records else batch.end, batch.end)
        return await self._deliver(tp, tail, tail.start, generation_id, False)

    async def _deliver_batch(
        self,
        tp: TP,
        batch: FetchedBatch,
        hand_from: int,
        generation_id: int,
        handler: BatchHandler,
        tracked: bool,
    ) -> int | None:
        """Hand a whole batch to ``handler``, send its outputs, and book its offsets as
        acked in Faust's structures (Faust's commit path then commits them, as for
        any event). Returns ``hand_from`` when the batch must be fetched again (the
        flow stopped, or a new generation began, before its offsets were booked)."""
        app = self.app
        gate = self.gate
        records = batch.records
        if records and records[0].offset < hand_from:
            records = [record for record in records if record.offset >= hand_from]
        async with gate.lock:
            if not self.flow_active or app.consumer_generation_id != generation_id:
                return hand_from
            unprocessed = gate.first_unprocessed(tp)
            if unprocessed is not None and records and records[0].offset < unprocessed:
                # Already sent in the open transaction (a seek back after a rebalance
                # that kept the partition here): sending again would commit twice.
                records = [record for record in records if record.offset >= unprocessed]
            outputs: list[Output] = []
            if records:
                message = self._to_message(tp, records[-1])
                event = Event(app, message.key, message.value, message.headers, message)
                token = _current_event.set(weakref.ref(event))
                try:
                    outputs = handler(tp, records)
                finally:
                    _current_event.reset(token)
            await self.send_outputs(tp, outputs)
            if not gate.holds_commits and (
                not self.flow_active or app.consumer_generation_id != generation_id
            ):
                # At-least-once, revoked while sending: the revoke's commit did not wait
                # for this batch, and the partition may be gone: not booked, so
                # processed again (duplicates). Under exactly_once the revoke's commit
                # waits for the lock and commits the batch with its outputs: booked,
                # or it would be processed again and its outputs committed twice.
                return hand_from
            offsets = range(hand_from, batch.end)
            self._acked[tp].extend(offsets)
            self._acked_index[tp].update(offsets)
            self._n_acked += len(offsets)
            self._read_offset[tp] = batch.end - 1
            if tracked:
                self.ledger.handed(tp, hand_from, batch.end)
            if records:
                gate.processed(tp, records[-1].offset)
            self._booked_since_commit = True
        monitor = app.monitor
        monitor.track_tp_end_offset(tp, self.highwater(tp))
        if records:
            on_batch_in = getattr(monitor, "on_batch_in", None)
            if on_batch_in is not None:
                on_batch_in(tp, len(records), records[-1].offset)
        if self._commit_every is not None and self._n_acked >= self._commit_every:
            self._n_acked = 0
            await self.commit()
        return None

    @Service.task
    async def _caught_up_commits(self) -> None:
        """Under exactly_once a ``read_committed`` reader sees a result when its
        transaction commits: with Faust's timer alone, half the commit interval on
        average. A worker that has read its input partitions (but the background
        topics') to their ends has nothing to batch its commit with, so it commits
        its booked batches at once,
        at most once per :attr:`caught_up_commit_seconds`; behind, it goes on
        committing every commit interval, as many batches at a time as arrive."""
        spacing = self.caught_up_commit_seconds
        if spacing is None:
            return
        wanted = self._commit_wanted = asyncio.Event()
        while not self.should_stop:
            await wanted.wait()
            wanted.clear()
            delay = self._last_commit_started + spacing - monotonic()
            if delay > 0:
                await self.sleep(delay)
            if self._booked_since_commit and self.flow_active and not self.should_stop:
                await self.commit()

    def _signal_if_caught_up(self) -> None:
        """After the batches of a fetch: wake :meth:`_caught_up_commits` if they were
        booked and the input partitions are read to their ends (:meth:`_caught_up`)."""
        wanted = self._commit_wanted
        if wanted is not None and self._booked_since_commit and self._caught_up():
            wanted.set()

    def _caught_up(self) -> bool:
        """Whether every input partition but the background topics' was handed over up
        to its end (its last stable offset under ``read_committed``, else its high
        watermark) as of its last fetch response, or to within :attr:`caught_up_lag`
        records of it.

        The consumer thread fetches ahead: under a steady load the next fetch response
        has usually moved a partition's end on by the time this batch is handed over,
        and a worker that waited for the very end would commit on the commit timer
        instead (half its interval on average); the records behind go in the next
        transaction either way. A backlog is far more than the lag, so it goes on
        committing on the timer, as many batches at a time as arrive."""
        consumer = self._thread._consumer
        subscription = None if consumer is None else consumer._subscription.subscription
        assignment = None if subscription is None else subscription.assignment
        if assignment is None:
            return False
        committed_only = consumer._isolation_level == "read_committed"
        background = self.background_topics
        for tp, ledger in self.ledger.partitions.items():
            if tp.topic in background:
                continue  # no reader waits for its outputs
            state = assignment.state_value(tp)  # Faust's TP is the same tuple
            if state is None:
                continue  # revoked: not this worker's to read
            end = state.lso if committed_only else state.highwater
            if end is None or end - ledger.expected > self.caught_up_lag:
                return False
        return True

    async def send_outputs(self, tp: TP, outputs: list[Output]) -> None:
        """Send the outputs of input partition ``tp`` (a batch's, or an agent's event's):
        under at-least-once as aiokafka batches (:class:`Appender`), under exactly_once
        through Faust's producer, each in the transaction of its input partition
        (``Output.source``, else ``tp``); a record the producer gives up on stops
        the next commit (``Deliveries``).

        Not through ``topic.send``: Faust's topic path (message futures, send
        sensors, callbacks) cost the worker about as much CPU per record as the
        producer itself."""
        if not outputs or self.recovery.requested is not None:
            return  # after a recovery request nothing commits: the next app resends
        gate = self.gate
        own = gate.transactional_id(tp)
        if own is None:
            # At-least-once: no transaction to join, so straight into aiokafka's
            # batches (``Appender``). Faust's send adds a signal and a wrapper per
            # record, and under exactly_once the lock and the stop barrier
            # (stopping.py) this would skip.
            async with self.send_lock:
                try:
                    await self._append_outputs(outputs)
                except Exception as error:
                    if not self.recovery.request(error, "send"):
                        raise
            return
        groups: dict[str, list[Output]] = {}
        for output in outputs:
            transactional_id = (
                own if output.source is None else gate.transactional_id(output.source)
            )
            group = groups.get(transactional_id)
            if group is None:
                groups[transactional_id] = [output]
            else:
                group.append(output)
        async with self.send_lock:
            for transactional_id, group in groups.items():
                try:
                    await self._send_in_transaction(transactional_id, group)
                except Exception as error:
                    if self.recovery.request(error, f"send in {transactional_id}"):
                        return
                    raise

    async def _send_in_transaction(self, transactional_id: str, outputs: list[Output]) -> None:
        """Exactly_once: ``outputs`` into aiokafka's batches of the transactional producer
        ``transactional_id``, as at-least-once sends them (one batch per partition, not
        Faust's send per record), under Faust's lock of that transaction and the stop
        barrier (``GracefulStop``: no send once the stop has committed, and the stop's
        commit waits for a send in progress)."""
        stop = self.stop_barrier
        if stop is not None and not stop.admits_send(outputs[0].topic):
            return
        with stop.sending() if stop is not None else contextlib.nullcontext():
            lock, appender = self.transaction_appender(transactional_id)
            async with lock:
                await self._append_outputs(outputs, appender)

    def transaction_appender(self, transactional_id: str) -> tuple[asyncio.Lock, Appender]:
        """Faust's lock of transaction ``transactional_id`` and an :class:`Appender` of its
        transactional producer (exactly_once)."""
        producer = self.app.producer
        client = producer._transaction_producers.get(transactional_id)
        if client is None:
            # A rebuild, not a crash (a worker exited 1 on it in a CI churn run): the
            # fresh app restores its tables as committed and reads what it owns again.
            raise TransactionProducerGone(
                f"no transactional producer {transactional_id}: its input partition was revoked"
            )
        if self._transaction_appenders is None:
            self._transaction_appenders = {}
        appender = self._transaction_appenders.get(transactional_id)
        if appender is None or appender.producer is not client:
            appender = self._transaction_appenders[transactional_id] = Appender(client)
        return producer._trn_locks[transactional_id], appender

    @property
    def send_lock(self) -> asyncio.Lock:
        """Held by every at-least-once :meth:`send_outputs` call while its records go
        to the producer's batches: the calls reach each partition in the order they
        were made (FIFO), whatever waits inside them.

        Without it, a call whose first record waits for a full or in-flight batch of
        its partition (aiokafka's ``add_batch`` waits while the partition has a
        batch pending) is overtaken by a later call's records to another partition:
        the commit's flush of the pending rollup contributions, waiting on one
        rollup partition, was overtaken by the next batch's newer contributions
        of the same run and input partition on another one, and the run's
        watermark then dropped the older ones as redelivered (the run rollups
        undercounted under at-least-once)."""
        if self._send_lock is None:
            self._send_lock = asyncio.Lock()
        return self._send_lock

    async def _append_outputs(
        self, outputs: list[Output], appender: Appender | None = None
    ) -> None:
        """``outputs`` into aiokafka's batches (of ``appender``, else the at-least-once
        producer's), in their order within each partition (the caller holds
        :attr:`send_lock`)."""
        watch = self.deliveries.watch
        appender = appender or self.appender()
        batched = [o for o in outputs if o.on_sent is None]
        for future in await appender.send_many(
            [(o.topic, o.key, o.value, o.partition, o.headers) for o in batched]
        ):
            watch(future)
        for output in outputs:
            if output.on_sent is not None:
                future = await appender.send(
                    output.topic, output.key, output.value, output.partition, output.headers
                )
                watch(future)
                future.add_done_callback(output.on_sent)

    async def delivered(self) -> bool:
        """Under at-least-once: wait until the broker has every record sent so far;
        True if each was delivered. An agent that consumes table state its input's
        redelivery would need (a release of parked results) makes its outputs durable
        this way first: the state's changelog write and the outputs otherwise land on
        their own, and a crash between them loses the outputs for good. False too
        once a rebuild is requested (:meth:`send_outputs` then drops what it is
        given). Under exactly_once True at once: one transaction holds both."""
        if self.recovery.exactly_once:
            return True
        await self.appender().producer.flush()
        return self.deliveries.error is None and self.recovery.requested is None

    async def send_command(self, output: Output) -> None:
        """Send ``output`` outside every transaction, whatever the guarantee: a command
        of the worker to itself (a parked query's expiry), which its handler makes
        idempotent and its sender sends again until it is handled. A failed send is
        logged (WARNING) and left to that resend.

        Under exactly_once Faust's ``topic.send`` put such a record in the
        transaction of its destination partition, which commits only with an input
        offset of that partition: once that partition's inputs stopped, the command
        stayed invisible to read_committed readers, the transaction timed out,
        its producer was fenced and every later command failed the same way (a
        churn run here: a worker's parked results never expired, its expiry
        partition never processed an event)."""
        if self.recovery.requested is not None:
            return
        future = await self.appender().send(
            output.topic, output.key, output.value, output.partition, output.headers
        )
        future.add_done_callback(_log_failed_command)

    def appender(self) -> Appender:
        """The :class:`Appender` of the producer's own aiokafka producer, which is not
        transactional: at-least-once outputs, and commands (:meth:`send_command`)."""
        client = self.app.producer._ensure_producer()
        appender = self._appender
        if appender is None or appender.producer is not client:
            appender = self._appender = Appender(client)
        return appender

    async def undelivered_stops_commit(self) -> bool:
        """True, with the worker crashed, when a record it sent was not delivered.

        Called once every send before the commit has its outcome: a commit would
        otherwise book the offsets of the input that produced the record (under
        at-least-once), or commit the transaction without it (under exactly_once:
        aiokafka fails the record's batch but still commits the transaction). The
        crash leaves the input uncommitted, so the next owner processes it again; a
        recoverable error asks for an in-process rebuild instead (``faust_edge.recovery``),
        which leaves it uncommitted too."""
        error = self.deliveries.error
        if error is None:
            return False
        if not self.recovery.request(error, "delivery"):
            await self.crash(error)
        return True

    async def _commit(self, offsets: Mapping[TP, int]) -> bool:
        """At-least-once commit (Faust has just flushed the producer, so every output
        of the batches in ``offsets`` has its outcome)."""
        if await self.undelivered_stops_commit():
            return False
        return await super()._commit(offsets)


def _log_failed_command(future: asyncio.Future[Any]) -> None:
    if future.cancelled() or future.exception() is None:
        return
    logger.warning(
        "A command record was not delivered (%r); it is sent again until handled",
        future.exception(),
    )
