"""Where a query's state lives, and inputs that a producer put somewhere else.

The join holds because a query's result, its qrels entry and its parked
results share a partition: the one the project's own producers (aiokafka, and
the Java client's default) choose for the record key, murmur2(key) modulo the
partition count. Other partitioners place the same key elsewhere: librdkafka's
default (``consistent_random``, crc32), Java's ``RoundRobinPartitioner``, a
producer that sets partitions itself. Such a record is *misplaced*: read there,
its result would be looked up in a table partition that never holds its qrels
(unjudged though they exist), and its qrels stored where no result looks.

So every input record is checked against its key's home partition before it is
handled; a misplaced one is counted and produced again to its home partition of
the same topic (in the transaction of the batch that read it, under
exactly_once), as Kafka Streams repartitions, and handled there. The copy keeps
the record's key, value and headers and adds one header naming where it was
first read.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.partitioner import murmur2

from scorer.stream.events import DEADLETTER_HEADER_PREFIX
from scorer.stream.outputs import Output

logger = logging.getLogger(__name__)

REROUTED_FROM = f"{DEADLETTER_HEADER_PREFIX}rerouted-from"
"""Header of a rerouted copy: ``topic/partition/offset`` of the misplaced original."""


class HomePartitions:
    """The home partition of each key among ``partitions`` (murmur2, as aiokafka's and
    the Java client's default partitioners place a keyed record), with the last keys'
    homes kept (a query's results share a key; the hash is pure Python)."""

    MAX_KEYS = 1 << 16

    def __init__(self, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"a topic has at least one partition, not {partitions}")
        self.partitions = partitions
        self._homes: dict[bytes, int] = {}

    def of(self, key: bytes) -> int:
        home = self._homes.get(key)
        if home is None:
            if len(self._homes) >= self.MAX_KEYS:
                self._homes = {}
            home = self._homes[key] = (murmur2(key) & 0x7FFFFFFF) % self.partitions
        return home


class Misplaced:
    """Finds the misplaced records of the input topics and makes their rerouted
    copies; counts them in ``counter`` (labelled by topic) and warns once per source
    partition, naming the fix."""

    def __init__(self, partitions: int, counter: Any) -> None:
        self.homes = HomePartitions(partitions)
        self.counter = counter
        self._warned: set[tuple[str, int]] = set()

    def home_if_misplaced(self, partition: int, key: bytes | None) -> int | None:
        """The key's home partition when the record was read from another one, else
        None (a record without a key has no home: it is left to the handler, which
        dead-letters it)."""
        if key is None:
            return None
        home = self.homes.of(key)
        return None if home == partition else home

    def copy_if_misplaced(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
    ) -> Output | None:
        """The rerouted copy of the record read at ``topic/partition/offset`` when it is
        misplaced (:meth:`home_if_misplaced`, :meth:`reroute`), else None."""
        home = self.home_if_misplaced(partition, key)
        if home is None:
            return None
        assert key is not None  # a record without a key has no home
        return self.reroute(topic, partition, offset, key, value, headers, home)

    def reroute(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes,
        value: bytes | None,
        headers: Any,
        home: int,
    ) -> Output:
        """The copy of a misplaced record for its ``home`` partition (counted)."""
        self.counter.labels(topic).inc()
        if (topic, partition) not in self._warned:
            self._warned.add((topic, partition))
            logger.warning(
                "%s/%s: records keyed by queryId are not on the partition murmur2(key) "
                "gives (first: offset %s, key %r, home partition %s): they are rerouted "
                "to their home partitions, each one produced twice. Fix the producer's "
                "partitioner: partitioner=murmur2_random for librdkafka (confluent-kafka, "
                "kcat), the default partitioner for the Java client; see docs/operations.md",
                topic, partition, offset, key[:80], home,
            )  # fmt: skip
        copied = [*(headers or []), (REROUTED_FROM, f"{topic}/{partition}/{offset}".encode())]
        return Output(topic, key, value, copied, partition=home)
