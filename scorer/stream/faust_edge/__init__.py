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
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from scorer.stream.faust_edge.consumer import BatchHandler, GuardedConsumer, Output
from scorer.stream.faust_edge.ledger import InputLedger, LedgerCollector
from scorer.stream.faust_edge.monitor import setup_faust_metrics
from scorer.stream.faust_edge.recovery import Recovery, RecoveryCollector
from scorer.stream.faust_edge.stopping import GracefulStop, install_graceful_stop
from scorer.stream.faust_edge.tables import ChangelogWriter
from scorer.stream.faust_edge.transactions import Transactions
from scorer.stream.faust_edge.versions import check_versions
from scorer.stream.faust_edge.wiring import EdgeConfig, attach

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
    """The worker's hold on Faust: what its guarded consumer is given (the config, the
    batch handlers, the input ledger, the transactions, the stop), filed under the
    app for the consumer to read when Faust builds it (``faust_edge.wiring``)."""

    def __init__(
        self, app: Any, config: EdgeConfig, recovery: Recovery, stop: GracefulStop
    ) -> None:
        self.app = app
        self.config = config
        self.stop = stop
        self.recovery = recovery
        self.ledger = InputLedger()
        self.transactions = Transactions(app, recovery)
        self.batch_handlers: dict[str, BatchHandler] = {}
        """Topic name -> the handler of its fetched batches (:meth:`route`)."""
        self.background_topics: set[str] = set()
        """Batch topics whose outputs no reader waits for (``route(background=True)``):
        handed over after the others in each pass, and left out of the caught-up check."""
        self.before_commits: list[Callable[[], Awaitable[None]]] = []
        """Run at the start of every commit, between two batches or events."""
        self.undecodable: dict[Any, str] = {}
        """The input partitions stopped on a batch that cannot be decoded, with why."""
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
        self.batch_handlers[name] = counted
        if background:
            self.background_topics.add(name)

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
        self.before_commits.append(hook)

    async def send(self, output: Output, source: Any) -> None:
        """Send an agent's output in the transaction of its input partition ``source``
        (a topic and partition) under exactly_once: the batch path's send
        (``GuardedConsumer.send_outputs``)."""
        await self.app.consumer.send_outputs(source, [output])

    async def send_command(self, output: Output) -> None:
        """Send a command of the worker to itself outside every transaction
        (``GuardedConsumer.send_command``): its handler must be idempotent."""
        await self.app.consumer.send_command(output)

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
    edge = Edge(app, config, recovery, stop)
    attach(app, edge)
    # Faust's class hook: the consumer it builds is ours, and reads the edge itself.
    app.transport.Consumer = GuardedConsumer
    undecodable = edge.undecodable
    Gauge(
        "scorer_input_partitions_undecodable",
        "Input partitions stopped on a record batch that cannot be decoded (its codec's "
        "library missing, or corrupt); the worker log names each.",
        registry=registry,
    ).set_function(lambda: len(undecodable))
    registry.register(LedgerCollector(edge.ledger))
    registry.register(RecoveryCollector(recovery))
    return edge
