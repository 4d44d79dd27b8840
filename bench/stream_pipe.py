"""The bare aiokafka pipe of ``bench/stream.py``: consume, decode JSON, encode, produce.

The limit of this client stack here: no framework, at-least-once (the output of
a fetched batch is acknowledged before its offsets are committed). Runs until
SIGTERM, then commits and stops.

    python bench/stream_pipe.py BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC GROUP_ID
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


async def pipe(bootstrap: str, source: str, sink: str, group_id: str) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await consumer.start()
    await producer.start()
    last_commit = time.monotonic()
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


if __name__ == "__main__":
    asyncio.run(pipe(*sys.argv[1:5]))
