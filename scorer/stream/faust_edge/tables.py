"""Table writes from a batch handler, without Faust's per-write machinery.

A Faust table write (``table[key] = value``) updates the store and queues a
changelog record in Faust's producer buffer, which one task sends a record at
a time through Faust's topic path (futures, sensors, callbacks): ~100 us a
write on this machine, and when more than 100 wait, every agent's delivery
stalls until they drain. A batch handler writes through a
:class:`ChangelogWriter` instead: the store is updated at once and the
changelog record joins the batch's outputs, sent with them by the batch path
(in the input partition's transaction under exactly_once) and serialized as
Faust would. The persisted offset (rocksdb) follows the broker's answer, as
Faust's own callback does it.
"""

from __future__ import annotations

from typing import Any

from scorer.stream.faust_edge.consumer import Output


class ChangelogWriter:
    """Writes to one Faust table whose changelog records go out as batch outputs."""

    def __init__(self, app: Any, table: Any) -> None:
        self.app = app
        self.table = table

    def set(self, key: Any, value: Any, partition: int, outputs: list[Output]) -> None:
        """``table[key] = value``, its changelog record appended to ``outputs``."""
        self.table.data[key] = value
        outputs.append(self._record(key, value, partition))

    def delete(self, key: Any, partition: int, outputs: list[Output]) -> None:
        """``del table[key]`` (when present), its tombstone appended to ``outputs``."""
        data = self.table.data
        if key in data:
            del data[key]
            outputs.append(self._record(key, None, partition))

    def _record(self, key: Any, value: Any, partition: int) -> Output:
        table = self.table
        topic = table.changelog_topic
        key_bytes, _ = topic.prepare_key(key, table.key_serializer)
        value_bytes = None
        if value is not None:
            value_bytes, _ = topic.prepare_value(value, table.value_serializer)
        return Output(
            topic.get_topic_name(),
            key_bytes,
            value_bytes,
            partition=partition,
            on_sent=self._persisted,
        )

    def _persisted(self, future: Any) -> None:
        """Where the table's store keeps its changelog offset (rocksdb reads it at start)."""
        if future.cancelled() or future.exception() is not None:
            return
        metadata = future.result()
        store = self.table.data
        if self.app.in_transaction:
            self.app.tables.persist_offset_on_commit(
                store, metadata.topic_partition, metadata.offset
            )
        else:
            store.set_persisted_offset(metadata.topic_partition, metadata.offset)
