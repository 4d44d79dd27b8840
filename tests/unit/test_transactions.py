"""The exactly_once plumbing (scorer.stream.faust_edge.transactions) against stand-ins for
Faust's app, consumer and transactional producers, without Kafka: an event already
processed in the current transaction is not processed again, every commit carries
the offset after the last event whose records are in the transaction (whatever
Faust's acked offsets say), and a commit waits for the event in hand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from scorer.stream.faust_edge.consumer import Deliveries
from scorer.stream.faust_edge.recovery import Recovery
from scorer.stream.faust_edge.transactions import Transactions, from_start_when_unknown

RESULTS = "results"


class TxnManager:
    def __init__(self) -> None:
        self.in_transaction = True

    def is_in_transaction(self) -> bool:
        return self.in_transaction


class TxnProducer:
    """Stands in for one aiokafka transactional producer."""

    def __init__(self) -> None:
        self._txn_manager = TxnManager()
        self.pending: list[tuple[asyncio.Future, BaseException | None]] = []

    async def flush(self) -> None:
        """aiokafka's: every record sent so far gets its outcome."""
        for future, error in self.pending:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
        self.pending.clear()


class Buffer:
    async def flush(self) -> None:
        pass


class Producer:
    """Faust's producer: transactional producers by transactional id."""

    def __init__(self) -> None:
        self._transaction_producers: dict[str, TxnProducer] = {}
        self.buffer = Buffer()
        self.sent: list[tuple[str, bytes | None, str | None]] = []
        self.failing: dict[str, BaseException] = {}

    async def stop_transaction(self, transactional_id: str) -> None:
        self._transaction_producers.pop(transactional_id, None)

    async def send(self, topic, key, value, partition, timestamp, headers, *, transactional_id):
        """Queues the record in its transactional producer; it is delivered at the next
        flush, or fails there when its topic is in ``failing`` (the broker refused it)."""
        self.sent.append((topic, value, transactional_id))
        future = asyncio.get_running_loop().create_future()
        error = self.failing.get(topic)
        self._transaction_producers[transactional_id].pending.append((future, error))
        return future


class Consumer:
    def __init__(self, app: App) -> None:
        self.app = app
        self.assigned = {TP(RESULTS, p) for p in range(2)}
        self.commits: list[dict[TP, int]] = []
        self.transactions = TransactionManager(self)
        self.deliveries = Deliveries()
        self.crashed: BaseException | None = None

    async def undelivered_stops_commit(self) -> bool:
        """``GuardedConsumer``'s, with the crash recorded."""
        if self.deliveries.error is None:
            return False
        self.crashed = self.deliveries.error
        return True

    def assignment(self) -> set[TP]:
        return self.assigned

    async def commit(self, offsets: dict[TP, int] | None = None) -> bool:
        """Faust's commit (its acked offsets, committed in the transactions), between
        two events as ``GuardedConsumer.commit`` makes it."""
        async with self.gate.lock:
            return await self.transactions.commit(offsets or {})

    async def _transactions_commit(self, offsets, start_new_transaction: bool = True) -> bool:
        self.commits.append(dict(offsets))
        return True


class TransactionManager:
    """Faust's, as far as these tests go: commits, and producers started and stopped on
    a rebalance, where Faust leaves out the revoked partitions kept as standbys."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.standbys: set[TP] = set()

    async def commit(self, offsets, start_new_transaction: bool = True) -> bool:
        return await self.consumer._transactions_commit(offsets, start_new_transaction)

    def _tps_to_transactional_ids(self, tps) -> set[str]:
        return {f"app-1-{tp.partition}" for tp in tps if tp not in self.standbys}

    async def on_rebalance(self, assigned, revoked, newly_assigned) -> None:
        producer = self.consumer.app.producer
        for transactional_id in self._tps_to_transactional_ids(revoked):
            await producer.stop_transaction(transactional_id)
        for transactional_id in self._tps_to_transactional_ids(assigned):
            producer._transaction_producers.setdefault(transactional_id, TxnProducer())


@dataclass
class App:
    in_transaction: bool = True
    producer: Producer = field(default_factory=Producer)
    conf: Any = field(default_factory=lambda: SimpleNamespace(id="app"))
    assignor: Any = field(default_factory=lambda: SimpleNamespace(group_for_topic=lambda t: 1))
    consumer: Any = None

    def __post_init__(self) -> None:
        self.consumer = Consumer(self)
        for partition in range(2):
            self.producer._transaction_producers[f"app-1-{partition}"] = TxnProducer()

    def replace_producer(self, partition: int) -> None:
        """What a rebalance that moves the partition does: a new transactional producer."""
        self.producer._transaction_producers[f"app-1-{partition}"] = TxnProducer()


def event(partition: int, offset: int) -> Any:
    message = SimpleNamespace(
        topic=RESULTS, partition=partition, offset=offset, tp=TP(RESULTS, partition)
    )
    return SimpleNamespace(message=message)


class Stream:
    """Yields the events it is given; ``events()`` as Faust's stream does."""

    def __init__(self, events: list[Any]) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        for item in events:
            self.queue.put_nowait(item)

    async def events(self) -> AsyncIterator[Any]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item


async def processed(transactions: Transactions, stream: Stream) -> list[tuple[int, int]]:
    seen = []
    async for item in transactions.events(stream):
        seen.append((item.message.partition, item.message.offset))
    return seen


def gated(app: App) -> Transactions:
    """The app's transactions, as the consumer's gate (``faust_edge.install`` does it)."""
    transactions = Transactions(app, Recovery(exactly_once=app.in_transaction))
    app.consumer.gate = transactions
    return transactions


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_an_event_fetched_again_is_not_processed_again() -> None:
    # Faust delivers the last event read before its seek to the committed offset twice.
    async def scenario() -> list:
        transactions = gated(App())
        stream = Stream([event(0, 5), event(0, 6), event(0, 6), event(0, 7), None])
        return await processed(transactions, stream)

    assert run(scenario()) == [(0, 5), (0, 6), (0, 7)]


def test_a_new_transactional_producer_means_the_events_are_processed_again() -> None:
    # The partition moved: the old producer's open transaction is aborted (fenced),
    # so what it held must be produced again.
    async def scenario() -> list:
        app = App()
        transactions = gated(app)
        stream = Stream([event(0, 5), event(0, 6)])
        seen = []
        agen = transactions.events(stream)
        seen.append((await agen.__anext__()).message.offset)
        seen.append((await agen.__anext__()).message.offset)
        app.replace_producer(0)
        stream.queue.put_nowait(event(0, 6))
        stream.queue.put_nowait(None)
        seen.extend([e.message.offset async for e in agen])
        return seen

    assert run(scenario()) == [5, 6, 6]


def test_a_commit_carries_the_offset_after_the_last_event_processed() -> None:
    async def scenario() -> list[dict[TP, int]]:
        app = App()
        transactions = gated(app)
        stream = Stream([event(0, 10), event(0, 11), event(1, 3)])
        agen = transactions.events(stream)
        for _ in range(3):
            await agen.__anext__()
        # Faust's acked offsets lag behind (partition 0) or are ahead (partition 1).
        commit = asyncio.create_task(app.consumer.commit({TP(RESULTS, 0): 10, TP(RESULTS, 1): 9}))
        await asyncio.sleep(0.01)
        assert not commit.done()  # event (1, 3) is in hand
        await agen.aclose()  # ... and its processing fails
        await commit
        return app.consumer.commits

    commits = run(scenario())
    # Event (1, 3) was still in hand: its offset is not committed yet, but Faust's is kept.
    assert commits == [{TP(RESULTS, 0): 12, TP(RESULTS, 1): 9}]


def test_a_commit_leaves_out_partitions_moved_away_or_without_news() -> None:
    async def scenario() -> list[dict[TP, int]]:
        app = App()
        transactions = gated(app)
        stream = Stream([event(0, 10), event(1, 3), None])
        await processed(transactions, stream)
        await app.consumer.commit()
        await app.consumer.commit()  # nothing new: no transaction to commit
        app.replace_producer(1)
        stream = Stream([event(0, 11), None])
        await processed(transactions, stream)
        await app.consumer.commit()
        app.consumer.assigned = {TP(RESULTS, 1)}
        await app.consumer.commit()
        return app.consumer.commits

    commits = run(scenario())
    assert commits == [
        {TP(RESULTS, 0): 11, TP(RESULTS, 1): 4},
        {},
        {TP(RESULTS, 0): 12},
        {},
    ]


def test_no_offsets_are_committed_outside_a_transaction() -> None:
    # Faust ends every transaction when it stops; its commit timer may fire after that.
    async def scenario() -> list[dict[TP, int]]:
        app = App()
        transactions = gated(app)
        await processed(transactions, Stream([event(0, 10), event(1, 3), None]))
        app.producer._transaction_producers["app-1-1"]._txn_manager.in_transaction = False
        await app.consumer.commit({TP(RESULTS, 0): 11, TP(RESULTS, 1): 4})
        return app.consumer.commits

    assert run(scenario()) == [{TP(RESULTS, 0): 11}]


def test_an_event_whose_processing_failed_is_not_marked_processed() -> None:
    async def scenario() -> list[dict[TP, int]]:
        app = App()
        transactions = gated(app)
        stream = Stream([event(0, 10), event(0, 11)])
        agen = transactions.events(stream)
        await agen.__anext__()
        await agen.__anext__()  # event 10 done, event 11 in hand
        await agen.aclose()  # the agent raised while processing event 11
        await app.consumer.commit()
        return app.consumer.commits

    assert run(scenario()) == [{TP(RESULTS, 0): 11}]


def test_a_commit_waits_for_the_event_in_hand() -> None:
    async def scenario() -> list[str]:
        app = App()
        transactions = gated(app)
        order: list[str] = []
        stream = Stream([event(0, 1), None])

        async def agent() -> None:
            async for _ in transactions.events(stream):
                order.append("event starts")
                await asyncio.sleep(0.05)
                order.append("event ends")

        async def committer() -> None:
            await asyncio.sleep(0.01)
            await app.consumer.commit()
            order.append("committed")

        task = asyncio.create_task(agent())
        await asyncio.sleep(0)  # the agent installs the guard with its first event
        await committer()
        await task
        return order

    assert run(scenario()) == ["event starts", "event ends", "committed"]


def test_a_record_the_broker_refused_stops_the_commit_of_its_transaction() -> None:
    # aiokafka fails the record's batch and would still commit the transaction without
    # it (and with its input's offset): the records must have their outcome first.
    from aiokafka.errors import InvalidTxnState

    from scorer.stream.run_state import SourcePosition

    async def scenario(failing: bool) -> tuple[list, BaseException | None]:
        app = App()
        transactions = gated(app)
        if failing:
            app.producer.failing["rollup"] = InvalidTxnState()
        source = SourcePosition(RESULTS, 1, 7)
        for topic, value in (("scored", b"v"), ("rollup", b"w")):
            future = await app.producer.send(
                topic, b"k", value, None, None, None,
                transactional_id=transactions.transactional_id(source),
            )  # fmt: skip
            app.consumer.deliveries.watch(future)
        transactions.processed(TP(RESULTS, 1), 7)
        await app.consumer.commit()
        return app.consumer.commits, app.consumer.crashed

    assert run(scenario(failing=False)) == ([{TP(RESULTS, 1): 8}], None)
    commits, crashed = run(scenario(failing=True))
    assert commits == []
    assert isinstance(crashed, InvalidTxnState)


def test_ending_the_transactions_commits_what_faust_had_no_offsets_for() -> None:
    # A revoke ends the transactions; Faust commits only partitions with new acked
    # offsets, and a kept partition's transaction would cross the rebalance open.
    async def scenario() -> tuple[bool, list, bool]:
        app = App()
        transactions = gated(app)
        transactions.processed(TP(RESULTS, 0), 4)
        await app.consumer.commit({TP(RESULTS, 0): 5})
        transactions.processed(TP(RESULTS, 1), 9)  # not in Faust's acked offsets
        ended = await transactions.end_transactions()
        again = await transactions.end_transactions()  # nothing new since
        return ended, app.consumer.commits, again

    ended, commits, again = run(scenario())
    assert ended is True
    assert commits == [{TP(RESULTS, 0): 5}, {TP(RESULTS, 1): 10}]
    assert again is False


def test_at_least_once_passes_everything_through() -> None:
    async def scenario() -> tuple[list, list]:
        app = App(in_transaction=False)
        transactions = gated(app)
        stream = Stream([event(0, 5), event(0, 5), None])
        return await processed(transactions, stream), app.consumer.commits

    seen, commits = run(scenario())
    assert seen == [(0, 5), (0, 5)]
    assert commits == []


def test_the_producer_of_a_partition_revoked_but_kept_as_standby_is_stopped() -> None:
    # Faust would keep it: its open transaction is fenced by the new owner's producer,
    # and the next send through it crashes the agent.
    def rebalance(guarded: bool) -> dict[str, TxnProducer]:
        app = App()
        before = dict(app.producer._transaction_producers)
        manager = app.consumer.transactions
        if guarded:
            Transactions(app).stop_revoked_producers(manager)
        manager.standbys = {TP(RESULTS, 1)}
        run(
            manager.on_rebalance(
                assigned={TP(RESULTS, 0), TP(RESULTS, 1)},
                revoked={TP(RESULTS, 1)},
                newly_assigned=set(),
            )
        )
        after = app.producer._transaction_producers
        assert after["app-1-0"] is before["app-1-0"]  # kept partitions keep theirs
        return {tid: producer for tid, producer in after.items() if producer is before.get(tid)}

    assert set(rebalance(guarded=False)) == {"app-1-0", "app-1-1"}
    assert set(rebalance(guarded=True)) == {"app-1-0"}


def test_a_revoked_partition_of_a_topic_the_assignor_no_longer_knows_stops_no_rebalance() -> None:
    # A topic created during the rebalance (the parking-expiry topic on a first start)
    # can be missing from the assignor's new topic groups: naming its producer raised
    # KeyError inside Faust's rebalance callback and crashed the worker.
    def group_for_topic(topic: str) -> int:
        if topic != RESULTS:
            raise KeyError(topic)
        return 1

    app = App(assignor=SimpleNamespace(group_for_topic=group_for_topic))
    manager = app.consumer.transactions
    Transactions(app).stop_revoked_producers(manager)
    run(
        manager.on_rebalance(
            assigned={TP(RESULTS, 0)},
            revoked={TP(RESULTS, 1), TP("app-parking-expiry", 1)},
            newly_assigned=set(),
        )
    )
    assert set(app.producer._transaction_producers) == {"app-1-0"}


def test_a_changelog_partition_without_a_start_offset_is_read_from_its_start() -> None:
    # Faust's interrupted recovery seeks such a partition to None: aiokafka raises.
    known = {TP("changelog", 1): 42}
    assert from_start_when_unknown(known) is known
    assert from_start_when_unknown({TP("changelog", 0): None, **known}) == {
        TP("changelog", 0): 0,
        TP("changelog", 1): 42,
    }
