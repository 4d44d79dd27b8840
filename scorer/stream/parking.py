"""Parking's time limit: results whose qrels never came end as unjudged.

Tables cannot be written outside a stream, so a timer finds the queries whose
oldest parked result is past ``parking_ttl_seconds`` and sends an expiry
command to an internal topic, on the query's own partition (outside any
transaction, under exactly_once too: the command is idempotent); an agent there
moves the expired results to unjudged (one command per query until handled, sent
again if still parked long after). Only the partitions this worker owns are swept:
the table also holds the standby copies of other workers' partitions.
"""

from __future__ import annotations

import time
from typing import Any

from scorer.stream import events
from scorer.stream.outputs import Output
from scorer.stream.parts import StreamParts
from scorer.stream.stored import decode_parked, encode_parked


def register(parts: StreamParts) -> None:
    """The expiry agent and the sweep timer."""
    app, settings, telemetry = parts.app, parts.settings, parts.telemetry
    parked_table, expiring = parts.parked_table, parts.expiring

    @app.agent(parts.expiry_topic, concurrency=1)
    async def expire_parked(stream: Any) -> None:
        async for event in stream.events():
            query_id = event.message.key.decode()
            expiring.pop(query_id, None)
            if query_id in parts.releasing:
                continue  # its qrels came: the qrels agent is scoring its results
            keep, expired = events.split_expired(
                decode_parked(parked_table.get(query_id)),
                time.time(),
                settings.parking_ttl_seconds,
            )
            if not expired:
                continue
            if keep:
                parked_table[query_id] = encode_parked(keep)
            else:
                parked_table.pop(query_id, None)
            telemetry.parked.set(parts.parked.add(-len(expired)))
            telemetry.count_unjudged(len(expired))

    expiry_name = parts.expiry_topic.get_topic_name()
    interval = min(1.0, settings.parking_ttl_seconds / 4)
    # A command whose query is still parked this long after it was sent is sent again:
    # its partition may have moved away and back before the command was handled
    # (by the worker that owned it then), and a query marked forever would never expire.
    resend_after = max(10 * interval, 5.0)

    @app.timer(interval=interval)
    async def sweep_parked() -> None:
        now = time.time()
        total = 0
        # The table holds the standby copies of other workers' partitions too: those
        # are theirs to count and expire.
        owned = parts.edge.owned_partitions(settings.results_topic)
        for query_id, stored in list(parked_table.items()):
            items = decode_parked(stored)
            if not items or items[0].partition not in owned:
                continue
            total += len(items)
            oldest = min(item.parked_at for item in items)
            if app.should_stop:
                return  # the stop commits without this sweep; the next owner sweeps again
            sent = expiring.get(query_id)
            if now - oldest >= settings.parking_ttl_seconds and (
                sent is None or now - sent >= resend_after
            ):
                expiring[query_id] = now
                # Outside the transactions: see GuardedConsumer.send_command.
                await parts.edge.send_command(
                    Output(expiry_name, query_id.encode(), b"", partition=items[0].partition)
                )
        telemetry.parked.set(parts.parked.reset(total))
