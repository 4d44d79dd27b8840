"""The stream's handlers run without a broker, for tests.

:class:`Pipeline` wires the results handler, the qrels release and the rollup
fold as a worker wires them, over memory tables (``outputs.MemoryTable``) and
in-memory topics, and lets a test play what a cluster does to a worker:

- ``feed`` appends records to a results partition and hands them to the results
  handler; ``redeliver`` hands records already fed to it again (a restart before
  the offset commit);
- ``judge`` stores a golden query and releases its parked results, as the qrels
  agent does; ``flush`` sends the pending contributions (once due); ``commit``
  sends them too and writes out the fold's writes behind (every offset commit
  does); ``fold`` folds what the rollup topic holds and has not been folded,
  ``refold`` folds part of it again (the rollup topic redelivered);
- ``crash`` loses what a worker keeps only in memory (pending contributions, the
  dedupe index, the writes behind: their keys go back to their last changelog
  values) and rebuilds the handlers over the tables as recovered, as a restart
  does; the next ``fold`` starts at the rollup offsets of the last ``commit``.
  ``lose_writes`` undoes the table writes since a point (a crash before they
  reached the changelog).

It reads back what a user would: the scored records, the dead letters and the
run documents of the API.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, NamedTuple

import orjson

from schemas import GoldenQuery, RetrievalResult
from scorer.settings import Settings
from scorer.stream import events, run_state, stored
from scorer.stream.outputs import MemoryTable, Output, Source
from scorer.stream.outputs import _encode as encode
from scorer.stream.placement import HomePartitions, Misplaced
from scorer.stream.qrels import release
from scorer.stream.results import ParkedCount, ResultBatches, Scoring
from scorer.stream.rollups import RollupFold
from scorer.stream.telemetry import Telemetry

TABLES = ("qrels", "parked", "rollups", "run_queries", "rollup_seen")

_ACKNOWLEDGED: Future[Any] = Future()
"""What the broker answers every record sent here with (an ``on_sent``'s argument)."""
_ACKNOWLEDGED.set_result(None)


class Record(NamedTuple):
    """An input record as a handler reads it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None
    timestamp: int | None = None


class Pipeline:
    """The results, qrels and rollup handlers of one worker that owns every
    partition, on memory tables and topics. ``clock``: epoch seconds (the fold's
    dedupe window and trend buckets)."""

    def __init__(
        self,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        **overrides: Any,
    ) -> None:
        self.settings = settings or Settings(kafka_bootstrap_servers="harness:9092", **overrides)
        self.clock = clock
        self.homes = HomePartitions(self.settings.partitions)
        self.tables = {name: MemoryTable(f"{name}-changelog") for name in TABLES}
        self.topics: dict[str, dict[int, list[Record]]] = {}
        """Every record sent, by topic and partition, in order."""
        self._folded: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        """Per rollup partition, the offset a restart folds from (as committed)."""
        self.changelogs: dict[str, dict[bytes, bytes | None]] = {}
        """The last changelog record of each key, by changelog topic."""
        self.changelog_writes: dict[str, int] = {}
        """How many records each changelog topic was sent."""
        self.start()

    def start(self) -> None:
        """The handlers over the tables as they are stored (a start, a restart)."""
        settings = self.settings
        self.telemetry = Telemetry(settings.facet_allowlist, settings.facet_max_values)
        self.scoring = Scoring(settings, self.telemetry)
        self.parked = ParkedCount()
        parked = self.tables["parked"].data.values()
        self.parked.reset(sum(len(stored.decode_parked(v)) for v in parked))
        self.results = ResultBatches(
            settings,
            self.telemetry,
            qrels=self.tables["qrels"],
            parked=self.tables["parked"],
            scoring=self.scoring,
            parked_count=self.parked,
            misplaced=Misplaced(settings.partitions, self.telemetry.misplaced),
        )
        self.rollups = RollupFold(
            settings,
            self.telemetry,
            rollups=self.tables["rollups"],
            queries=self.tables["run_queries"],
            seen=self.tables["rollup_seen"],
            clock=self.clock,
        )
        self.rollups.reindex(self.tables["rollup_seen"].data.items(), range(settings.partitions))
        self.rollups.reindex_entries(range(settings.partitions))

    # ------------------------------------------------------------------ inputs

    def feed(
        self, results: Iterable[RetrievalResult | bytes | Record], partition: int | None = None
    ) -> list[Output]:
        """Append ``results`` (events, raw values without a key, or records) to the
        results topic and hand them to the results handler, one batch per partition:
        each on its key's home partition (murmur2, as producers place them) unless
        ``partition`` says where (a record without a key: partition 0)."""
        batches: dict[int, list[Record]] = {}
        for item in results:
            if isinstance(item, RetrievalResult):
                item = Record(0, item.query_id.encode(), item.to_json_bytes())
            elif not isinstance(item, Record):
                item = Record(0, None, item)
            where = partition
            if where is None:
                where = 0 if item.key is None else self.homes.of(item.key)
            log = self.topic(self.settings.results_topic, where)
            record = item._replace(offset=len(log))
            log.append(record)
            batches.setdefault(where, []).append(record)
        outputs = []
        for where, batch in sorted(batches.items()):
            outputs += self._handle(where, batch)
        return outputs

    def redeliver(self, partition: int = 0, start: int = 0, end: int | None = None) -> list[Output]:
        """Hand results partition ``partition``'s records from offset ``start`` (to
        ``end``) to the handler again: a restart before their offsets were committed."""
        log = self.topic(self.settings.results_topic, partition)
        return self._handle(partition, log[start:end])

    def _handle(self, partition: int, batch: list[Record]) -> list[Output]:
        outputs = self.results(Source(self.settings.results_topic, partition), batch)
        self._send(outputs)
        return outputs

    def judge(self, golden: GoldenQuery) -> list[Output]:
        """Store ``golden``'s qrels and score the results parked for it, as the qrels
        agent does for a qrels event (on its query's home partition)."""
        partition = self.homes.of(golden.query_id.encode())
        log = self.topic(self.settings.qrels_topic, partition)
        offset = len(log)
        log.append(Record(offset, golden.query_id.encode(), golden.to_json_bytes()))
        entry = events.golden_entry(golden)
        self.tables["qrels"].data[golden.query_id] = entry
        waiting = stored.decode_parked(self.tables["parked"].get(golden.query_id))
        outputs = release(
            self.scoring, waiting, entry, self.settings.qrels_topic, partition, offset,
            time.perf_counter(),
        )  # fmt: skip
        outputs += self.scoring.rollup_outputs(force=True)
        self.tables["parked"].delete(golden.query_id, partition, outputs)
        self.parked.add(-len(waiting))
        self._send(outputs)
        return outputs

    def flush(self) -> list[Output]:
        """The pending run contributions sent without an offset commit (a results batch
        sends them once they are due)."""
        outputs = self.scoring.rollup_outputs(force=True)
        self._send(outputs)
        return outputs

    def commit(self) -> list[Output]:
        """What every offset commit sends first: the pending run contributions, and the
        fold's writes behind."""
        outputs = self.scoring.rollup_outputs(force=True)
        self.rollups.write_out(outputs)
        self._send(outputs)
        self._committed = dict(self._folded)
        return outputs

    def settle(self) -> list[Output]:
        """:meth:`commit`, then :meth:`fold` what it sent: the contributions counted."""
        return self.commit() + self.fold()

    # ------------------------------------------------------------------ the fold

    def fold(self) -> list[Output]:
        """Fold every rollup partition's records not folded yet, a batch per partition."""
        outputs = []
        for partition, log in sorted(self.topics.get(self.settings.rollup_topic, {}).items()):
            start = self._folded.get(partition, 0)
            if start < len(log):
                outputs += self.refold(partition, start)
        return outputs

    def refold(self, partition: int, start: int = 0, end: int | None = None) -> list[Output]:
        """Fold rollup partition ``partition``'s records from offset ``start`` (to ``end``)
        again: the rollup topic redelivered."""
        log = self.topic(self.settings.rollup_topic, partition)
        batch = log[start:end]
        if not batch:
            return []
        outputs = self.rollups(Source(self.settings.rollup_topic, partition), batch)
        self._folded[partition] = max(self._folded.get(partition, 0), batch[-1].offset + 1)
        self._send(outputs)
        return outputs

    # ------------------------------------------------------------------ faults

    def snapshot(self) -> dict[str, dict[Any, Any]]:
        """The tables as stored now, and their changelogs (to :meth:`lose_writes` back to)."""
        tables = {name: copy.deepcopy(table.data) for name, table in self.tables.items()}
        logs = {name: dict(log) for name, log in self.changelogs.items()}
        return {**tables, **logs}

    def lose_writes(self, snapshot: dict[str, dict[Any, Any]], tables: Iterable[str]) -> None:
        """Undo the writes to ``tables`` since ``snapshot``: they never reached the
        changelog (a crash), so the recovered tables do not have them."""
        for name in tables:
            table = self.tables[name]
            table.data = copy.deepcopy(snapshot[name])
            self.changelogs[table.changelog] = dict(snapshot.get(table.changelog, {}))

    def crash(self) -> None:
        """Lose what the worker holds only in memory and start again over the tables as
        their changelogs hold them."""
        for name, keys in self.rollups.unsent().items():
            table = self.tables[name]
            written = self.changelogs.get(table.changelog, {})
            for key in keys:
                value = written.get(encode(key))  # the key as its changelog record has it
                if value is None:
                    table.data.pop(key, None)
                else:
                    table.data[key] = orjson.loads(value)
        if self.rollups.blocks is not None:
            # Recovered as Faust recovers a memory store: each key's last changelog
            # record (the per-query entries' blocks among them), taken apart at start.
            table = self.tables["run_queries"]
            written = self.changelogs.get(table.changelog, {})
            table.data = {
                orjson.loads(key): orjson.loads(value)
                for key, value in written.items()
                if value is not None
            }
        # The rollup records folded since the last commit are delivered again.
        self._folded = dict(self._committed)
        self.start()

    # ------------------------------------------------------------------ reading

    def topic(self, name: str, partition: int) -> list[Record]:
        return self.topics.setdefault(name, {}).setdefault(partition, [])

    def records(self, name: str) -> list[Record]:
        """Every record sent to topic ``name``, partition by partition."""
        return [r for _, log in sorted(self.topics.get(name, {}).items()) for r in log]

    def scored(self) -> list[dict[str, Any]]:
        """The scored topic's records, decoded."""
        return [orjson.loads(r.value) for r in self.records(self.settings.scored_topic)]

    def deadletters(self) -> list[Record]:
        return self.records(self.settings.deadletter_topic)

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The run API's document of ``run_id`` (None when no result of it was folded)."""
        state = self.tables["rollups"].get(run_id.encode())
        if state is None:
            return None
        state = stored.decode_run_state(state)
        return run_state.run_document(run_id, state, self.settings.rollup_max_queries)

    def _send(self, outputs: list[Output]) -> None:
        """Into the in-memory topics (the tables' changelog records are already applied)."""
        for output in outputs:
            if output.topic.endswith("-changelog"):
                self.changelogs.setdefault(output.topic, {})[output.key] = output.value
                self.changelog_writes[output.topic] = self.changelog_writes.get(output.topic, 0) + 1
                if output.on_sent is not None:
                    output.on_sent(_ACKNOWLEDGED)
                continue
            partition = output.partition
            if partition is None:
                partition = 0 if output.key is None else self.homes.of(output.key)
            log = self.topic(output.topic, partition)
            log.append(Record(len(log), output.key, output.value, output.headers))
