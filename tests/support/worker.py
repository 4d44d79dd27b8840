"""Running real worker processes against the test broker, and reading topics back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from pydantic import SecretStr

from scorer.kafka.topics import describe_topics
from scorer.settings import Settings

SCORER = str(Path(sys.executable).with_name("scorer"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker_env(settings: Settings, defaults: bool = True) -> dict[str, str]:
    """The environment that makes a ``scorer`` process read ``settings``; without
    ``defaults``, only the settings that differ from their defaults (for another
    checkout's scorer, which refuses a setting it predates)."""
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers}
    for name, value in settings.model_dump(exclude_defaults=not defaults).items():
        if name == "kafka_bootstrap_servers" or value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, tuple | list):
            value = json.dumps(list(value))
        env[f"SCORER_{name.upper()}"] = str(value)
    return env


@dataclass
class Worker:
    """A ``scorer worker`` subprocess with its own web port and data directory."""

    settings: Settings
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    defaults: bool = True
    """Whether settings at their defaults are passed too (``worker_env``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"worker-{self.port}.log"

    def start(self, ready_timeout: float = 90.0) -> Worker:
        self.launch()
        self.wait_ready(ready_timeout)
        return self

    def launch(self, *args: str) -> Worker:
        """Start the process (``args`` added to ``scorer worker``) without waiting for it."""
        env = worker_env(self.settings, self.defaults)
        env["SCORER_WEB_PORT"] = str(self.port)
        env["SCORER_DATADIR"] = str(self.workdir / f"data-{self.port}")
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [SCORER, "worker", "--loglevel", "info", *args],
                env=env,
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"worker exited with {self.process.returncode}:\n{self.tail()}"
                )
            status, _ = self.get("/readyz")
            if status == 200:
                return
            time.sleep(0.3)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.tail()}")

    def get(self, path: str) -> tuple[int, bytes]:
        """``(status, body)`` of a GET; status 0 when nothing answers."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError:
            return 0, b""

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """One sample of the worker's /metrics (0.0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        _, body = self.get("/metrics")
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in (labels or {}).items()
                ):
                    return sample.value
        return 0.0

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


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
