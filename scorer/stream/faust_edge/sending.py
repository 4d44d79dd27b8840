"""The batch path's sends, appended to aiokafka's producer batches (both guarantees).

``AIOKafkaProducer.send`` does per record what a batch of records to a few
topics needs once: it awaits the topic's metadata, builds the topic's partition
set three times (two sets and two lists) to choose a partition, and hashes the
key with aiokafka's pure-Python murmur2. Here the partition lists are kept per
topic until the client's metadata changes (aiokafka replaces its partition map
on every update), a key's hash is kept while the key recurs (a query's results
share it), and the record goes to the producer's accumulator as ``send`` would
put it there: the same size check, the same partition, the same batch. A topic
the client has no metadata for yet takes ``send`` itself, which fetches it.

Under exactly_once the producer is an input partition's transactional one: a
record is refused, as ``send`` refuses it, when no transaction is open (the
accumulator adds each new batch's partition to the open transaction).

Private names (aiokafka 0.14.0): ``AIOKafkaProducer._serialize``,
``._partitioner``, ``._message_accumulator``, ``._request_timeout_ms``,
``._txn_manager``, ``ClusterMetadata._partitions``; see docs/faust-internals.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka.errors import IllegalOperation
from aiokafka.partitioner import DefaultPartitioner, murmur2
from aiokafka.structs import TopicPartition

Record = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes]] | None]
"""A record to send: topic, key, value, partition (None: the partitioner's), headers."""


class Appender:
    """Sends records through one started ``AIOKafkaProducer`` (transactional or not)."""

    MAX_HASHES = 1 << 16
    """Keys whose hash is kept; the cache starts afresh when full."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self._seen_map: Any = None
        self._topics: dict[str, tuple[list[int], list[int]]] = {}
        self._hashes: dict[bytes, int] = {}
        self._default_partitioner = isinstance(producer._partitioner, DefaultPartitioner)
        self._timeout = producer._request_timeout_ms / 1000
        txn_manager = producer._txn_manager
        self._transaction = (
            txn_manager if txn_manager is not None and txn_manager.transactional_id else None
        )

    def partition_for(self, topic: str, key: bytes | None) -> int | None:
        """The partition ``send`` would choose for ``key`` (None: no metadata yet)."""
        return self._target(topic, key, None)

    def _target(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        """``partition``, else the one ``send`` would choose for ``key``; None when the
        client has no metadata for ``topic`` yet (``send`` itself must fetch it)."""
        lists = self._partition_lists(topic)
        if lists is None:
            return None
        if partition is not None:
            return partition
        every, available = lists
        if key is None or not self._default_partitioner:
            return self.producer._partitioner(key, every, available)
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= self.MAX_HASHES:
                self._hashes = {}
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return every[hashed % len(every)]

    def _partition_lists(self, topic: str) -> tuple[list[int], list[int]] | None:
        """``topic``'s partitions, all and available, as ``send`` lists them."""
        cluster = self.producer.client.cluster
        if cluster._partitions is not self._seen_map:
            self._seen_map = cluster._partitions
            self._topics = {}
        lists = self._topics.get(topic)
        if lists is None:
            every = cluster.partitions_for_topic(topic)
            if every is None:
                return None
            available = cluster.available_partitions_for_topic(topic)
            lists = self._topics[topic] = (list(every), list(available))
        return lists

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes]] | None,
    ) -> asyncio.Future[Any]:
        """What ``AIOKafkaProducer.send`` returns: the record's delivery future."""
        producer = self.producer
        chosen = self._target(topic, key, partition)
        if chosen is None:
            return await producer.send(topic, value, key=key, partition=partition, headers=headers)
        headers = headers or []
        key, value = producer._serialize(key, value, headers)
        self._check_transaction()
        return await producer._message_accumulator.add_message(
            TopicPartition(topic, chosen), key, value, self._timeout, headers=headers
        )

    def _check_transaction(self) -> None:
        """A transactional producer sends only in an open transaction (as ``send``)."""
        transaction = self._transaction
        if transaction is not None and not transaction.is_in_transaction():
            raise IllegalOperation("Can't send messages while not in transaction")

    async def send_many(self, records: Sequence[Record]) -> list[asyncio.Future[Any]]:
        """Send ``records`` as one aiokafka batch per topic partition (more where one
        fills up), in their order within each partition: one delivery future per batch
        (each record sent alone costs a future made and resolved on the event loop).
        Records of a topic without metadata yet go one by one through ``send``."""
        producer = self.producer
        futures: list[asyncio.Future[Any]] = []
        groups: dict[tuple[str, int], list[Record]] = {}
        for record in records:
            topic, key, value, partition, headers = record
            chosen = self._target(topic, key, partition)
            if chosen is None:
                futures.append(
                    await producer.send(topic, value, key=key, partition=partition, headers=headers)
                )
                continue
            group = groups.get((topic, chosen))
            if group is None:
                groups[(topic, chosen)] = [record]
            else:
                group.append(record)
        for (topic, partition), group in groups.items():
            self._check_transaction()
            builder = producer.create_batch()
            for _, key, value, _, headers in group:
                headers = headers or []
                producer._serialize(key, value, headers)  # send's size check
                if builder.append(timestamp=None, key=key, value=value, headers=headers) is None:
                    futures.append(await producer.send_batch(builder, topic, partition=partition))
                    builder = producer.create_batch()
                    builder.append(timestamp=None, key=key, value=value, headers=headers)
            futures.append(await producer.send_batch(builder, topic, partition=partition))
        return futures
