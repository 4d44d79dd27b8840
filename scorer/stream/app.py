"""The Faust app of the streaming scorer: topics, tables, and who handles each topic.

Every result ends in exactly one place (scored, parked, unjudged, duplicate,
dead letter) and is counted there (``scorer.stream.telemetry``). Who does what:

- ``results``: the results topic, a fetched batch at a time (the hot path,
  delivered by the Faust edge, not an agent);
- ``qrels``: the golden set into the qrels table (an agent);
- ``parking``: the time limit of results waiting for their qrels (an agent
  and a timer);
- ``rollups``: per-run rollups of the scored results (the rollup topic a fetched
  batch at a time, a background topic of the Faust edge, and a flush of the
  pending contributions before every commit);
- ``web``: the run API and the health endpoints.

State lives in changelog-backed tables keyed by queryId and co-partitioned with
the results and qrels topics (``qrels``, ``parked``), or keyed by run id
(``rollups``, ``run_queries``, ``rollup_seen``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import faust
from aiokafka.admin import NewTopic

from scorer.settings import Settings
from scorer.stream import faust_edge, parking, qrels, rollups, watch
from scorer.stream.parts import StreamParts
from scorer.stream.placement import Misplaced
from scorer.stream.results import ResultBatches, Scoring
from scorer.stream.telemetry import Telemetry
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
    parts: StreamParts
    readiness: Callable[[], tuple[bool, str]]
    """What ``/readyz`` answers now: ``(ready, why)``."""


def internal_topics(scorer: Scorer) -> list[NewTopic]:
    """The topics Faust would create for this app at its start (the tables'
    changelogs, the parking timer), as Faust would create them: its partition count,
    replication factor and cleanup policy (``scorer worker`` creates them first)."""
    app = scorer.app
    topics = [scorer.parts.expiry_topic, *(table.changelog_topic for table in app.tables.values())]
    wanted = []
    for topic in topics:
        if topic.retention is not None:
            continue  # left to Faust: its unit conversions are its own
        config = {str(key): str(value) for key, value in (topic.config or {}).items()}
        cleanup = [
            flag for flag, on in (("compact", topic.compacting), ("delete", topic.deleting)) if on
        ]
        if cleanup:
            config["cleanup.policy"] = ",".join(cleanup)
        for name in topic.topics:
            wanted.append(
                NewTopic(
                    name,
                    num_partitions=topic.partitions or app.conf.topic_partitions,
                    replication_factor=topic.replicas or app.conf.topic_replication_factor,
                    topic_configs=config,
                )
            )
    return wanted


def create_app(settings: Settings, recovery: faust_edge.Recovery | None = None) -> Scorer:
    """Build the streaming scorer for ``settings`` (nothing connects until it runs).
    ``recovery`` is the process's record of in-process rebuilds (``scorer worker``
    passes the same one to every app it builds)."""
    faust_edge.check_versions()
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
        broker_commit_interval=settings.commit_interval(),
        broker_session_timeout=settings.broker_session_timeout,
        # Heartbeats well inside the session, as Kafka recommends (a third of it at most).
        broker_heartbeat_interval=min(3.0, settings.broker_session_timeout / 3),
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        # Changelog records (run states) are kilobytes: 16 KiB batches (Faust's default)
        # meant a produce round trip for every one or two of them.
        producer_max_batch_size=1 << 20,
        # Faust's default (1,000,000) is below the broker's message.max.bytes; records
        # are fitted to this limit before they are sent (scorer.stream.limits).
        producer_max_request_size=settings.producer_max_request_size,
        topic_allow_declare=True,
        autodiscover=False,
    )
    telemetry = Telemetry(
        settings.facet_allowlist, settings.facet_max_values, settings.risk_confidence_edges
    )
    edge = faust_edge.install(
        app, telemetry.registry, faust_edge.EdgeConfig.from_settings(settings), recovery
    )

    parts = StreamParts(
        app=app,
        settings=settings,
        telemetry=telemetry,
        edge=edge,
        results_topic=app.topic(settings.results_topic, **RAW),
        qrels_topic=app.topic(settings.qrels_topic, **RAW),
        rollup_topic=app.topic(settings.rollup_topic, **RAW),
        expiry_topic=app.topic(
            f"{settings.app_id}-parking-expiry",
            internal=True,
            partitions=settings.partitions,
            **RAW,
        ),
        qrels_table=app.Table("qrels", default=None, partitions=settings.partitions),
        parked_table=app.Table("parked", default=None, partitions=settings.partitions),
        # Raw byte keys: the router hashes a key as the producer did on the rollup topic.
        rollup_table=app.Table(
            "rollups", default=None, partitions=settings.partitions, key_type=bytes
        ),
        run_queries_table=app.Table("run_queries", default=None, partitions=settings.partitions),
        # Where each run counted each resultId, for ``rollup_dedupe_seconds`` (run_state.RunBatch).
        # Raw values, binary blocks (seen.encode_block); keys stay JSON strings.
        seen_table=app.Table(
            "rollup_seen",
            default=None,
            partitions=settings.partitions,
            value_type=bytes,
        ),
        misplaced=Misplaced(settings.partitions, telemetry.misplaced),
        scoring=Scoring(settings, telemetry),
    )
    telemetry.judged_queries.set_function(lambda: len(parts.qrels_table))

    edge.route(
        parts.results_topic,
        ResultBatches(
            settings,
            telemetry,
            qrels=edge.writer(parts.qrels_table),
            parked=edge.writer(parts.parked_table),
            scoring=parts.scoring,
            parked_count=parts.parked,
            misplaced=parts.misplaced,
        ),
    )
    qrels.register(parts)
    parking.register(parts)
    rollups.register(parts)
    watch.register(parts)
    readiness = register_views(
        app,
        settings,
        parts.rollup_table,
        parts.run_queries_table,
        recovering=edge.recovery.readiness_reason,
        watched=parts.watched,
    )
    return Scorer(app, settings, telemetry, parts, readiness)
