"""The batch path's at-least-once sends against a real aiokafka producer (not started:
its metadata is fed in, and the records stay in its accumulator for the test to read)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation, KafkaTimeoutError, MessageSizeTooLargeError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from scorer.stream.faust_edge.consumer import GuardedConsumer, OpenGate, Output
from scorer.stream.faust_edge.recovery import Recovery
from scorer.stream.faust_edge.sending import Appender

RESULTS = TopicPartition("results", 0)


def metadata(partitions: dict[str, int], leaderless: tuple[int, ...] = ()) -> SimpleNamespace:
    """A version-0 metadata response: one broker, ``partitions`` per topic."""
    return SimpleNamespace(
        API_VERSION=0,
        brokers=[(0, "127.0.0.1", 9092)],
        topics=[
            (0, topic, [(0, p, -1 if p in leaderless else 0, [0], [0]) for p in range(count)])
            for topic, count in partitions.items()
        ],
    )


def producer_with(partitions: dict[str, int], **options: object) -> AIOKafkaProducer:
    """An aiokafka producer that never starts (so never connects), with metadata."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", **options)
    producer.client.cluster.update_metadata(metadata(partitions))
    # Nothing to close: it never started (aiokafka warns of unclosed producers).
    producer._closed = True
    return producer


def queued(producer: AIOKafkaProducer, tp: TopicPartition) -> list[tuple[bytes, bytes]]:
    """The (key, value) of each record the accumulator holds for ``tp``."""
    records = []
    for batch in producer._message_accumulator._batches.get(tp, []):
        buffer = batch._builder._builder.build()
        records += [(r.key, r.value) for r in DefaultRecordBatch(bytes(buffer))]
    return records


@given(st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=50))
def test_a_key_goes_to_the_partition_aiokafkas_send_would_choose(keys: list[bytes]) -> None:
    async def scenario() -> None:
        producer = producer_with({"scored": 7})
        appender = Appender(producer)
        partitions = list(producer.client.cluster.partitions_for_topic("scored"))
        for key in keys + keys:  # the second time from the kept hashes
            assert appender.partition_for("scored", key) == DefaultPartitioner()(
                key, partitions, partitions
            )

    asyncio.run(scenario())


def test_records_land_in_the_producers_batches_of_their_partitions() -> None:
    async def scenario() -> None:
        producer = producer_with({"scored": 4, "expiry": 4})
        appender = Appender(producer)
        futures = [
            await appender.send("scored", b"q-1", b"one", None, None),
            await appender.send("scored", b"q-1", b"two", None, [("h", b"v")]),
            await appender.send("expiry", b"q-2", b"three", 3, None),
        ]
        assert all(isinstance(future, asyncio.Future) for future in futures)
        chosen = appender.partition_for("scored", b"q-1")
        assert queued(producer, TopicPartition("scored", chosen)) == [
            (b"q-1", b"one"),
            (b"q-1", b"two"),
        ]
        assert queued(producer, TopicPartition("expiry", 3)) == [(b"q-2", b"three")]

    asyncio.run(scenario())


def test_new_metadata_is_read_again() -> None:
    async def scenario() -> None:
        producer = producer_with({"scored": 1})
        appender = Appender(producer)
        assert appender.partition_for("scored", b"q") == 0
        producer.client.cluster.update_metadata(metadata({"scored": 8}))
        partitions = list(range(8))
        assert appender.partition_for("scored", b"q") == DefaultPartitioner()(
            b"q", partitions, partitions
        )

    asyncio.run(scenario())


def test_a_record_over_the_request_size_is_refused_as_send_refuses_it() -> None:
    async def scenario() -> None:
        producer = producer_with({"scored": 1}, max_request_size=1024)
        with pytest.raises(MessageSizeTooLargeError):
            await Appender(producer).send("scored", b"q", b"x" * 2048, None, None)

    asyncio.run(scenario())


def test_a_topic_without_metadata_takes_sends_own_path() -> None:
    async def scenario() -> list[str]:
        producer = producer_with({"scored": 1})
        taken: list[str] = []

        async def send(topic: str, value: bytes, **kwargs: object) -> asyncio.Future[None]:
            taken.append(topic)
            return asyncio.get_running_loop().create_future()

        producer.send = send  # type: ignore[method-assign]
        appender = Appender(producer)
        await appender.send("unknown", b"q", b"v", None, None)
        await appender.send("unknown", b"q", b"v", 2, None)
        await appender.send("scored", b"q", b"v", None, None)
        return taken

    assert asyncio.run(scenario()) == ["unknown", "unknown"]


def test_records_sent_together_make_one_batch_per_partition_in_their_order() -> None:
    async def scenario() -> None:
        producer = producer_with({"scored": 4, "changelog": 4})
        appender = Appender(producer)
        keys = [f"q-{n}".encode() for n in range(40)]
        records = [("scored", key, b"v-" + key, None, None) for key in keys]
        records.append(("changelog", b"k", b"state", 2, [("h", b"v")]))
        futures = await appender.send_many(records)
        expected: dict[TopicPartition, list[tuple[bytes, bytes]]] = {}
        for key in keys:
            tp = TopicPartition("scored", appender.partition_for("scored", key))
            expected.setdefault(tp, []).append((key, b"v-" + key))
        expected[TopicPartition("changelog", 2)] = [(b"k", b"state")]
        assert len(futures) == len(expected)  # one delivery future per batch
        for tp, records_of_tp in expected.items():
            assert queued(producer, tp) == records_of_tp

    asyncio.run(scenario())


def guarded_consumer(producer: AIOKafkaProducer) -> GuardedConsumer:
    """Just enough of the worker's consumer for its at-least-once ``send_outputs``."""
    consumer = GuardedConsumer.__new__(GuardedConsumer)
    consumer.gate = OpenGate()
    consumer.recovery = Recovery()
    appender = Appender(producer)
    consumer.appender = lambda: appender  # type: ignore[method-assign]
    return consumer


def drain_accumulator(producer: AIOKafkaProducer) -> list[tuple[TopicPartition, list[bytes]]]:
    """What aiokafka's sender does with the ready batches: takes them out of the
    accumulator (which wakes whoever waits for a partition's batch to drain);
    returns the values of each batch taken, per partition."""
    nodes, _ = producer._message_accumulator.drain_by_nodes(ignore_nodes=[])
    taken = []
    for batches in nodes.values():
        for tp, batch in batches.items():
            buffer = batch._builder._builder.build()
            taken.append((tp, [r.value for r in DefaultRecordBatch(bytes(buffer))]))
    return taken


def test_outputs_reach_each_partition_in_the_order_of_the_calls_that_sent_them() -> None:
    # The rollup undercount: the commit's flush (older contributions to two rollup
    # partitions) waited for partition 0's pending batch, and the next scored batch's
    # newer contributions to partition 1 went first; the run's watermark then dropped
    # the older ones as redelivered.
    async def scenario() -> dict[int, list[bytes]]:
        producer = producer_with({"rollup": 2})
        consumer = guarded_consumer(producer)
        # A batch already queued for partition 0: a new batch for it must wait.
        await consumer.send_outputs(RESULTS, [Output("rollup", None, b"earlier", partition=0)])
        older = asyncio.create_task(
            consumer.send_outputs(
                RESULTS,
                [
                    Output("rollup", None, b"older-0", partition=0),
                    Output("rollup", None, b"older-1", partition=1),
                ],
            )
        )
        await asyncio.sleep(0)  # the flush now waits for partition 0
        newer = asyncio.create_task(
            consumer.send_outputs(RESULTS, [Output("rollup", None, b"newer-1", partition=1)])
        )
        landed: dict[int, list[bytes]] = {0: [], 1: []}
        while not (older.done() and newer.done()):
            for tp, values in drain_accumulator(producer):
                landed[tp.partition] += values
            await asyncio.sleep(0.01)
        for tp, values in drain_accumulator(producer):
            landed[tp.partition] += values
        return landed

    landed = asyncio.run(scenario())
    assert landed == {0: [b"earlier", b"older-0"], 1: [b"older-1", b"newer-1"]}


def test_a_transactional_producers_records_go_only_into_its_open_transaction() -> None:
    # Outside a transaction both send paths refuse, as aiokafka's send refuses; inside,
    # every partition written is in the transaction.
    async def scenario() -> None:
        producer = producer_with({"scored": 4, "rollup": 2}, transactional_id="app-1-0")
        appender = Appender(producer)
        with pytest.raises(IllegalOperation, match="not in transaction"):
            await appender.send_many([("scored", b"q", b"v", None, None)])
        with pytest.raises(IllegalOperation, match="not in transaction"):
            await appender.send("rollup", b"run", b"r", 0, None)
        transaction = producer._txn_manager
        transaction.set_pid_and_epoch(7, 0)
        transaction.begin_transaction()
        records = [("scored", f"q-{n}".encode(), b"v", None, None) for n in range(20)]
        records.append(("rollup", b"run", b"r", 1, None))
        await appender.send_many(records)
        await appender.send("rollup", b"run", b"r", 0, None)
        wanted = {
            TopicPartition("scored", appender.partition_for("scored", k))
            for _, k, *_ in records[:-1]
        }
        wanted |= {TopicPartition("rollup", 1), TopicPartition("rollup", 0)}
        assert transaction.partitions_to_add() == wanted

    asyncio.run(scenario())


def answered(producer: AIOKafkaProducer, error: Exception | None = None) -> int:
    """What the broker's answers do to the batches the sender took: each delivered (or
    failed with ``error``). Returns how many batches were answered."""
    nodes, _ = producer._message_accumulator.drain_by_nodes(ignore_nodes=[])
    count = 0
    for batches in nodes.values():
        for batch in batches.values():
            if error is None:
                batch.done(base_offset=0)
            else:
                batch.failure(exception=error)
            count += 1
    return count


@pytest.mark.parametrize("outcome", ["delivered", "failed", "rebuild requested"])
def test_delivered_waits_until_the_broker_has_every_record_sent_so_far(outcome: str) -> None:
    """The qrels release deletes its parked entry only after ``delivered()``: True only
    once every record sent before it is on the broker, False if one was not (or a
    rebuild was asked for, which drops the sends after it)."""

    async def scenario() -> tuple[bool, bool]:
        producer = producer_with({"scored": 1, "rollup": 2})
        consumer = guarded_consumer(producer)
        consumer.recovery = Recovery()  # at-least-once
        outputs = [
            Output("scored", None, b"s", partition=0),
            Output("rollup", None, b"c0", partition=0),
            Output("rollup", None, b"c1", partition=1),
        ]
        await consumer.send_outputs(RESULTS, outputs)
        waiting = asyncio.create_task(consumer.delivered())
        await asyncio.sleep(0.02)
        early = waiting.done()
        if outcome == "rebuild requested":
            consumer.recovery.request(KafkaTimeoutError(), "test")
        error = KafkaTimeoutError() if outcome == "failed" else None
        assert answered(producer, error) == 3
        return early, await asyncio.wait_for(waiting, 5)

    early, delivered = asyncio.run(scenario())
    assert not early
    assert delivered is (outcome == "delivered")


def test_under_exactly_once_delivered_does_not_wait() -> None:
    """One transaction holds the release's records and the parked entry's deletion."""

    async def scenario() -> bool:
        producer = producer_with({"rollup": 1})
        consumer = guarded_consumer(producer)
        consumer.recovery = Recovery(exactly_once=True)
        await consumer.send_outputs(RESULTS, [Output("rollup", None, b"c", partition=0)])
        return await asyncio.wait_for(consumer.delivered(), 1)

    assert asyncio.run(scenario()) is True
