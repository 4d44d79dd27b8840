"""The records the worker stores, one codec each, every earlier format read here.

A stored record outlives the worker that wrote it (a table's changelog is
replayed at every start, the rollup topic is read by whichever worker owns
the run next), so each record carries the version of its format, and this
module is the one place that writes it and reads it back, earlier formats
included:

- a **rollup record** (a value of the rollup topic): ``[1, [row, ...]]``, each
  row the ten fields of :class:`RollupRow`; earlier versions wrote ``[row,
  ...]``, rows of 8, 9 or 10 items (before the confidence, before the qrels
  fingerprint, and with both);
- a **run state** (the ``rollups`` table, :func:`new_run_state`): a dict with
  ``"v": 1``; earlier versions wrote none, and maybe no ``risk``, ``history``
  or ``changedQrels`` (each added since);
- a **parked list** (the ``parked`` table, a query's results waiting for their
  qrels): ``[1, [item, ...]]``, items of :class:`ParkedItem`; earlier versions
  wrote ``[item, ...]``;
- a **qrels entry** (the ``qrels`` table, :func:`encode_qrels_entry`): a dict
  with ``"v": 1``; earlier versions wrote none, and maybe no ``others``;
- a **seen block** (the ``rollup_seen`` table): binary, version 2; earlier
  versions wrote JSON.

The seen block's codec is ``scorer.stream.seen`` (its binary layout is the
dedupe index's own). A JSON list leads with its version as an int (an earlier
format's first item is a list); a dict has the key ``"v"``: one test of a value
already in hand on the hot path. A value decoded here is in this version's
format; one of the current version comes back as it is (no copy), so a caller
can still tell by identity that it is the object it stored.

A later version's record is refused with :class:`UnknownVersion` (a
``ValueError`` of one line naming the record and its version), raised to the
caller as any undecodable stored value was before versions: out of the batch
handler, agent or view that read it, which logs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from scorer.analysis.risk_sketch import RiskSketch
from scorer.core.metrics import Judgments
from scorer.core.rollup import RunRollup
from scorer.stream.limits import split_rows

ROLLUP_VERSION = 1
RUN_STATE_VERSION = 1
PARKED_VERSION = 1
QRELS_VERSION = 1


class UnknownVersion(ValueError):
    """A stored record of a version this one does not know (written by a later one), or
    of no format any version wrote (``shape`` says what it is)."""

    def __init__(self, kind: str, version: Any = None, shape: str | None = None) -> None:
        if shape is None:
            message = (
                f"{kind} of unknown version {version!r}: written by a later version of the "
                "scorer, which this worker cannot read (upgrade it)"
            )
        else:
            message = f"{kind} of no known format: {shape}"
        super().__init__(message)
        self.kind = kind
        self.version = version


# ------------------------------------------------------------------ rollup records


class SourcePosition(NamedTuple):
    """Where a scored record came from: the input event that produced it, and its
    index among the records that event produced (a qrels event can release several
    parked results). Ordered as its fields are (one is made per scored result: a
    tuple is cheaper to make than a frozen dataclass)."""

    topic: str
    partition: int
    offset: int
    seq: int = 0

    @property
    def stream(self) -> str:
        return f"{self.topic}/{self.partition}"


class RollupRow(NamedTuple):
    """What one scored result adds to its run's rollup: a row of a rollup record.

    The hot paths keep rows as plain sequences in this order, a row per result: the
    results path makes them with :func:`rollup_row`, the fold reads the JSON arrays
    they decode to by position. ``RollupRow(*row)`` names one."""

    topic: str
    partition: int
    offset: int
    seq: int
    """The input position (:class:`SourcePosition`) of the event that produced it."""
    result_id: str
    query_id: str
    values: list[float]
    """Every measure, in ``scorer.core.measures.METRIC_NAMES`` order (a row made before
    a measure existed has fewer: the fold counts it unseen)."""
    facets: dict[str, str]
    confidence: float | None = None
    """The result's confidence for risk–coverage (``RetrievalResult.top_confidence``)."""
    fingerprint: str | None = None
    """The fingerprint of the qrels it was scored against (``events.qrels_fingerprint``)."""

    @property
    def position(self) -> SourcePosition:
        return SourcePosition(self.topic, self.partition, self.offset, self.seq)


def rollup_row(
    position: SourcePosition,
    result_id: str,
    query_id: str,
    values: list[float],
    facets: dict[str, str],
    confidence: float | None = None,
    fingerprint: str | None = None,
) -> tuple[Any, ...]:
    """A :class:`RollupRow` as a plain tuple, as the results path queues one per scored
    result: a named tuple costs a Python call to make and a callback to encode."""
    return (*position, result_id, query_id, values, facets, confidence, fingerprint)


ROW_FIELDS = len(RollupRow.__annotations__)
ROW_RESULT_ID = 4
"""The index of ``result_id`` in a row."""
_ROLLUP_HEAD = b"[%d," % ROLLUP_VERSION


def encode_rollup_records(
    rows: Sequence[Sequence[Any]], key: bytes | None = None, max_request_size: int | None = None
) -> list[bytes]:
    """``rows`` (:class:`RollupRow` or :func:`rollup_row`, in input order) as rollup
    records: one, or with ``max_request_size`` as many as keep each record under
    ``key`` within it (``limits.split_rows``)."""
    if max_request_size is None:
        return [orjson.dumps([ROLLUP_VERSION, rows], default=list)]
    return split_rows(rows, key, max_request_size, head=_ROLLUP_HEAD, tail=b"]")


def decode_rollup_record(raw: bytes) -> list[Sequence[Any]]:
    """The rows of one rollup record, in input order, each ten items in the order of
    :class:`RollupRow`. Rows of earlier versions (an untagged array of rows of 8, 9
    or 10 items: before the confidence, before the qrels fingerprint, and with one)
    are padded with None."""
    data = orjson.loads(raw)
    if type(data) is not list or not data:
        raise UnknownVersion("rollup record", shape=f"{type(data).__name__} {raw[:80]!r}")
    head = data[0]
    if type(head) is int:
        if head == ROLLUP_VERSION and len(data) == 2:
            return data[1]
        raise UnknownVersion("rollup record", head)
    return [_current_row(row) for row in data]


def _current_row(row: Any) -> list[Any]:
    missing = ROW_FIELDS - len(row) if type(row) is list else -1
    if missing == 0:
        return row
    if missing in (1, 2):
        return [*row, *([None] * missing)]
    raise UnknownVersion("rollup row", shape=f"{type(row).__name__} of {len(row)} items")


# ------------------------------------------------------------------ run states


def new_run_state() -> dict[str, Any]:
    """A run's state before any result is folded in (the ``rollups`` table's value)."""
    return {
        "v": RUN_STATE_VERSION,
        "rollup": RunRollup().to_state(),
        "risk": RiskSketch().to_state(),
        "watermarks": {},
        "updatedAt": None,
        "queries": 0,
        "history": [],
        "changedQrels": 0,
    }


def decode_run_state(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A ``rollups`` table value in this version's format. A state of an earlier
    version (no ``"v"``) gets what was added since, as its readers took it then: an
    empty risk sketch, no trend history, no results against changed qrels."""
    version = stored.get("v")
    if version == RUN_STATE_VERSION:
        return stored  # type: ignore[return-value]
    if version is not None:
        raise UnknownVersion("run state", version)
    if "rollup" not in stored or "watermarks" not in stored:
        raise UnknownVersion("run state", shape=f"untagged, keys {sorted(stored)[:20]}")
    state = new_run_state()
    state.update(stored)
    state["v"] = RUN_STATE_VERSION
    if state["risk"] is None:
        state["risk"] = RiskSketch().to_state()
    if state["history"] is None:
        state["history"] = []
    return state


# ------------------------------------------------------------------ parked lists


class ParkedItem(NamedTuple):
    """A result waiting for its qrels, an item of its query's parked list."""

    result_id: str
    parked_at: float
    """Epoch seconds."""
    raw: str
    """The result's JSON text, as it arrived."""
    partition: int
    """Its input partition (the expiry command goes there)."""


_PARKED_FIELDS = len(ParkedItem.__annotations__)
_PARKED_FRAME = len(orjson.dumps([PARKED_VERSION, []]))
"""Bytes of a parked list's changelog value around its items: ``[1,[`` and ``]]``."""


def encode_parked(items: Sequence[ParkedItem]) -> list[Any]:
    """A query's parked list as the ``parked`` table keeps it (never empty: an empty
    list is deleted)."""
    return [PARKED_VERSION, list(items)]


def decode_parked(stored: Iterable[Any] | None) -> list[ParkedItem]:
    """A query's parked list as read from the table (None: nothing parked), as it was
    stored or as a changelog replay decoded it (arrays). Earlier versions stored the
    items untagged, ``[item, ...]``, each the four fields of :class:`ParkedItem`."""
    if not stored:
        return []
    data = list(stored)
    head = data[0]
    if type(head) is int:
        if head == PARKED_VERSION and len(data) == 2:
            items = data[1]
        else:
            raise UnknownVersion("parked list", head)
    else:
        items = data
    parked = []
    for item in items:
        if len(item) != _PARKED_FIELDS:
            raise UnknownVersion("parked item", shape=f"{type(item).__name__} of {len(item)} items")
        parked.append(ParkedItem(*item))
    return parked


def parked_item_size(item: ParkedItem) -> int:
    """Bytes of ``item`` in its query's parked list as the ``parked`` table's changelog
    carries it (a JSON array, as Faust's json codec writes it: orjson, UTF-8)."""
    return len(orjson.dumps(list(item)))


def parked_list_size(sizes: Sequence[int]) -> int:
    """Bytes of a parked list (the changelog value, :func:`encode_parked`) whose items
    have ``sizes``: the items, a comma between each two, and the version around them."""
    return sum(sizes) + max(0, len(sizes) - 1) + _PARKED_FRAME


# ------------------------------------------------------------------ qrels entries


def encode_qrels_entry(
    judgments: Judgments, facets: Mapping[str, str] | None, fingerprint: str
) -> dict[str, Any]:
    """What the qrels table keeps per query: the judgments as offline scoring prepares
    them (``Judgments.from_qrels``: relevant grades, the other judged ids, the ideal
    DCG computed once), the golden set's facets and its fingerprint."""
    return {
        "v": QRELS_VERSION,
        "grades": dict(judgments.grades),
        "others": dict(judgments.others),
        "idcg": judgments.ideal_dcg,
        "facets": dict(facets or {}),
        "fingerprint": fingerprint,
    }


def decode_qrels_entry(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A ``qrels`` table value in this version's format. An entry of an earlier
    version (no ``"v"``) stored before ``others`` was kept has none: it scores
    judged@k against its relevant ids only, until its golden set is published again."""
    version = stored.get("v")
    if version == QRELS_VERSION:
        return stored  # type: ignore[return-value]
    if version is not None:
        raise UnknownVersion("qrels entry", version)
    return {"others": {}, **stored, "v": QRELS_VERSION}
