"""Run rollups: the contributions of scored results folded into per-run state.

The results path queues each scored result's contribution
(``scorer.stream.run_state.PendingRollups``) and sends them to the rollup topic,
keyed by run id, several to a record; every offset commit sends what is
pending first, so a crash loses no contribution whose input is not
redelivered. The rollup topic's fetched batches (the Faust edge's batch path, as
for results) are folded into the ``rollups`` table (keyed by
run id, raw keys so that the web router finds a run's owner), the bounded
``run_queries`` table and the ``rollup_seen`` table, one changelog record per
run and fetched batch.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from scorer.stream import limits, run_state
from scorer.stream.faust_edge import Output
from scorer.stream.parts import StreamParts
from scorer.stream.results import rollup_outputs
from scorer.stream.seen import SeenIndex, split_entries

logger = logging.getLogger(__name__)


def register(parts: StreamParts) -> None:
    """The flush before every commit, and the batch handler of the rollup topic."""
    settings, telemetry, edge = parts.settings, parts.telemetry, parts.edge
    rollup_table, run_queries_table = parts.rollup_table, parts.run_queries_table
    seen_table = parts.seen_table
    dedupe = settings.rollup_dedupe_seconds
    next_seen_sweep: dict[int, float] = {}
    seen = SeenIndex()
    telemetry.rollup_seen_ids.set_function(lambda: len(seen))
    rollups_out = edge.writer(rollup_table)
    queries_out = edge.writer(run_queries_table)
    seen_out = edge.writer(seen_table)

    async def flush_pending() -> None:
        # One call: drained and queued for the producer at once, so no contribution
        # drained later (by a batch scored while this flush waits) overtakes them.
        await edge.send_all(rollup_outputs(parts, force=True))

    edge.before_commit(flush_pending)

    @seen_table.on_recover
    async def index_seen_ids() -> None:
        """After every recovery (a start, a rebalance) and before any batch: the seen
        ids of the rollup partitions this worker now owns, as the table holds them."""
        if not dedupe:
            return
        started = time.perf_counter()
        owned = edge.owned_partitions(settings.rollup_topic)
        seen.rebuild(seen_table.data.items(), owned)
        logger.info(
            "Seen ids of rollup partitions %s indexed: %d in %.2f s",
            sorted(owned), len(seen), time.perf_counter() - started,
        )  # fmt: skip

    def roll_up(tp: Any, records: list[Any]) -> list[Output]:
        """Fold a fetched batch of one rollup partition into its runs' states: each
        run's state, query entries and seen ids are read and written once per batch
        (every run here lives in this partition: the topic is keyed by run)."""
        now = time.time()
        partition = tp.partition
        decoded = [(record.key, orjson.loads(record.value)) for record in records]
        load_seen = None
        if dedupe:
            # Every row's earlier entry looked up at once (nearly all are new ids).
            query_key = run_state.query_key
            load_seen = seen.get_many(
                query_key(key.decode(), row[4]) for key, rows in decoded for row in rows
            ).get
        batch = run_state.RunBatch(
            rollups_out.get,
            queries_out.get,
            settings.rollup_max_queries,
            load_seen=load_seen,
            partition=partition,
            now=now,
            history_seconds=settings.run_history_seconds,
            history_buckets=settings.run_history_buckets,
        )
        for key, rows in decoded:
            for row in rows:
                batch.add_row(key, row)
        outputs: list[Output] = []
        for key, entry in batch.queries.items():
            queries_out.set(key, entry, partition, outputs)
        if batch.seen:
            now_ns = time.time_ns()
            budget = settings.producer_max_request_size - limits.SIZE_MARGIN - 1024
            for n, block in enumerate(split_entries(batch.seen, budget)):
                key = run_state.seen_block_key(partition, records[0].offset, now_ns + n)
                seen_out.set(key, seen.add(partition, key, now, block), partition, outputs)
        for key, state in batch.finish(datetime.fromtimestamp(now, UTC).isoformat()).items():
            rollups_out.set(key, state, partition, outputs)
        if batch.duplicates:
            telemetry.rollup_duplicates.inc(batch.duplicates)
        if batch.resent:
            telemetry.rollup_resent.inc(batch.resent)
        if dedupe:
            # The first sweep of a partition waits a period too: at a start the worker
            # has a backlog to score first, and nothing recovered is due before then.
            due = next_seen_sweep.setdefault(partition, now + max(1.0, dedupe / 4))
            if now >= due:
                next_seen_sweep[partition] = now + max(1.0, dedupe / 4)
                for key in seen.expired(partition, now - dedupe):
                    seen_out.delete(key, partition, outputs)
        return outputs

    # No reader waits for a fold (the run API reads between them): results go first.
    edge.route(parts.rollup_topic, roll_up, background=True)
