"""Run rollups: the contributions of scored results folded into per-run state.

The results path queues each scored result's contribution
(``scorer.stream.runs.PendingRollups``) and sends them to the rollup topic,
keyed by run id, several to a record; every offset commit sends what is
pending first, so a crash loses no contribution whose input is not
redelivered. An agent there folds them into the ``rollups`` table (keyed by
run id, raw keys so that the web router finds a run's owner), the bounded
``run_queries`` table and the ``rollup_seen`` table, one changelog record per
run and batch.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from scorer.stream import runs
from scorer.stream.parts import StreamParts
from scorer.stream.results import rollup_outputs


def register(parts: StreamParts) -> None:
    """The flush before every commit, and the agent of the rollup topic."""
    app, settings, telemetry, edge = parts.app, parts.settings, parts.telemetry, parts.edge
    rollup_table, run_queries_table = parts.rollup_table, parts.run_queries_table
    seen_table = parts.seen_table
    dedupe = settings.rollup_dedupe_seconds
    next_seen_sweep: dict[int, float] = {}

    async def flush_pending() -> None:
        for output in rollup_outputs(parts, force=True):
            await edge.send(output, output.source)

    edge.before_commit(flush_pending)

    @app.agent(parts.rollup_topic, concurrency=1)
    async def roll_up(stream: Any) -> None:
        # take_events acks a batch's events only after this body has written the
        # tables, so the guarantees are those of one event at a time.
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
