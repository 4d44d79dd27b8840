"""The qrels topic: golden queries into the qrels table, releasing parked results.

An agent (the golden set is low-volume): a GoldenQuery is stored as its qrels
entry; a tombstone deletes the query; the results parked for the query are
scored at once, each in the transaction of the qrels event that released it.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from scorer.stream import events, limits
from scorer.stream.outputs import Output
from scorer.stream.parts import StreamParts
from scorer.stream.results import Scoring
from scorer.stream.stored import ParkedItem, SourcePosition, decode_parked


def check_entry_fits(key: bytes | None, entry: dict[str, Any], max_request_size: int) -> None:
    """A golden query whose table entry would not fit in one changelog record (a query
    can hold 10,000 relevant ids of 256 characters: 2.7 MB) is refused, as a dead
    letter; stored, its changelog write would stop the worker on every restart."""
    size = limits.record_size(key, orjson.dumps(entry), [])
    budget = max_request_size - limits.SIZE_MARGIN
    if size > budget:
        raise events.RejectedEvent(
            "EntryTooLarge",
            f"the golden query's table entry is {size} bytes, over the {budget} bytes a "
            "changelog record may take (SCORER_PRODUCER_MAX_REQUEST_SIZE): split its "
            "judgments or raise the broker's and the worker's limits",
        )


def register(parts: StreamParts) -> None:
    """The agent of the qrels topic."""
    app, edge, telemetry, scoring = parts.app, parts.edge, parts.telemetry, parts.scoring
    qrels_table, parked_table = parts.qrels_table, parts.parked_table

    @app.agent(parts.qrels_topic, concurrency=1)
    async def store_qrels(stream: Any) -> None:
        async for event in edge.events(stream):
            started = time.perf_counter()
            telemetry.inputs.labels("qrels").inc()
            message = event.message
            rerouted = parts.misplaced.copy_if_misplaced(
                message.topic, message.partition, message.offset, message.key,
                message.value, message.headers,
            )  # fmt: skip
            if rerouted is not None:
                await edge.send(rerouted, message)
                continue
            if message.value is None:
                if message.key is not None:
                    qrels_table.pop(message.key.decode("utf-8", "replace"), None)
                telemetry.qrels.labels("deleted").inc()
                continue
            try:
                golden = events.decode_keyed(events.decode_golden, message.key, message.value)
                entry = events.golden_entry(golden)
                check_entry_fits(message.key, entry, parts.settings.producer_max_request_size)
            except events.RejectedEvent as error:
                output = scoring.deadletter(
                    error, "qrels", message.topic, message.partition, message.offset,
                    message.key, message.value, message.headers,
                )  # fmt: skip
                await edge.send(output, message)
                continue
            qrels_table[golden.query_id] = entry
            telemetry.qrels.labels("stored").inc()
            waiting = decode_parked(parked_table.get(golden.query_id))
            if not waiting:
                continue
            source = (message.topic, message.partition, message.offset)
            # Until the entry goes, the expiry agent leaves the query alone: a result
            # released here must not also end as unjudged there.
            parts.releasing.add(golden.query_id)
            try:
                for output in release(scoring, waiting, entry, *source, started):
                    await edge.send(output, message)
                # The released results' contributions reach the broker before the
                # parked entry's tombstone is written: if this event is redelivered (a
                # crash before its commit), the entry is still there to release them
                # again, at the same positions (the fold drops the copies). The other
                # way round, a crash between the two lost them from the run rollups
                # under at-least-once.
                await edge.send_all(scoring.rollup_outputs(force=True))
                if not await edge.delivered():
                    continue  # no commit comes after a lost record: the event comes again
                parked_table.pop(golden.query_id, None)
                telemetry.parked.set(parts.parked.add(-len(waiting)))
            finally:
                parts.releasing.discard(golden.query_id)


def release(
    scoring: Scoring,
    waiting: list[ParkedItem],
    entry: dict[str, Any],
    topic: str,
    partition: int,
    offset: int,
    started: float,
) -> list[Output]:
    """The scored records of the results parked for a query, released by its qrels
    event at ``topic/partition/offset``: the n-th at that position with seq n, so that
    a redelivered event releases them at the same positions (the fold drops copies)."""
    return [
        scoring.output(
            events.decode_result(item.raw.encode()),
            entry,
            started,
            SourcePosition(topic, partition, offset, seq),
        )
        for seq, item in enumerate(waiting)
    ]
