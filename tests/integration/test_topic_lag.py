"""`scorer topics describe` counts a transactional producer's records, not its commit
markers: a caught-up group has lag 0, N unread records are lag N."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from scorer.kafka.topics import describe_topics
from scorer.settings import Settings
from tests.support.kafka import create_topics, unique_name

pytestmark = pytest.mark.integration


async def produce_transaction(bootstrap: str, topic: str, values: list[bytes], commit: bool = True):
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=unique_name("lag-txn"), acks="all"
    )
    await producer.start()
    try:
        async with producer.transaction() if commit else _aborting(producer):
            sent = [await producer.send(topic, value, key=b"q1", partition=0) for value in values]
            await asyncio.gather(*sent)
    finally:
        await producer.stop()


class _aborting:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        await self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.abort_transaction()


async def consume_all_and_commit(bootstrap: str, topic: str, group: str) -> list[bytes]:
    """Read partition 0 to its end as the worker does (read_committed) and commit the
    offset after the last record read, as Faust does."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        values: list[bytes] = []
        last = None
        for _ in range(20):
            for records in (await consumer.getmany(tp, timeout_ms=300)).values():
                values.extend(record.value for record in records)
                last = records[-1].offset if records else last
        assert last is not None
        await consumer.commit({tp: last + 1})
        return values
    finally:
        await consumer.stop()


def partition_zero(settings: Settings, topic: str, group: str):
    [report] = describe_topics(settings, [topic], group)
    return report.partitions[0]


def test_lag_is_zero_when_only_commit_markers_remain_and_n_for_n_unread_records(
    kafka_settings: Settings,
) -> None:
    bootstrap = kafka_settings.bootstrap_servers
    topic, group = unique_name("lag"), unique_name("lag-group")
    create_topics(bootstrap, 1, topic)

    asyncio.run(produce_transaction(bootstrap, topic, [b"a", b"b", b"c"]))
    assert asyncio.run(consume_all_and_commit(bootstrap, topic, group)) == [b"a", b"b", b"c"]
    caught_up = partition_zero(kafka_settings, topic, group)
    # Three records and the commit marker: end 4, committed 3, yet nothing to read.
    assert (caught_up.end, caught_up.committed, caught_up.lag) == (4, 3, 0)

    asyncio.run(produce_transaction(bootstrap, topic, [b"d", b"e"]))
    behind = partition_zero(kafka_settings, topic, group)
    assert (behind.end, behind.committed, behind.lag) == (7, 3, 2)

    # An aborted transaction's records are never delivered: not lag either.
    asyncio.run(produce_transaction(bootstrap, topic, [b"x"], commit=False))
    aborted = partition_zero(kafka_settings, topic, group)
    assert (aborted.end, aborted.lag) == (9, 2)

    assert asyncio.run(consume_all_and_commit(bootstrap, topic, group)) == [b"d", b"e"]
    again = partition_zero(kafka_settings, topic, group)
    assert (again.committed, again.lag) == (6, 0)


def test_lag_of_plain_records_is_still_end_minus_committed(kafka_settings: Settings) -> None:
    bootstrap = kafka_settings.bootstrap_servers
    topic, group = unique_name("lag-plain"), unique_name("lag-group")
    create_topics(bootstrap, 1, topic)

    async def produce(values: list[bytes]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()

    asyncio.run(produce([b"1", b"2"]))
    asyncio.run(consume_all_and_commit(bootstrap, topic, group))
    asyncio.run(produce([b"3", b"4", b"5"]))
    offsets = partition_zero(kafka_settings, topic, group)
    assert (offsets.end, offsets.committed, offsets.lag) == (5, 2, 3)


def test_a_backlog_past_the_exact_span_is_counted_from_its_first_record_to_its_last(
    kafka_settings: Settings,
) -> None:
    """Past ``EXACT_SPAN`` offsets the unread records are not all read: the span from
    the first readable one to the last, found from the tail, markers at either end
    left out."""
    bootstrap = kafka_settings.bootstrap_servers
    topic, group = unique_name("lag-large"), unique_name("lag-group")
    create_topics(bootstrap, 1, topic)
    asyncio.run(produce_transaction(bootstrap, topic, [b"first"]))
    asyncio.run(consume_all_and_commit(bootstrap, topic, group))
    asyncio.run(produce_transaction(bootstrap, topic, [b"r%d" % i for i in range(1200)]))
    offsets = partition_zero(kafka_settings, topic, group)
    # committed 1 (the first marker at 1), records 2..1201, marker 1202: end 1203.
    assert (offsets.end, offsets.committed, offsets.lag) == (1203, 1, 1200)
