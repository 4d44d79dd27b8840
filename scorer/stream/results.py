"""The results topic, a fetched batch at a time: decode, join, score, park, dead-letter.

:class:`ResultBatches` is the batch handler the Faust edge calls with every
fetched batch of one results partition (``faust_edge.Edge.route``). It runs in
one synchronous pass and returns the records to send; the edge sends them (in
the partition's transaction under exactly_once) and books the batch's offsets.
Each record's fate is decided inside the pass, so one bad record is one dead
letter and the rest of the batch is scored. Parking writes are folded to one
table write per query per batch.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from schemas import RetrievalResult
from scorer.settings import Settings
from scorer.stream import events, limits, run_state
from scorer.stream.outputs import Output, Source, TableWriter, new_tuple
from scorer.stream.placement import Misplaced
from scorer.stream.stored import (
    ParkedItem,
    SourcePosition,
    decode_parked,
    decode_qrels_entry,
    encode_parked,
    rollup_row,
)
from scorer.stream.telemetry import Telemetry


class ParkedCount:
    """How many results wait in this worker's parking now (a plain counter: the
    results path adds, the qrels and expiry paths take away, the sweep resets it
    from the table)."""

    def __init__(self) -> None:
        self.value = 0

    def full(self, limit: int) -> bool:
        return self.value >= limit

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def reset(self, value: int) -> int:
        self.value = value
        return value


class Scoring:
    """Scores results against their qrels entries and queues their run contributions;
    shared by the results batches and the qrels agent's releases."""

    def __init__(
        self,
        settings: Settings,
        telemetry: Telemetry,
        pending: run_state.PendingRollups | None = None,
    ) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.pending = run_state.PendingRollups() if pending is None else pending
        self.judgments = events.JudgmentsCache()

    def output(
        self,
        result: RetrievalResult,
        entry: dict[str, Any],
        started: float,
        position: SourcePosition,
        scored_at: str | None = None,
        counted: bool = True,
    ) -> Output:
        """Score ``result`` against its qrels entry (decoded): its scored record, with the run
        rollup contribution queued and the telemetry observed. ``scored_at``: its
        ``scoredAt`` in ISO 8601 (now if None; a batch is scored at one time); ``counted``:
        False when the caller counts the scored results itself (a batch, at once)."""
        settings = self.settings
        query_id = result.query_id
        scored = events.score_result(
            result,
            entry,
            settings.default_retrieval_k,
            scored_at,
            self.judgments.of(query_id, entry),
        )
        confidence = scored.confidence
        self.pending.add_row(
            result.run_id.encode(),
            rollup_row(
                position,
                result.result_id,
                query_id,
                list(scored.values),
                scored.facets,
                confidence,
                entry["fingerprint"],
            ),
            started,
        )
        telemetry = self.telemetry
        if counted:
            telemetry.scored.inc()
        telemetry.observe_metrics(scored.values, scored.facets, confidence)
        telemetry.latency.observe(time.perf_counter() - started)
        return new_tuple(
            Output,
            (settings.scored_topic, query_id.encode(), scored.payload, None, None, None, None),
        )

    def rollup_outputs(self, force: bool = False) -> list[Output]:
        """The pending rollup contributions as records of the rollup topic, one per input
        partition and run, when the flush rule says so (or ``force``); each goes in the
        transaction of the input partition that produced it."""
        pending = self.pending
        settings = self.settings
        if not pending.size:
            return []
        if not force and not pending.due(
            time.perf_counter(), settings.rollup_batch_size, settings.rollup_batch_seconds
        ):
            return []
        return [
            Output(
                settings.rollup_topic, run_key, value, source=Source(source.topic, source.partition)
            )
            for source, run_key, value in pending.drain(settings.producer_max_request_size)
        ]

    def deadletter(
        self,
        error: events.RejectedEvent,
        input_name: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
    ) -> Output:
        """The dead letter of an input record, with the reason in its headers (counted);
        truncated, with headers saying so, when it would not fit the producer's request
        size (``limits.fit_deadletter``)."""
        self.telemetry.count_deadletter(input_name, error.error_class)
        settings = self.settings
        letter = limits.fit_deadletter(
            key,
            value,
            list(headers or []),
            events.deadletter_headers(error, topic, partition, offset),
            settings.producer_max_request_size,
        )
        if letter.truncated:
            self.telemetry.deadletters_truncated.labels(input_name).inc()
        return Output(settings.deadletter_topic, letter.key, letter.value, letter.headers)


class ResultBatches:
    """The batch handler of the results topic: ``qrels`` and ``parked`` are the two
    tables it reads and writes (the Faust edge's changelog writers in the worker,
    ``outputs.MemoryTable`` in tests)."""

    def __init__(
        self,
        settings: Settings,
        telemetry: Telemetry,
        qrels: TableWriter,
        parked: TableWriter,
        scoring: Scoring | None = None,
        parked_count: ParkedCount | None = None,
        misplaced: Misplaced | None = None,
    ) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.qrels = qrels
        self.parked_out = parked
        self.scoring = Scoring(settings, telemetry) if scoring is None else scoring
        self.parked = ParkedCount() if parked_count is None else parked_count
        self.misplaced = (
            Misplaced(settings.partitions, telemetry.misplaced) if misplaced is None else misplaced
        )

    def __call__(self, tp: Any, records: list[Any]) -> list[Output]:
        telemetry = self.telemetry
        scoring = self.scoring
        qrels = self.qrels
        started = time.perf_counter()
        now = time.time()
        scored_at = datetime.fromtimestamp(now, UTC).isoformat()
        scored = 0
        outputs: list[Output] = []
        parked: dict[str, list[ParkedItem]] = {}
        telemetry.result_inputs.inc(len(records))
        misplaced = self.misplaced
        topic, partition = tp.topic, tp.partition
        for record in records:
            rerouted = misplaced.copy_if_misplaced(
                topic, partition, record.offset, record.key, record.value, record.headers
            )
            if rerouted is not None:
                outputs.append(rerouted)
                continue
            try:
                result = events.decode_keyed(events.decode_result, record.key, record.value)
            except events.RejectedEvent as error:
                outputs.append(
                    scoring.deadletter(
                        error, "results", topic, partition, record.offset,
                        record.key, record.value, record.headers,
                    )
                )  # fmt: skip
                continue
            if record.timestamp:
                telemetry.age.observe(max(0.0, now - record.timestamp / 1000.0))
            entry = qrels.get(result.query_id)
            if entry is not None:
                entry = decode_qrels_entry(entry)
                position = new_tuple(SourcePosition, (topic, partition, record.offset, 0))
                outputs.append(scoring.output(result, entry, started, position, scored_at, False))
                scored += 1
                continue
            self._park(result, record.value, partition, now, parked)
        if scored:
            telemetry.scored.inc(scored)
        for query_id, items in parked.items():
            self.parked_out.set(query_id, encode_parked(items), partition, outputs)
        outputs.extend(scoring.rollup_outputs())
        return outputs

    def _park(
        self,
        result: RetrievalResult,
        raw: bytes,
        partition: int,
        now: float,
        parked: dict[str, list[ParkedItem]],
    ) -> None:
        """Park a result whose qrels have not arrived (into ``parked``, written to the
        table once per query at the end of the batch)."""
        settings = self.settings
        telemetry = self.telemetry
        if self.parked.full(settings.parking_max_total):
            telemetry.count_unjudged()
            return
        query_id = result.query_id
        current = parked.get(query_id)
        if current is None:
            current = decode_parked(self.parked_out.get(query_id))
        decision = events.park(
            current, raw, result.result_id, now, settings.parking_max_per_query, partition,
            settings.parking_max_bytes_per_query,
        )  # fmt: skip
        if not decision.added:
            if decision.oversized:
                telemetry.count_unjudged()
            else:
                telemetry.results.labels("duplicate").inc()
            return
        parked[query_id] = decision.parked
        telemetry.parked_total.inc()
        telemetry.parked.set(self.parked.add(1 - len(decision.evicted)))
        if decision.evicted:
            telemetry.count_unjudged(len(decision.evicted))
