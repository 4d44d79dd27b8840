"""The per-query entries' changelog as blocks: one record per folded batch, not per entry.

A folded batch changes the entries of most of its results (one per run and query),
and one changelog record each was about a quarter of an at-least-once worker's CPU
(the benchmark's A/B with the entries off: 1.35x). With blocks, the store still
holds each entry under its own key (``run\\x1fquery``: the fold and the run API read
it so), and the changelog gets the batch's changed entries as one record, a *block*
``{entryKey: entry, ...}`` under a key of its own (:data:`PREFIX`, the rollup
partition, a time in nanoseconds).

- **Recovery.** Faust puts each block into the store under its block key, and
  :meth:`EntryBlocks.reindex` (after every recovery, before any batch) takes each
  block apart: every entry of the blocks whose count is the highest of its key
  (an entry's count only grows; of equal ones, the later block's) goes under its
  own key, and the block key leaves the store. An entry written by an earlier
  version under its own key takes part as one more candidate.
- **Which records stay.** The registry knows, per entry key, the block holding
  its newest value. A block none of whose entries is the newest any more is
  deleted (a tombstone) once every block of its partition up to the last one that
  took an entry from it is acknowledged by the broker: never before the value
  that replaces it is durable. A block with less than a quarter of its entries
  still newest has those written again with the next block of its partition, so
  that it dies: the changelog holds at most about four records' worth of entries
  per live entry, and Kafka's compaction removes the rest.
- **Why it is exact.** A block is what the per-key records of one batch were, in
  one record: a crash keeps it or loses it whole, and the redelivered rollup
  records are folded by each entry's marks (``run_state.RunBatch._fold_marked``),
  as after any lost write.

Used under at-least-once with a memory store and query marks (``RollupFold``):
exactly_once would have to tie a tombstone to the commit of the transaction that
holds its replacement, and a RocksDB store keeps its own copy on disk.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

PREFIX = "\x1eentries:"
"""Start of a block's key. An entry's key (``run\\x1fquery``, ``run_state.query_key``)
always holds the separator, a block's never: a run id may start with anything."""
SPARSE = 4
"""A block whose newest entries are fewer than a ``SPARSE``-th of those it holds has
them written again (and then dies)."""


def block_key(partition: int, now_ns: int) -> str:
    return f"{PREFIX}{partition}:{now_ns}"


def is_block_key(key: Any) -> bool:
    return type(key) is str and key.startswith(PREFIX) and "\x1f" not in key


def partition_of(key: str) -> int:
    return int(key[len(PREFIX) :].split(":", 1)[0])


def _time_of(key: str) -> int:
    return int(key.rsplit(":", 1)[1])


def _count(entry: Any) -> float:
    return entry[0] if entry else 0.0


def newest_entries(items: Iterable[tuple[Any, Any]], prefix: str = "") -> dict[str, Any]:
    """The entries of a ``run_queries`` store's items whose keys start with ``prefix`` (a
    run's: ``run_state.query_key(run, "")``), blocks taken apart: of the copies of a
    key, the one of the highest count (of equal ones, the latest block's). For a reader
    of a store no :meth:`EntryBlocks.reindex` has run over (a standby's)."""
    found: dict[str, Any] = {}
    blocks = []
    for key, value in items:
        if value is None:
            continue
        if is_block_key(key):
            blocks.append((_time_of(key), value))
        elif key.startswith(prefix):
            found[key] = value
    for _, block in sorted(blocks, key=lambda item: item[0]):
        for key, entry in block.items():
            if key.startswith(prefix):
                current = found.get(key)
                if current is None or _count(entry) >= _count(current):
                    found[key] = entry
    return found


@dataclass(slots=True)
class _Block:
    partition: int
    key: str
    size: int
    """Entries it holds."""
    newest: set[str]
    """Keys whose newest value it holds."""
    superseded_by: int = -1
    """The latest block that took one of its entries."""


@dataclass
class EntryBlocks:
    """Which blocks of the ``run_queries`` changelog hold each entry's newest value, for
    the rollup partitions this worker folds; ``budget``: the most bytes of a block."""

    budget: int
    _where: dict[str, int] = field(default_factory=dict)
    """Entry key -> the number of the block holding its newest value."""
    _blocks: dict[int, _Block] = field(default_factory=dict)
    _next: int = 0
    _unacked: dict[int, deque[int]] = field(default_factory=dict)
    """Per partition, its blocks not yet acknowledged, in the order written."""
    _acked: set[int] = field(default_factory=set)
    _durable: dict[int, int] = field(default_factory=dict)
    """Per partition, the newest block such that it and every earlier one of the
    partition are acknowledged (-1: none)."""
    _dead: dict[int, list[int]] = field(default_factory=dict)
    """Per partition, blocks without a newest entry, to delete once durable."""
    _sparse: dict[int, set[int]] = field(default_factory=dict)
    """Per partition, blocks to empty by writing their newest entries again."""
    _latest: dict[int, int] = field(default_factory=dict)
    """Per partition, the time of its latest block key."""
    _numbers: dict[str, int] = field(default_factory=dict)
    """Block key -> its number, of the blocks known."""

    def __len__(self) -> int:
        """Blocks live in the changelog, as far as this worker knows."""
        return len(self._blocks)

    def write(
        self,
        partition: int,
        entries: Mapping[str, Any],
        now_ns: int,
        lookup: Callable[[str], Any],
    ) -> list[tuple[str, bytes, int]]:
        """A batch's changed ``entries`` (all of rollup partition ``partition``) as
        blocks: ``(key, value, number)`` to send, the value encoded, each of at most
        :attr:`budget` bytes when an entry fits. The newest entries of the partition's
        sparse blocks go along, as ``lookup`` (the store) has them. ``now_ns``: the
        time the block keys carry (each past the partition's latest)."""
        sparse = self._sparse.pop(partition, None)
        if sparse:
            entries = dict(entries)
            for number in sparse:
                block = self._blocks.get(number)
                if block is None:
                    continue
                for key in block.newest:
                    if key not in entries:
                        value = lookup(key)
                        if value is not None:
                            entries[key] = value
        written = []
        for chunk, value in self._encode(dict(entries)):
            number = self._next
            self._next += 1
            key = block_key(partition, self._time(partition, now_ns))
            self._register(number, partition, key, chunk)
            self._unacked.setdefault(partition, deque()).append(number)
            written.append((key, value, number))
        return written

    def _time(self, partition: int, now_ns: int) -> int:
        """A new block's time in ``partition``: ``now_ns``, or past the latest block's
        there (a key written again would replace that block: a clock behind the
        previous owner's, or standing still in tests)."""
        latest = self._latest.get(partition, -1)
        chosen = self._latest[partition] = max(now_ns, latest + 1)
        return chosen

    def _encode(self, entries: dict[str, Any]) -> Iterator[tuple[list[str], bytes]]:
        value = orjson.dumps(entries)
        if len(value) <= self.budget or len(entries) == 1:
            yield list(entries), value
            return
        keys = list(entries)
        half = len(keys) // 2
        yield from self._encode({key: entries[key] for key in keys[:half]})
        yield from self._encode({key: entries[key] for key in keys[half:]})

    def _register(self, number: int, partition: int, key: str, newest: Iterable[str]) -> None:
        block = self._blocks[number] = _Block(partition, key, 0, set())
        self._numbers[key] = number
        where, blocks = self._where, self._blocks
        for entry_key in newest:
            block.size += 1
            block.newest.add(entry_key)
            earlier = where.get(entry_key)
            where[entry_key] = number
            if earlier is None or earlier == number:
                continue
            old = blocks[earlier]
            old.newest.discard(entry_key)
            old.superseded_by = number
            if not old.newest:
                self._dead.setdefault(old.partition, []).append(earlier)
                self._sparse.get(old.partition, set()).discard(earlier)
            elif len(old.newest) * SPARSE < old.size:
                self._sparse.setdefault(old.partition, set()).add(earlier)

    def sent(self, number: int, future: Any) -> None:
        """The broker's answer to block ``number`` (its record's ``on_sent``)."""
        if future.cancelled() or future.exception() is not None:
            return  # never durable: nothing it replaced is deleted (until a restart)
        block = self._blocks.get(number)
        if block is None:
            return
        self._acked.add(number)
        unacked = self._unacked.get(block.partition)
        while unacked and unacked[0] in self._acked:
            done = unacked.popleft()
            self._acked.discard(done)
            self._durable[block.partition] = done

    def deletable(self, partition: int) -> list[str]:
        """The keys of ``partition``'s blocks to delete now (tombstones to send): dead,
        and every block up to the last that took an entry from them acknowledged;
        forgotten here."""
        dead = self._dead.get(partition)
        if not dead:
            return []
        durable = self._durable.get(partition, -1)
        keys, waiting = [], []
        for number in dead:
            block = self._blocks[number]
            if block.superseded_by <= durable:
                keys.append(block.key)
                del self._blocks[number]
                del self._numbers[block.key]
            else:
                waiting.append(number)
        self._dead[partition] = waiting
        return keys

    def reindex(self, store: Any, owned: Container[int]) -> int:
        """After a recovery, before any batch: the blocks in ``store`` (the table's store,
        a mutable mapping) of the rollup partitions ``owned`` taken apart into their
        newest entries, each under its own key, and registered (as acknowledged: they
        are in the changelog); the block keys leave the store. The entries of the
        partitions not owned any more leave the store, and what is known of them is
        forgotten, as Faust drops the records it recovered for them (their new owner
        reads their blocks). Returns how many blocks were taken apart."""
        for number in [n for n, block in self._blocks.items() if block.partition not in owned]:
            block = self._blocks.pop(number)
            del self._numbers[block.key]
            for entry_key in block.newest:
                if self._where.get(entry_key) == number:
                    del self._where[entry_key]
                    store.pop(entry_key, None)
        for partitions in (self._unacked, self._dead, self._sparse, self._durable, self._latest):
            for partition in [p for p in partitions if p not in owned]:
                del partitions[partition]
        found = sorted(
            (
                (_time_of(key), key)
                for key in list(store.keys())
                if is_block_key(key) and partition_of(key) in owned
            ),
        )
        for time_ns, key in found:
            block = store[key]
            del store[key]
            if key in self._numbers:
                # Known already: recovered again (a partition kept through a rebalance).
                # The store is at least as new; it only fills a key the store lacks.
                for entry_key, entry in (block or {}).items():
                    if store.get(entry_key) is None:
                        store[entry_key] = entry
                continue
            partition = partition_of(key)
            self._latest[partition] = max(self._latest.get(partition, -1), time_ns)
            newest = []
            for entry_key, entry in (block or {}).items():
                current = store.get(entry_key)
                if current is None or _count(entry) >= _count(current):
                    store[entry_key] = entry
                    newest.append(entry_key)
            number = self._next
            self._next += 1
            self._register(number, partition, key, newest)
            if not newest:
                self._dead.setdefault(partition, []).append(number)
            if not self._unacked.get(partition):
                self._durable[partition] = number
        return len(found)
