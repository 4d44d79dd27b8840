"""The worker's hold on Faust and aiokafka, behind ``install``.

The rest of the worker talks to Faust through its public API (``faust.App``,
topics, tables, agents, web views). What Faust 0.15.3 gets wrong for this
worker, and the batch path of the results topic, live here, installed through
Faust's class hook for the consumer (``Transport.Consumer``). Nearly every
private name of faust, mode and aiokafka the project uses is here; each one,
and each attribute replaced at runtime, is listed with why in
docs/faust-internals.md, and tests/unit/test_private_names.py fails when the
code and that list differ.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge

from scorer.stream.faust_edge.consumer import (
    BatchHandler,
    GuardedConsumer,
    GuardedConsumerThread,
    OpenGate,
    Output,
)
from scorer.stream.faust_edge.ledger import InputLedger, LedgerCollector
from scorer.stream.faust_edge.monitor import setup_faust_metrics
from scorer.stream.faust_edge.recovery import Recovery, RecoveryCollector
from scorer.stream.faust_edge.resume import hold_inputs_until_seeked
from scorer.stream.faust_edge.stopping import GracefulStop, install_graceful_stop
from scorer.stream.faust_edge.tables import ChangelogWriter
from scorer.stream.faust_edge.transactions import Transactions
from scorer.stream.faust_edge.versions import check_versions

if TYPE_CHECKING:
    from scorer.settings import Settings

__all__ = [
    "ChangelogWriter",
    "Edge",
    "EdgeConfig",
    "Output",
    "Recovery",
    "check_versions",
    "install",
]


class Edge:
    """The worker's hold on Faust: its consumer class, transactions and input ledger."""

    def __init__(
        self,
        app: Any,
        consumer_class: type[GuardedConsumer],
        recovery: Recovery,
        stop: GracefulStop,
    ) -> None:
        self.app = app
        self.stop = stop
        self.consumer_class = consumer_class
        self.ledger: InputLedger = consumer_class.ledger
        self.recovery = recovery
        self.transactions = Transactions(app, recovery)
        self._writers: list[ChangelogWriter] = []

    def route(self, topic: Any, handler: BatchHandler, background: bool = False) -> None:
        """Deliver ``topic``'s records to ``handler`` a fetched batch at a time (instead
        of an agent). The topic is subscribed and co-partitioned as an agent's is. A
        ``background`` topic's batches come after the others' in each pass, and its
        outputs do not hold back commits once caught up (no reader waits for them)."""
        self.app.topics.add(topic)
        writers = self._writers
        app = self.app

        def counted(tp: Any, records: list[Any]) -> list[Output]:
            try:
                return handler(tp, records)
            finally:
                monitor = app.monitor
                for writer in writers:
                    writer.report(monitor)

        name = topic.get_topic_name()
        self.consumer_class.batch_handlers[name] = counted
        if background:
            self.consumer_class.background_topics.add(name)

    def writer(self, table: Any) -> ChangelogWriter:
        """Reads and writes ``table`` from a batch handler, its writes as outputs of the
        batch; the operations are reported to Faust's monitor after every batch."""
        writer = ChangelogWriter(self.app, table, self.recovery.exactly_once)
        self._writers.append(writer)
        return writer

    def owned_partitions(self, topic: str) -> set[int]:
        """The partitions of ``topic`` this worker owns now: its active assignment, not
        the standby copies its tables also hold."""
        return {tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == topic}

    def before_commit(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run ``hook`` at the start of every offset commit, between two batches."""
        self.consumer_class.before_commit.append(hook)

    async def send(self, output: Output, source: Any) -> None:
        """Send an agent's output in the transaction of its input partition ``source``
        (a topic and partition) under exactly_once: the batch path's send
        (``GuardedConsumer.send_outputs``)."""
        await self.app.consumer.send_outputs(source, [output])

    async def send_all(self, outputs: list[Output]) -> None:
        """Send ``outputs`` (each with its ``source``) in one call: they reach each
        partition in their order, before any output sent after this call began."""
        if outputs:
            await self.app.consumer.send_outputs(outputs[0].source, outputs)

    async def delivered(self) -> bool:
        """Every output sent so far is on the broker (``GuardedConsumer.delivered``)."""
        return await self.app.consumer.delivered()

    def events(self, stream: Any) -> Any:
        """An agent's events, one at a time between commits (``Transactions.events``)."""
        return self.transactions.events(stream)


@dataclass(frozen=True)
class EdgeConfig:
    """Everything the Faust edge is told, in one object (``from_settings``)."""

    exactly_once: bool
    """The processing guarantee: every part of the edge reads it from here (through
    ``Recovery.exactly_once``), not from Faust's ``app.in_transaction``, which is
    cached on its first read and False until the app runs in a worker."""
    fetch_max_wait_ms: int
    """How long a fetch waits at the broker for records (aiokafka's
    ``fetch_max_wait_ms``; see docs/faust-internals.md for Faust's hidden waits)."""
    stop_timeout_seconds: float
    """The longest a stop takes before the worker exits anyway."""
    metrics_prefix: str = "retrieval_scorer"
    """Faust's own series' prefix (fixed: the rules and dashboards name them)."""
    caught_up_commit_seconds: float = 0.0
    """Under exactly_once, a worker that has caught up commits its batches at once, at
    most this often (0: only on Faust's timer)."""
    batch_max_records: int | None = None
    """A routed topic's fetched batches are handed over in parts of at most this many
    records (None: whole), but the background topics'."""

    @classmethod
    def from_settings(cls, settings: Settings) -> EdgeConfig:
        return cls(
            exactly_once=settings.processing_guarantee == "exactly_once",
            fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
            stop_timeout_seconds=settings.stop_timeout_seconds,
            caught_up_commit_seconds=settings.caught_up_commit_seconds,
            batch_max_records=settings.batch_max_records,
        )


def install(
    app: Any, registry: CollectorRegistry, config: EdgeConfig, recovery: Recovery | None = None
) -> Edge:
    """Make ``app``'s consumer the guarded one (before anything creates it), its monitor
    the cached Prometheus one (Faust's series and the input ledger's go to
    ``registry``), and its stop a graceful one, as ``config`` says. A recoverable
    producer error is reported to ``recovery`` (one of its own when None), which the
    worker command reads to rebuild the app in-process (``faust_edge.recovery``)."""
    recovery = recovery or Recovery()
    recovery.exactly_once = config.exactly_once
    setup_faust_metrics(app, registry=registry, name_prefix=config.metrics_prefix)
    stop = install_graceful_stop(app, config.stop_timeout_seconds, recovery)
    ledger = InputLedger()
    undecodable: dict[Any, str] = {}
    thread = type(
        "GuardedConsumerThread",
        (GuardedConsumerThread,),
        {"fetch_max_wait_ms": config.fetch_max_wait_ms, "undecodable": undecodable},
    )
    Gauge(
        "scorer_input_partitions_undecodable",
        "Input partitions stopped on a record batch that cannot be decoded (its codec's "
        "library missing, or corrupt); the worker log names each.",
        registry=registry,
    ).set_function(lambda: len(undecodable))
    consumer_class = type(
        "GuardedConsumer",
        (GuardedConsumer,),
        {
            "Thread": thread,
            "ledger": ledger,
            "batch_handlers": {},
            "background_topics": set(),
            "before_commit": [],
            "batch_max_records": config.batch_max_records,
            "recovery": recovery,
        },
    )
    app.transport.Consumer = consumer_class
    registry.register(LedgerCollector(ledger))
    registry.register(RecoveryCollector(recovery))
    edge = Edge(app, consumer_class, recovery, stop)
    new_consumer = app._new_consumer

    def new_guarded_consumer() -> Any:
        """Faust's consumer (now a GuardedConsumer), with the fixes that must be in
        place before its first rebalance."""
        consumer = hold_inputs_until_seeked(new_consumer()).consumer
        # Faust runs transactions only in a worker (``app.in_transaction``, read here
        # and nowhere else: it is cached on its first read).
        if bool(app.in_transaction) != config.exactly_once:
            raise RuntimeError(
                f"the edge is configured for exactly_once={config.exactly_once}, but "
                f"Faust's app.in_transaction is {app.in_transaction} (a consumer made "
                "outside a worker?)"
            )
        if config.exactly_once:
            consumer.gate = edge.transactions
            consumer.stop_barrier = stop
            edge.transactions.guard_rebalances(consumer)
            if config.caught_up_commit_seconds > 0:
                consumer.caught_up_commit_seconds = config.caught_up_commit_seconds
        else:
            consumer.gate = OpenGate()
        return consumer

    app._new_consumer = new_guarded_consumer
    return edge
