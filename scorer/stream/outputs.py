"""What the stream's handlers produce and the tables they write, without Faust.

The handlers (``results.ResultBatches``, ``rollups.RollupFold``) are plain
functions of their input records: they read and write tables through a
:class:`TableWriter` and return :class:`Output` records for the edge to send.
The Faust edge gives them its changelog-backed writer
(``faust_edge.tables.ChangelogWriter``); tests and ``scorer.stream.testing``
give them a :class:`MemoryTable`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import orjson

new_tuple = tuple.__new__
"""``new_tuple(Cls, (every field, in order))`` makes the named tuple ``Cls(...)`` does, at
about 40% of its cost (130 against 320 ns for an :class:`Output`: the generated
``__new__`` binds its arguments by name): for the ones made per result."""


class Source(NamedTuple):
    """An input partition, as Faust's ``TP`` is (equal to it and hashed alike)."""

    topic: str
    partition: int


class Output(NamedTuple):
    """A record a handler produced."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None
    source: Source | None = None
    """The input partition (a :class:`Source` or Faust's ``TP``) whose transaction it
    belongs in; None: the batch's own."""
    partition: int | None = None
    """The destination partition (None: the topic's partitioner decides)."""
    on_sent: Callable[[Any], None] | None = None
    """Called with the send's future once the broker answered."""


class TableWriter(Protocol):
    """A table as a handler reads and writes it: every write also becomes an output
    (its changelog record), so that it is sent with the batch that made it."""

    def get(self, key: Any) -> Any:
        """The stored value, None when absent."""

    def set(self, key: Any, value: Any, partition: int, outputs: list[Output]) -> None:
        """Store ``value``, its changelog record appended to ``outputs``."""

    def put(self, key: Any, value: Any) -> None:
        """Store ``value`` without a changelog record: the caller writes one with
        :meth:`write_out` later, before the offsets of what it folded are committed
        (``rollups.RollupFold``'s write-behind)."""

    def write_out(self, key: Any, partition: int, outputs: list[Output]) -> None:
        """The changelog record of ``key`` as stored now, appended to ``outputs``
        (nothing when absent: the caller's keys are put, never deleted)."""

    def delete(self, key: Any, partition: int, outputs: list[Output]) -> None:
        """Delete ``key`` when present, its tombstone appended to ``outputs``."""

    def record(
        self,
        key: Any,
        value: Any,
        partition: int,
        outputs: list[Output],
        on_sent: Callable[[Any], None] | None = None,
    ) -> None:
        """A changelog record of ``key`` (``value`` None: a tombstone) appended to
        ``outputs``, the store left alone (``entry_blocks``: the blocks of per-query
        entries live in the changelog only)."""

    def store(self) -> Any:
        """The table's store itself, a mutable mapping (taken apart after a recovery:
        ``entry_blocks.EntryBlocks.reindex``)."""


class MemoryTable:
    """A :class:`TableWriter` over a dict: the table of a handler run without a
    broker. Its changelog records go to the topic ``changelog`` with the key and
    value as JSON (bytes as they are), so a test can read what would be written."""

    def __init__(self, changelog: str, data: dict[Any, Any] | None = None) -> None:
        self.changelog = changelog
        self.data: dict[Any, Any] = {} if data is None else data

    def get(self, key: Any) -> Any:
        return self.data.get(key)

    def set(self, key: Any, value: Any, partition: int, outputs: list[Output]) -> None:
        self.data[key] = value
        outputs.append(Output(self.changelog, _encode(key), _encode(value), partition=partition))

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def write_out(self, key: Any, partition: int, outputs: list[Output]) -> None:
        value = self.data.get(key)
        if value is not None:
            outputs.append(
                Output(self.changelog, _encode(key), _encode(value), partition=partition)
            )

    def delete(self, key: Any, partition: int, outputs: list[Output]) -> None:
        if key in self.data:
            del self.data[key]
            outputs.append(Output(self.changelog, _encode(key), None, partition=partition))

    def record(
        self,
        key: Any,
        value: Any,
        partition: int,
        outputs: list[Output],
        on_sent: Callable[[Any], None] | None = None,
    ) -> None:
        encoded = None if value is None else _encode(value)
        outputs.append(
            Output(self.changelog, _encode(key), encoded, None, None, partition, on_sent)
        )

    def store(self) -> dict[Any, Any]:
        return self.data


def _encode(obj: Any) -> bytes:
    return obj if isinstance(obj, bytes) else orjson.dumps(obj, default=_as_list)


def _as_list(obj: Any) -> Any:
    """Named tuples (a parked item) as JSON arrays, as Faust's codec writes them."""
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")
