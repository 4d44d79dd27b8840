"""How the worker's outputs join Faust's exactly_once transactions.

Under ``processing_guarantee=exactly_once`` Faust runs one transactional
producer per input partition and commits each partition's consumed offsets in
that partition's transaction. Faust 0.15.3 leaves gaps that this module closes:

- Faust snapshots the offsets of acked events, then commits each partition's
  transaction while the agents go on sending into it: records of events
  processed in between would commit without their input's offset, and a crash
  would then deliver them twice. So a commit waits for the event in hand
  (:meth:`Transactions.events`).
- Faust's ``topic.send`` picks the transaction of the *destination*
  partition: records for topics the worker does not consume (scored, dead
  letters) would go out outside any transaction, and rollup records (keyed by
  run id) in another partition's transaction. The worker's one send path
  (``GuardedConsumer.send_outputs``) puts a record in the transaction of the
  input that produced it (:meth:`Transactions.transactional_id`).
- After a rebalance (every start is one) Faust resumes the input partitions
  *before* it seeks them to their committed offsets, so the first events are
  processed, then fetched again from the committed offset. Faust drops the
  refetched events below the last one it read but delivers that last one a
  second time; and it books the refetched range as a gap in its acked offsets,
  after which its commits advance one offset at a time while the processing
  runs far ahead. Those transactions commit the records of thousands of events
  with an offset far behind them: a SIGKILL then delivers all of them again
  (measured: 230 duplicates in one run). ``scorer.stream.faust_edge.resume`` now holds the
  input partitions until the seek (the same window also lost events); as a
  guard, the transactions still record, per input partition, the last event
  processed whose records are in the current transactional producer; an event
  at or below it is not processed again, and every commit carries the offset
  after it (:meth:`Transactions.events`, ``commit_with_processed``).

- On a rebalance Faust stops the transactional producers of the revoked
  partitions, but it leaves out every partition the worker keeps as a standby
  (with ``table_standby_replicas=1``, all of them when there are two workers).
  The old producer then lives on with its transaction open, is fenced by the
  new owner's, and the next send through it fails ("Can't send messages while
  not in transaction"), crashing the agent. So the producers of revoked
  partitions are stopped whatever the standby assignment
  (:meth:`Transactions.stop_revoked_producers`); their open transactions are aborted by
  the new owner, which processes those events again from the committed offset.

- Under exactly_once Faust takes the end of each changelog partition (where
  table recovery stops) from the consumer's cached last stable offset, which is
  unknown until a fetch of that partition has returned since the assignment:
  right after a rebalance it reads -1, and a worker that kept the partition
  then crashes with ``ConsistencyError`` (its table is past the "end"), or one
  that did not recovers nothing. :meth:`GuardedConsumerThread._highwaters`
  asks the broker instead (a read_committed consumer's end offsets are the last
  stable offsets).

- When a rebalance interrupts table recovery, Faust seeks standby changelog
  partitions whose start offset it has not computed yet (``None``) and crashes
  (seen in rolling restarts): they are read from their start
  (:func:`from_start_when_unknown`, through ``GuardedConsumer.seek_wait``).

Under at-least-once all of this is a plain pass-through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from scorer.stream.faust_edge.recovery import Recovery

logger = logging.getLogger(__name__)


class Transactions:
    """The exactly_once plumbing of one Faust app (a no-op under at-least-once)."""

    holds_commits = True
    """Every commit takes :attr:`lock`, so it waits for the batch in hand."""

    def __init__(self, app: Any, recovery: Recovery | None = None) -> None:
        self.app = app
        self.recovery = recovery or Recovery()
        self._between_events = asyncio.Lock()
        # Input partition -> (transactional producer, offset of the last event
        # processed whose records went to that producer).
        self._processed: dict[Any, tuple[Any, int]] = {}
        # Input partition -> the offset this module last added to a commit.
        self._committed: dict[Any, int] = {}

    # ---------------------------------------------------------------- the batch gate
    # (faust_edge.consumer.BatchGate: what the batch path of the results topic needs)

    @property
    def lock(self) -> asyncio.Lock:
        """Held while an event or a batch is processed; every commit takes it."""
        return self._between_events

    def transactional_id(self, tp: Any) -> str:
        return self._transactional_id(tp.topic, tp.partition)

    def first_unprocessed(self, tp: Any) -> int | None:
        """The first offset of ``tp`` whose records are not in its open transaction."""
        last = self._processed.get(tp)
        if last is None or last[0] is not self._producer_for(tp.topic, tp.partition):
            return None
        return last[1] + 1

    def processed(self, tp: Any, offset: int) -> None:
        """The records of ``tp`` up to ``offset`` went to its transactional producer."""
        self._guard_commits()
        producer = self._producer_for(tp.topic, tp.partition)
        if producer is not None:
            self._processed[tp] = (producer, offset)

    async def end_transactions(self) -> bool:
        """Commit, without starting new ones, the transactions that hold processed
        records Faust's own commit left out (it commits only the partitions with new
        offsets in its acked lists): see ``GuardedConsumer.commit``."""
        merged = self._with_processed({})
        if not merged:
            return False
        logger.info(
            "Committing the open transactions Faust's commit left: %s",
            ", ".join(f"{tp.topic}/{tp.partition}={o}" for tp, o in sorted(merged.items())),
        )
        return bool(
            await self.app.consumer.transactions.commit(merged, start_new_transaction=False)
        )

    def _transactional_id(self, topic: str, partition: int) -> str:
        """Faust's transactional id of an input partition."""
        group = self.app.assignor.group_for_topic(topic)
        return f"{self.app.conf.id}-{group}-{partition}"

    def _producer_for(self, topic: str, partition: int) -> Any:
        """The transactional producer (aiokafka) that holds the open transaction of an
        input partition, or None. Faust replaces it on a rebalance that moves the
        partition: the old one's open transaction is then aborted (fenced)."""
        producers = getattr(self.app.producer, "_transaction_producers", {})
        return producers.get(self._transactional_id(topic, partition))

    def _in_transaction(self, topic: str, partition: int) -> bool:
        """Whether an input partition's transactional producer has a transaction open."""
        txn_manager = getattr(self._producer_for(topic, partition), "_txn_manager", None)
        return txn_manager is not None and txn_manager.is_in_transaction()

    def _with_processed(self, offsets: Mapping[Any, int]) -> dict[Any, int]:
        """``offsets`` (Faust's, from its acked events) raised to the offset after the
        last event processed in each input partition's current transaction.

        Partitions without an open transaction are left out: Faust ends them all
        when it stops, then its commit timer may still fire, and committing
        offsets outside a transaction is impossible (aiokafka raises, which
        crashed the consumer on shutdown)."""
        merged = {
            tp: offset
            for tp, offset in offsets.items()
            if self._in_transaction(tp.topic, tp.partition)
        }
        if len(merged) < len(offsets):
            left_out = {tp: offset for tp, offset in offsets.items() if tp not in merged}
            logger.info("No transaction open: offsets not committed %r", left_out)
        assigned = self.app.consumer.assignment()
        for tp, (producer, offset) in self._processed.items():
            if tp not in assigned or producer is not self._producer_for(tp.topic, tp.partition):
                continue
            if not self._in_transaction(tp.topic, tp.partition):
                continue
            if tp not in merged and self._committed.get(tp) == offset + 1:
                continue  # nothing new since the last commit
            merged[tp] = max(merged.get(tp, 0), offset + 1)
        return merged

    def _guard_commits(self) -> None:
        """Make Faust's exactly_once commits match what was produced (once per consumer).

        Table changelog writes still in Faust's send buffer, which would miss the
        transaction that commits their input's offset (Faust flushes that buffer
        before at-least-once commits only), are flushed first; and each
        partition's transaction commits the offset after the last event whose
        records it holds. (A commit waits for the event or batch in hand:
        ``GuardedConsumer.commit`` takes :attr:`lock`.)
        """
        app = self.app
        consumer = app.consumer
        if getattr(consumer, "_scorer_guarded", False):
            return
        commit_transaction = consumer.transactions.commit

        async def commit_with_processed(
            offsets: Mapping[Any, int], start_new_transaction: bool = True
        ) -> bool:
            if self.recovery.requested is not None:
                return False  # the open transactions are to be aborted, not committed
            await app.producer.buffer.flush()
            merged = self._with_processed(offsets)
            await self._flush_producers_of(merged)
            if await consumer.undelivered_stops_commit():
                return False
            committed = await commit_transaction(
                merged, start_new_transaction=start_new_transaction
            )
            self._committed.update(merged)
            return committed

        consumer.transactions.commit = commit_with_processed
        self._commit_concurrently(app.producer, self.recovery)
        consumer._scorer_guarded = True

    @staticmethod
    def _commit_concurrently(producer: Any, recovery: Recovery) -> None:
        """Commit the transactions of one commit side by side.

        Faust commits them one after the other, each with three broker round trips
        (the offsets to the transaction, to the group, the end of the transaction):
        with the results and rollup partitions of one worker, seven of them took
        38 ms at the median (79 ms at p90) on the benchmark, and a ``read_committed``
        reader waits for all of it. Each transaction still takes its own lock, and
        every one is tried even when another fails; the first error is raised, but a
        lost transaction (fenced, timed out) is handed to ``recovery`` instead: Faust
        would crash the app on it (``faust_edge.recovery``)."""
        if getattr(producer, "_scorer_concurrent_commits", False):
            return

        async def commit_one(
            transactional_id: str, offsets: Mapping[Any, int], group_id: str, begin: bool
        ) -> None:
            async with producer._trn_locks[transactional_id]:
                transaction_producer = producer._transaction_producers.get(transactional_id)
                if transaction_producer is None:
                    logger.warning("Commit invoked for unknown transaction %s", transactional_id)
                    return
                await transaction_producer.send_offsets_to_transaction(offsets, group_id)
                await transaction_producer.commit_transaction()
                if begin:
                    await transaction_producer.begin_transaction()

        async def commit_transactions(
            tid_to_offset_map: Mapping[str, Mapping[Any, int]],
            group_id: str,
            start_new_transaction: bool = True,
        ) -> None:
            outcomes = await asyncio.gather(
                *(
                    commit_one(transactional_id, offsets, group_id, start_new_transaction)
                    for transactional_id, offsets in tid_to_offset_map.items()
                ),
                return_exceptions=True,
            )
            errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
            for error in errors:
                recovered = isinstance(error, Exception) and recovery.request(
                    error, "commit", committing=True
                )
                if not recovered:
                    raise error

        producer.commit_transactions = commit_transactions
        producer._scorer_concurrent_commits = True

    async def _flush_producers_of(self, offsets: Mapping[Any, int]) -> None:
        """Wait for the outcome of every record sent in the transactions about to commit
        ``offsets``.

        aiokafka's commit waits for them too, but then commits the transaction even
        when a record's batch failed (a non-retriable produce error), without that
        record: the failure must be seen before the commit, not after."""
        producers = {self._producer_for(tp.topic, tp.partition) for tp in offsets}
        for producer in producers - {None}:
            await producer.flush()
        # The records' done callbacks run after their batch's; let them all run.
        await asyncio.sleep(0)

    def stop_revoked_producers(self, manager: Any) -> None:
        """Stop the producers of revoked partitions before Faust starts the assigned
        ones (Faust skips the partitions that stay here as standbys)."""
        app = self.app
        on_rebalance = manager.on_rebalance

        async def on_rebalance_stopping_revoked(
            assigned: Any, revoked: Any, newly_assigned: Any
        ) -> None:
            # Every producer the new assignment does not need, rather than those named
            # after the revoked partitions: a revoked partition's topic can be missing
            # from the assignor's new topic groups (a topic created during the
            # rebalance), and naming its producer then raised KeyError in the rebalance
            # callback, which crashed the worker (tests/integration/test_churn.py).
            kept = manager._tps_to_transactional_ids(assigned)
            stale = set(getattr(app.producer, "_transaction_producers", {})) - kept
            for transactional_id in sorted(stale):
                if transactional_id in getattr(app.producer, "_transaction_producers", {}):
                    logger.info(
                        "Stopping the transactional producer %s: its partitions were revoked",
                        transactional_id,
                    )
                    await app.producer.stop_transaction(transactional_id)
            await on_rebalance(assigned, revoked, newly_assigned)

        manager.on_rebalance = on_rebalance_stopping_revoked

    async def events(self, stream: Any) -> AsyncIterator[Any]:
        """The stream's events; under exactly_once no commit happens while one is
        processed (the ack runs, without yielding, when the next event is asked for),
        and an event already processed in the current transactions is skipped."""
        if not self.recovery.exactly_once:
            async for event in stream.events():
                yield event
            return
        self._guard_commits()
        processed = self._processed
        recovery = self.recovery
        async for event in stream.events():
            if recovery.requested is not None:
                continue  # nothing more is committed: the next app processes it
            async with self._between_events:
                message = event.message
                tp, offset = message.tp, message.offset
                producer = self._producer_for(message.topic, message.partition)
                last = processed.get(tp)
                if last is None or last[0] is not producer:
                    logger.info(
                        "First event of %s/%s for this transactional producer: offset %s",
                        message.topic,
                        message.partition,
                        offset,
                    )
                if last is not None and last[0] is producer and offset <= last[1]:
                    logger.info(
                        "Not processing %s/%s offset %s again: its records are in the "
                        "current transaction (last processed %s)",
                        message.topic,
                        message.partition,
                        offset,
                        last[1],
                    )
                    continue
                yield event
                # Only once the agent asks for the next one: the event's records are sent.
                if producer is not None:
                    processed[tp] = (producer, offset)


def from_start_when_unknown(partitions: Mapping[Any, int | None]) -> Mapping[Any, int | None]:
    """``partitions`` (changelog partition -> start offset) with an unknown start read
    from the start (0), logged.

    When a rebalance interrupts a recovery (a worker rejoining while the other
    is still recovering the partitions it took over), Faust's restarted
    recovery seeks standby partitions that the new rebalance added and whose
    start offset it has not computed yet (``None``, from ``Recovery._add``);
    aiokafka refuses (``ValueError('Offset must be a positive integer')``) and
    the recovery crashes the worker. The start (0) is where Faust's own
    computation ends for a memory store, which keeps no persisted offsets."""
    unknown = sorted(tp for tp, offset in partitions.items() if offset is None)
    if not unknown:
        return partitions
    logger.info(
        "Recovery: no start offset for %s; reading from the start",
        ", ".join(f"{tp.topic}/{tp.partition}" for tp in unknown),
    )
    return {tp: 0 if offset is None else offset for tp, offset in partitions.items()}


def log_seeks(offsets: Mapping[Any, int]) -> None:
    """Log the committed offsets Faust seeks to after an assignment."""
    logger.info(
        "Seeking to committed offsets: %s",
        ", ".join(f"{tp.topic}/{tp.partition}={o}" for tp, o in sorted(offsets.items())),
    )
