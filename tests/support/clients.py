"""Kafka clients nobody on the project wrote, driving the worker in integration tests.

- :class:`Librdkafka`: librdkafka through ``confluent-kafka``, with its own defaults
  (its default partitioner is ``consistent_random``, crc32 of the key, not murmur2);
- :class:`JavaClient`: the Java client (``kafka-clients``) from the broker's own jars,
  running ``tests/support/java/ScorerProducer.java``, compiled once per session with
  ``javac -cp 'lib/*'`` (:meth:`JavaClient.compile`).

Both take the same *steps*: records (:class:`Record`) and, for a transactional
producer, the strings :data:`BEGIN`, :data:`COMMIT` and :data:`ABORT` (an abort
flushes first: librdkafka can otherwise fail it with ``INVALID_TXN_STATE``). Both
return each record's :class:`Delivered` (partition and offset as the broker
acknowledged them, and whether its transaction committed), in the order sent.

:class:`TopicReader` reads a topic ``read_committed`` in a thread of its own for as
long as a test module needs it, so each test only looks at what arrived.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from aiokafka.partitioner import murmur2

JAVA_SOURCE = Path(__file__).with_name("java") / "ScorerProducer.java"

BEGIN, COMMIT, ABORT = "BEGIN", "COMMIT", "ABORT"


class Record(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes


class Delivered(NamedTuple):
    """A record as the broker acknowledged it."""

    topic: str
    key: bytes | None
    value: bytes
    partition: int
    offset: int
    committed: bool
    """False for a record of an aborted transaction (written, never to be read committed)."""


Step = Record | str


def transactional_steps(transactions: Iterable[tuple[Sequence[Record], bool]]) -> list[Step]:
    """``(records, commit)`` pairs as steps: begin, the records, commit or abort."""
    steps: list[Step] = []
    for records, commit in transactions:
        steps += [BEGIN, *records, COMMIT if commit else ABORT]
    return steps


def _committed_flags(steps: Sequence[Step]) -> list[bool]:
    """Per record of ``steps``, whether it ends committed (outside any transaction: yes)."""
    flags: list[bool] = []
    open_from: int | None = None
    for step in steps:
        if isinstance(step, Record):
            flags.append(True)
        elif step == BEGIN:
            open_from = len(flags)
        elif step in (COMMIT, ABORT):
            assert open_from is not None, f"{step} outside a transaction"
            if step == ABORT:
                flags[open_from:] = [False] * (len(flags) - open_from)
            open_from = None
    assert open_from is None, "a transaction is left open"
    return flags


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java client, aiokafka and Faust pick for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Librdkafka:
    """librdkafka's producer (``confluent_kafka.Producer``)."""

    name = "librdkafka"

    def send(
        self,
        bootstrap: str,
        steps: Sequence[Step],
        config: Mapping[str, object] | None = None,
        rate: float | None = None,
        timeout: float = 120.0,
    ) -> list[Delivered]:
        """Send ``steps``; ``rate`` (records per second) paces the records. A
        ``transactional.id`` in ``config`` makes it transactional (else no
        transaction step may appear)."""
        from confluent_kafka import KafkaException, Producer

        options: dict[str, object] = {"bootstrap.servers": bootstrap, **(config or {})}
        producer = Producer(options)
        records = [step for step in steps if isinstance(step, Record)]
        reports: list[tuple[int, int] | None] = [None] * len(records)
        errors: list[str] = []

        def report(index: int):
            def on_delivery(error, message) -> None:
                if error is not None:
                    errors.append(f"record {index}: {error}")
                else:
                    reports[index] = (message.partition(), message.offset())

            return on_delivery

        if "transactional.id" in options:
            producer.init_transactions(30)
        started = time.monotonic()
        index = 0
        for step in steps:
            if step == BEGIN:
                producer.begin_transaction()
            elif step == COMMIT:
                producer.commit_transaction(60)
            elif step == ABORT:
                producer.flush(60)
                producer.abort_transaction(60)
            else:
                assert isinstance(step, Record)
                if rate is not None:
                    delay = started + index / rate - time.monotonic()
                    if delay > 0:
                        producer.poll(delay)
                while True:
                    try:
                        producer.produce(
                            step.topic, step.value, step.key, on_delivery=report(index)
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                    except KafkaException as error:
                        message = f"librdkafka refused record {index}: {error}"
                        raise AssertionError(message) from None
                producer.poll(0)
                index += 1
        left = producer.flush(timeout)
        assert left == 0, f"librdkafka: {left} records undelivered after {timeout}s"
        assert not errors, f"librdkafka delivery failed: {errors[:5]}"
        return _delivered(records, reports, _committed_flags(steps))


def _delivered(
    records: Sequence[Record], reports: Sequence[tuple[int, int] | None], committed: Sequence[bool]
) -> list[Delivered]:
    missing = [index for index, got in enumerate(reports) if got is None]
    assert not missing, f"no delivery report for records {missing[:10]}"
    return [
        Delivered(record.topic, record.key, record.value, got[0], got[1], flag)
        for record, got, flag in zip(records, reports, committed, strict=True)
        if got is not None
    ]


@dataclass(frozen=True)
class JavaClient:
    """The Java client's ``KafkaProducer`` in a JVM of its own per :meth:`send`."""

    classes: Path
    lib: Path
    name: str = "java"

    @classmethod
    def compile(cls, lib: Path, into: Path) -> JavaClient:
        """Compile ``ScorerProducer.java`` against the jars in ``lib`` into ``into``."""
        javac = shutil.which("javac")
        assert javac, "javac is not on PATH (a JDK 17+ is needed, as for the broker)"
        into.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [javac, "-cp", f"{lib}/*", "-d", str(into), str(JAVA_SOURCE)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"javac failed:\n{done.stdout}\n{done.stderr}"
        return cls(into, lib)

    def send(
        self,
        bootstrap: str,
        steps: Sequence[Step],
        config: Mapping[str, object] | None = None,
        timeout: float = 180.0,
    ) -> list[Delivered]:
        records = [step for step in steps if isinstance(step, Record)]
        lines = []
        for step in steps:
            if isinstance(step, Record):
                key = "-" if step.key is None else base64.b64encode(step.key).decode()
                lines.append(f"R {step.topic} {key} {base64.b64encode(step.value).decode()}")
            else:
                lines.append(step)
        steps_file = self.classes / f"steps-{uuid.uuid4().hex[:10]}.txt"
        steps_file.write_text("\n".join(lines) + "\n")
        options = {"bootstrap.servers": bootstrap, **(config or {})}
        java = shutil.which("java") or "java"
        try:
            done = subprocess.run(
                [
                    java,
                    "-cp",
                    f"{self.classes}{os.pathsep}{self.lib}/*",
                    "ScorerProducer",
                    str(steps_file),
                    *(f"{name}={value}" for name, value in options.items()),
                ],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        finally:
            steps_file.unlink(missing_ok=True)
        assert done.returncode == 0, (
            f"the Java producer exited with {done.returncode}:\n{done.stderr[-3000:]}"
        )
        reports: list[tuple[int, int] | None] = [None] * len(records)
        for line in done.stdout.splitlines():
            if line.startswith("ACK "):
                _, index, partition, offset = line.split()
                reports[int(index)] = (int(partition), int(offset))
        return _delivered(records, reports, _committed_flags(steps))


class TopicReader:
    """Every record of a topic, read ``read_committed`` from the start by a librdkafka
    consumer in a thread of its own (no consumer group: nothing is committed)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:10]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.max.bytes": 64 * 1024 * 1024,
                "receive.message.max.bytes": 100 * 1024 * 1024,
            }
        )
        self._partitions = [TopicPartition(topic, p, -2) for p in range(partitions)]  # beginning
        self._consumer.assign(self._partitions)
        # A second handle for the watermark queries of ``caught_up``.
        self._probe = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:10]}"}
        )
        self._positions: dict[int, int] = {}
        self._lock = threading.Lock()
        self._records: list = []
        self._stop = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"reader-{topic}")
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import TopicPartition

        # Only this thread calls the consumer (librdkafka's handle is not shared).
        wanted = [TopicPartition(self.topic, tp.partition) for tp in self._partitions]
        while not self._stop.is_set():
            messages = self._consumer.consume(num_messages=1000, timeout=0.2)
            kept = []
            for message in messages:
                if message.error() is not None:
                    if not message.error().retriable():
                        self.error = str(message.error())
                    continue
                kept.append(message)
            positions = {tp.partition: tp.offset for tp in self._consumer.position(wanted)}
            with self._lock:
                self._records.extend(kept)
                self._positions = positions

    def records(self, where: Callable[[object], bool] | None = None) -> list:
        """The ``confluent_kafka.Message`` objects read so far (those ``where`` accepts)."""
        with self._lock:
            records = list(self._records)
        return records if where is None else [record for record in records if where(record)]

    def caught_up(self, timeout: float = 15.0) -> bool:
        """Wait until everything the topic held when called was read; True if it was."""
        from confluent_kafka import TopicPartition

        ends = {}
        for tp in self._partitions:
            _, high = self._probe.get_watermark_offsets(
                TopicPartition(self.topic, tp.partition), timeout=10, cached=False
            )
            ends[tp.partition] = high
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                positions = dict(self._positions)
            if all(end == 0 or positions.get(p, -1) >= end for p, end in ends.items()):
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()
        self._probe.close()


def topic_max_message_bytes(bootstrap: str, topic: str) -> int:
    """The broker's limit for one record batch of ``topic`` (``max.message.bytes``,
    the broker's ``message.max.bytes`` unless the topic overrides it)."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    return int(configs["max.message.bytes"].value)
