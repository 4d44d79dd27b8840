"""The bare aiokafka pipes of ``bench/stream.py``: consume, decode JSON, encode, produce.

The limit of this client stack here, with no framework:

- at-least-once (default): the output of a fetched batch is acknowledged before
  its offsets are committed, every 2.8 s;
- ``--exactly-once``: Kafka transactions with no framework. Inputs are read
  read_committed, and each fetched batch is one transaction of one producer
  (its outputs and its offsets, committed as soon as they are sent): the plain
  transactional consume-transform-produce loop, whose outputs a read_committed
  reader sees only when their transaction commits;
- ``--second-record``: at-least-once, and each event also writes a second, small
  record (its key and seven floats, the size of the scorer's per-query changelog
  record) to ``OUTPUT_TOPIC.second``: what a second record per event costs this
  client stack, sent the same way as the first;
- ``--exactly-once --per-partition``: the same, with a transactional producer
  per input partition (``GROUP_ID-tx-PARTITION``), as Faust runs exactly_once
  (aiokafka 0.14 has no KIP-447 group metadata in ``TxnOffsetCommit``, so a
  producer shared by partitions could not fence a zombie owner of one): each
  fetched batch is one transaction per partition in it, committed side by side.

Runs until SIGTERM, then commits and stops.

    python bench/stream_pipe.py BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC GROUP_ID \
        [--second-record | --exactly-once [--per-partition]]
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

COMMIT_INTERVAL = 2.8
"""Seconds between offset commits (Faust's default commit interval)."""


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    return stopping


def input_consumer(
    bootstrap: str, source: str, group_id: str, isolation_level: str
) -> AIOKafkaConsumer:
    """The consumer of ``source`` in ``group_id``, committing by hand, from the start."""
    return AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation_level,
    )


SECOND_VALUE = orjson.dumps([0.123456789012345] * 7)
"""The second record's value (``--second-record``): a per-query entry's size."""


async def pipe(bootstrap: str, source: str, sink: str, group_id: str, second: bool = False) -> None:
    """The at-least-once pipe; ``second``: each event also writes a second record."""
    stopping = stop_on_signals()
    consumer = input_consumer(bootstrap, source, group_id, "read_uncommitted")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await consumer.start()
    await producer.start()
    last_commit = time.monotonic()
    second_sink = f"{sink}.second"
    pending: list[asyncio.Future[object]] = []
    try:
        while not stopping.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=2000)
            for records in batches.values():
                for record in records:
                    event = orjson.loads(record.value)
                    pending.append(
                        await producer.send(sink, key=record.key, value=orjson.dumps(event))
                    )
                    if second:
                        pending.append(
                            await producer.send(second_sink, key=record.key, value=SECOND_VALUE)
                        )
            if len(pending) > 10_000 or time.monotonic() - last_commit >= COMMIT_INTERVAL:
                await asyncio.gather(*pending)
                pending.clear()
                await consumer.commit()
                last_commit = time.monotonic()
        await asyncio.gather(*pending)
        await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


async def transactional_pipe(bootstrap: str, source: str, sink: str, group_id: str) -> None:
    """The exactly-once pipe: one transaction per fetched batch."""
    stopping = stop_on_signals()
    consumer = input_consumer(bootstrap, source, group_id, "read_committed")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{group_id}-tx")
    await consumer.start()
    await producer.start()
    try:
        while not stopping.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=2000)
            if not batches:
                continue
            async with producer.transaction():
                offsets = {}
                for tp, records in batches.items():
                    for record in records:
                        event = orjson.loads(record.value)
                        await producer.send(sink, key=record.key, value=orjson.dumps(event))
                    offsets[tp] = records[-1].offset + 1
                await producer.send_offsets_to_transaction(offsets, group_id)
    finally:
        await producer.stop()
        await consumer.stop()


async def per_partition_pipe(bootstrap: str, source: str, sink: str, group_id: str) -> None:
    """The exactly-once pipe with a transactional producer per input partition."""
    stopping = stop_on_signals()
    consumer = input_consumer(bootstrap, source, group_id, "read_committed")
    producers: dict[int, AIOKafkaProducer] = {}
    await consumer.start()

    async def producer_of(partition: int) -> AIOKafkaProducer:
        producer = producers.get(partition)
        if producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, transactional_id=f"{group_id}-tx-{partition}"
            )
            await producer.start()
            producers[partition] = producer
        return producer

    async def one_partition(tp: object, records: list) -> None:
        producer = await producer_of(tp.partition)  # type: ignore[attr-defined]
        async with producer.transaction():
            for record in records:
                event = orjson.loads(record.value)
                await producer.send(sink, key=record.key, value=orjson.dumps(event))
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, group_id)

    try:
        while not stopping.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=2000)
            if batches:
                await asyncio.gather(*(one_partition(tp, rs) for tp, rs in batches.items()))
    finally:
        for producer in producers.values():
            await producer.stop()
        await consumer.stop()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    loop_of = pipe
    if "--second-record" in arguments:
        arguments.remove("--second-record")
        asyncio.run(pipe(*arguments[:4], second=True))
        sys.exit(0)
    if "--exactly-once" in arguments:
        arguments.remove("--exactly-once")
        loop_of = transactional_pipe
        if "--per-partition" in arguments:
            arguments.remove("--per-partition")
            loop_of = per_partition_pipe
    asyncio.run(loop_of(*arguments[:4]))
