"""The scorer's topics, created idempotently with aiokafka's admin client.

Brokers run with ``auto.create.topics.enable=false``: the project creates its
own topics so that the results and qrels topics are co-partitioned (same
partition count, same key) and the qrels topic is compacted. A run of
``ensure_topics`` creates what is missing, leaves what exists alone, and
reports what it found; ``describe_topics`` reports partitions, cleanup policy,
end offsets and the worker group's lag; ``missing_topics`` says which of some
topics do not exist (the worker's readiness).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from scorer.kafka.probe import probe_broker
from scorer.settings import Settings

TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3
COMPACT = {"cleanup.policy": "compact"}


class TopicMismatchError(RuntimeError):
    """An existing topic breaks the join's contract (partitions or cleanup policy)."""


@dataclass(frozen=True)
class TopicState:
    """A topic as found on (or just created in) the cluster.

    ``config`` holds the values, on the cluster, of the settings the scorer
    asks for (``cleanup.policy`` for every topic).
    """

    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    created: bool = False


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's end offset and the offset a consumer group committed on it."""

    partition: int
    end: int
    """The high watermark: the offset the next record written will get."""
    committed: int | None
    """The group's committed offset (the next record it will read); None: none committed."""
    unread: int | None = None
    """Records a read_committed consumer still gets from ``committed`` on, transaction
    markers (and aborted records) left out (:func:`_unread_records`); None: not
    counted, the lag is then ``end - committed``."""

    @property
    def lag(self) -> int | None:
        """Records the group has yet to read here; None when it committed nothing.

        A transaction's commit marker takes an offset no consumer ever gets: a group
        caught up on a transactional producer's records has ``end - committed`` 1
        (more with several producers), but a lag of 0."""
        if self.committed is None:
            return None
        if self.unread is not None:
            return self.unread
        return max(0, self.end - self.committed)


@dataclass(frozen=True)
class TopicReport:
    """A topic as ``scorer topics list`` and ``describe`` show it.

    A topic that does not exist has ``exists`` False, no partitions and an
    empty ``cleanup_policy``.
    """

    name: str
    exists: bool
    cleanup_policy: str
    partitions: list[PartitionOffsets] = field(default_factory=list)

    @property
    def end(self) -> int:
        """The sum of the partitions' end offsets (records ever written, compacted or not)."""
        return sum(offsets.end for offsets in self.partitions)

    @property
    def lag(self) -> int | None:
        """The group's lag summed over the partitions it committed on; None if none."""
        lags = [offsets.lag for offsets in self.partitions if offsets.lag is not None]
        return sum(lags) if lags else None


def wanted_topics(settings: Settings) -> list[NewTopic]:
    """The scorer's topics as they should be: qrels compacted, all with ``settings.partitions``."""

    def topic(name: str, config: dict[str, str] | None = None) -> NewTopic:
        return NewTopic(
            name,
            num_partitions=settings.partitions,
            replication_factor=settings.replication_factor,
            topic_configs=dict(config or {}),
        )

    return [
        topic(settings.results_topic),
        topic(settings.qrels_topic, COMPACT),
        topic(settings.scored_topic),
        topic(settings.deadletter_topic),
        topic(settings.rollup_topic),
    ]


def ensure_topics(settings: Settings) -> list[TopicState]:
    """Create the missing scorer topics and describe all of them (blocking).

    Raises ``TopicMismatchError`` when the results and qrels topics differ in
    partition count from each other or from ``settings.partitions``, or the
    qrels topic is not compacted; other topics whose partition count differs
    are reported as found (the caller may warn). An unreachable broker or a
    refused login raises ``BrokerUnavailable``; other broker errors propagate
    as aiokafka's ``KafkaError``.
    """
    return asyncio.run(ensure_topics_async(settings))


async def ensure_topics_async(settings: Settings) -> list[TopicState]:
    """``ensure_topics`` for callers that already run an event loop."""
    wanted = wanted_topics(settings)
    await probe_broker(settings.aiokafka_options())
    admin = AIOKafkaAdminClient(client_id=f"{settings.app_id}-admin", **settings.aiokafka_options())
    await admin.start()
    try:
        existing = await _partition_counts(admin, [topic.name for topic in wanted])
        missing = [topic for topic in wanted if topic.name not in existing]
        created: set[str] = set()
        if missing:
            created = await _create(admin, missing)
            existing = await _wait_for_metadata(admin, [topic.name for topic in wanted])
        configs = await _cleanup_policies(admin, [topic.name for topic in wanted])
    finally:
        await admin.close()
    states = [
        TopicState(
            topic.name,
            existing[topic.name],
            {"cleanup.policy": configs[topic.name]},
            created=topic.name in created,
        )
        for topic in wanted
    ]
    _check_join_contract(settings, states)
    return states


def create_missing_topics(settings: Settings, wanted: list[NewTopic]) -> list[str]:
    """Create the topics of ``wanted`` that do not exist, wait until the cluster's
    metadata shows them, and return the names created (blocking).

    The worker creates its internal topics (changelogs, the parking timer) this way
    before Faust starts: Faust creates them itself, but its consumer's first
    metadata request can come before the broker shows a topic just created, and
    aiokafka then logs an ERROR (``Topic ... not found in cluster metadata``) at every
    first start. Another creator winning the race is fine; other errors propagate."""
    return asyncio.run(_create_missing(settings, wanted))


async def _create_missing(settings: Settings, wanted: list[NewTopic]) -> list[str]:
    if not wanted:
        return []
    admin = AIOKafkaAdminClient(client_id=f"{settings.app_id}-admin", **settings.aiokafka_options())
    await admin.start()
    try:
        names = [topic.name for topic in wanted]
        existing = await _partition_counts(admin, names)
        missing = [topic for topic in wanted if topic.name not in existing]
        created: set[str] = set()
        if missing:
            created = await _create(admin, missing)
            await _wait_for_metadata(admin, names)
    finally:
        await admin.close()
    return sorted(created)


async def _create(admin: AIOKafkaAdminClient, missing: list[NewTopic]) -> set[str]:
    """Create ``missing``; the names created. A topic another creator made first (a lost
    race) is fine; any other error propagates."""
    created: set[str] = set()
    response = await admin.create_topics(missing)
    for error in response.to_object()["topic_errors"]:
        code = error["error_code"]
        if code == 0:
            created.add(error["topic"])
        elif code != TOPIC_ALREADY_EXISTS:
            raise for_code(code)(f"creating {error['topic']}: {error['error_message']}")
    return created


def _check_join_contract(settings: Settings, states: list[TopicState]) -> None:
    by_name = {state.name: state for state in states}
    results, qrels = by_name[settings.results_topic], by_name[settings.qrels_topic]
    if results.partitions != qrels.partitions or results.partitions != settings.partitions:
        raise TopicMismatchError(
            f"topics {results.name} ({results.partitions} partitions) and {qrels.name} "
            f"({qrels.partitions}) must both have SCORER_PARTITIONS={settings.partitions}: "
            "set SCORER_PARTITIONS to match, or delete and recreate the topics"
        )
    if "compact" not in qrels.config["cleanup.policy"].split(","):
        raise TopicMismatchError(
            f"topic {qrels.name} has cleanup.policy={qrels.config['cleanup.policy']}, "
            "but the golden set needs compact: alter its config or recreate it"
        )


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Partition count of each topic in ``names`` that exists."""
    counts: dict[str, int] = {}
    for topic in await admin.describe_topics(names):
        if topic["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
            continue
        if topic["error_code"] != 0:
            raise for_code(topic["error_code"])(f"describing topic {topic['topic']}")
        counts[topic["topic"]] = len(topic["partitions"])
    return counts


async def _wait_for_metadata(
    admin: AIOKafkaAdminClient, names: list[str], timeout: float = 10.0
) -> dict[str, int]:
    """Partition counts once every topic in ``names`` shows in the metadata (just created)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        counts = await _partition_counts(admin, names)
        if len(counts) == len(names) or loop.time() > deadline:
            missing = sorted(set(names) - set(counts))
            if missing:
                raise TopicMismatchError(f"topics {missing} were created but never showed up")
            return counts
        await asyncio.sleep(0.1)


async def _cleanup_policies(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, str]:
    """The effective ``cleanup.policy`` of each topic in ``names``."""
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, {"cleanup.policy": None}) for name in names
    ]
    policies: dict[str, str] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            if resource["error_code"] != 0:
                raise for_code(resource["error_code"])(
                    f"describing configs of topic {resource['resource_name']}: "
                    f"{resource['error_message']}"
                )
            for entry in resource["config_entries"]:
                policies[resource["resource_name"]] = entry["config_value"]
    return policies


async def partition_counts(options: Mapping[str, object], names: list[str]) -> dict[str, int]:
    """The partition count of each topic of ``names`` that exists on the cluster."""
    admin = AIOKafkaAdminClient(**options)
    await admin.start()
    try:
        return await _partition_counts(admin, names)
    finally:
        await admin.close()


async def missing_topics(options: Mapping[str, object], names: list[str]) -> list[str]:
    """The topics of ``names`` that do not exist on the cluster, in the order given.

    ``options`` are aiokafka client keyword arguments (``Settings.aiokafka_options()``).
    Broker errors propagate as aiokafka's ``KafkaError``.
    """
    existing = await partition_counts(options, names)
    return [name for name in names if name not in existing]


def describe_topics(
    settings: Settings, names: list[str] | None = None, group: str | None = None
) -> list[TopicReport]:
    """Partitions, cleanup policy, end offsets and ``group``'s lag of each topic (blocking).

    ``names`` defaults to the scorer's topics followed by the worker's own
    internal topics (changelogs and the like: names starting with
    ``{app_id}-``); ``group`` defaults to the worker's consumer group (the app
    id). Topics that do not exist are reported with ``exists`` False. An
    unreachable broker raises ``BrokerUnavailable``; other broker errors
    propagate as aiokafka's ``KafkaError``.
    """
    return asyncio.run(_describe_topics(settings, names, group or settings.app_id))


async def _describe_topics(
    settings: Settings, names: list[str] | None, group: str
) -> list[TopicReport]:
    options = settings.aiokafka_options()
    await probe_broker(options)
    admin = AIOKafkaAdminClient(client_id=f"{settings.app_id}-admin", **options)
    await admin.start()
    try:
        if names is None:
            internal = sorted(
                name for name in await admin.list_topics() if name.startswith(f"{settings.app_id}-")
            )
            names = [topic.name for topic in wanted_topics(settings)] + internal
        counts = await _partition_counts(admin, names)
        present = [name for name in names if name in counts]
        policies = await _cleanup_policies(admin, present) if present else {}
        committed = {
            (tp.topic, tp.partition): meta.offset
            for tp, meta in (await admin.list_consumer_group_offsets(group)).items()
            if meta.offset >= 0
        }
    finally:
        await admin.close()
    partitions = [TopicPartition(name, p) for name in present for p in range(counts[name])]
    ends = await _end_offsets(options, partitions) if partitions else {}
    behind = {
        tp: committed[(tp.topic, tp.partition)]
        for tp in partitions
        if (tp.topic, tp.partition) in committed and committed[(tp.topic, tp.partition)] < ends[tp]
    }
    unread = await _unread_records(options, behind) if behind else {}
    return [
        TopicReport(
            name,
            exists=name in counts,
            cleanup_policy=policies.get(name, ""),
            partitions=[
                PartitionOffsets(
                    p,
                    ends[TopicPartition(name, p)],
                    committed.get((name, p)),
                    unread.get(TopicPartition(name, p)),
                )
                for p in range(counts.get(name, 0))
            ],
        )
        for name in names
    ]


async def _end_offsets(
    options: Mapping[str, object], partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """The high watermark of each partition, read by a consumer that joins no group."""
    consumer = AIOKafkaConsumer(**options, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(partitions))
    finally:
        await consumer.stop()


EXACT_SPAN = 1000
"""Offsets past the committed one read to count the unread records exactly; a larger
backlog is counted from its first readable record to its last."""

TAIL_SPAN = 64
"""Offsets below the last stable offset read first to find the last readable record
(more, eight times as many each time, while none is found)."""


async def _unread_records(
    options: Mapping[str, object], committed: Mapping[TopicPartition, int], timeout: float = 10.0
) -> dict[TopicPartition, int]:
    """Per partition of ``committed`` (a group's committed offsets), the records a
    read_committed consumer still gets from there: transaction markers and aborted
    records take offsets but are never delivered, so the end offset overstates it.

    A backlog of at most :data:`EXACT_SPAN` offsets below the last stable offset is
    read and counted; a larger one is the span from its first readable record to
    the offset after its last (found reading back from the last stable offset), the
    markers inside it counted. A partition not read within ``timeout`` seconds is
    left out (its lag is then ``end - committed``)."""
    consumer = AIOKafkaConsumer(
        **options,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        stable = await consumer.end_offsets(list(committed))
        deadline = asyncio.get_running_loop().time() + timeout
        unread = {tp: 0 for tp in committed if committed[tp] >= stable[tp]}
        behind = {tp: committed[tp] for tp in committed if tp not in unread}
        head = await _read_span(
            consumer,
            {tp: (start, min(stable[tp], start + EXACT_SPAN)) for tp, start in behind.items()},
            deadline,
        )
        large: dict[TopicPartition, int] = {}
        for tp, start in behind.items():
            if tp not in head:
                continue
            count, first, _ = head[tp]
            if stable[tp] <= start + EXACT_SPAN:
                unread[tp] = count
            else:
                large[tp] = start if first is None else first
        span = TAIL_SPAN
        stops = {tp: stable[tp] for tp in large}
        while large:
            starts = {tp: max(first, stops[tp] - span) for tp, first in large.items()}
            tail = await _read_span(
                consumer, {tp: (starts[tp], stops[tp]) for tp in large}, deadline
            )
            still: dict[TopicPartition, int] = {}
            for tp, first in large.items():
                if tp not in tail:
                    continue
                last = tail[tp][2]
                if last is not None:
                    unread[tp] = last + 1 - first
                elif starts[tp] <= first:
                    unread[tp] = 0
                else:
                    still[tp] = first
                    stops[tp] = starts[tp]
            large = still
            span *= 8
        return unread
    finally:
        await consumer.stop()


async def _read_span(
    consumer: AIOKafkaConsumer,
    spans: Mapping[TopicPartition, tuple[int, int]],
    deadline: float,
) -> dict[TopicPartition, tuple[int, int | None, int | None]]:
    """``(count, first offset, last offset)`` of the records ``consumer`` gets in each
    partition's span ``[start, stop)``; partitions whose position does not reach
    ``stop`` by ``deadline`` (the loop's clock) are left out. Markers are skipped by
    the consumer, but its position moves past them."""
    if not spans:
        return {}
    consumer.assign(list(spans))
    for tp, (start, _) in spans.items():
        consumer.seek(tp, start)
    found: dict[TopicPartition, list[int | None]] = {tp: [0, None, None] for tp in spans}
    waiting = set(spans)
    loop = asyncio.get_running_loop()
    while waiting and loop.time() < deadline:
        for tp in list(waiting):
            if await consumer.position(tp) >= spans[tp][1]:
                waiting.discard(tp)
        if not waiting:
            break
        fetched = await consumer.getmany(*waiting, timeout_ms=200)
        for tp, records in fetched.items():
            stop = spans[tp][1]
            state = found[tp]
            for record in records:
                if record.offset < stop:
                    state[0] = int(state[0] or 0) + 1
                    state[1] = record.offset if state[1] is None else state[1]
                    state[2] = record.offset
    return {
        tp: (int(count or 0), first, last)
        for tp, (count, first, last) in found.items()
        if tp not in waiting
    }
