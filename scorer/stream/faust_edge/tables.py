"""Table reads and writes from a batch handler, without Faust's per-key machinery.

A Faust table write (``table[key] = value``) updates the store and queues a
changelog record in Faust's producer buffer, which one task sends a record at
a time through Faust's topic path (futures, sensors, callbacks): ~100 us a
write on this machine, and when more than 100 wait, every agent's delivery
stalls until they drain. A batch handler writes through a
:class:`ChangelogWriter` instead: the store is updated at once and the
changelog record joins the batch's outputs, sent with them by the batch path
(in the input partition's transaction under exactly_once) and serialized as
Faust would. The persisted offset (rocksdb) follows the broker's answer, as
Faust's own callback does it; a memory store persists none, so its records
carry no callback.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson
from faust.serializers import codecs
from faust.stores.memory import Store as MemoryStore
from faust.types import ModelT
from faust.utils import json as faust_json
from mode.utils.compat import want_bytes

from scorer.stream.faust_edge.consumer import Output
from scorer.stream.outputs import new_tuple


class ChangelogWriter:
    """Reads and writes one Faust table from a batch handler; its changelog records go
    out as batch outputs.

    Reads and writes go to the table's store directly: Faust's ``table[key]`` runs
    its sensors (the monitor) on every key, ~10% of the batch path's CPU. The
    operations are counted here instead and reported per batch
    (:meth:`report`), so Faust's table-operation series still count them."""

    def __init__(self, app: Any, table: Any, exactly_once: bool) -> None:
        self.app = app
        self.table = table
        self.exactly_once = exactly_once
        self.reads = self.writes = self.deletes = 0
        self._changelog: tuple[str, Any, Any, Any] | None = None

    def get(self, key: Any) -> Any:
        """``table.get(key)``: the stored value, None when absent."""
        self.reads += 1
        store = self.table.data
        if type(store) is MemoryStore:
            # Its plain dict: the store's own get is Mapping.get over FastUserDict's
            # __getitem__, two Python calls a key (a few per scored result).
            return store.data.get(key)
        return store.get(key)

    def report(self, monitor: Any) -> None:
        """Add the operations since the last report to ``monitor``'s table counters."""
        count = getattr(monitor, "count_table_operations", None)
        if count is not None:
            table = self.table
            if self.reads:
                count(table, monitor.KEYS_RETRIEVED, self.reads)
            if self.writes:
                count(table, monitor.KEYS_UPDATED, self.writes)
            if self.deletes:
                count(table, monitor.KEYS_DELETED, self.deletes)
        self.reads = self.writes = self.deletes = 0

    def set(self, key: Any, value: Any, partition: int, outputs: list[Output]) -> None:
        """``table[key] = value``, its changelog record appended to ``outputs``."""
        self.writes += 1
        store = self.table.data
        if type(store) is MemoryStore:
            store.data[key] = value  # what its __setitem__ does, without the call
        else:
            store[key] = value
        outputs.append(self._record(key, value, partition))

    def put(self, key: Any, value: Any) -> None:
        """``table[key] = value`` in the store alone: its changelog record is written by a
        later :meth:`write_out` (``rollups.RollupFold``'s write-behind, memory stores
        only)."""
        self.writes += 1
        store = self.table.data
        if type(store) is MemoryStore:
            store.data[key] = value
        else:
            store[key] = value

    def write_out(self, key: Any, partition: int, outputs: list[Output]) -> None:
        """The changelog record of ``key`` as stored now, appended to ``outputs``
        (nothing when absent)."""
        store = self.table.data
        value = store.data.get(key) if type(store) is MemoryStore else store.get(key)
        if value is not None:
            outputs.append(self._record(key, value, partition))

    def delete(self, key: Any, partition: int, outputs: list[Output]) -> None:
        """``del table[key]`` (when present), its tombstone appended to ``outputs``."""
        data = self.table.data
        if key in data:
            self.deletes += 1
            del data[key]
            outputs.append(self._record(key, None, partition))

    def record(
        self,
        key: Any,
        value: Any,
        partition: int,
        outputs: list[Output],
        on_sent: Any = None,
    ) -> None:
        """A changelog record of ``key`` (``value`` None: a tombstone) appended to
        ``outputs``, the store left alone; ``on_sent`` its callback (a memory store's
        records carry none of their own)."""
        self.writes += 1
        output = self._record(key, value, partition)
        if on_sent is not None:
            output = output._replace(on_sent=on_sent)
        outputs.append(output)

    def store(self) -> Any:
        """The table's store: a memory store's plain dict, else the store itself."""
        store = self.table.data
        return store.data if type(store) is MemoryStore else store

    def _record(self, key: Any, value: Any, partition: int) -> Output:
        changelog = self._changelog
        if changelog is None:
            # Looked up once: the table makes its changelog topic on first use.
            table = self.table
            topic = table.changelog_topic
            changelog = self._changelog = (
                topic.get_topic_name(),
                changelog_encoder(
                    partial(topic.prepare_key, key_serializer=table.key_serializer),
                    table.key_serializer,
                    table.key_type,
                ),
                changelog_encoder(
                    partial(topic.prepare_value, value_serializer=table.value_serializer),
                    table.value_serializer,
                    table.value_type,
                ),
                # A memory store keeps no changelog offset: no callback per record.
                None if isinstance(table.data, MemoryStore) else self._persisted,
            )
        name, encode_key, encode_value, on_sent = changelog
        value = None if value is None else encode_value(value)
        return new_tuple(Output, (name, encode_key(key), value, None, None, partition, on_sent))

    def _persisted(self, future: Any) -> None:
        """Where the table's store keeps its changelog offset (rocksdb reads it at start)."""
        if future.cancelled() or future.exception() is not None:
            return
        metadata = future.result()
        store = self.table.data
        if self.exactly_once:
            self.app.tables.persist_offset_on_commit(
                store, metadata.topic_partition, metadata.offset
            )
        else:
            store.set_persisted_offset(metadata.topic_partition, metadata.offset)


def changelog_encoder(prepare: Any, serializer: Any, declared_type: Any) -> Any:
    """A function of a table key or value to its changelog form: what Faust's
    changelog topic makes of it (``prepare``: its ``prepare_key`` or
    ``prepare_value``), without the layers in between when the serializer is
    Faust's plain ``json`` codec and no type is declared.

    Those layers (schema, serializer registry, codec chain) cost ~2 µs a key and
    ~2.5 µs a value here, the encoding itself ~0.5 µs, and a batch writes a
    per-query entry for most of its results. Under the same conditions Faust's
    path leaves bytes as they are and encodes anything else with
    ``faust.utils.json.dumps``; so does this (models still go Faust's way).
    ``tests/unit/test_faust_edge.py`` checks the bytes against Faust's.
    """

    def faust_path(obj: Any) -> Any:
        return prepare(obj)[0]

    codec = codecs.get_codec("json")
    if (
        serializer != "json"
        or declared_type is not None
        or type(codec) is not codecs.json
        or [type(node) for node in codec.nodes] != [codecs.json]
    ):
        return faust_path
    dumps = faust_json.dumps

    def encode(obj: Any) -> Any:
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, ModelT):
            return faust_path(obj)
        return want_bytes(dumps(obj))

    if getattr(faust_json, "orjson", None) is not orjson:
        return encode
    # ``faust_json.dumps`` is then this very call (bytes out): made here without its
    # wrapper, ``want_bytes`` and the model check for the types the worker's tables
    # hold, which are never models. A plain call: through ``functools.partial`` its
    # keywords made a dict a call, 510 against 170 ns for a key (timeit).
    orjson_dumps, on_default = orjson.dumps, faust_json.on_default
    options = orjson.OPT_NON_STR_KEYS | orjson.OPT_UTC_Z
    plain = (str, list, dict)

    def encode_plain(obj: Any) -> Any:
        if type(obj) in plain:
            return orjson_dumps(obj, default=on_default, option=options)
        return encode(obj)

    return encode_plain
