"""The run rollups' dedupe window: where each run counted each resultId, compactly.

A counted result leaves a :class:`~scorer.stream.run_state.SeenEntry` for
``rollup_dedupe_seconds``; at 5,000 results/s over 300 s that is 1.5 M entries
per worker, so both copies of the window are kept as packed bytes and arrays,
not as Python objects (a dict of tuples held ~300 bytes per id):

- **the table** (``rollup_seen``, one record per folded batch, a *block*): the
  entries of a batch in the binary format of :func:`encode_block`, 30 bytes an
  entry (a 128-bit hash of ``run\\x1fresultId``, the input position, the stream
  as an index into the block's list of streams);
- **the index** (:class:`SeenIndex`), which finds a resultId's block: the hashes
  and block numbers in sorted numpy arrays (20 bytes an entry), the latest
  entries in a small dict until they are merged in. A hit (a resend: rare) reads
  the entry back from its block, which the index shares with the table.

The hash is xxh3-128 of the UTF-8 key: two different ids of a window of ``n``
collide with probability about n² / 2^129 (1.5 M ids: 3e-27), so the check is as
exact as the dict it replaces. Blocks written by earlier versions (JSON, with the
keys themselves) are read through :func:`decode_block` too.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import xxhash

from scorer.stream.run_state import SeenEntry
from scorer.stream.stored import UnknownVersion

BLOCK_VERSION = 2
"""The first byte of a block in the binary format (a JSON block starts with ``[``)."""
_BINARY = bytes([BLOCK_VERSION])

ENTRY = np.dtype(
    [("hi", "<i8"), ("lo", "<i8"), ("offset", "<i8"), ("seq", "<u4"), ("stream", "<u2")]
)
"""One entry of a binary block: 30 bytes, packed."""

_HEADER = struct.Struct("<BdHH")
"""version, seenAt, rollup partition, number of streams; then each stream as a
uint16 length and UTF-8, a uint32 count of entries, the entries."""
_LENGTH = struct.Struct("<H")
_COUNT = struct.Struct("<I")
_MASK = (1 << 64) - 1
_HALF = 1 << 63
"""Each 64-bit half is stored less 2^63, as a signed integer: numpy compares and
searches int64 arrays against Python ints without a conversion (~1 µs saved a lookup)."""

_hash128 = xxhash.xxh3_128_intdigest


def key_hash(seen_key: str) -> tuple[int, int]:
    """The 128-bit hash of a seen key (``run\x1fresultId``) as its two halves, as stored."""
    return split_hash(_hash128(seen_key.encode()))


def split_hash(digest: int) -> tuple[int, int]:
    return (digest >> 64) - _HALF, (digest & _MASK) - _HALF


def encode_block(
    seen_at: float,
    partition: int,
    entries: Mapping[str, SeenEntry],
    digests: list[int] | None = None,
) -> bytes:
    """A folded batch's new entries as one ``rollup_seen`` record (version 2);
    ``digests``: their keys' 128-bit hashes, when the caller has them."""
    if digests is None:
        digests = [_hash128(seen_key.encode()) for seen_key in entries]
    count = len(digests)
    values = entries.values()
    streams: dict[str, int] = {}
    rows = np.empty(count, ENTRY)
    rows["hi"] = np.fromiter(((d >> 64) - _HALF for d in digests), np.int64, count)
    rows["lo"] = np.fromiter(((d & _MASK) - _HALF for d in digests), np.int64, count)
    rows["offset"] = np.fromiter((e.offset for e in values), np.int64, count)
    rows["seq"] = np.fromiter((e.seq for e in values), np.uint32, count)
    rows["stream"] = np.fromiter(
        (streams.setdefault(e.stream, len(streams)) for e in values), np.uint16, count
    )
    parts = [_HEADER.pack(BLOCK_VERSION, seen_at, partition, len(streams))]
    for name in streams:
        encoded = name.encode()
        parts += [_LENGTH.pack(len(encoded)), encoded]
    parts.append(_COUNT.pack(count))
    parts.append(rows.tobytes())
    return b"".join(parts)


def block_size(streams: Iterable[str], entries: int) -> int:
    """The bytes of a block of ``entries`` entries from ``streams``."""
    names = sum(_LENGTH.size + len(name.encode()) for name in streams)
    return _HEADER.size + names + _COUNT.size + entries * ENTRY.itemsize


class Block:
    """A decoded binary block: its time, rollup partition, streams and entries."""

    __slots__ = ("entries", "partition", "seen_at", "streams")

    def __init__(self, value: bytes) -> None:
        version, self.seen_at, self.partition, count = _HEADER.unpack_from(value)
        if version != BLOCK_VERSION:
            raise UnknownVersion("rollup_seen block", version)
        position = _HEADER.size
        streams = []
        for _ in range(count):
            (length,) = _LENGTH.unpack_from(value, position)
            position += _LENGTH.size
            streams.append(value[position : position + length].decode())
            position += length
        self.streams = streams
        (entries,) = _COUNT.unpack_from(value, position)
        self.entries = np.frombuffer(value, ENTRY, entries, position + _COUNT.size)

    def find(self, hi: int, lo: int) -> SeenEntry | None:
        """The entry of the key with this hash, None when the block has none."""
        entries = self.entries
        found = np.flatnonzero((entries["hi"] == hi) & (entries["lo"] == lo))
        if not len(found):
            return None
        row = entries[found[-1]]
        return SeenEntry(
            self.streams[row["stream"]], int(row["offset"]), int(row["seq"]),
            self.seen_at, self.partition,
        )  # fmt: skip


def decode_block(key: str, stored: Any) -> bytes:
    """A ``rollup_seen`` record as a binary block: as it is when it is one; a block or
    per-result entry of the JSON formats of earlier versions (bytes, or as a JSON
    table decoded it) re-encoded; a binary block of a later version refused
    (``stored.UnknownVersion``)."""
    if isinstance(stored, (bytes, bytearray, memoryview)):
        stored = bytes(stored)
        if stored[:1] == _BINARY:
            return stored
        if not stored:
            raise UnknownVersion("rollup_seen block", shape="empty")
        if stored[:1] != b"[":
            raise UnknownVersion("rollup_seen block", stored[0])
        stored = orjson.loads(stored)
    seen_at, partition, entries = decode_json_record(key, stored)
    return encode_block(seen_at, partition, entries)


def decode_json_record(key: str, stored: Sequence[Any]) -> tuple[float, int, dict[str, SeenEntry]]:
    """A ``rollup_seen`` record of the JSON formats of earlier versions as (seenAt,
    rollup partition, its entries by seen key): version 1, a block ``[seenAt,
    partition, [[seenKey, stream, offset, seq], ...]]``; version 0, one entry
    ``[stream, offset, seq, seenAt, partition]`` under its seen key."""
    if isinstance(stored[0], str):
        entry = SeenEntry(*stored)
        return entry.seen_at, entry.partition, {key: entry}
    seen_at, partition, rows = stored
    return (
        seen_at,
        partition,
        {
            seen_key: SeenEntry(stream, offset, seq, seen_at, partition)
            for seen_key, stream, offset, seq in rows
        },
    )


def split_entries(entries: Mapping[str, SeenEntry], budget: int) -> list[dict[str, SeenEntry]]:
    """A batch's new entries as blocks of at most ``budget`` bytes each, in their order
    (a block is one changelog record; a rollup batch can bring 100,000s)."""
    blocks: list[dict[str, SeenEntry]] = [{}]
    streams: set[str] = set()
    size = block_size((), 0)
    for seen_key, entry in entries.items():
        grows = ENTRY.itemsize
        if entry.stream not in streams:
            grows += _LENGTH.size + len(entry.stream.encode())
        if blocks[-1] and size + grows > budget:
            blocks.append({})
            streams = set()
            size = block_size((), 0)
            grows = ENTRY.itemsize + _LENGTH.size + len(entry.stream.encode())
        blocks[-1][seen_key] = entry
        streams.add(entry.stream)
        size += grows
    return blocks


class SeenIndex:
    """Where each run counted each resultId in the window, for the rollup partitions
    this worker folds, and the blocks of the ``rollup_seen`` table that hold them.

    The hashes are in arrays sorted by their high half, each with its block's
    number (blocks are numbered in the order written); of two entries of one key,
    the later in the arrays is the newer (a renewal), and wins. Entries added since
    the last merge wait in a dict (:attr:`merge_at` of them at most), then go into
    the arrays at once, in one pass. Rebuilt from the table (:meth:`rebuild`) after
    every table recovery (a start, a rebalance), before any batch is folded. Blocks
    expire whole, in the order written (:meth:`expired`).
    """

    MIN_MERGE = 4096

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._hi = np.empty(0, np.int64)
        self._lo = np.empty(0, np.int64)
        self._number = np.empty(0, np.int32)
        self._recent: dict[int, int] = {}
        """128-bit hash -> block number, of the entries added since the last merge."""
        self._blocks: dict[int, tuple[float, int, str, bytes]] = {}
        """The live blocks by number: (seenAt, partition, table key, value)."""
        self._next_number = 0
        self._order: dict[int, deque[int]] = {}
        self._decoded: tuple[int, Block] | None = None

    @property
    def merge_at(self) -> int:
        """How many entries wait in the dict: a 32nd of those in the arrays (a merge
        moves every array once: ~10 ms at 1.5 M entries), at least :attr:`MIN_MERGE`."""
        return max(self.MIN_MERGE, len(self._hi) >> 5)

    def __len__(self) -> int:
        """Entries held (a renewed one counts twice until its older block expires)."""
        return len(self._hi) + len(self._recent)

    def get(self, seen_key: str) -> SeenEntry | None:
        digest = _hash128(seen_key.encode())
        number = self._recent.get(digest)
        hi, lo = split_hash(digest)
        if number is None:
            his = self._hi
            at, end = his.searchsorted(hi), len(his)
            # Equal high halves are rare (2^-64 a pair): the last match is the newest.
            while at < end and his.item(at) == hi:
                if self._lo.item(at) == lo:
                    number = self._number.item(at)
                at += 1
        block = None if number is None else self._blocks.get(number)
        if block is None:
            return None
        cached = self._decoded
        if cached is None or cached[0] != number:
            cached = self._decoded = (number, Block(block[3]))
        return cached[1].find(hi, lo)

    def get_many(self, seen_keys: Iterable[str]) -> dict[str, SeenEntry]:
        """:meth:`get` of many keys at once (a folded batch's), as a dict of those
        found: one vectorised search instead of one per key (~0.7 against ~2.6 µs a
        key, nearly all of them absent)."""
        keys = list(seen_keys)
        digests = [_hash128(key.encode()) for key in keys]
        found: dict[str, SeenEntry] = {}
        candidates = [n for n, digest in enumerate(digests) if digest in self._recent]
        his = self._hi
        if len(his) and keys:
            wanted = np.fromiter(((d >> 64) - _HALF for d in digests), np.int64, len(keys))
            at = np.minimum(his.searchsorted(wanted), len(his) - 1)
            candidates += np.flatnonzero(his[at] == wanted).tolist()
        for n in candidates:
            entry = self.get(keys[n])
            if entry is not None:
                found[keys[n]] = entry
        return found

    def add(
        self, partition: int, key: str, seen_at: float, entries: Mapping[str, SeenEntry]
    ) -> bytes:
        """Remember a folded batch's new ``entries`` (recorded at ``seen_at``) as the
        block stored under ``key``; returns the block's table value."""
        digests = [_hash128(seen_key.encode()) for seen_key in entries]
        value = encode_block(seen_at, partition, entries, digests)
        number = self._register(partition, key, seen_at, value)
        self._recent.update(dict.fromkeys(digests, number))
        if len(self._recent) >= self.merge_at:
            self._merge()
        return value

    def _register(self, partition: int, key: str, seen_at: float, value: bytes) -> int:
        number = self._next_number
        self._next_number += 1
        self._blocks[number] = (seen_at, partition, key, value)
        self._order.setdefault(partition, deque()).append(number)
        return number

    def _merge(self) -> None:
        """The entries waiting in the dict into the arrays, after any of equal hash."""
        recent = self._recent
        if not recent:
            return
        count = len(recent)
        his = np.fromiter(((d >> 64) - _HALF for d in recent), np.int64, count)
        los = np.fromiter(((d & _MASK) - _HALF for d in recent), np.int64, count)
        numbers = np.fromiter(recent.values(), np.int32, count)
        self._recent = {}
        order = np.argsort(his, kind="stable")
        his, los, numbers = his[order], los[order], numbers[order]
        at = np.searchsorted(self._hi, his, side="right")
        self._hi = np.insert(self._hi, at, his)
        self._lo = np.insert(self._lo, at, los)
        self._number = np.insert(self._number, at, numbers)

    def rebuild(
        self, stored: Iterable[tuple[str, Any]], partitions: Container[int] | None = None
    ) -> None:
        """Forget everything, then index the table's records (``stored``) of the rollup
        ``partitions`` (None: all): after every table recovery, before any batch."""
        self._clear()
        found = []
        for key, value in stored:
            data = decode_block(key, value)  # the table's own bytes when binary: shared
            block = Block(data)
            if partitions is None or block.partition in partitions:
                found.append((block.seen_at, key, block, data))
        found.sort(key=lambda item: item[0])
        his, los, numbers = [self._hi], [self._lo], [self._number]
        for seen_at, key, block, data in found:
            number = self._register(block.partition, key, seen_at, data)
            his.append(block.entries["hi"])
            los.append(block.entries["lo"])
            numbers.append(np.full(len(block.entries), number, np.int32))
        # In block order, so a stable sort by the high half keeps the newest last.
        all_his = np.concatenate(his)
        order = np.argsort(all_his, kind="stable")
        self._hi = all_his[order]
        self._lo = np.concatenate(los)[order]
        self._number = np.concatenate(numbers)[order]

    def expired(self, partition: int, before: float) -> list[str]:
        """Forget ``partition``'s blocks recorded before ``before`` (epoch seconds);
        returns their table keys. An entry renewed by a later block is kept."""
        order = self._order.get(partition)
        keys: list[str] = []
        gone: list[int] = []
        while order and self._blocks[order[0]][0] < before:
            number = order.popleft()
            keys.append(self._blocks.pop(number)[2])
            gone.append(number)
        if gone:
            self._decoded = None
            blocks = self._blocks
            self._recent = {d: n for d, n in self._recent.items() if n in blocks}
            keep = ~np.isin(self._number, np.array(gone, np.int32))
            self._hi, self._lo, self._number = self._hi[keep], self._lo[keep], self._number[keep]
        return keys
