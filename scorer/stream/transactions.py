"""How the worker's outputs join Faust's exactly_once transactions.

Under ``processing_guarantee=exactly_once`` Faust runs one transactional
producer per input partition and commits each partition's consumed offsets in
that partition's transaction. Two gaps in Faust 0.15.3 are closed here:

- Faust snapshots the offsets of acked events, then commits each partition's
  transaction while the agents go on sending into it: records of events
  processed in between would commit without their input's offset, and a crash
  would then deliver them twice. So a commit waits for the event in hand
  (:meth:`Transactions.events`).
- Faust's ``topic.send`` picks the transaction of the *destination*
  partition: records for topics the worker does not consume (scored, dead
  letters) would go out outside any transaction, and rollup records (keyed by
  run id) in another partition's transaction. :meth:`Transactions.send` puts
  a record in the transaction of the input that produced it.

Under at-least-once both are plain pass-throughs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from scorer.stream.runs import SourcePosition


class Transactions:
    """The exactly_once plumbing of one Faust app (a no-op under at-least-once)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._between_events = asyncio.Lock()

    def _guard_commits(self) -> None:
        """Make Faust's exactly_once commits match what was produced (once per consumer).

        A commit waits for the event in hand; and table changelog writes still in
        Faust's send buffer, which would miss the transaction that commits their
        input's offset (Faust flushes that buffer before at-least-once commits
        only), are flushed first.
        """
        app = self.app
        consumer = app.consumer
        if getattr(consumer, "_scorer_guarded", False):
            return
        commit, commit_transaction = consumer.commit, consumer.transactions.commit
        between_events = self._between_events

        async def commit_between_events(*args: Any, **kwargs: Any) -> bool:
            async with between_events:
                return await commit(*args, **kwargs)

        async def commit_with_changelog(offsets: Any, start_new_transaction: bool = True) -> bool:
            await app.producer.buffer.flush()
            return await commit_transaction(offsets, start_new_transaction=start_new_transaction)

        consumer.commit = commit_between_events
        consumer.transactions.commit = commit_with_changelog
        consumer._scorer_guarded = True

    async def events(self, stream: Any) -> AsyncIterator[Any]:
        """The stream's events; under exactly_once no commit happens while one is
        processed (the ack runs, without yielding, when the next event is asked for)."""
        if not self.app.in_transaction:
            async for event in stream.events():
                yield event
            return
        self._guard_commits()
        async for event in stream.events():
            async with self._between_events:
                yield event

    async def send(
        self,
        topic: Any,
        source: SourcePosition,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Send a record that the input event at ``source`` produced, in the
        transaction of the input's partition under exactly_once."""
        app = self.app
        if not app.in_transaction:
            await topic.send(key=key, value=value, headers=headers)
            return
        group = app.assignor.group_for_topic(source.topic)
        transactional_id = f"{app.conf.id}-{group}-{source.partition}"
        await app.producer.send(
            topic.get_topic_name(),
            key,
            value,
            None,  # partition: the destination topic's partitioner decides
            None,  # timestamp: now
            headers,
            transactional_id=transactional_id,
        )
