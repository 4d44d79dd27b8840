"""The worker's logic without Faust: decode, join, score, park, dead-letter.

Everything here is a plain function or a small class over plain data, so it is
tested without a broker; ``scorer.stream.app`` only wires it to topics and
tables.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from schemas import GoldenQuery, RetrievalResult, describe_validation_error
from scorer import __version__
from scorer.core.measures import GROUPS, each, unrolled
from scorer.core.metrics import Judgments, MetricValues, score
from scorer.stream.outputs import new_tuple
from scorer.stream.stored import (
    ParkedItem,
    encode_qrels_entry,
    parked_item_size,
    parked_list_size,
)

DEADLETTER_HEADER_PREFIX = "x-scorer-"


class RejectedEvent(Exception):
    """An input event that cannot be scored: it goes to the dead-letter topic.

    ``error_class`` is a short, bounded category (a label on /metrics);
    ``message`` is one line saying what is wrong and where.
    """

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message


def _decode(model: type[Any], value: bytes | None) -> Any:
    if value is None:
        raise RejectedEvent("EmptyValue", "value is null")
    try:
        # The model's validator itself: what model_validate_json calls, without its
        # argument checks (4.08 -> 3.74 µs a bench/stream.py result, medians of 3).
        return model.__pydantic_validator__.validate_json(value)
    except ValidationError as error:
        kinds = {e["type"] for e in error.errors()}
        error_class = "InvalidJson" if "json_invalid" in kinds else "SchemaViolation"
        raise RejectedEvent(error_class, describe_validation_error(error, "event")) from None
    except (ValueError, RecursionError) as error:
        first_line = (str(error).splitlines() or ["undecodable"])[0][:300]
        raise RejectedEvent("InvalidJson", first_line) from None


def decode_result(value: bytes | None) -> RetrievalResult:
    """A RetrievalResult from the wire, or :class:`RejectedEvent` saying why not."""
    return _decode(RetrievalResult, value)


def decode_golden(value: bytes) -> GoldenQuery:
    """A GoldenQuery from the wire, or :class:`RejectedEvent` saying why not."""
    return _decode(GoldenQuery, value)


def check_key(key: bytes | None, query_id: str) -> None:
    """The record key must be the queryId: the join relies on co-partitioning by it."""
    if key is None or key.decode("utf-8", "replace") != query_id:
        shown = "null" if key is None else repr(key[:80].decode("utf-8", "replace"))
        raise RejectedEvent(
            "KeyMismatch", f"record key {shown} is not the event's queryId {query_id!r}"
        )


def decode_keyed(
    decode: Callable[[bytes | None], Any], key: bytes | None, value: bytes | None
) -> Any:
    """An input event decoded with ``decode`` whose record key is its queryId, or
    :class:`RejectedEvent` saying why not."""
    event = decode(value)
    check_key(key, event.query_id)
    return event


def qrels_fingerprint(qrels: Mapping[str, int]) -> str:
    """A short, order-independent hash of a qrels map (which judgments scored a result)."""
    canonical = orjson.dumps(qrels, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=8).hexdigest()


def golden_entry(golden: GoldenQuery) -> dict[str, Any]:
    """What the qrels table keeps per query: only what scoring needs, precomputed.

    The judgments are prepared as offline (``Judgments.from_qrels``) and stored in
    their JSON form (``stored.encode_qrels_entry``); :func:`judgments_of` turns an
    entry back into them without recomputing.
    """
    return encode_qrels_entry(
        Judgments.from_qrels(golden.qrels), golden.facets, qrels_fingerprint(golden.qrels)
    )


def judgments_of(entry: Mapping[str, Any]) -> Judgments:
    """The judgments a qrels table entry holds (decoded, ``stored.decode_qrels_entry``)."""
    grades = entry["grades"]
    return Judgments(
        grades=grades,
        n_relevant=len(grades),
        ideal_dcg=entry["idcg"],
        others=entry["others"],
    )


class Scored(NamedTuple):
    """A scored result: its wire bytes, and what the telemetry and rollups need (a
    tuple: one is made per result)."""

    payload: bytes
    values: MetricValues
    facets: dict[str, str]
    confidence: float | None = None
    """The result's confidence (``RetrievalResult.top_confidence``)."""


_scored_document = unrolled(
    """
def scored_document(result_id, run_id, query_id, facets, k, values, fingerprint, scored_at):
    "The ScoredResult document, its keys in wire order (the timestamp and confidence follow)."
    {values}, = values
    return {{
        "resultId": result_id,
        "runId": run_id,
        "queryId": query_id,
        "facets": facets,
        "k": k,
        {groups},
        "qrelsFingerprint": fingerprint,
        "scorerVersion": VERSION,
        "scoredAt": scored_at,
    }}
""".format(
        values=each("v$"),
        groups=",\n        ".join(
            f"{group!r}: {{" + ", ".join(f"{m.wire!r}: v{m.slot}" for m in members) + "}"
            for group, members in GROUPS.items()
        ),
    ),
    "scored_document",
    {"VERSION": __version__},
)
"""The scored document in one dict display, generated from the registry: what
``{**values.as_wire(), ...}`` builds, without a comprehension per metric object and
the merges (``score_result`` runs once per result)."""


class JudgmentsCache:
    """The :class:`Judgments` of each qrels table entry, made once per entry: a table
    entry is replaced, never changed in place, when its golden set is published again,
    so an entry that is still the same object still holds the same judgments. At most
    ``limit`` entries are kept (past that it starts afresh)."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self._limit = limit
        self._made: dict[str, tuple[Mapping[str, Any], Judgments]] = {}

    def of(self, query_id: str, entry: Mapping[str, Any]) -> Judgments:
        """The judgments of ``entry``, the table entry (decoded) of ``query_id``."""
        made = self._made.get(query_id)
        if made is not None and made[0] is entry:
            return made[1]
        if len(self._made) >= self._limit:
            self._made = {}
        judgments = judgments_of(entry)
        self._made[query_id] = (entry, judgments)
        return judgments


def score_result(
    result: RetrievalResult,
    entry: Mapping[str, Any],
    default_k: int,
    now: datetime | str | None = None,
    judgments: Judgments | None = None,
) -> Scored:
    """Score ``result`` against its query's table entry (decoded,
    ``stored.decode_qrels_entry``) into a ScoredResult.

    Facets of the golden set are overridden by those of the result; ``k`` is the
    result's own, else ``default_k``. ``now``: when it was scored (now if None),
    or that time already in ISO 8601 (a batch is scored at one time).
    ``judgments``: the entry's, when the caller has them (:class:`JudgmentsCache`).
    """
    k = result.k or default_k
    values = score(result.ranked, judgments_of(entry) if judgments is None else judgments, k)
    own = result.facets
    facets = {**entry["facets"], **own} if own else dict(entry["facets"])
    document = _scored_document(
        result.result_id,
        result.run_id,
        result.query_id,
        facets,
        k,
        values,
        entry["fingerprint"],
        now if isinstance(now, str) else (now or datetime.now(UTC)).isoformat(),
    )
    if result.timestamp is not None:
        # orjson writes a datetime as isoformat() does (the same text for every one the
        # model reads: tests/unit/test_stream_events.py), without a str object made here.
        document["timestamp"] = result.timestamp
    confidence = result.top_confidence()
    if confidence is not None:
        document["confidence"] = confidence
    return new_tuple(Scored, (orjson.dumps(document), values, facets, confidence))


def deadletter_headers(
    error: RejectedEvent,
    topic: str,
    partition: int,
    offset: int,
    original: list[tuple[str, bytes]] | None = None,
) -> list[tuple[str, bytes]]:
    """Headers of a dead letter: the original ones, then why and where it came from."""
    return [
        *(original or []),
        (f"{DEADLETTER_HEADER_PREFIX}error-class", error.error_class.encode()),
        (f"{DEADLETTER_HEADER_PREFIX}error-message", error.message.encode()[:1000]),
        (f"{DEADLETTER_HEADER_PREFIX}source-topic", topic.encode()),
        (f"{DEADLETTER_HEADER_PREFIX}source-partition", str(partition).encode()),
        (f"{DEADLETTER_HEADER_PREFIX}source-offset", str(offset).encode()),
    ]


def _size_bound(item: ParkedItem) -> int:
    """At least :func:`parked_item_size` of ``item``, without encoding it: a character
    of a JSON string takes at most 6 bytes (``\\u00XX``), the rest at most 64."""
    return 6 * (len(item.raw) + len(item.result_id)) + 64


@dataclass(frozen=True, slots=True)
class ParkDecision:
    """Where a result without qrels goes: the new parked list, and what was pushed out.

    ``added`` is False for a result already parked (``oversized`` False: a duplicate)
    and for one that alone is over the byte bound (``oversized`` True: it ends
    unjudged, never parked)."""

    parked: list[ParkedItem]
    evicted: list[ParkedItem]
    added: bool = True
    oversized: bool = False


def park(
    parked: list[ParkedItem],
    raw: bytes,
    result_id: str,
    now: float,
    max_per_query: int,
    partition: int,
    max_bytes: int | None = None,
) -> ParkDecision:
    """Append a result to its query's parked list, keeping at most ``max_per_query``
    items and, when ``max_bytes`` is set, a list of at most ``max_bytes`` bytes as the
    table's changelog carries it (:func:`parked_list_size`: one changelog record per
    query must fit the producer's request size).

    When the list is over either bound the oldest items are evicted, as few as
    bring it within both (they end as unjudged, never silently). A result already
    parked (redelivered after a crash) is not parked twice; a result whose list of
    one would be over ``max_bytes`` is not parked at all (``oversized``).
    """
    if any(item.result_id == result_id for item in parked):
        return ParkDecision(parked=parked, evicted=[], added=False)
    new = ParkedItem(result_id, now, raw.decode(), partition)
    if (
        max_bytes is not None
        and _size_bound(new) + 2 > max_bytes
        and parked_list_size([parked_item_size(new)]) > max_bytes
    ):
        return ParkDecision(parked=parked, evicted=[], added=False, oversized=True)
    items = [*parked, new]
    evict = max(0, len(items) - max_per_query)
    kept = items[evict:]
    if max_bytes is not None and parked_list_size([_size_bound(i) for i in kept]) > max_bytes:
        sizes = [parked_item_size(item) for item in kept]
        total = parked_list_size(sizes)
        for size in sizes:
            if total <= max_bytes:
                break
            total -= size + 1
            evict += 1
    return ParkDecision(parked=items[evict:], evicted=items[:evict])


def split_expired(
    parked: list[ParkedItem], now: float, ttl: float
) -> tuple[list[ParkedItem], list[ParkedItem]]:
    """``(still parked, expired)``: items parked for ``ttl`` seconds or more have expired."""
    keep = [item for item in parked if now - item.parked_at < ttl]
    expired = [item for item in parked if now - item.parked_at >= ttl]
    return keep, expired
