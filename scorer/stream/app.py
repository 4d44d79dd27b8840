"""The Faust app: topics, tables, agents and timers of the streaming scorer.

Thin by design: each agent decodes, joins, calls ``scorer.stream.core`` and
emits. Every result ends in exactly one place (scored, parked, unjudged, dead
letter) and is counted there (``scorer.stream.telemetry``).

State, all in changelog-backed tables keyed by queryId and co-partitioned with
the results and qrels topics:

- ``qrels``: the table entry of each golden query (``core.golden_entry``);
- ``parked``: results that arrived before their qrels, ``[resultId, parkedAt,
  raw JSON, partition]`` items. Parking TTLs are enforced by a timer that
  cannot write tables outside a stream, so it sends an expiry command to an
  internal topic, on the query's own partition, and an agent there moves the
  expired items to unjudged.

Run rollups: what each scored result adds to its run (with the position of
the input that produced it) is sent to the rollup topic keyed by run id, many
to a record: contributions wait in ``runs.PendingRollups`` until
``rollup_batch_size`` of them or ``rollup_batch_seconds`` have passed, and
every offset commit sends them first. An agent there folds them into the
``rollups`` table (keyed by run id, raw keys so that the web router finds a
run's owner), the bounded ``run_queries`` table and the ``rollup_seen`` table
(``scorer.stream.runs``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import faust

from scorer.settings import Settings
from scorer.stream import core, runs
from scorer.stream.faust_metrics import setup_faust_metrics
from scorer.stream.resume import hold_inputs_until_seeked
from scorer.stream.stopping import install_graceful_stop
from scorer.stream.telemetry import Telemetry
from scorer.stream.transactions import Transactions
from scorer.stream.web import register_views

RAW = {"key_serializer": "raw", "value_serializer": "raw"}


def broker_credentials(settings: Settings) -> Any:
    """Faust credentials for the configured security protocol (None for plaintext)."""
    protocol = settings.kafka_security_protocol
    ssl_context = settings.aiokafka_options().get("ssl_context")
    if protocol.startswith("SASL"):
        assert settings.kafka_sasl_password is not None
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password.get_secret_value(),
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=ssl_context,
        )
    if protocol == "SSL":
        return faust.SSLCredentials(ssl_context)
    return None


@dataclass
class Scorer:
    """The app and its parts, for the CLI and the tests to reach."""

    app: faust.App
    settings: Settings
    telemetry: Telemetry
    qrels_table: Any
    parked_table: Any
    rollup_table: Any
    run_queries_table: Any


def create_app(settings: Settings) -> Scorer:
    """Build the streaming scorer for ``settings`` (nothing connects until it runs)."""
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{host}" for host in settings.bootstrap_servers.split(",")],
        broker_credentials=broker_credentials(settings),
        store=settings.store,
        datadir=str(settings.data_dir),
        web_bind=settings.web_host,
        web_port=settings.web_port,
        canonical_url=settings.canonical_url,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        processing_guarantee=settings.processing_guarantee,
        producer_linger=settings.producer_linger_seconds,
        broker_session_timeout=settings.broker_session_timeout,
        # Heartbeats well inside the session, as Kafka recommends (a third of it at most).
        broker_heartbeat_interval=min(3.0, settings.broker_session_timeout / 3),
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        topic_allow_declare=True,
        autodiscover=False,
    )
    telemetry = Telemetry(settings.facet_allowlist, settings.facet_max_values)
    # A fixed prefix: the rules and dashboards name Faust's metrics whatever the app id.
    setup_faust_metrics(app, registry=telemetry.registry, name_prefix="retrieval_scorer")

    results_topic = app.topic(settings.results_topic, **RAW)
    qrels_topic = app.topic(settings.qrels_topic, **RAW)
    scored_topic = app.topic(settings.scored_topic, **RAW)
    deadletter_topic = app.topic(settings.deadletter_topic, **RAW)
    rollup_topic = app.topic(settings.rollup_topic, **RAW)
    expiry_topic = app.topic(
        f"{settings.app_id}-parking-expiry",
        internal=True,
        partitions=settings.partitions,
        **RAW,
    )
    qrels_table = app.Table("qrels", default=None, partitions=settings.partitions)
    parked_table = app.Table("parked", default=None, partitions=settings.partitions)
    # Raw byte keys: the router hashes a key as the producer did on the rollup topic.
    rollup_table = app.Table(
        "rollups", default=None, partitions=settings.partitions, key_type=bytes
    )
    run_queries_table = app.Table("run_queries", default=None, partitions=settings.partitions)
    # Where each run counted each resultId, for ``rollup_dedupe_seconds`` (runs.RunBatch).
    seen_table = app.Table("rollup_seen", default=None, partitions=settings.partitions)
    dedupe = settings.rollup_dedupe_seconds
    telemetry.judged_queries.set_function(lambda: len(qrels_table))
    telemetry.rollup_seen_ids.set_function(lambda: len(seen_table))

    parked_count = 0
    expiring: set[str] = set()
    install_graceful_stop(app, settings.stop_timeout_seconds)
    transactions = Transactions(app)
    new_consumer = app._new_consumer

    def new_guarded_consumer() -> Any:
        """Faust's consumer, with the fixes that must be in place before its first
        rebalance (scorer.stream.resume, scorer.stream.transactions)."""
        consumer = hold_inputs_until_seeked(new_consumer()).consumer
        if app.in_transaction:
            transactions.guard_rebalances(consumer)
        return consumer

    app._new_consumer = new_guarded_consumer
    one_at_a_time = transactions.events
    pending = runs.PendingRollups()
    send_output = transactions.send

    async def dead_letter(event: Any, error: core.RejectedEvent, input_name: str) -> None:
        message = event.message
        await send_output(
            deadletter_topic,
            position_of(message),
            key=message.key,
            value=message.value,
            headers=core.deadletter_headers(
                error,
                message.topic,
                message.partition,
                message.offset,
                list(message.headers or []),
            ),
        )
        telemetry.count_deadletter(input_name, error.error_class)

    async def emit_scored(
        result: Any, entry: dict[str, Any], started: float, position: runs.SourcePosition
    ) -> None:
        scored = core.score_result(result, entry, settings.default_retrieval_k)
        await send_output(
            scored_topic, position, key=result.query_id.encode(), value=scored.payload
        )
        pending.add(
            result.run_id.encode(),
            runs.Contribution(
                position, result.result_id, result.query_id, list(scored.values), scored.facets
            ),
            started,
        )
        telemetry.observe_scored(scored.values, scored.facets)
        telemetry.latency.observe(time.perf_counter() - started)
        if (
            pending.size >= settings.rollup_batch_size
            or started - pending.since >= settings.rollup_batch_seconds
        ):
            await flush_rollups()

    async def flush_rollups() -> None:
        """Send the pending rollup contributions, one record per input partition and run."""
        for source, run_key, value in pending.drain():
            await send_output(rollup_topic, source, key=run_key, value=value)

    def flush_rollups_before_commits() -> None:
        """Every offset commit first sends the rollup contributions of the events it
        commits, so a crash can lose no contribution whose input is not redelivered.
        Installed before the exactly_once guard wraps the commit, so that under
        exactly_once the flush runs inside it, between two events."""
        consumer = app.consumer
        if getattr(consumer, "_scorer_flushes_rollups", False):
            return
        assert not getattr(consumer, "_scorer_guarded", False), "flush must run inside the guard"
        commit = consumer.commit

        async def commit_after_flush(*args: Any, **kwargs: Any) -> bool:
            await flush_rollups()
            return await commit(*args, **kwargs)

        consumer.commit = commit_after_flush
        consumer._scorer_flushes_rollups = True

    def position_of(message: Any, seq: int = 0) -> runs.SourcePosition:
        return runs.SourcePosition(message.topic, message.partition, message.offset, seq)

    @app.agent(results_topic, concurrency=1)
    async def score_results(stream: Any) -> None:
        nonlocal parked_count
        flush_rollups_before_commits()
        async for event in one_at_a_time(stream):
            started = time.perf_counter()
            telemetry.result_inputs.inc()
            message = event.message
            try:
                result = core.decode_keyed(core.decode_result, message.key, message.value)
            except core.RejectedEvent as error:
                await dead_letter(event, error, "results")
                continue
            if message.timestamp:
                telemetry.age.observe(max(0.0, time.time() - message.timestamp))
            entry = qrels_table.get(result.query_id)
            if entry is not None:
                await emit_scored(result, entry, started, position_of(message))
                continue
            if parked_count >= settings.parking_max_total:
                telemetry.count_unjudged()
                continue
            decision = core.park(
                parked_table.get(result.query_id) or [],
                message.value,
                result.result_id,
                time.time(),
                settings.parking_max_per_query,
                message.partition,
            )
            if not decision.added:
                telemetry.results.labels("duplicate").inc()
                continue
            parked_table[result.query_id] = decision.parked
            parked_count += 1 - len(decision.evicted)
            telemetry.parked_total.inc()
            telemetry.parked.set(parked_count)
            if decision.evicted:
                telemetry.count_unjudged(len(decision.evicted))

    @app.agent(qrels_topic, concurrency=1)
    async def store_qrels(stream: Any) -> None:
        nonlocal parked_count
        flush_rollups_before_commits()
        async for event in one_at_a_time(stream):
            started = time.perf_counter()
            telemetry.inputs.labels("qrels").inc()
            message = event.message
            if message.value is None:
                if message.key is not None:
                    qrels_table.pop(message.key.decode("utf-8", "replace"), None)
                telemetry.qrels.labels("deleted").inc()
                continue
            try:
                golden = core.decode_keyed(core.decode_golden, message.key, message.value)
            except core.RejectedEvent as error:
                await dead_letter(event, error, "qrels")
                continue
            entry = core.golden_entry(golden)
            qrels_table[golden.query_id] = entry
            telemetry.qrels.labels("stored").inc()
            waiting = parked_table.pop(golden.query_id, None)
            if waiting:
                parked_count -= len(waiting)
                telemetry.parked.set(parked_count)
                for seq, item in enumerate(waiting):
                    result = core.decode_result(item[2].encode())
                    await emit_scored(result, entry, started, position_of(message, seq))

    @app.agent(expiry_topic, concurrency=1)
    async def expire_parked(stream: Any) -> None:
        nonlocal parked_count
        async for event in stream.events():
            query_id = event.message.key.decode()
            expiring.discard(query_id)
            keep, expired = core.split_expired(
                parked_table.get(query_id) or [], time.time(), settings.parking_ttl_seconds
            )
            if not expired:
                continue
            if keep:
                parked_table[query_id] = keep
            else:
                parked_table.pop(query_id, None)
            parked_count -= len(expired)
            telemetry.parked.set(parked_count)
            telemetry.count_unjudged(len(expired))

    next_seen_sweep: dict[int, float] = {}

    @app.agent(rollup_topic, concurrency=1)
    async def roll_up(stream: Any) -> None:
        # Batched: each run's state is read, decoded and written (one changelog
        # record) once per batch. take_events acks a batch's events only after
        # this body has written the tables, so the guarantees are those of one
        # event at a time.
        async for events in stream.take_events(
            settings.rollup_batch_size, within=settings.rollup_batch_seconds
        ):
            by_partition: dict[int, list[Any]] = {}
            for event in events:
                by_partition.setdefault(event.message.partition, []).append(event)
            now = time.time()
            updated_at = datetime.fromtimestamp(now, UTC).isoformat()
            for partition, partition_events in by_partition.items():
                # Table writes go to the changelog partition of the current event;
                # every run here lives in this partition (the topic is keyed by run).
                stream._set_current_event(partition_events[-1])
                batch = runs.RunBatch(
                    rollup_table.get,
                    run_queries_table.get,
                    settings.rollup_max_queries,
                    load_seen=seen_table.get if dedupe else None,
                    partition=partition,
                    now=now,
                )
                for event in partition_events:
                    message = event.message
                    for item in runs.decode_contributions(message.value):
                        batch.add(message.key, item)
                for key, entry in batch.queries.items():
                    run_queries_table[key] = entry
                for key, seen in batch.seen.items():
                    seen_table[key] = seen
                for key, state in batch.finish(updated_at).items():
                    rollup_table[key] = state
                if batch.duplicates:
                    telemetry.rollup_duplicates.inc(batch.duplicates)
                if batch.resent:
                    telemetry.rollup_resent.inc(batch.resent)
                if dedupe and now >= next_seen_sweep.get(partition, 0.0):
                    next_seen_sweep[partition] = now + max(1.0, dedupe / 4)
                    forget_seen(partition, now - dedupe)

    def forget_seen(partition: int, before: float) -> None:
        """Drop this partition's ``seen`` entries recorded before ``before`` (called
        with an event of that partition current, so the deletes reach its changelog)."""
        mine = ((key, entry) for key, entry in seen_table.items() if entry[4] == partition)
        for key in runs.expired_seen(mine, before):
            seen_table.pop(key, None)

    @app.timer(interval=min(1.0, settings.parking_ttl_seconds / 4))
    async def sweep_parked() -> None:
        nonlocal parked_count
        now = time.time()
        total = 0
        for query_id, items in list(parked_table.items()):
            total += len(items)
            oldest = min(item[1] for item in items)
            if app.should_stop:
                return  # the stop commits without this sweep; the next owner sweeps again
            if now - oldest >= settings.parking_ttl_seconds and query_id not in expiring:
                expiring.add(query_id)
                await expiry_topic.send(key=query_id.encode(), value=b"", partition=items[0][3])
        parked_count = total
        telemetry.parked.set(total)

    register_views(app, settings, rollup_table, run_queries_table)
    return Scorer(
        app, settings, telemetry, qrels_table, parked_table, rollup_table, run_queries_table
    )
