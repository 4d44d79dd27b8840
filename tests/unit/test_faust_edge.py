"""The start-up guards of the worker's consumer (scorer.stream.faust_edge), without a
broker: the input ledger, the snapshot fetch over aiokafka's fetch buffer, and the
drain's bookkeeping against a stand-in of Faust's consumer."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.consumer.fetcher import FetchResult
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import ProducerFenced, UnsupportedCodecError
from aiokafka.structs import TopicPartition
from intervaltree import IntervalTree

from scorer.stream.faust_edge.consumer import (
    FetchedBatch,
    GuardedConsumer,
    GuardedConsumerThread,
    OpenGate,
    Output,
    fetch_batches,
    split_batch,
)
from scorer.stream.faust_edge.ledger import Admission, InputLedger, LedgerCollector
from scorer.stream.faust_edge.recovery import Recovery
from scorer.stream.faust_edge.transactions import Transactions
from scorer.stream.faust_edge.versions import PINNED, VersionMismatch, check_versions, installed

RESULTS = [TopicPartition("results", p) for p in range(2)]
CHANGELOG = TopicPartition("app-qrels-changelog", 0)


# ---------------------------------------------------------------- the ledger


def test_a_batch_that_continues_where_the_last_ended_is_handed_over() -> None:
    ledger = InputLedger()
    ledger.started(RESULTS[0], 100)
    assert ledger.admit(RESULTS[0], 100, 150).admission is Admission.HAND
    ledger.handed(RESULTS[0], 100, 150)
    verdict = ledger.admit(RESULTS[0], 150, 160)
    assert (verdict.admission, verdict.offset) == (Admission.HAND, 150)
    assert ledger.partitions[RESULTS[0]].accounted == 50


def test_a_batch_past_the_first_offset_not_handed_over_is_a_hole_to_refetch() -> None:
    ledger = InputLedger()
    ledger.started(RESULTS[0], 0)
    verdict = ledger.admit(RESULTS[0], 1636, 4951)  # the start-up loss: 0..1635 taken
    assert (verdict.admission, verdict.offset) == (Admission.HOLE, 0)
    assert ledger.holes == 1
    assert ledger.partitions[RESULTS[0]].expected == 0


def test_a_refetched_batch_is_handed_over_from_the_first_new_offset_only() -> None:
    ledger = InputLedger()
    ledger.started(RESULTS[0], 0)
    ledger.handed(RESULTS[0], 0, 40)
    assert ledger.admit(RESULTS[0], 10, 30).admission is Admission.STALE
    verdict = ledger.admit(RESULTS[0], 10, 60)
    assert (verdict.admission, verdict.offset) == (Admission.HAND, 40)


def test_a_commit_past_start_plus_accounted_offsets_is_a_violation() -> None:
    ledger = InputLedger()
    ledger.started(RESULTS[0], 10)
    ledger.handed(RESULTS[0], 10, 30)
    assert ledger.committing(RESULTS[0], 30)
    assert not ledger.committing(RESULTS[0], 31)
    assert ledger.violations == 1
    assert ledger.committing(RESULTS[1], 5)  # untracked partitions are not judged


def test_a_seek_back_to_the_committed_offset_keeps_what_was_handed_over() -> None:
    ledger = InputLedger()
    ledger.started(RESULTS[0], 100)
    ledger.handed(RESULTS[0], 100, 200)
    ledger.started(RESULTS[0], 120)  # a rebalance: back to the committed offset
    assert ledger.committing(RESULTS[0], 200)  # processed before the seek: no violation
    assert ledger.admit(RESULTS[0], 120, 150).admission is Admission.HAND
    ledger.handed(RESULTS[0], 120, 150)
    assert ledger.partitions[RESULTS[0]].accounted == 100
    ledger.started(RESULTS[0], 500)  # forward past the range: another worker went on
    assert ledger.partitions[RESULTS[0]].accounted == 0
    assert not ledger.committing(RESULTS[0], 501)


def test_a_batch_booked_after_a_revoke_forgot_its_partition_is_not_tracked_again() -> None:
    # Under exactly_once a batch in hand when a revoke begins is booked anyway (the
    # revoke's commit commits it); the revoke has already forgotten the partition.
    ledger = InputLedger()
    ledger.started(RESULTS[0], 100)
    ledger.forget([RESULTS[0]])
    ledger.handed(RESULTS[0], 100, 150)
    assert RESULTS[0] not in ledger.partitions
    assert ledger.committing(RESULTS[0], 150)


def test_the_ledger_is_exported_per_partition() -> None:
    ledger = InputLedger()
    ledger.started(RESULTS[1], 7)
    ledger.handed(RESULTS[1], 7, 19)
    ledger.committing(RESULTS[1], 19)
    ledger.admit(RESULTS[1], 25, 30)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in LedgerCollector(ledger).collect()
        for sample in family.samples
    }
    labels = (("partition", "1"), ("topic", "results"))
    assert samples[("scorer_input_start_offset", labels)] == 7
    assert samples[("scorer_input_accounted_offsets", labels)] == 12
    assert samples[("scorer_input_committed_offset", labels)] == 19
    assert samples[("scorer_input_refetched_batches_total", ())] == 1
    assert samples[("scorer_input_commit_violations_total", ())] == 0


# ---------------------------------------------------------------- the snapshot fetch


class StandInRecords:
    """aiokafka's PartitionRecords: records to yield, and the next offset to fetch
    (past a trailing transaction marker once the records are consumed)."""

    def __init__(self, start: int, offsets: list[int], end: int) -> None:
        self.next_fetch_offset = start
        self._offsets = offsets
        self._end = end

    def __iter__(self) -> StandInRecords:
        return self

    def __next__(self) -> SimpleNamespace:
        if not self._offsets:
            self.next_fetch_offset = self._end
            raise StopIteration
        offset = self._offsets.pop(0)
        self.next_fetch_offset = offset + 1
        return SimpleNamespace(offset=offset)


class StandInFetcher:
    """aiokafka's Fetcher: its buffer of fetched results, over a real subscription."""

    def __init__(self, positions: dict[TopicPartition, int]) -> None:
        self._subscriptions = SubscriptionState()
        self._subscriptions.assign_from_user(set(positions))
        self.assignment = self._subscriptions.subscription.assignment
        for tp, position in positions.items():
            self.assignment.state_value(tp).seek(position)
        self._records: dict[TopicPartition, Any] = {}
        self._wait_consume_future = None
        self._closed = False

    def buffer(self, tp: TopicPartition, offsets: list[int], end: int) -> None:
        start = self.assignment.state_value(tp).position
        self._records[tp] = FetchResult(
            tp,
            assignment=self.assignment,
            partition_records=StandInRecords(start, offsets, end),
            backoff=0,
        )

    def _notify(self, future: Any) -> None:
        pass

    def _create_fetch_waiter(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()


def test_the_fetch_returns_only_the_snapshot_partitions_with_their_offset_ranges() -> None:
    async def scenario() -> None:
        fetcher = StandInFetcher({RESULTS[0]: 0, RESULTS[1]: 0, CHANGELOG: 5})
        fetcher.buffer(RESULTS[0], [0, 1, 2], end=4)  # a commit marker at 3
        fetcher.buffer(RESULTS[1], [0, 1], end=2)
        fetcher.buffer(CHANGELOG, [5, 6], end=7)
        got = await fetch_batches(fetcher, frozenset({CHANGELOG}), 0, None)
        assert {tp: (batch.start, batch.end) for tp, batch in got.items()} == {CHANGELOG: (5, 7)}
        # The results partitions were not in the snapshot: records and positions stay.
        assert set(fetcher._records) == set(RESULTS)
        assert fetcher.assignment.state_value(RESULTS[0]).position == 0
        got = await fetch_batches(fetcher, None, 0, None)
        assert {tp: (batch.start, batch.end) for tp, batch in got.items()} == {
            RESULTS[0]: (0, 4),
            RESULTS[1]: (0, 2),
        }
        assert [record.offset for record in got[RESULTS[0]].records] == [0, 1, 2]
        assert fetcher.assignment.state_value(RESULTS[0]).position == 4

    asyncio.run(scenario())


def test_a_paused_partitions_buffered_records_are_dropped_without_moving_its_position() -> None:
    async def scenario() -> None:
        fetcher = StandInFetcher({RESULTS[0]: 0})
        fetcher.buffer(RESULTS[0], [0, 1, 2], end=3)
        fetcher.assignment.state_value(RESULTS[0]).pause()
        assert await fetch_batches(fetcher, None, 0, None) == {}
        assert fetcher.assignment.state_value(RESULTS[0]).position == 0
        assert not fetcher._records

    asyncio.run(scenario())


def test_a_batch_of_only_markers_still_advances_the_range() -> None:
    async def scenario() -> None:
        fetcher = StandInFetcher({RESULTS[0]: 10})
        fetcher.buffer(RESULTS[0], [], end=12)
        got = await fetch_batches(fetcher, None, 0, None)
        assert {tp: (batch.records, batch.start, batch.end) for tp, batch in got.items()} == {
            RESULTS[0]: ([], 10, 12)
        }

    asyncio.run(scenario())


def test_the_partition_set_is_copied_when_the_fetch_is_asked_for_and_empty_fetches_nothing() -> (
    None
):
    thread = GuardedConsumerThread.__new__(GuardedConsumerThread)
    asked: list[Any] = []

    async def call_thread(method: Any, consumer: Any, partitions: Any, **kwargs: Any) -> dict:
        asked.append(partitions)
        active.clear()  # Faust empties its live set while the fetch waits
        return {}

    thread._consumer = SimpleNamespace(_max_poll_records=500)
    thread.call_thread = call_thread  # type: ignore[method-assign]
    active = {RESULTS[0], RESULTS[1]}
    asyncio.run(thread.getmany(active, 1.0))
    assert asked == [frozenset(RESULTS)]
    assert asyncio.run(thread.getmany(set(), 1.0)) == {}
    assert len(asked) == 1, "an empty set never reaches the fetcher"


# ---------------------------------------------------------------- the drain's bookkeeping


class StandInThread:
    def __init__(self) -> None:
        self.sought: dict[TopicPartition, int] = {}

    async def seek_back(self, offsets: dict[TopicPartition, int]) -> None:
        self.sought.update(offsets)


def stand_in_consumer(stop_after: int | None = None) -> tuple[GuardedConsumer, list[int]]:
    """A GuardedConsumer with Faust's bookkeeping structures and a callback that
    records the offsets delivered (and stops the flow after ``stop_after`` of them)."""
    consumer = GuardedConsumer.__new__(GuardedConsumer)
    delivered: list[int] = []
    # What GuardedConsumer.__init__ reads from the edge (faust_edge.install).
    consumer.ledger = InputLedger()
    consumer.batch_handlers = {}
    consumer.background_topics = set()
    consumer.before_commit = []
    consumer.batch_max_records = None
    consumer.recovery = Recovery()
    consumer.app = SimpleNamespace(
        consumer_generation_id=1,
        topics=SimpleNamespace(acks_enabled_for=lambda topic: True),
        tables=SimpleNamespace(changelog_topics={CHANGELOG.topic}),
    )
    consumer.flow_active = True
    consumer._active_partitions = set(RESULTS)
    consumer._buffered_partitions = set()
    consumer._read_offset = defaultdict(lambda: None)
    consumer._acked = defaultdict(list)
    consumer._acked_index = defaultdict(set)
    consumer._committed_offset = defaultdict(lambda: None)
    consumer._gap = defaultdict(IntervalTree)
    consumer._commit_every = None
    consumer._n_acked = 0
    consumer._thread = StandInThread()  # type: ignore[assignment]
    consumer.suspend_flow = asyncio.Event()

    async def callback(message: SimpleNamespace) -> None:
        delivered.append(message.offset)
        if stop_after is not None and len(delivered) >= stop_after:
            consumer.flow_active = False

    async def wait_first(*coroutines: Any) -> None:
        await coroutines[0]
        coroutines[1].close()

    consumer.callback = callback  # type: ignore[assignment]
    consumer.wait_first = wait_first  # type: ignore[method-assign]
    consumer._to_message = lambda tp, record: record  # type: ignore[method-assign]
    return consumer, delivered


def batch(first: int, last: int, end: int | None = None) -> FetchedBatch:
    records = [SimpleNamespace(offset=offset) for offset in range(first, last + 1)]
    return FetchedBatch(records, first, last + 1 if end is None else end)


def test_a_hole_is_sought_back_and_nothing_of_it_is_delivered() -> None:
    consumer, delivered = stand_in_consumer()
    consumer.ledger.started(RESULTS[0], 0)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(1636, 1700)}))
    assert delivered == []
    assert consumer._thread.sought == {RESULTS[0]: 0}


def test_a_batch_of_a_partition_no_longer_active_is_sought_back_to_its_start() -> None:
    consumer, delivered = stand_in_consumer()
    consumer._active_partitions = {RESULTS[1]}
    consumer.ledger.started(RESULTS[0], 0)
    consumer.ledger.started(RESULTS[1], 0)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 9), RESULTS[1]: batch(0, 2)}))
    assert delivered == [0, 1, 2]
    assert consumer._thread.sought == {RESULTS[0]: 0}
    assert consumer.ledger.partitions[RESULTS[0]].expected == 0
    assert consumer.ledger.partitions[RESULTS[1]].expected == 3


def test_a_delivery_the_flow_stops_half_way_is_sought_back_to_the_first_undelivered() -> None:
    consumer, delivered = stand_in_consumer(stop_after=4)
    consumer.ledger.started(RESULTS[0], 0)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 9)}))
    assert delivered == [0, 1, 2, 3]
    assert consumer._thread.sought == {RESULTS[0]: 4}
    ledger = consumer.ledger.partitions[RESULTS[0]]
    assert (ledger.expected, ledger.accounted) == (4, 4)


def test_an_event_committed_as_soon_as_it_is_handed_over_is_within_the_ledger() -> None:
    # The agent takes the event, acks it and a commit runs before the delivery loop
    # goes on: the commit must not look like one past what was handed over.
    consumer, delivered = stand_in_consumer()
    consumer.ledger.started(RESULTS[0], 0)
    verdicts: list[bool] = []

    async def processed_and_committed_at_once(message: SimpleNamespace) -> None:
        delivered.append(message.offset)
        verdicts.append(consumer.ledger.committing(RESULTS[0], message.offset + 1))

    consumer.callback = processed_and_committed_at_once  # type: ignore[assignment]
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 5)}))
    assert delivered == [0, 1, 2, 3, 4, 5]
    assert verdicts == [True] * 6
    assert consumer.ledger.violations == 0


@pytest.mark.parametrize("committed", [None, 0])
def test_no_commit_passes_a_head_gap_when_nothing_was_committed(committed: int | None) -> None:
    consumer, _ = stand_in_consumer()
    consumer.ledger.started(RESULTS[0], 0)
    consumer._committed_offset[RESULTS[0]] = committed
    consumer._acked[RESULTS[0]].extend(range(1636, 1700))
    assert consumer._new_offset(RESULTS[0]) is None
    consumer._acked[RESULTS[0]][:0] = range(0, 1636)
    assert consumer._new_offset(RESULTS[0]) == 1700


# ---------------------------------------------------------------- the batch path


class StandInClient:
    """The ``Appender`` of one of aiokafka's producers under Faust's: at-least-once
    sends go straight to the plain one ("aiokafka"), exactly_once sends to the
    transactional one of their input partition (its transactional id)."""

    def __init__(self, producer: StandInProducer, name: str = "aiokafka") -> None:
        self.producer = producer
        self.name = name

    async def send(self, topic, key, value, partition, headers):
        return self.producer.record(topic, value, partition, self.name)

    async def send_many(self, records):
        return [await self.send(*record) for record in records]


class StandInProducer:
    """Faust's producer: records what is sent (with the transactional id, or
    "aiokafka" for a send made to its aiokafka producer) and hands back a future per
    record (failed with ``fail`` for the values in ``failing``)."""

    def __init__(self, failing: set[bytes] | None = None) -> None:
        self.sent: list[tuple[str, bytes | None, int | None, str | None]] = []
        self.futures: list[asyncio.Future] = []
        self.failing = failing or set()
        self.client = StandInClient(self)

    async def send(self, topic, key, value, partition, timestamp, headers, *, transactional_id):
        return self.record(topic, value, partition, transactional_id)

    def record(self, topic, value, partition, transactional_id):
        self.sent.append((topic, value, partition, transactional_id))
        future = asyncio.get_running_loop().create_future()
        if value in self.failing:
            future.set_exception(RuntimeError("broker said no"))
        else:
            future.set_result(SimpleNamespace(topic=topic, offset=len(self.sent)))
        self.futures.append(future)
        return future


class StandInGate(OpenGate):
    """The exactly_once gate: one transactional id per partition, and the offsets
    already sent in each partition's open transaction."""

    holds_commits = True

    def __init__(self) -> None:
        super().__init__()
        self.lock = asyncio.Lock()
        self.last: dict[Any, int] = {}

    def transactional_id(self, tp: Any) -> str:
        return f"app-1-{tp.partition}"

    def first_unprocessed(self, tp: Any) -> int | None:
        return None if tp not in self.last else self.last[tp] + 1

    def processed(self, tp: Any, offset: int) -> None:
        self.last[tp] = offset


def batch_consumer(
    gate: OpenGate | None = None, failing: set[bytes] | None = None
) -> tuple[GuardedConsumer, list[list[int]]]:
    """A stand-in consumer whose results topic goes to a handler that echoes each
    record as an output; returns it and the offsets each handler call saw."""
    consumer, _ = stand_in_consumer()
    seen: list[list[int]] = []

    def handler(tp: Any, records: list[Any]) -> list[Output]:
        seen.append([record.offset for record in records])
        return [Output("scored", None, str(record.offset).encode()) for record in records]

    consumer.batch_handlers = {"results": handler}
    consumer.gate = gate or OpenGate()
    consumer.app.producer = StandInProducer(failing)
    consumer.appender = lambda: consumer.app.producer.client  # type: ignore[method-assign]
    consumer.transaction_appender = lambda tid: (  # type: ignore[method-assign]
        asyncio.Lock(),
        StandInClient(consumer.app.producer, tid),
    )
    consumer.app.monitor = SimpleNamespace(track_tp_end_offset=lambda tp, offset: None)
    consumer.highwater = lambda tp: 0  # type: ignore[method-assign]
    consumer._to_message = lambda tp, record: SimpleNamespace(  # type: ignore[method-assign]
        key=None, value=None, headers=None, offset=record.offset
    )
    return consumer, seen


def test_an_output_goes_to_the_transaction_of_the_input_that_produced_it() -> None:
    # Agents send through the same path: an event's output in its partition's
    # transaction, a rollup record in the transaction of the results it holds.
    consumer, _ = batch_consumer(StandInGate())
    outputs = [
        Output("scored", b"q", b"scored"),
        Output("rollup", b"run", b"rollup", source=RESULTS[0]),
    ]
    asyncio.run(consumer.send_outputs(RESULTS[1], outputs))
    assert consumer.app.producer.sent == [
        ("scored", b"scored", None, "app-1-1"),
        ("rollup", b"rollup", None, "app-1-0"),
    ]
    at_least_once, _ = batch_consumer()
    asyncio.run(at_least_once.send_outputs(RESULTS[1], outputs))
    assert [sent[3] for sent in at_least_once.app.producer.sent] == ["aiokafka", "aiokafka"]


def test_an_output_whose_transaction_producer_was_stopped_asks_for_a_rebuild() -> None:
    """A rollup contribution queued before a rebalance whose revoke Faust did not commit
    (a worker woken from a freeze past its session timeout) waits for the producer of
    a partition that was revoked since: the worker used to crash on it (exit 1, a CI
    churn run); now nothing more is sent and the app is rebuilt."""
    consumer, _ = batch_consumer(StandInGate())
    del consumer.transaction_appender  # the real lookup, in Faust's producer's tables
    consumer.app.producer._transaction_producers = {}
    consumer.app.producer._trn_locks = {}
    stops: list[str] = []
    consumer.recovery = Recovery(exactly_once=True)
    consumer.recovery.stop_with(lambda: stops.append("stop"))
    outputs = [Output("rollup", b"run", b"contribution", source=RESULTS[0])]
    asyncio.run(consumer.send_outputs(RESULTS[1], outputs))
    assert consumer.app.producer.sent == []
    assert stops == ["stop"]
    assert consumer.recovery.requested == (
        "send in app-1-0: TransactionProducerGone: no transactional producer app-1-0: "
        "its input partition was revoked"
    )
    # What was not sent is not sent later by this app either: the next one resends it.
    asyncio.run(consumer.send_outputs(RESULTS[1], outputs))
    assert consumer.app.producer.sent == [] and stops == ["stop"]


def test_a_command_goes_outside_every_transaction_and_a_failed_one_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A parked query's expiry command, under exactly_once too: in its destination
    partition's transaction (Faust's topic.send) it stayed unseen until an input of
    that partition came, and none came once the inputs stopped."""
    consumer, _ = batch_consumer(StandInGate(), failing={b"lost"})
    consumer.recovery = Recovery(exactly_once=True)

    async def send() -> None:
        await consumer.send_command(Output("expiry", b"q-1", b"", partition=3))
        await consumer.send_command(Output("expiry", b"q-2", b"lost", partition=1))
        await asyncio.sleep(0)  # the done callbacks

    with caplog.at_level("WARNING"):
        asyncio.run(send())
    assert consumer.app.producer.sent == [
        ("expiry", b"", 3, "aiokafka"),
        ("expiry", b"lost", 1, "aiokafka"),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "A command record was not delivered (RuntimeError('broker said no')); it is sent "
        "again until handled"
    ]
    consumer.recovery.request(ProducerFenced(), "commit")
    asyncio.run(consumer.send_command(Output("expiry", b"q-3", b"", partition=0)))
    assert len(consumer.app.producer.sent) == 2  # the next app sends it


def test_a_batch_is_handled_whole_its_outputs_sent_then_its_offsets_booked() -> None:
    consumer, seen = batch_consumer()
    consumer.ledger.started(RESULTS[0], 0)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 4, end=6)}))  # a marker at 5
    assert seen == [[0, 1, 2, 3, 4]]
    assert [value for _, value, _, _ in consumer.app.producer.sent] == [
        b"0",
        b"1",
        b"2",
        b"3",
        b"4",
    ]
    assert consumer._acked[RESULTS[0]] == [0, 1, 2, 3, 4, 5]
    assert consumer._new_offset(RESULTS[0]) == 6
    assert consumer.ledger.partitions[RESULTS[0]].accounted == 6


@pytest.mark.parametrize(
    ("every", "commits", "left"), [(None, [], 12), (10, [12], 0), (4, [6, 12], 0)]
)
def test_booked_batches_commit_after_the_configured_count_of_records(
    every: int | None, commits: list[int], left: int
) -> None:
    """Faust's commit by count (``EdgeConfig.commit_every_records``), counted in the
    offsets batches book; None: the commit timer alone (exactly_once's default)."""
    consumer, _ = batch_consumer()
    consumer._commit_every = every
    made: list[int] = []

    async def commit() -> bool:
        made.append(len(consumer._acked[RESULTS[0]]))
        return True

    consumer.commit = commit  # type: ignore[method-assign]

    async def deliver() -> None:
        await consumer._deliver_all({RESULTS[0]: batch(0, 5)})
        await consumer._deliver_all({RESULTS[0]: batch(6, 11)})

    asyncio.run(deliver())
    assert made == commits  # the offsets booked when each commit began
    assert consumer._n_acked == left


def test_a_batch_of_a_revoked_partition_is_dropped_and_sought_back() -> None:
    consumer, seen = batch_consumer()
    consumer._active_partitions = {RESULTS[1]}
    consumer.ledger.started(RESULTS[0], 10)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(10, 19)}))
    assert seen == []
    assert consumer.app.producer.sent == []
    assert not consumer._acked[RESULTS[0]]
    assert consumer._thread.sought == {RESULTS[0]: 10}


def rebalance_on_first_send(consumer: GuardedConsumer) -> None:
    """An at-least-once consumer whose consumer group rebalances while it sends."""
    send = consumer.app.producer.client.send

    async def send_then_rebalance(*args: Any, **kwargs: Any) -> Any:
        consumer.app.consumer_generation_id = 2  # a rebalance began meanwhile
        return await send(*args, **kwargs)

    consumer.app.producer.client.send = send_then_rebalance


def test_a_batch_whose_generation_ended_while_sending_is_not_booked() -> None:
    # At-least-once: no lock holds a revoke's commit back, so it may have committed
    # already and the partition may be gone; processed again (duplicates) instead.
    consumer, seen = batch_consumer()
    consumer.ledger.started(RESULTS[0], 0)
    rebalance_on_first_send(consumer)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 2)}))
    assert seen == [[0, 1, 2]]
    assert not consumer._acked[RESULTS[0]]
    assert consumer._thread.sought == {RESULTS[0]: 0}
    assert consumer.ledger.partitions[RESULTS[0]].accounted == 0


def test_under_exactly_once_a_batch_whose_flow_stopped_while_sending_is_booked() -> None:
    # A revoke stops the flow, then commits, waiting for the batch in hand: the
    # batch's outputs are in the transaction, so its offsets must be in that commit.
    # Left out, the batch would be processed again after the rebalance and its
    # outputs committed twice (or, with the guard against that, its table writes lost).
    consumer, seen = batch_consumer(StandInGate())
    consumer.ledger.started(RESULTS[0], 0)
    record = consumer.app.producer.record

    def send_then_revoke(*args: Any) -> Any:
        consumer.flow_active = False  # a revoke began meanwhile
        return record(*args)

    consumer.app.producer.record = send_then_revoke
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 2)}))
    assert seen == [[0, 1, 2]]
    assert list(consumer._acked[RESULTS[0]]) == [0, 1, 2]
    assert consumer._thread.sought == {}
    assert consumer.ledger.partitions[RESULTS[0]].accounted == 3


def test_an_output_the_producer_gave_up_on_stops_the_commit() -> None:
    consumer, _ = batch_consumer(failing={b"1"})
    consumer.ledger.started(RESULTS[0], 0)
    crashed: list[BaseException] = []

    async def crash(error: BaseException) -> None:
        crashed.append(error)

    consumer.crash = crash  # type: ignore[method-assign]

    async def scenario() -> bool:
        await consumer._deliver_all({RESULTS[0]: batch(0, 2)})
        await asyncio.sleep(0)  # the futures' callbacks run
        return await consumer._commit({RESULTS[0]: 3})

    assert asyncio.run(scenario()) is False
    assert [str(error) for error in crashed] == ["broker said no"]


def test_under_exactly_once_outputs_join_the_partitions_transaction_once() -> None:
    gate = StandInGate()
    consumer, seen = batch_consumer(gate)
    consumer.ledger.started(RESULTS[1], 0)
    asyncio.run(consumer._deliver_all({RESULTS[1]: batch(0, 3)}))
    # A seek back to the committed offset after a rebalance that kept the partition
    # here: records already in the open transaction are not sent again.
    consumer.ledger.started(RESULTS[1], 0)
    asyncio.run(consumer._deliver_all({RESULTS[1]: batch(0, 5)}))
    assert seen == [[0, 1, 2, 3], [4, 5]]
    assert {txn for *_, txn in consumer.app.producer.sent} == {"app-1-1"}
    assert gate.last == {RESULTS[1]: 5}


def test_a_batch_split_in_parts_covers_its_range_with_parts_that_touch() -> None:
    # Records 0-4, a transaction marker at 5: the last part's range keeps it.
    parts = split_batch(batch(0, 4, end=6), 2)
    assert [[r.offset for r in part.records] for part in parts] == [[0, 1], [2, 3], [4]]
    assert [(part.start, part.end) for part in parts] == [(0, 2), (2, 4), (4, 6)]
    whole = batch(0, 4, end=6)
    assert split_batch(whole, 5) == [whole]


def test_a_large_batch_is_scored_in_parts_in_turn_across_partitions_each_sent_first() -> None:
    consumer, seen = batch_consumer()
    consumer.batch_max_records = 2
    sent_before: list[int] = []
    handler = consumer.batch_handlers["results"]

    def counting(tp: Any, records: list[Any]) -> list[Output]:
        sent_before.append(len(consumer.app.producer.sent))
        return handler(tp, records)

    consumer.batch_handlers = {"results": counting}
    for tp in RESULTS:
        consumer.ledger.started(tp, 0)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 4, end=6), RESULTS[1]: batch(0, 2)}))
    assert seen == [[0, 1], [0, 1], [2, 3], [2], [4]]
    assert sent_before == [0, 2, 4, 6, 7]
    assert consumer._acked[RESULTS[0]] == [0, 1, 2, 3, 4, 5]
    assert consumer._acked[RESULTS[1]] == [0, 1, 2]
    assert consumer.ledger.partitions[RESULTS[0]].accounted == 6
    assert consumer.ledger.partitions[RESULTS[1]].accounted == 3
    assert consumer._thread.sought == {}


def test_once_a_part_is_not_handed_over_the_rest_of_its_partition_is_sought_back() -> None:
    consumer, seen = batch_consumer()
    consumer.batch_max_records = 2
    consumer.ledger.started(RESULTS[0], 0)
    rebalance_on_first_send(consumer)
    asyncio.run(consumer._deliver_all({RESULTS[0]: batch(0, 5)}))
    assert seen == [[0, 1]]
    assert not consumer._acked[RESULTS[0]]
    assert consumer._thread.sought == {RESULTS[0]: 0}
    assert consumer.ledger.holes == 0


# ---------------------------------------------------------------- pinned versions


def test_a_background_topics_batches_are_handed_over_after_the_others() -> None:
    consumer, _ = batch_consumer()
    order: list[str] = []

    def handler(name: str):
        def handle(tp: Any, records: list[Any]) -> list[Output]:
            order.append(f"{name}/{tp.partition}")
            return []

        return handle

    rollup = TopicPartition("rollup", 1)
    consumer.batch_handlers = {"results": handler("results"), "rollup": handler("rollup")}
    consumer.background_topics = {"rollup"}
    consumer._active_partitions = {*RESULTS, rollup}
    for tp in (*RESULTS, rollup):
        consumer.ledger.started(tp, 0)
    asyncio.run(
        consumer._deliver_all(
            {rollup: batch(0, 1), RESULTS[1]: batch(0, 2), RESULTS[0]: batch(0, 0)}
        )
    )
    assert order == ["results/1", "results/0", "rollup/1"]


# ---------------------------------------------------------------- commits once caught up


def assign(
    subscription: SubscriptionState, ends: dict[TopicPartition, int | None], isolation: str
) -> None:
    subscription.assign_from_user(set(ends))
    for tp, end in ends.items():
        state = subscription.subscription.assignment.state_value(tp)
        state.seek(0)
        if isolation == "read_committed":
            state.lso, state.highwater = end, None if end is None else end + 5
        else:
            state.lso, state.highwater = -1, end


def caught_up_consumer(
    ends: dict[TopicPartition, int | None], isolation: str = "read_committed", lag: int = 0
) -> tuple[GuardedConsumer, SubscriptionState]:
    """A stand-in consumer over a real aiokafka subscription whose partitions' last
    fetch responses gave ``ends`` (the last stable offset, or the high watermark),
    counting a partition caught up up to ``lag`` records from its end."""
    consumer, _ = batch_consumer(StandInGate())
    consumer.caught_up_lag = lag
    subscription = SubscriptionState()
    assign(subscription, ends, isolation)
    consumer._thread = SimpleNamespace(  # type: ignore[assignment]
        _consumer=SimpleNamespace(_subscription=subscription, _isolation_level=isolation)
    )
    return consumer, subscription


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_caught_up_means_every_input_partition_handed_over_to_its_end(isolation: str) -> None:
    async def scenario() -> None:
        consumer, subscription = caught_up_consumer({RESULTS[0]: 6, RESULTS[1]: 3}, isolation)
        for tp in RESULTS:
            consumer.ledger.started(tp, 0)
        await consumer._deliver_all({RESULTS[0]: batch(0, 4, end=6)})
        assert not consumer._caught_up()  # results/1 is still behind its end
        await consumer._deliver_all({RESULTS[1]: batch(0, 1)})
        assert not consumer._caught_up()  # 2 of 3
        await consumer._deliver_all({RESULTS[1]: batch(2, 2)})
        assert consumer._caught_up()
        # A partition revoked since it was read does not hold the others back...
        assign(subscription, {RESULTS[0]: 6}, isolation)
        consumer.ledger.partitions[RESULTS[1]].expected = 0
        assert consumer._caught_up()
        # ...nor does a background topic's partition (no reader waits for its outputs).
        rollup = TopicPartition("rollup", 0)
        assign(subscription, {RESULTS[0]: 6, rollup: 9}, isolation)
        consumer.ledger.started(rollup, 0)
        assert not consumer._caught_up()
        consumer.background_topics = {"rollup"}
        assert consumer._caught_up()
        # ...but one whose end no fetch response has given yet does.
        consumer, _ = caught_up_consumer({RESULTS[0]: None, RESULTS[1]: 0}, isolation)
        consumer.ledger.started(RESULTS[0], 0)
        assert not consumer._caught_up()

    asyncio.run(scenario())


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_partition_a_few_records_from_its_end_counts_as_caught_up(isolation: str) -> None:
    """Under load the consumer thread's next fetch response has often moved a
    partition's end past what was handed over: up to ``caught_up_lag`` records behind
    it still counts (those records go in the next transaction), more does not."""

    async def scenario() -> None:
        consumer, subscription = caught_up_consumer(
            {RESULTS[0]: 110, RESULTS[1]: 40}, isolation, lag=50
        )
        for tp in RESULTS:
            consumer.ledger.started(tp, 0)
        await consumer._deliver_all({RESULTS[0]: batch(0, 49)})
        assert not consumer._caught_up()  # results/0: 60 behind its end of 110
        await consumer._deliver_all({RESULTS[0]: batch(50, 59)})
        assert consumer._caught_up()  # 50 behind; results/1: 40 behind, none handed over
        state = subscription.subscription.assignment.state_value(RESULTS[1])
        if isolation == "read_committed":
            state.lso = 51
        else:
            state.highwater = 51
        assert not consumer._caught_up()  # results/1: 51 behind
        consumer.caught_up_lag = 0
        await consumer._deliver_all({RESULTS[1]: batch(0, 50)})
        assert not consumer._caught_up()  # at 0: only partitions read to their very ends
        await consumer._deliver_all({RESULTS[0]: batch(60, 109)})
        assert consumer._caught_up()

    asyncio.run(scenario())


def test_a_caught_up_worker_commits_its_booked_batch_at_once_then_waits_the_spacing() -> None:
    commits: list[float] = []

    async def scenario() -> None:
        consumer, _ = caught_up_consumer({RESULTS[0]: 3, RESULTS[1]: 0})
        consumer.caught_up_commit_seconds = 0.2
        consumer.ledger.started(RESULTS[0], 0)

        async def commit() -> bool:
            commits.append(asyncio.get_running_loop().time())
            consumer._booked_since_commit = False
            consumer._last_commit_started = time.monotonic()
            return True

        consumer.commit = commit  # type: ignore[method-assign]
        consumer._stopped, consumer._crashed = asyncio.Event(), asyncio.Event()
        consumer.sleep = asyncio.sleep  # type: ignore[method-assign]
        committer = asyncio.create_task(GuardedConsumer._caught_up_commits.fun(consumer))
        await asyncio.sleep(0)
        start = asyncio.get_running_loop().time()
        # Behind (results/0 ends at 3): a booked batch waits for the commit timer.
        await consumer._deliver_all({RESULTS[0]: batch(0, 1)})
        consumer._signal_if_caught_up()
        await asyncio.sleep(0.05)
        assert commits == []
        # Caught up: committed at once.
        await consumer._deliver_all({RESULTS[0]: batch(2, 2)})
        consumer._signal_if_caught_up()
        await asyncio.sleep(0.05)
        assert len(commits) == 1 and commits[0] - start < 0.1
        # The next one waits until 0.2 s after the last commit began.
        subscription = consumer._thread._consumer._subscription
        subscription.subscription.assignment.state_value(RESULTS[0]).lso = 5
        await consumer._deliver_all({RESULTS[0]: batch(3, 4)})
        consumer._signal_if_caught_up()
        await asyncio.sleep(0.05)
        assert len(commits) == 1
        await asyncio.sleep(0.2)
        assert len(commits) == 2 and commits[1] - commits[0] >= 0.19
        # Nothing booked since: no commit, however often the drain looks.
        consumer._signal_if_caught_up()
        await asyncio.sleep(0.3)
        assert len(commits) == 2
        committer.cancel()

    asyncio.run(scenario())


def test_the_transactions_of_one_commit_are_committed_side_by_side() -> None:
    """Each transaction: offsets, commit, begin again, under its own lock; all of them
    at once, every one tried when another fails, the first error raised."""
    steps: list[str] = []

    class TransactionalProducer:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
            steps.append(f"{self.name} offsets {sorted(offsets.values())} {group_id}")
            await asyncio.sleep(0.05)

        async def commit_transaction(self) -> None:
            if self.fail:
                raise RuntimeError(f"{self.name} fenced")
            steps.append(f"{self.name} commit")

        async def begin_transaction(self) -> None:
            steps.append(f"{self.name} begin")

    ids = ["app-1-0", "app-1-1", "app-1-2"]
    producer = SimpleNamespace(
        _trn_locks={},
        _transaction_producers={
            "app-1-0": TransactionalProducer("p0"),
            "app-1-1": TransactionalProducer("p1", fail=True),
            "app-1-2": TransactionalProducer("p2"),
        },
    )
    Transactions._commit_concurrently(producer, Recovery())

    async def commit() -> float:
        producer._trn_locks.update({tid: asyncio.Lock() for tid in ids})
        start = asyncio.get_running_loop().time()
        offsets = {tid: {TopicPartition("results", n): 10 * n} for n, tid in enumerate(ids)}
        with pytest.raises(RuntimeError, match="p1 fenced"):
            await producer.commit_transactions(offsets, "app")
        return asyncio.get_running_loop().time() - start

    took = asyncio.run(commit())
    assert took < 0.1  # three 50 ms round trips at once, not one after the other
    assert steps[:3] == ["p0 offsets [0] app", "p1 offsets [10] app", "p2 offsets [20] app"]
    assert sorted(steps[3:]) == ["p0 begin", "p0 commit", "p2 begin", "p2 commit"]


def test_a_fenced_transaction_in_a_commit_asks_for_a_rebuild_instead_of_raising() -> None:
    """Faust would crash the app on ProducerFenced; the commit hands it to the recovery
    (the others are still committed), and an error of our own still raises."""
    committed: list[str] = []

    class TransactionalProducer:
        def __init__(self, name: str, error: BaseException | None = None) -> None:
            self.name, self.error = name, error

        async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
            return None

        async def commit_transaction(self) -> None:
            if self.error is not None:
                raise self.error
            committed.append(self.name)

        async def begin_transaction(self) -> None:
            return None

    def run(error: BaseException) -> Recovery:
        recovery = Recovery()
        recovery.exactly_once = True
        producer = SimpleNamespace(
            _trn_locks={"a": asyncio.Lock(), "b": asyncio.Lock()},
            _transaction_producers={
                "a": TransactionalProducer("a", error),
                "b": TransactionalProducer("b"),
            },
        )
        Transactions._commit_concurrently(producer, recovery)
        offsets = {"a": {TopicPartition("results", 0): 1}, "b": {TopicPartition("results", 1): 2}}
        asyncio.run(producer.commit_transactions(offsets, "app"))
        return recovery

    recovery = run(ProducerFenced())
    assert committed == ["b"]
    assert recovery.requested is not None and recovery.requested.startswith("commit: Producer")
    with pytest.raises(ValueError, match="ours"):
        run(ValueError("ours"))


def test_the_installed_faust_and_aiokafka_are_the_pinned_ones() -> None:
    assert {name: installed(name) for name in PINNED} == PINNED
    check_versions()


def test_another_version_stops_the_worker_with_one_line_naming_both() -> None:
    with pytest.raises(VersionMismatch) as raised:
        check_versions({"faust-streaming": "0.15.3", "aiokafka": "0.13.0"})
    message = str(raised.value)
    assert "\n" not in message
    assert "aiokafka 0.13.0 (needs 0.14.0)" in message
    assert "faust-streaming" not in message.split("found", 1)[1]


def test_changelog_records_are_the_bytes_faust_would_write() -> None:
    """The batch path encodes a table's changelog keys and values without Faust's
    layers when the serializer is plain json: the bytes must be Faust's own, for the
    worker's tables (raw byte keys included) and the values they hold."""
    import faust

    from scorer.stream.faust_edge import ChangelogWriter

    app = faust.App("edge-bytes", broker="kafka://localhost:1", store="memory://")
    tables = {
        "qrels": app.Table("qrels", default=None, partitions=2),
        "rollups": app.Table("rollups", default=None, partitions=2, key_type=bytes),
        "run_queries": app.Table("run_queries", default=None, partitions=2),
    }
    values = [
        {"grades": {"d1": 3, "d\u00e9": 1}, "idcg": 7.5, "facets": {"type": "faq"}, "fp": "ab"},
        [3.0, 0.5, 1e-17, 0.6666666666666666, 0.7, 1],
        {"rollup": {"overall": [2, [0.1] * 5, [0.01] * 5]}, "risk": {"buckets": {-3: [1, 0, 0.5]}}},
        [["r1", 1764000000.25, '{"queryId":"q\u2603"}', 3]],
        [1764000000.5, 1, [["run\x1fr1", "results/0", 41, 0]]],
        "caf\u00e9\x1fq\n",
        None,
        True,
        12,
    ]
    keys = {
        "qrels": ["q1", "caf\u00e9"],
        "run_queries": ["run\x1fq1"],
        "rollups": [b"run-\xc3\xa9"],
    }
    for name, table in tables.items():
        writer = ChangelogWriter(app, table, exactly_once=False)
        topic = table.changelog_topic
        for key in keys[name]:
            for value in values:
                outputs: list = []
                writer.set(key, value, 1, outputs)
                faust_key = topic.prepare_key(key, key_serializer=table.key_serializer)[0]
                assert outputs[0].key == faust_key, (name, key)
                if value is not None:
                    faust_value = topic.prepare_value(
                        value, value_serializer=table.value_serializer
                    )
                    assert outputs[0].value == faust_value[0], (name, value)
                assert outputs[0].partition == 1
                # Written behind: stored with no record, the same record later.
                writer.put(key, ["later", value])
                assert writer.get(key) == ["later", value]
                writer.write_out(key, 0, outputs)
                assert outputs[1:] == [
                    Output(
                        topic.get_topic_name(),
                        faust_key,
                        topic.prepare_value(["later", value], value_serializer="json")[0],
                        partition=0,
                    )
                ]
                writer.write_out(
                    key + (b"-absent" if isinstance(key, bytes) else "-absent"), 0, outputs
                )
                assert len(outputs) == 2  # no tombstone for a key never stored
                # A record alone (a block of per-query entries): the store untouched.
                writer.record(key, value, 3, outputs, on_sent=print)
                writer.record(key, None, 3, outputs)
                assert writer.get(key) == ["later", value]
                assert outputs[2].key == outputs[3].key == faust_key
                assert outputs[2].value == outputs[0].value and outputs[3].value is None
                assert (outputs[2].partition, outputs[2].on_sent, outputs[3].on_sent) == (
                    3,
                    print,
                    None,
                )
        assert writer.store() is table.data.data  # a memory store's own dict
        _, encode_key, encode_value, _ = writer._changelog
        # The json tables take the direct path (else this test would prove nothing).
        assert encode_value.__name__ == "encode_plain"
        assert encode_key.__name__ == ("faust_path" if name == "rollups" else "encode_plain")


def test_deliveries_report_the_first_failure_and_keep_only_what_is_in_flight() -> None:
    from scorer.stream.faust_edge.consumer import Deliveries

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        deliveries = Deliveries()
        deliveries._prune_at = 4
        futures = [loop.create_future() for _ in range(6)]
        for future in futures[:3]:
            deliveries.watch(future)
        futures[0].set_result("ok")
        futures[1].set_result("ok")
        assert deliveries.error is None
        deliveries.watch(futures[3])  # the list pruned: the two delivered are dropped
        assert deliveries._pending == [futures[2], futures[3]]
        failure = RuntimeError("broker said no")
        futures[3].set_exception(failure)
        futures[2].set_exception(ValueError("later"))
        deliveries.watch(futures[4])
        # Both failed by the time it looked: the first in sending order is reported.
        first = deliveries.error
        assert isinstance(first, ValueError) and first is not failure
        futures[4].cancel()
        assert deliveries.error is first  # the first failure seen is kept
        assert deliveries._pending == []

    asyncio.run(scenario())


class UndecodableRecords(StandInRecords):
    """A batch compressed with a codec whose library is missing, as aiokafka reads it."""

    def __next__(self) -> SimpleNamespace:
        raise UnsupportedCodecError("Libraries for lz4 compression codec not found")


def test_a_batch_that_cannot_be_decoded_stops_its_partition_alone_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        fetcher = StandInFetcher({RESULTS[0]: 7, RESULTS[1]: 0})
        assignment = fetcher.assignment
        fetcher._records[RESULTS[0]] = FetchResult(
            RESULTS[0],
            assignment=assignment,
            partition_records=UndecodableRecords(7, [7, 8], 9),
            backoff=0,
        )
        fetcher.buffer(RESULTS[1], [0, 1], end=2)
        undecodable: dict[Any, str] = {}
        got = await fetch_batches(fetcher, None, 0, None, undecodable)
        assert {tp: (b.start, b.end) for tp, b in got.items()} == {RESULTS[1]: (0, 2)}
        assert assignment.state_value(RESULTS[0]).paused
        assert assignment.state_value(RESULTS[0]).position == 7
        assert undecodable == {RESULTS[0]: "Libraries for lz4 compression codec not found"}
        # Faust resumes it (after a recovery, say) and the batch comes again: paused
        # again, and nothing more is said.
        assignment.state_value(RESULTS[0]).resume()
        fetcher._records[RESULTS[0]] = FetchResult(
            RESULTS[0],
            assignment=assignment,
            partition_records=UndecodableRecords(7, [7, 8], 9),
            backoff=0,
        )
        assert await fetch_batches(fetcher, None, 0, None, undecodable) == {}
        assert assignment.state_value(RESULTS[0]).paused

    with caplog.at_level("ERROR"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(lines) == 1
    assert lines[0].startswith("results/0: the record batch at offset 7 cannot be decoded")
    assert "lz4" in lines[0] and "cramjam" in lines[0] and "\n" not in lines[0]


class StandInMessage(SimpleNamespace):
    __hash__ = object.__hash__  # Faust keeps unacked messages in a set


def message_of(generation: int, offset: int) -> StandInMessage:
    return StandInMessage(
        acked=False, tp=RESULTS[0], topic="results", offset=offset, generation_id=generation
    )


def test_under_at_least_once_an_event_of_an_earlier_generation_is_not_acked() -> None:
    consumer, _ = stand_in_consumer()
    consumer.gate = OpenGate()
    consumer._unacked_messages = set()
    consumer._waiting_for_ack = None
    consumer.app.consumer_generation_id = 2
    old = message_of(1, 87)  # in hand when the rebalance began
    consumer._unacked_messages.add(old)
    assert consumer.ack(old) is False
    assert consumer._acked[RESULTS[0]] == []
    assert not consumer._unacked_messages
    assert consumer.ack(message_of(2, 80)) is True
    assert consumer._acked[RESULTS[0]] == [80]


def test_under_exactly_once_every_ack_is_fausts() -> None:
    consumer, _ = stand_in_consumer()
    consumer.gate = StandInGate()
    consumer._unacked_messages = set()
    consumer._waiting_for_ack = None
    consumer.app.consumer_generation_id = 2
    assert consumer.ack(message_of(1, 87)) is True
    assert consumer._acked[RESULTS[0]] == [87]


def test_the_guarantee_is_read_from_faust_in_one_place_only() -> None:
    """``EdgeConfig.exactly_once`` (through ``Recovery.exactly_once``) is what the edge
    reads; Faust's ``app.in_transaction`` is cached on its first read, so it is read
    once, where the consumer is made (``GuardedConsumer.__init__``), to check that the
    two agree."""
    import ast
    from pathlib import Path

    import scorer

    readers = {}
    root = Path(scorer.__file__).parent
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        lines = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "in_transaction"
        ]
        if lines:
            readers[str(path.relative_to(root))] = lines
    assert list(readers) == ["stream/faust_edge/consumer.py"], readers


def test_no_attribute_the_edge_gives_the_consumer_shadows_one_of_faust_or_mode() -> None:
    """What ``GuardedConsumer.__init__`` and its bases set on the consumer (and on its
    thread) are names of our own: one named ``stop`` replaced mode's
    ``Service.stop``, and the worker's stop failed with "'GracefulStop' object is
    not callable"."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
    from faust.transport.drivers.aiokafka import Consumer as FaustConsumer

    from scorer.stream.faust_edge.resume import HoldsInputsUntilSeeked
    from scorer.stream.faust_edge.stopping import CommitsOnceAtStop

    ours = {
        name
        for cls in (GuardedConsumer, HoldsInputsUntilSeeked, CommitsOnceAtStop)
        for name in vars(cls).get("__annotations__", {})
    }
    assert {"ledger", "batch_handlers", "gate", "graceful_stop", "recovery"} <= ours
    assert sorted(name for name in ours if hasattr(FaustConsumer, name)) == []
    thread = set(vars(GuardedConsumerThread).get("__annotations__", {})) | {
        "fetch_max_wait_ms",
        "exactly_once",
    }
    assert sorted(name for name in thread if hasattr(AIOKafkaConsumerThread, name)) == []


def test_a_batch_booked_while_the_commit_hooks_send_runs_them_again() -> None:
    """At-least-once: a hook sends what the booked batches left pending, and nothing
    holds the batch path while it waits; a batch booked meanwhile would have its
    offsets in the commit and its pending outputs not. The hooks run again until a
    round in which none was booked, and the commit is skipped after five."""

    async def scenario() -> None:
        consumer, seen = batch_consumer()
        consumer.ledger.started(RESULTS[0], 0)
        rounds: list[int] = []

        async def hook() -> None:
            rounds.append(len(seen))
            if len(rounds) == 1:  # a batch handled and booked while this one sends
                await consumer._deliver_all({RESULTS[0]: batch(0, 1)})

        consumer.before_commit = [hook]
        assert await consumer._run_before_commit()
        assert rounds == [0, 1]  # the second round saw the batch booked in the first
        assert not consumer._booked_since_commit

        busy, _ = batch_consumer()
        busy.ledger.started(RESULTS[0], 0)
        next_offset = [0]

        async def always_booking() -> None:
            first = next_offset[0]
            next_offset[0] += 1
            await busy._deliver_all({RESULTS[0]: batch(first, first)})

        busy.before_commit = [always_booking]
        assert not await busy._run_before_commit()
        assert next_offset[0] == GuardedConsumer.HOOK_ROUNDS
        assert busy._booked_since_commit  # the next chance to commit takes them

    asyncio.run(scenario())
