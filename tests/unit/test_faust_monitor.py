"""The cached Faust monitor exports the same series as Faust's own, and drops its
cache when Faust clears the topic series on a rebalance."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from faust.types import TP
from prometheus_client import CollectorRegistry

from scorer.settings import Settings
from scorer.stream.app import create_app
from scorer.stream.faust_edge.consumer import OpenGate
from scorer.stream.faust_edge.monitor import CachedPrometheusMonitor
from scorer.stream.faust_edge.transactions import Transactions


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def monitor_of(tmp_path) -> tuple[CachedPrometheusMonitor, CollectorRegistry]:
    scorer = create_app(Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", datadir=tmp_path))
    assert isinstance(scorer.app.monitor, CachedPrometheusMonitor)
    return scorer.app.monitor, scorer.telemetry.registry


def test_messages_sends_and_table_operations_are_counted_per_label(tmp_path) -> None:
    monitor, registry = monitor_of(tmp_path)
    tp = TP("results", 2)
    for offset in (7, 8, 9):
        monitor.on_message_in(tp, offset, SimpleNamespace())
    monitor.on_message_in(TP("qrels", 0), 4, SimpleNamespace())
    table = SimpleNamespace(name="qrels")
    monitor.on_table_get(table, "q1")
    monitor.on_table_get(table, "q2")
    monitor.on_table_set(table, "q1", {})
    monitor.on_send_initiated(None, "scored", None, 1, 2)
    prefix = "retrieval_scorer"
    assert sample(registry, f"{prefix}_messages_received_total") == 4
    assert sample(registry, f"{prefix}_messages_received_per_topic_total", topic="results") == 3
    assert (
        sample(
            registry, f"{prefix}_messages_received_per_topics_partition", topic="results",
            partition="2",
        )
        == 9
    )  # fmt: skip
    assert (
        sample(
            registry, f"{prefix}_table_operations_total", table="table.qrels",
            operation="keys_retrieved",
        )
        == 2
    )  # fmt: skip
    assert sample(registry, f"{prefix}_topic_messages_sent_total", topic="topic.scored") == 1


def test_a_rebalance_clears_the_series_and_the_cache(tmp_path) -> None:
    monitor, registry = monitor_of(tmp_path)
    name = "retrieval_scorer_messages_received_per_topic_total"
    monitor.on_message_in(TP("results", 0), 1, SimpleNamespace())
    assert sample(registry, name, topic="results") == 1
    monitor._clear_partition_related_metrics()
    assert sample(registry, name, topic="results") is None
    monitor.on_message_in(TP("results", 0), 2, SimpleNamespace())
    assert sample(registry, name, topic="results") == 1


def test_the_monitor_keeps_its_service_children(tmp_path) -> None:
    """The label cache must not shadow mode.Service's own ``_children`` list: the
    worker stops a service's children at shutdown."""
    monitor, _ = monitor_of(tmp_path)
    monitor.on_message_in(TP("results", 0), 1, SimpleNamespace())
    assert isinstance(monitor._children, list)
    assert all(hasattr(child, "stop") for child in monitor._children)


def test_a_batch_handlers_table_operations_are_counted_when_reported(tmp_path) -> None:
    """The batch path reads and writes a table's store directly (ChangelogWriter), and
    reports the counts to Faust's table-operation series after each batch."""
    scorer = create_app(Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", datadir=tmp_path))
    monitor, registry = scorer.app.monitor, scorer.telemetry.registry
    writer = scorer.parts.edge.writer(scorer.parts.parked_table)
    outputs: list = []
    assert writer.get("q1") is None
    writer.set("q1", [["r1", 0.0, "{}", 0]], 3, outputs)
    assert writer.get("q1") == [["r1", 0.0, "{}", 0]]
    writer.delete("q1", 3, outputs)
    writer.delete("q1", 3, outputs)  # absent now: no tombstone, not counted

    def operations() -> dict[str, float | None]:
        return {
            operation: sample(
                registry, "retrieval_scorer_table_operations_total",
                table="table.parked", operation=operation,
            )
            for operation in ("keys_retrieved", "keys_updated", "keys_deleted")
        }  # fmt: skip

    assert operations() == dict.fromkeys(("keys_retrieved", "keys_updated", "keys_deleted"))
    writer.report(monitor)
    counted = {"keys_retrieved": 2.0, "keys_updated": 1.0, "keys_deleted": 1.0}
    assert operations() == counted
    writer.report(monitor)
    assert operations() == counted
    changelog = scorer.parts.parked_table.changelog_topic.get_topic_name()
    # The table's keys are JSON too.
    assert [(o.topic, o.partition, o.key) for o in outputs] == [(changelog, 3, b'"q1"')] * 2
    # What Faust's recovery reads back: the JSON of the value, then a tombstone.
    assert orjson.loads(outputs[0].value) == [["r1", 0.0, "{}", 0]]
    assert outputs[1].value is None
    # A memory store keeps no changelog offsets: nothing to do when a record is sent.
    assert [output.on_sent for output in outputs] == [None, None]


def test_under_exactly_once_the_workers_consumer_joins_the_transactions(tmp_path) -> None:
    """Faust caches ``app.in_transaction`` on first use, False until the app runs in a
    worker: nothing built with the app may read it earlier (a read at build time once
    left a worker without transactions, and a SIGKILL then made duplicates)."""
    for guarantee, seconds in (
        ("exactly_once", 0.02),
        ("exactly_once", 0),
        ("at_least_once", 0.02),
    ):
        scorer = create_app(
            Settings(
                KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",
                datadir=tmp_path / f"{guarantee}-{seconds}",
                processing_guarantee=guarantee,
                caught_up_commit_seconds=seconds,
            )
        )
        scorer.app.in_worker = True  # what `faust worker` sets before it starts the app
        consumer = scorer.app.consumer
        if guarantee == "exactly_once":
            assert scorer.app.in_transaction
            assert isinstance(consumer.gate, Transactions)
            assert consumer.caught_up_commit_seconds == (seconds or None)
            # The lag the settings give (500) counts only when caught-up commits are on.
            assert consumer.caught_up_lag == (500 if seconds else 0)
            assert consumer._commit_every is None  # the commit timer alone
        else:
            assert not scorer.app.in_transaction
            assert isinstance(consumer.gate, OpenGate)
            assert consumer.caught_up_commit_seconds is None
            assert consumer.caught_up_lag == 0
            assert consumer._commit_every == 10_000  # Faust's count
