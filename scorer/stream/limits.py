"""Size limits of the records the worker produces: pure functions, no Faust.

The worker's producer refuses a record whose size, as aiokafka estimates it
(``DefaultRecordBatchBuilder.estimate_size_in_bytes``: the batch header, the
largest record overhead, then the key, value and headers with their length
prefixes), is over its ``max_request_size`` (``SCORER_PRODUCER_MAX_REQUEST_SIZE``):
``MessageSizeTooLargeError``, which stops the worker, and stops it again on the
same input after every restart. Inputs can be larger than any limit (a
compressed batch holds records far larger than the batch), so what the worker
passes on is fitted here first:

- a dead letter that does not fit keeps a prefix of the original value, with
  headers saying it was truncated and how large the original was
  (:func:`fit_deadletter`);
- rollup contributions are split into records that fit (:func:`split_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import size_of_varint

Headers = list[tuple[str, bytes]]

SIZE_MARGIN = 1024
"""Bytes kept free below the producer's limit by everything fitted here: room for
what aiokafka's estimate could count differently from a broker (its estimate
already includes the batch header)."""

TRUNCATED_HEADER = "x-scorer-truncated"
ORIGINAL_SIZE_HEADER = "x-scorer-original-size"
DROPPED_HEADERS_HEADER = "x-scorer-dropped-headers"
ORIGINAL_KEY_SIZE_HEADER = "x-scorer-original-key-size"


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """The size aiokafka's producer checks against its ``max_request_size`` for a
    record with this key, value and headers (an upper bound of the record alone in
    a batch, batch header included)."""
    return DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)


class DeadLetter(NamedTuple):
    """A dead letter as it is sent: what :func:`fit_deadletter` made of the input."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    truncated: bool


def _longest_prefix(fixed: int, length: int, budget: int) -> int:
    """The longest prefix (at most ``length`` bytes) of a field whose record is
    ``fixed`` bytes without it (its length prefix excluded) and must stay within
    ``budget``: a field of n bytes adds ``size_of_varint(n) + n``."""
    room = budget - fixed
    if room <= 0:
        return -1
    n = min(length, room - 1)
    while n > 0 and n + size_of_varint(n) > room:
        n -= 1
    return n


def fit_deadletter(
    key: bytes | None,
    value: bytes | None,
    original_headers: Headers,
    reason_headers: Headers,
    max_request_size: int,
) -> DeadLetter:
    """A dead letter of ``key`` and ``value`` whose size (:func:`record_size`) is at
    most ``max_request_size - SIZE_MARGIN``.

    Its headers are ``original_headers`` (those of the input record), then
    ``reason_headers`` (why and where from: ``events.deadletter_headers``). A record
    that fits is returned as it is. Otherwise the value is cut to the longest
    prefix that fits and ``x-scorer-truncated: true`` and ``x-scorer-original-size:
    <bytes of the value>`` are added; when even an empty value does not fit, the
    original headers are dropped too (``x-scorer-dropped-headers: <count>``), then
    the key is cut (``x-scorer-original-key-size: <bytes>``). The reason headers are
    always kept (they are bounded: ``events.deadletter_headers``).
    """
    budget = max_request_size - SIZE_MARGIN
    headers = [*original_headers, *reason_headers]
    if record_size(key, value, headers) <= budget:
        return DeadLetter(key, value, headers, truncated=False)
    length = 0 if value is None else len(value)
    marks: Headers = [(TRUNCATED_HEADER, b"true"), (ORIGINAL_SIZE_HEADER, str(length).encode())]
    headers = [*original_headers, *reason_headers, *marks]
    if original_headers and record_size(key, b"", headers) > budget:
        count = str(len(original_headers)).encode()
        headers = [*reason_headers, *marks, (DROPPED_HEADERS_HEADER, count)]
    if key is not None and record_size(key, b"", headers) > budget:
        headers = [*headers, (ORIGINAL_KEY_SIZE_HEADER, str(len(key)).encode())]
        without_key = record_size(b"", b"", headers) - 1  # the empty key's length prefix
        keep = _longest_prefix(without_key, len(key), budget)
        if keep < 0:
            raise ValueError(
                f"max_request_size {max_request_size} leaves no room for a dead letter's "
                "reason headers: raise SCORER_PRODUCER_MAX_REQUEST_SIZE"
            )
        key = key[:keep]
    if value is None:
        return DeadLetter(key, None, headers, truncated=True)
    without_value = record_size(key, b"", headers) - 1  # the empty value's length prefix
    keep = _longest_prefix(without_value, len(value), budget)
    if keep < 0:
        raise ValueError(
            f"max_request_size {max_request_size} leaves no room for a dead letter's "
            "reason headers: raise SCORER_PRODUCER_MAX_REQUEST_SIZE"
        )
    return DeadLetter(key, value[:keep], headers, truncated=True)


def split_rows(
    rows: Sequence[Any],
    key: bytes | None,
    max_request_size: int,
    head: bytes = b"",
    tail: bytes = b"",
) -> list[bytes]:
    """``rows`` as JSON arrays between ``head`` and ``tail`` (a record's framing, e.g.
    its version), in order, each record (under ``key``, no headers) of at most
    ``max_request_size - SIZE_MARGIN`` bytes (:func:`record_size`): one array when
    all fit, else as few as filling each in turn makes. Rows may be named tuples.

    A single row too large for a record of its own raises ``ValueError`` (the
    schema's bounds keep a scored result's row to tens of kilobytes)."""
    budget = max_request_size - SIZE_MARGIN
    whole = head + orjson.dumps(rows, default=list) + tail
    if record_size(key, whole, []) <= budget:
        return [whole]
    # The fixed part of a record: key, empty headers, the value's length prefix at
    # its largest (5 bytes covers any value under 2**31 bytes), the framing; then
    # the array's brackets and a comma per row.
    fixed = record_size(key, b"", []) - 1 + 5 + len(head) + len(tail)
    records: list[bytes] = []
    current: list[bytes] = []
    size = fixed + 2
    for row in rows:
        encoded = orjson.dumps(row, default=list)
        added = len(encoded) + (1 if current else 0)
        if current and size + added > budget:
            records.append(head + b"[" + b",".join(current) + b"]" + tail)
            current, size, added = [], fixed + 2, len(encoded)
        if size + added > budget:
            raise ValueError(
                f"a rollup contribution of {len(encoded)} bytes does not fit a record of "
                f"max_request_size {max_request_size}: raise SCORER_PRODUCER_MAX_REQUEST_SIZE"
            )
        current.append(encoded)
        size += added
    records.append(head + b"[" + b",".join(current) + b"]" + tail)
    return records
