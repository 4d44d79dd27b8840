"""Parking's time limit: results whose qrels never came end as unjudged.

Tables cannot be written outside a stream, so a timer finds the queries whose
oldest parked result is past ``parking_ttl_seconds`` and sends an expiry
command to an internal topic, on the query's own partition; an agent there
moves the expired results to unjudged (one command per query until handled).
"""

from __future__ import annotations

import time
from typing import Any

from scorer.stream import events
from scorer.stream.parts import StreamParts


def register(parts: StreamParts) -> None:
    """The expiry agent and the sweep timer."""
    app, settings, telemetry = parts.app, parts.settings, parts.telemetry
    parked_table, expiring = parts.parked_table, parts.expiring

    @app.agent(parts.expiry_topic, concurrency=1)
    async def expire_parked(stream: Any) -> None:
        async for event in stream.events():
            query_id = event.message.key.decode()
            expiring.discard(query_id)
            keep, expired = events.split_expired(
                events.parked_items(parked_table.get(query_id)),
                time.time(),
                settings.parking_ttl_seconds,
            )
            if not expired:
                continue
            if keep:
                parked_table[query_id] = keep
            else:
                parked_table.pop(query_id, None)
            telemetry.parked.set(parts.parked.add(-len(expired)))
            telemetry.count_unjudged(len(expired))

    @app.timer(interval=min(1.0, settings.parking_ttl_seconds / 4))
    async def sweep_parked() -> None:
        now = time.time()
        total = 0
        for query_id, stored in list(parked_table.items()):
            items = events.parked_items(stored)
            total += len(items)
            oldest = min(item.parked_at for item in items)
            if app.should_stop:
                return  # the stop commits without this sweep; the next owner sweeps again
            if now - oldest >= settings.parking_ttl_seconds and query_id not in expiring:
                expiring.add(query_id)
                await parts.expiry_topic.send(
                    key=query_id.encode(), value=b"", partition=items[0].partition
                )
        telemetry.parked.set(parts.parked.reset(total))
