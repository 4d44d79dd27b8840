"""Run rollups: the contributions of scored results folded into per-run state.

The results path queues each scored result's contribution
(``scorer.stream.run_state.PendingRollups``) and sends them to the rollup topic,
keyed by run id, several to a record; every offset commit sends what is
pending first, so a crash loses no contribution whose input is not
redelivered. The rollup topic's fetched batches (the Faust edge's batch path, as
for results) are folded into the ``rollups`` table (keyed by
run id, raw keys so that the web router finds a run's owner), the bounded
``run_queries`` table and the ``rollup_seen`` table.

The seen ids go to the changelog with every batch, one record per batch. Under
at-least-once with a memory store, the run states and per-query entries are
*written behind* (``rollup_write_behind``): a batch updates the store, and the
newest value of each key it changed goes to the changelog once per offset commit
(a hook that runs before the commit), as Kafka Streams' record caches do. A query
or a run that recurs between two commits is one record instead of one per batch.
That is exact because of what the commit covers: a crash loses the unwritten
values together with the offsets of the batches that made them, and the rollup
records are redelivered and folded again (the run state's watermarks and the
entries' marks decide what each write lacks, as after any lost write). A
RocksDB store keeps its own copy on disk, which would then run ahead of its
changelog, and exactly_once writes in the batch's transaction: both write with
every batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container, Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from scorer.settings import Settings
from scorer.stream import limits, run_state
from scorer.stream.entry_blocks import EntryBlocks
from scorer.stream.outputs import Output, TableWriter
from scorer.stream.parts import StreamParts
from scorer.stream.seen import SeenIndex, split_entries
from scorer.stream.stored import ROW_RESULT_ID, decode_rollup_record
from scorer.stream.telemetry import Telemetry

logger = logging.getLogger(__name__)

_RUN_STATES, _ENTRIES = 0, 1
"""The tables a fold may write behind (``RollupFold._writers``)."""


def register(parts: StreamParts) -> None:
    """The flush before every commit, and the batch handler of the rollup topic."""
    settings, edge = parts.settings, parts.edge
    seen_table = parts.seen_table
    fold = RollupFold(
        settings,
        parts.telemetry,
        rollups=edge.writer(parts.rollup_table),
        queries=edge.writer(parts.run_queries_table),
        seen=edge.writer(seen_table),
    )

    async def flush_pending() -> None:
        # One call: drained and queued for the producer at once, so no contribution
        # drained later (by a batch scored while this flush waits) overtakes them.
        await edge.send_all(parts.scoring.rollup_outputs(force=True))

    edge.before_commit(flush_pending)

    if fold.write_behind:

        async def write_out() -> None:
            # Synchronous up to the send: a batch folded while it waits is written out
            # by the next commit (the consumer runs the hooks again if one was booked).
            owned = edge.owned_partitions(settings.rollup_topic)
            await edge.send_all(fold.write_out(owned=owned))

        edge.before_commit(write_out)

    @parts.run_queries_table.on_recover
    async def take_entry_blocks_apart() -> None:
        """After every recovery and before any batch: the per-query entries' blocks of
        the rollup partitions this worker now owns, each entry under its own key."""
        fold.reindex_entries(edge.owned_partitions(settings.rollup_topic))

    @seen_table.on_recover
    async def index_seen_ids() -> None:
        """After every recovery (a start, a rebalance) and before any batch: the seen
        ids of the rollup partitions this worker now owns, as the table holds them."""
        fold.reindex(seen_table.data.items(), edge.owned_partitions(settings.rollup_topic))

    # No reader waits for a fold (the run API reads between them): results go first.
    edge.route(parts.rollup_topic, fold, background=True)


class RollupFold:
    """The batch handler of the rollup topic: a fetched batch of one rollup partition
    folded into its runs' states, per-query entries and dedupe window (the tables
    ``rollups``, ``queries`` and ``seen``: the Faust edge's changelog writers in the
    worker, ``outputs.MemoryTable`` in tests). ``clock``: epoch seconds."""

    MAX_DECODED = 10_000
    """Runs kept decoded between batches at most (past it, they are decoded afresh)."""
    MAX_UNSENT = 50_000
    """Keys written behind at most: past it, a batch writes them all out with its own
    outputs (early is always safe)."""

    def __init__(
        self,
        settings: Settings,
        telemetry: Telemetry,
        rollups: TableWriter,
        queries: TableWriter,
        seen: TableWriter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.rollups_out = rollups
        self.queries_out = queries
        self.seen_out = seen
        self.clock = clock
        self.window = SeenIndex()
        self._decoded: dict[bytes, tuple[Any, Any, Any]] = {}
        """Run states decoded by earlier batches (``RunBatch.decoded``)."""
        self._next_sweep: dict[int, float] = {}
        self._last_block_ns = 0
        self.write_behind = (
            settings.rollup_write_behind
            and settings.rollup_query_marks
            and settings.processing_guarantee == "at_least_once"
            and settings.store.startswith("memory:")
        )
        """Run states and entries to the changelog once per commit (the module docstring)."""
        if settings.rollup_write_behind and not self.write_behind:
            logger.warning(
                "SCORER_ROLLUP_WRITE_BEHIND is set but has no effect: it needs "
                "at_least_once, a memory store and SCORER_ROLLUP_QUERY_MARKS (here %s, %s, "
                "query marks %s); run states and per-query entries are written with every "
                "batch",
                settings.processing_guarantee, settings.store, settings.rollup_query_marks,
            )  # fmt: skip
        blocks = (
            settings.rollup_entry_blocks
            and settings.rollup_query_marks
            and settings.processing_guarantee == "at_least_once"
            and settings.store.startswith("memory:")
        )
        self.blocks = (
            EntryBlocks(settings.producer_max_request_size - limits.SIZE_MARGIN - 1024)
            if blocks
            else None
        )
        """Per-query entries to the changelog as one block per batch (``entry_blocks``)."""
        self._writers = (rollups, queries)
        """By table: ``_RUN_STATES``, ``_ENTRIES``."""
        self._unsent: dict[tuple[int, int], dict[Any, None]] = {}
        """Keys stored and not yet written out, by (rollup partition, table), in the
        order first changed."""
        self._unsent_count = 0
        telemetry.rollup_seen_ids.set_function(lambda: len(self.window))
        telemetry.rollup_unsent_writes.set_function(lambda: self._unsent_count)

    def reindex(self, stored: Iterable[tuple[str, Any]], owned: Container[int]) -> None:
        """The dedupe window of the rollup partitions ``owned``, from the ``seen``
        table's records ``stored``: after every recovery, before any batch."""
        self._decoded.clear()  # the recovered tables hold new objects
        # Another worker folds a partition this one lost from its changelog and the
        # rollup records after its committed offset: what was not written is its.
        for where in [where for where in self._unsent if where[0] not in owned]:
            self._unsent_count -= len(self._unsent.pop(where))
        if not self.settings.rollup_dedupe_seconds:
            return
        started = time.perf_counter()
        self.window.rebuild(stored, owned)
        logger.info(
            "Seen ids of rollup partitions %s indexed: %d in %.2f s",
            sorted(owned), len(self.window), time.perf_counter() - started,
        )  # fmt: skip

    def __call__(self, tp: Any, records: list[Any]) -> list[Output]:
        """Fold a fetched batch of one rollup partition into its runs' states: each
        run's state, query entries and seen ids are read and written once per batch
        (every run here lives in this partition: the topic is keyed by run)."""
        settings, telemetry, window = self.settings, self.telemetry, self.window
        dedupe = settings.rollup_dedupe_seconds
        now = self.clock()
        partition = tp.partition
        outputs: list[Output] = []
        if dedupe:
            # Expired blocks go before this batch is looked up in the window. The first
            # sweep of a partition waits a period too: at a start the worker has a
            # backlog to score first, and nothing recovered is due before then.
            period = max(1.0, dedupe / 4)
            due = self._next_sweep.setdefault(partition, now + period)
            if now >= due:
                self._next_sweep[partition] = now + period
                for key in window.expired(partition, now - dedupe):
                    self.seen_out.delete(key, partition, outputs)
        decoded = [(record.key, decode_rollup_record(record.value)) for record in records]
        if len(self._decoded) > self.MAX_DECODED:
            self._decoded.clear()
        load_seen = None
        if dedupe:
            # Every row's earlier entry looked up at once (nearly all are new ids).
            query_key = run_state.query_key
            load_seen = window.get_many(
                query_key(key.decode(), row[ROW_RESULT_ID]) for key, rows in decoded for row in rows
            ).get
        batch = run_state.RunBatch(
            self.rollups_out.get,
            self.queries_out.get,
            settings.rollup_max_queries,
            load_seen=load_seen,
            partition=partition,
            now=now,
            history_seconds=settings.run_history_seconds,
            history_buckets=settings.run_history_buckets,
            decoded=self._decoded,
            query_marks=settings.rollup_query_marks,
        )
        for key, rows in decoded:
            batch.add_rows(key, rows)
        if self.blocks is None:
            self._write(_ENTRIES, batch.queries, partition, outputs)
        else:
            self._write_blocks(batch.queries, partition, now, outputs)
        if batch.seen:
            # Block keys carry the time, so that a batch folded again (redelivered)
            # writes a block of its own; nanoseconds, strictly increasing.
            now_ns = self._last_block_ns = max(int(now * 1e9), self._last_block_ns + 1)
            budget = settings.producer_max_request_size - limits.SIZE_MARGIN - 1024
            for n, block in enumerate(split_entries(batch.seen, budget)):
                key = run_state.seen_block_key(partition, records[0].offset, now_ns + n)
                value = window.add(partition, key, now, block)
                self.seen_out.set(key, value, partition, outputs)
            self._last_block_ns += n
        changed = batch.finish(datetime.fromtimestamp(now, UTC).isoformat())
        self._write(_RUN_STATES, changed, partition, outputs)
        if self._unsent_count > self.MAX_UNSENT:
            self.write_out(outputs)
        if batch.duplicates:
            telemetry.rollup_duplicates.inc(batch.duplicates)
        if batch.resent:
            telemetry.rollup_resent.inc(batch.resent)
        return outputs

    def _write_blocks(
        self, entries: dict[str, Any], partition: int, now: float, outputs: list[Output]
    ) -> None:
        """A batch's new per-query entries stored, and sent as blocks (``entry_blocks``),
        after the tombstones of the partition's blocks that died and are replaced
        durably."""
        blocks, writer = self.blocks, self.queries_out
        assert blocks is not None
        for key in blocks.deletable(partition):
            writer.record(key, None, partition, outputs)
        if not entries:
            return
        put = writer.put
        for key, value in entries.items():
            put(key, value)
        for key, value, number in blocks.write(partition, entries, int(now * 1e9), writer.get):
            writer.record(key, value, partition, outputs, partial(blocks.sent, number))

    def reindex_entries(self, owned: Container[int]) -> None:
        """The per-query entries' blocks recovered into the store, taken apart (the
        partitions ``owned``): after every recovery, before any batch."""
        if self.blocks is None:
            return
        started = time.perf_counter()
        found = self.blocks.reindex(self.queries_out.store(), owned)
        if found:
            logger.info(
                "Per-query entry blocks of rollup partitions %s taken apart: %d in %.2f s",
                sorted(owned), found, time.perf_counter() - started,
            )  # fmt: skip

    def _write(
        self, table: int, values: dict[Any, Any], partition: int, outputs: list[Output]
    ) -> None:
        """A batch's new ``values`` of the run states or the entries (``table``): each
        with its changelog record in ``outputs``, or stored and left for the next
        commit's :meth:`write_out` (written behind)."""
        writer = self._writers[table]
        if not self.write_behind:
            for key, value in values.items():
                writer.set(key, value, partition, outputs)
            return
        put = writer.put
        unsent = self._unsent.setdefault((partition, table), {})
        before = len(unsent)
        for key, value in values.items():
            put(key, value)
            unsent[key] = None
        self._unsent_count += len(unsent) - before

    def write_out(
        self, outputs: list[Output] | None = None, owned: Container[int] | None = None
    ) -> list[Output]:
        """The changelog records of every key written behind (their values as stored
        now), appended to ``outputs``; those of rollup partitions not in ``owned`` are
        dropped instead (revoked: their new owner folds them again). Nothing is left
        unsent after it: the hook before every offset commit."""
        outputs = [] if outputs is None else outputs
        for (partition, table), keys in self._unsent.items():
            if owned is not None and partition not in owned:
                continue
            write = self._writers[table].write_out
            for key in keys:
                write(key, partition, outputs)
        self._unsent = {}
        self._unsent_count = 0
        return outputs

    def unsent(self) -> dict[str, list[Any]]:
        """The keys written behind and not yet out, by table (``rollups``,
        ``run_queries``): what a crash now would lose from the changelog."""
        found: dict[str, list[Any]] = {"rollups": [], "run_queries": []}
        for (_, table), keys in self._unsent.items():
            found["run_queries" if table == _ENTRIES else "rollups"] += keys
        return found
