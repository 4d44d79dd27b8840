"""Sending keyed events to the scorer's input topics (replay and demo traffic)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable

from aiokafka import AIOKafkaProducer

from scorer.settings import Settings

Record = tuple[str, bytes | None]
"""``(key, value)``: the key is the queryId; a None value is a tombstone."""


def make_producer(settings: Settings, **options: object) -> AIOKafkaProducer:
    """An idempotent producer for the configured broker and security settings."""
    return AIOKafkaProducer(
        **settings.aiokafka_options(),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        **options,
    )


async def paced(records: Iterable[Record], rate: float | None) -> AsyncIterator[Record]:
    """Yield ``records`` at about ``rate`` per second (as fast as possible if None)."""
    start = time.monotonic()
    for sent, record in enumerate(records):
        if rate:
            delay = start + sent / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        yield record


async def send_all(
    producer: AIOKafkaProducer, topic: str, records: Iterable[Record], rate: float | None = None
) -> int:
    """Send ``records`` to ``topic`` keyed by queryId; returns how many were acknowledged."""
    pending = []
    sent = 0
    async for key, value in paced(records, rate):
        pending.append(await producer.send(topic, key=key.encode(), value=value))
        sent += 1
        if len(pending) >= 1000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    return sent
