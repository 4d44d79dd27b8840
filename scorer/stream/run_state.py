"""Per-run rollups of the scored stream: pure state transitions, no Faust.

The results path sends each scored result's contribution (its position, ids,
metric values and facets) to the rollup topic keyed by run id, several to a
record (:class:`PendingRollups`: one record per run and input partition per
flush, flushed before every offset commit); the rollup topic's batches are
folded into its run's state (a changelog-backed table value). Three things make the
counts exact under at-least-once delivery:

- every contribution carries the position of the input event that produced
  it (``topic/partition/offset/seq``); a run keeps, per input partition, the
  highest position folded in. Contributions are produced in input order per
  input partition, so a redelivered one is at or below that watermark and is
  dropped, whatever the crash.
- a result sent twice by its producer (a retry after a timeout: same
  resultId, new offset) is caught by resultId: for ``window`` seconds the run
  remembers where each resultId was counted (a :class:`SeenEntry`, kept in the
  ``rollup_seen`` table one block per folded batch, ``seen.SeenIndex``). The
  block is a separate changelog record from the run state, so an entry counts
  only when the run state includes it (the run's watermark is at or past the
  entry's position): an entry whose run-state write was lost in a crash does
  not block the recount.
- per-query scores, for paired comparisons, are folded the same way and are
  bounded: at most ``max_queries`` distinct queries per run are tracked. Each
  entry carries the positions folded into it (its *marks*), and is folded by
  them apart from the run state: the run state, the entries and the seen blocks
  are separate changelog records, and when a crash keeps some of a fold's writes
  and loses the others, the redelivered batch folds each result into whichever
  lacks it (:meth:`RunBatch._fold_marked`).

The rows (``stored.RollupRow``) and the run states are written and read back,
earlier formats included, by ``scorer.stream.stored``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scorer.analysis.risk_sketch import RiskSketch
from scorer.core.measures import METRIC_NAMES, NDCG_SLOT, each, unrolled
from scorer.core.metrics import MetricValues, compiled
from scorer.core.rollup import (
    MAX_FACET_VALUES_PER_RUN,
    OTHER_FACET_VALUE,
    MetricAggregate,
    RunRollup,
)
from scorer.stream.outputs import new_tuple
from scorer.stream.stored import (
    SourcePosition,
    decode_run_state,
    encode_rollup_records,
    new_run_state,
)


class SeenEntry(NamedTuple):
    """Where a run counted a resultId (kept in a ``rollup_seen`` block, ``seen.SeenIndex``)."""

    stream: str
    """The input partition, ``topic/partition``."""
    offset: int
    seq: int
    seen_at: float
    """Epoch seconds."""
    partition: int
    """The rollup partition whose changelog holds the entry."""


@dataclass
class PendingRollups:
    """Contributions waiting to be sent, grouped by input partition and run.

    One rollup record per (input partition, run) per flush: its contributions
    are in input order, and under exactly_once it joins the transaction of that
    input partition. ``drain`` returns ``(source, run_key, value)`` triples, the
    source being the first contribution's position (whose transaction it joins).
    """

    size: int = 0
    since: float = 0.0
    """When the oldest pending contribution was added (``now`` of :meth:`add`)."""
    _groups: dict[tuple[str, int, bytes], list[Sequence[Any]]] = field(default_factory=dict)

    def add_row(self, run_key: bytes, row: Sequence[Any], now: float = 0.0) -> None:
        """Queue one scored result's row of the run ``run_key`` (a ``RollupRow``, or the
        plain tuple of ``stored.rollup_row``)."""
        if not self.size:
            self.since = now
        group = (row[0], row[1], run_key)
        rows = self._groups.get(group)
        if rows is None:
            self._groups[group] = [row]
        else:
            rows.append(row)
        self.size += 1

    def due(self, now: float, max_size: int, max_seconds: float) -> bool:
        """Whether to send what is pending: ``max_size`` contributions, or the oldest
        one ``max_seconds`` old (``now`` on the clock :meth:`add` was given)."""
        return self.size > 0 and (self.size >= max_size or now - self.since >= max_seconds)

    def drain(
        self, max_request_size: int | None = None
    ) -> list[tuple[SourcePosition, bytes, bytes]]:
        """Everything pending, as records to send, and nothing pending after. With
        ``max_request_size``, a group too large for one record of that size is split
        into several, in input order (``limits.split_rows``), each with the group's
        source: a run's rows of many long ids and facets reach megabytes."""
        records = []
        for (_, _, run_key), rows in self._groups.items():
            source = SourcePosition(*rows[0][:4])
            for value in encode_rollup_records(rows, run_key, max_request_size):
                records.append((source, run_key, value))
        self._groups = {}
        self.size = 0
        return records


def _at_or_below_mark(state: Mapping[str, Any], stream: str, offset: int, seq: int) -> bool:
    mark = state["watermarks"].get(stream)
    return mark is not None and (offset, seq) <= tuple(mark)


@dataclass
class RunBatch:
    """A batch of scored records folded into run states: each run's state is read,
    decoded and written back once per batch, not once per record.

    ``load_run(key)`` and ``load_query(key)`` read the tables (None when absent);
    after :meth:`add` of every record, :attr:`runs` and :attr:`queries` hold the
    entries to write. Folding a batch gives exactly the states that folding its
    records one at a time would (duplicates are judged against the watermark as
    it moves within the batch).
    """

    load_run: Callable[[bytes], dict[str, Any] | None]
    load_query: Callable[[str], list[float] | None]
    max_queries: int
    load_seen: Callable[[str], SeenEntry | None] | None = None
    """Where the run counted a resultId (``SeenIndex.get``); None turns the check off."""
    partition: int = 0
    """The rollup partition of this batch, stamped on ``seen`` entries."""
    now: float = 0.0
    history_seconds: float = 300.0
    """The width of a run's trend buckets (:func:`add_to_history`)."""
    history_buckets: int = 48
    """How many trend buckets a run keeps (the newest)."""
    decoded: dict[bytes, tuple[Any, RunRollup, RiskSketch]] | None = None
    """Runs decoded by an earlier batch, by run key: (the state it wrote, its rollup and
    sketch as objects). A run whose stored state is still that very object is not
    decoded again (a third of a fold's time with many runs); an entry is taken out
    while a batch uses it and put back by :meth:`finish`, so a batch that fails half
    way leaves nothing half folded behind."""
    query_marks: bool = True
    """Per-query entries carry the positions folded into them (``split_marks``) and are
    folded by them, apart from the run state (the setting ``rollup_query_marks``)."""
    runs: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    queries: dict[str, list[Any]] = field(default_factory=dict)
    seen: dict[str, SeenEntry] = field(default_factory=dict)
    duplicates: int = 0
    """Records dropped as redelivered (at or below the run's watermark)."""
    resent: int = 0
    """Records dropped because their resultId was already counted in the run."""
    _rollups: dict[bytes, RunRollup] = field(default_factory=dict)
    _sketches: dict[bytes, RiskSketch] = field(default_factory=dict)
    _changed: set[bytes] = field(default_factory=set)
    _trend: dict[bytes, list[float]] = field(default_factory=dict)

    def add_row(self, run_key: bytes, row: Sequence[Any]) -> bool:
        """Fold one scored result of the run ``run_key``: a row in the order of
        ``stored.RollupRow`` (a decoded rollup record's, ``stored.decode_rollup_record``);
        False if a duplicate."""
        return self.add_rows(run_key, (row,)) == 1

    def _open(self, run_key: bytes) -> dict[str, Any]:
        """The state of run ``run_key`` in this batch: read and decoded at its first row."""
        state = self.runs.get(run_key)
        if state is None:
            stored = self.load_run(run_key)
            state = new_run_state() if stored is None else decode_run_state(stored)
            self.runs[run_key] = state
            decoded = self.decoded
            cached = decoded.pop(run_key, None) if decoded is not None else None
            if cached is not None and cached[0] is stored:
                self._rollups[run_key], self._sketches[run_key] = cached[1], cached[2]
            else:
                self._rollups[run_key] = RunRollup.from_state(state["rollup"])
                self._sketches[run_key] = RiskSketch.from_state(state["risk"])
        return state

    def add_rows(self, run_key: bytes, rows: Iterable[Sequence[Any]]) -> int:
        """Fold the scored results ``rows`` of the run ``run_key`` in their order, each as
        :meth:`add_row` would (a rollup record's rows: what the run's state, rollup,
        sketch and trend are looked up for once); returns how many were counted.

        With per-query marks, the compiled kernel (``fold_rows`` in
        ``scorer/core/_kernel.c``) folds the rows of the common case: a new resultId past
        the run's watermark, whose query entry is new or lacks it. It stops at any other
        row, which :meth:`_add_rows_python`, the reference, folds before the kernel goes
        on (a redelivery, a resend, an entry of an earlier layout...)."""
        if _fold_rows is None or not self.query_marks:
            return self._add_rows_python(run_key, rows)
        rows = rows if type(rows) is list else list(rows)
        state = self._open(run_key)
        rollup = self._rollups[run_key]
        load_seen = self.load_seen
        arguments = [
            rows, 0, state, state["watermarks"], run_key.decode(), rollup,
            MAX_FACET_VALUES_PER_RUN, OTHER_FACET_VALUE, MetricAggregate,
            self._sketches[run_key].add, load_seen, self.seen, SeenEntry, self.queries,
            self.load_query, self.max_queries, self.now, self.partition,
            self._trend.get(run_key), {}, _golden_marks, golden_mark, NDCG_SLOT,
        ]  # fmt: skip
        counted, end = 0, len(rows)
        while True:
            start, folded, trend = _fold_rows(*arguments)
            counted += folded
            if trend is not None:
                self._trend[run_key] = trend
            if start >= end:
                break
            counted += self._add_rows_python(run_key, rows[start : start + 1])
            if start + 1 >= end:
                break
            arguments[1] = start + 1
            arguments[_TREND_ARGUMENT] = self._trend.get(run_key)
        if counted:
            self._changed.add(run_key)
        return counted

    def _add_rows_python(self, run_key: bytes, rows: Iterable[Sequence[Any]]) -> int:
        """:meth:`add_rows` in Python, every row (the compiled kernel's reference)."""
        state = self._open(run_key)
        run_id = run_key.decode()
        watermarks = state["watermarks"]
        rollup, sketch = self._rollups[run_key], self._sketches[run_key]
        load_seen, seen = self.load_seen, self.seen
        queries, load_query, max_queries = self.queries, self.load_query, self.max_queries
        now, partition = self.now, self.partition
        trend = self._trend.get(run_key)
        streams: dict[tuple[str, int], str] = {}
        counted = 0
        marking = self.query_marks
        for row in rows:
            topic, source, offset, seq, result_id, query_id, values, facets, confidence, qrels = row
            stream = streams.get((topic, source))
            if stream is None:
                stream = streams[(topic, source)] = f"{topic}/{source}"
            earlier = None
            if load_seen is not None:
                seen_key = query_key(run_id, result_id)
                earlier = seen[seen_key] if seen_key in seen else load_seen(seen_key)
            if _at_or_below_mark(state, stream, offset, seq):
                self.duplicates += 1
                in_run = False
                if load_seen is not None and earlier is None:
                    # Counted by the run state, and the block that said so was lost with
                    # a crash (or has expired): written again, so that a resend of it is
                    # still caught.
                    seen[seen_key] = new_tuple(SeenEntry, (stream, offset, seq, now, partition))
                if not marking:
                    continue
            else:
                in_run = True
                if load_seen is not None:
                    if earlier is not None and counted_in(state, earlier):
                        # Its own redelivery must still be dropped by the watermark.
                        watermarks[stream] = [offset, seq]
                        self._changed.add(run_key)
                        self.resent += 1
                        if not marking:
                            continue
                        in_run = False
                    else:
                        seen[seen_key] = new_tuple(SeenEntry, (stream, offset, seq, now, partition))
            if in_run:
                rollup.add(values, facets)
            if len(values) != _N:
                values = values_of_row(values)
            key = query_key(run_id, query_id)
            tracked = queries[key] if key in queries else load_query(key)
            if marking:
                if tracked is None and in_run:
                    # The common case, made here: a new entry counted in the run.
                    if state["queries"] < max_queries:
                        state["queries"] += 1
                        entry = fold_query(None, values, now)
                        if qrels is not None:
                            track_golden_set(entry, qrels)
                        entry.append({_AT: {stream: [offset, seq]}, _NEW: [stream, offset, seq]})
                        queries[key] = entry
                else:
                    self._fold_marked(
                        state, key, tracked, values, qrels, in_run, stream, offset, seq, earlier
                    )
            elif tracked is not None or state["queries"] < max_queries:
                if tracked is None:
                    state["queries"] += 1
                entry = fold_query(tracked, values, now)
                if qrels is not None:
                    changed = track_golden_set(entry, qrels)
                    if changed:
                        state["changedQrels"] += changed
                queries[key] = entry
            if not in_run:
                continue
            # The sketch reads no values of a result without a confidence.
            sketch.add(confidence, values if confidence is None else MetricValues(*values))
            if trend is None:
                trend = self._trend[run_key] = [1.0, values[NDCG_SLOT]]
            else:
                trend[0] += 1.0
                trend[1] += values[NDCG_SLOT]
            watermarks[stream] = [offset, seq]
            counted += 1
        if counted:
            self._changed.add(run_key)
        return counted

    def _fold_marked(
        self,
        state: dict[str, Any],
        key: str,
        tracked: list[Any] | None,
        values: list[float],
        qrels: str | None,
        in_run: bool,
        stream: str,
        offset: int,
        seq: int,
        earlier: SeenEntry | None,
    ) -> None:
        """Fold a result into its query's entry by the entry's own marks (``query_marks``),
        whether or not the run state counts it here (``in_run``): under at-least-once a
        crash can leave one of the two changelog writes of a fold without the other, and
        the fold of the redelivered batch then mends the one that was lost. The run-state
        counts an entry drives (tracked queries, changed qrels) are added by whichever
        fold the run state keeps: the one that counts the result in the run."""
        floats: Sequence[Any] | None = None
        marks: dict[str, Any] | None = None
        if tracked is not None:
            if type(tracked[-1]) is dict:
                floats, marks = tracked[:-1], tracked[-1]
            else:
                # An entry written before marks holds what the run state holds.
                if not in_run:
                    return
                floats = tracked
                marks = {_AT: {name: list(mark) for name, mark in state["watermarks"].items()}}
        if marks is not None and (
            _marked(marks, stream, offset, seq)
            or (earlier is not None and _marked(marks, earlier.stream, earlier.offset, earlier.seq))
        ):
            # The entry has it: its write landed and the run state's did not.
            if in_run:
                if marks.get(_NEW) == [stream, offset, seq]:
                    state["queries"] += 1
                changed = marks.get(_CHANGED)
                if changed is not None and changed[:3] == [stream, offset, seq]:
                    state["changedQrels"] += changed[3]
            return
        if floats is None:
            if state["queries"] >= self.max_queries:
                return
            if in_run:
                state["queries"] += 1
            marks = {_AT: {stream: [offset, seq]}, _NEW: [stream, offset, seq]}
        else:
            # A new dict: the stored entry stays as it was until the batch is written.
            at = dict(marks[_AT])  # type: ignore[index]
            at[stream] = [offset, seq]
            marks = {**marks, _AT: at}  # type: ignore[dict-item]
        entry = fold_query(floats, values, self.now)
        if qrels is not None:
            changed = track_golden_set(entry, qrels)
            if changed:
                marks[_CHANGED] = [stream, offset, seq, changed]
                if in_run:
                    state["changedQrels"] += changed
        entry.append(marks)
        self.queries[key] = entry

    def finish(self, updated_at: str) -> dict[bytes, dict[str, Any]]:
        """The run states to write (only those that changed), stamped ``updated_at``."""
        changed = {}
        for run_key in self._changed:
            state = self.runs[run_key]
            state["rollup"] = self._rollups[run_key].to_state()
            state["risk"] = self._sketches[run_key].to_state()
            state["updatedAt"] = updated_at
            trend = self._trend.get(run_key)
            if trend is not None:
                bucket = math.floor(self.now / self.history_seconds) * self.history_seconds
                state["history"] = add_to_history(
                    state["history"], bucket, trend[0], trend[1], self.history_buckets
                )
            changed[run_key] = state
        decoded = self.decoded
        if decoded is not None:
            # Every run read, changed or not (all its rows redeliveries): its objects
            # now match the state it leaves in the table.
            for run_key, state in self.runs.items():
                decoded[run_key] = (state, self._rollups[run_key], self._sketches[run_key])
        return changed


def add_to_history(
    history: list[list[float]] | None, bucket: float, count: float, ndcg: float, keep: int
) -> list[list[float]]:
    """A run's trend with a batch's results added: ``[[bucketStart, count, sum of
    nDCG@10], ...]``, oldest first, one entry per time bucket that had results (the
    bucket of the fold's time), the newest ``keep`` kept. Folded once per counted
    result, so exact under redelivery and restarts as the rollup is."""
    history = [list(entry) for entry in history or []]
    if history and history[-1][0] == bucket:
        history[-1][1] += count
        history[-1][2] += ndcg
    else:
        history.append([bucket, count, ndcg])
    return history[-keep:]


def trend_of(state: Mapping[str, Any]) -> list[list[float]]:
    """``[[bucketStart, mean nDCG@10, count], ...]`` of a (decoded) run state."""
    return [[start, total / count, count] for start, count, total in state["history"]]


def counted_in(state: Mapping[str, Any], seen: SeenEntry) -> bool:
    """True when the run state includes the record a ``seen`` entry names: the run's
    watermark for that entry's input partition is at or past its position."""
    return _at_or_below_mark(state, seen.stream, seen.offset, seen.seq)


def seen_block_key(partition: int, first_offset: int, now_ns: int) -> str:
    """Table key of a block: the rollup partition and first offset of its batch, and
    the time, so that a batch folded again (redelivered) writes a block of its own."""
    return f"{partition}:{first_offset}:{now_ns}"


def query_key(run_id: str, query_id: str) -> str:
    """Key of a run's per-query scores (the separator cannot occur in JSON ids unescaped)."""
    return f"{run_id}\x1f{query_id}"


_N = len(METRIC_NAMES)
_fold_rows = compiled("fold_rows")
"""The compiled :meth:`RunBatch.add_rows` of the common rows; None where Python folds."""
_TREND_ARGUMENT = 18
"""Where the run's trend goes among ``fold_rows``' arguments."""
_QUERY_ENTRY = 2 + 2 * _N
"""Items of a per-query entry: count, a sum per measure, enteredAt, a first value per measure."""
_FIVE_SUMS_ONLY = 6
"""The layout from before first answers were kept (and before any measure was added)."""
_WITH_GOLDEN = _QUERY_ENTRY + 2
"""A per-query entry with its golden set: ``[..., qrels fingerprint as a number, results
scored against it]`` (:func:`track_golden_set`)."""
_FINGERPRINT_DIGITS = 13
"""Hex digits of a qrels fingerprint kept in an entry: 52 bits, exact in a float."""


_golden_marks: dict[str, float] = {}
"""Qrels fingerprints as entries hold them (:func:`golden_mark`), at most
``_MAX_GOLDEN_MARKS`` (past it, the cache starts afresh)."""
_MAX_GOLDEN_MARKS = 1 << 16


def golden_mark(fingerprint: str) -> float:
    """A qrels fingerprint as a per-query entry holds it: its first 52 bits, a float
    (parsing them was 1.4% of a busy worker's samples: kept while they recur)."""
    mark = _golden_marks.get(fingerprint)
    if mark is None:
        if len(_golden_marks) >= _MAX_GOLDEN_MARKS:
            _golden_marks.clear()
        mark = _golden_marks[fingerprint] = float(int(fingerprint[:_FINGERPRINT_DIGITS], 16))
    return mark


def track_golden_set(entry: list[float], fingerprint: str) -> int:
    """Count one more result of the query of ``entry`` (a folded per-query entry, changed
    in place) as scored against the qrels ``fingerprint``; returns how many results of
    the query were scored against qrels that have now changed (those of the previous
    fingerprint, when this one differs), else 0."""
    mark = golden_mark(fingerprint)
    if len(entry) != _WITH_GOLDEN:
        del entry[_QUERY_ENTRY:]
        entry += [mark, 1.0]
        return 0
    if entry[-2] == mark:
        entry[-1] += 1.0
        return 0
    changed = int(entry[-1])
    entry[-2], entry[-1] = mark, 1.0
    return changed


_AT = "at"
"""Marks of a per-query entry: the position of the last result folded in, per input
partition (``{stream: [offset, seq]}``)."""
_NEW = "new"
"""Marks: the position of the result that made the entry (``[stream, offset, seq]``)."""
_CHANGED = "chg"
"""Marks: the last result that found the query's qrels changed, and how many results it
found scored against the earlier ones (``[stream, offset, seq, count]``)."""


def split_marks(entry: Sequence[Any]) -> tuple[Sequence[Any], dict[str, Any] | None]:
    """A stored per-query entry as its numbers and its marks: a dict after the numbers,
    in entries written with ``rollup_query_marks`` (None in those written without). The
    numbers are not a copy to change: :func:`fold_query` makes a new entry of them."""
    if entry and type(entry[-1]) is dict:
        return entry[:-1], entry[-1]
    return entry, None


def _marked(marks: Mapping[str, Any], stream: str, offset: int, seq: int) -> bool:
    """True when an entry's marks say the position was folded into it."""
    mark = marks[_AT].get(stream)
    return mark is not None and (offset, seq) <= tuple(mark)


def _current_query_entry(entry: Sequence[Any]) -> list[float]:
    """A stored per-query entry in today's layout, without its marks. One written before
    the first answer was kept (count and sums only) takes its mean as the first answer,
    entered at 0; one written before a measure existed (fewer sums) has NaN for it, so
    that the paired comparisons leave the query out of that measure alone."""
    if entry and type(entry[-1]) is dict:
        entry = entry[:-1]
    if None in entry:
        # NaN (a measure a result was scored without) comes back from the changelog's
        # JSON as null.
        entry = [math.nan if value is None else value for value in entry]
    if len(entry) == _WITH_GOLDEN or len(entry) == _QUERY_ENTRY:
        return list(entry)
    count = entry[0]
    if len(entry) == _FIVE_SUMS_ONLY:
        sums = list(entry[1:])
        first = [0.0, *(total / count for total in sums)]
    else:
        width = (len(entry) - 2) // 2
        sums, first = list(entry[1 : 1 + width]), list(entry[1 + width :])
    missing = [math.nan] * (_N - len(sums))
    return [count, *sums, *missing, *first, *missing]


fold_query = unrolled(
    """
def fold_query(entry, values, now=0.0):
    "Per-query state with one more result (see the module-level docstring)."
    if entry is None:
        return [1.0, *values, now, *values]
    if (len(entry) != QUERY_ENTRY and len(entry) != WITH_GOLDEN) or entry[LAST_SUM] is None:
        entry = current_query_entry(entry)
    count, {sums} = entry[:{width}]
    {values}, = values
    return [count + 1.0, {folded}, *entry[{width}:]]
""".format(sums=each("s$"), width=1 + _N, values=each("v$"), folded=each("s$ + v$")),
    "fold_query",
    {
        "QUERY_ENTRY": _QUERY_ENTRY,
        "WITH_GOLDEN": _WITH_GOLDEN,
        "LAST_SUM": _N,
        "current_query_entry": _current_query_entry,
    },
)
fold_query.__doc__ = """Per-query state with one more result: ``[count, sum of each measure...,
enteredAt, first value of each measure...]``: the sums give the query's mean (the
fixed-horizon paired comparison), the first answer and when it was folded (``now``)
give the anytime-valid one its observation, which later answers do not rewrite.
Older layouts are read by :func:`_current_query_entry`, and so is an entry read back
from the changelog with a measure its results were scored without (NaN, which JSON
stores as null: always the last measure, as measures are added at the end).
Straight-line code from the registry (``scorer.core.measures.unrolled``): a loop here
was a quarter of a fold's time."""


def query_means(entry: list[float]) -> list[float]:
    if (len(entry) != _QUERY_ENTRY and len(entry) != _WITH_GOLDEN) or entry[_N] is None:
        entry = _current_query_entry(entry)
    count = entry[0]
    return [total / count for total in entry[1 : 1 + _N]]


def query_first(entry: list[float]) -> list[float]:
    """``[enteredAt, first value of each measure...]`` of a per-query entry."""
    if (len(entry) != _QUERY_ENTRY and len(entry) != _WITH_GOLDEN) or entry[_N] is None:
        entry = _current_query_entry(entry)
    return list(entry[1 + _N : _QUERY_ENTRY])


def values_of_row(values: Sequence[float]) -> list[float]:
    """A contribution's values with a slot per measure: a row made before a measure
    existed has NaN for it (the rollup counts it unseen, ``RunRollup.add``)."""
    return [*values, *([math.nan] * (_N - len(values)))]


def run_document(run_id: str, state: Mapping[str, Any], max_queries: int) -> dict[str, Any]:
    """The API's answer for one run (its state decoded, ``stored.decode_run_state``):
    the ``scorer eval --format json`` shape of a run, plus when it was last updated
    and how many queries the paired comparison tracks."""
    document = {"runId": run_id, **RunRollup.from_state(state["rollup"]).summary()}
    document["updatedAt"] = state["updatedAt"]
    document["pairedQueries"] = {"tracked": state["queries"], "limit": max_queries}
    document["changedQrels"] = state["changedQrels"]
    return document


def risk_document(run_id: str, state: Mapping[str, Any]) -> dict[str, Any]:
    """The API's risk–coverage answer for one run (its state decoded): the
    ``riskCoverage`` block of ``scorer eval --format json`` from the run's sketch,
    where the exact values lie (``sketch``), and when the run was last updated. A run
    state from before the sketch existed has an empty one (its results are not in the
    block)."""
    sketch = RiskSketch.from_state(state["risk"])
    return {
        "runId": run_id,
        **sketch.summary(),
        "sketch": sketch.bounds(),
        "updatedAt": state["updatedAt"],
    }
