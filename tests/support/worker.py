"""Real worker processes against the test broker (:mod:`scorer.stream.process`),
and reading topics back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from scorer.kafka.topics import describe_topics
from scorer.settings import Settings
from scorer.stream.process import SCORER, Worker, free_port, worker_env

__all__ = [
    "SCORER",
    "Worker",
    "consume",
    "free_port",
    "read_topic",
    "uncommitted_records",
    "wait_all_committed",
    "wait_for_open_transaction",
    "worker_env",
]


def read_topic(
    settings: Settings,
    topic: str,
    done: Callable[[list], bool],
    timeout: float = 120.0,
    isolation_level: str = "read_uncommitted",
    grace: float = 3.0,
) -> list:
    """Every record of ``topic`` from the start until ``done(records)`` holds, then
    ``grace`` seconds more so that any surplus (a duplicate) is caught as well."""

    async def run() -> list:
        consumer = AIOKafkaConsumer(
            topic,
            **settings.aiokafka_options(),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=None,
            isolation_level=isolation_level,
        )
        await consumer.start()
        records: list = []
        try:
            deadline = time.monotonic() + timeout
            grace_until: float | None = None
            while time.monotonic() < deadline:
                if grace_until is None and done(records):
                    grace_until = time.monotonic() + grace
                if grace_until is not None and time.monotonic() > grace_until:
                    break
                batch = await consumer.getmany(timeout_ms=500)
                for partition_records in batch.values():
                    records.extend(partition_records)
        finally:
            await consumer.stop()
        return records

    return asyncio.run(run())


def consume(
    settings: Settings, topic: str, expected: int, timeout: float = 60.0
) -> list[ConsumerRecord]:
    """Read ``topic`` from the start until ``expected`` records arrived (or the
    timeout), then a short while longer to catch any surplus (duplicates)."""
    return read_topic(settings, topic, lambda records: len(records) >= expected, timeout, grace=2.0)


def uncommitted_records(settings: Settings, topics: list[str]) -> dict[str, int]:
    """Per partition of ``topics`` (``"topic/partition"``), how many committed records
    lie past the worker group's committed offset: what a restart or a rebalance would
    hand to a worker again. Empty once the group has committed everything it read.

    Read with read_committed from the committed offset to the last stable offset, so
    transaction markers and aborted records (never handed to a worker) do not count.
    """
    behind = {
        TopicPartition(report.name, partition.partition): partition.committed or 0
        for report in describe_topics(settings, topics)
        for partition in report.partitions
        if partition.end > (partition.committed or 0)
    }

    async def run() -> dict[str, int]:
        consumer = AIOKafkaConsumer(
            **settings.aiokafka_options(),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        await consumer.start()
        counts = dict.fromkeys(behind, 0)
        try:
            consumer.assign(list(behind))
            ends = await consumer.end_offsets(list(behind))
            for tp, offset in behind.items():
                consumer.seek(tp, offset)
            left = {tp for tp in behind if ends[tp] > behind[tp]}
            deadline = time.monotonic() + 30
            while left and time.monotonic() < deadline:
                batch = await consumer.getmany(*left, timeout_ms=500)
                for tp, records in batch.items():
                    counts[tp] += len(records)
                left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
        finally:
            await consumer.stop()
        return {f"{tp.topic}/{tp.partition}": n for tp, n in counts.items() if n}

    return asyncio.run(run()) if behind else {}


def wait_all_committed(settings: Settings, timeout: float = 60.0) -> None:
    """Wait until the worker group has committed every result and rollup record it
    read: from then on no redelivery can change what the workers counted."""
    topics = [settings.results_topic, settings.rollup_topic]
    deadline = time.monotonic() + timeout
    while (left := uncommitted_records(settings, topics)) and time.monotonic() < deadline:
        time.sleep(0.25)
    if left:
        raise AssertionError(f"after {timeout:.0f} s, records still not committed: {left}")


def wait_for_open_transaction(settings: Settings, topic: str, timeout: float = 30.0) -> set[int]:
    """Wait until a transaction with records of ``topic`` is open on the broker (some
    partition's high watermark past its last stable offset) and return those
    partitions: a freeze that begins now holds a transaction the broker began."""

    partitions = [
        TopicPartition(report.name, partition.partition)
        for report in describe_topics(settings, [topic])
        for partition in report.partitions
    ]

    async def run() -> set[int]:
        ends = {}
        for isolation in ("read_uncommitted", "read_committed"):
            ends[isolation] = AIOKafkaConsumer(
                **settings.aiokafka_options(),
                group_id=None,
                enable_auto_commit=False,
                isolation_level=isolation,
            )
            await ends[isolation].start()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                high = await ends["read_uncommitted"].end_offsets(partitions)
                stable = await ends["read_committed"].end_offsets(partitions)
                open_ = {tp.partition for tp in partitions if high[tp] > stable[tp]}
                if open_:
                    return open_
                await asyncio.sleep(0.05)
        finally:
            for consumer in ends.values():
                await consumer.stop()
        raise AssertionError(f"no transaction of {topic} open on the broker in {timeout:.0f} s")

    return asyncio.run(run())
