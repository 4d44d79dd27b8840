"""Records the worker produces fit its producer's request size (scorer.stream.limits)."""

from __future__ import annotations

import orjson
import pytest
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.producer import AIOKafkaProducer

from scorer.stream import events, limits
from scorer.stream.qrels import check_entry_fits

LIMIT = 1_048_588
BUDGET = LIMIT - limits.SIZE_MARGIN
REASON = events.deadletter_headers(
    events.RejectedEvent("InvalidJson", "unexpected end of data"), "retrieval.results", 3, 42
)


def producer_check(max_request_size: int, key: bytes | None, value: bytes | None, headers):
    """aiokafka's own size check of ``send`` (``AIOKafkaProducer._serialize``), without a
    broker: raises MessageSizeTooLargeError over the limit."""
    producer = object.__new__(AIOKafkaProducer)
    producer._key_serializer = producer._value_serializer = None
    producer._max_request_size = max_request_size
    return producer._serialize(key, value, headers)


def value_filling(budget: int, key: bytes | None, headers) -> int:
    """The value length at which a record of ``key`` and ``headers`` is exactly ``budget``."""
    for length in range(budget, 0, -1):
        if limits.record_size(key, b"x" * length, headers) <= budget:
            return length
    raise AssertionError("no value fits")


def test_record_size_is_the_size_aiokafkas_producer_refuses_above() -> None:
    headers = [("trace", b"abc")]
    size = limits.record_size(b"q1", b"x" * 1000, headers)
    producer_check(size, b"q1", b"x" * 1000, headers)
    with pytest.raises(MessageSizeTooLargeError):
        producer_check(size - 1, b"q1", b"x" * 1000, headers)


def test_the_faust_default_limit_refuses_the_dead_letter_of_a_large_bad_record() -> None:
    """The issue's numbers: a 1,000,510-byte bad record makes a dead letter over
    Faust's 1,000,000 bytes, but within the broker's 1,048,588."""
    value = b"{" * 1_000_510
    headers = [("trace", b"abc"), *REASON]
    size = limits.record_size(b"q1", value, headers)
    assert 1_000_600 < size < 1_001_000
    with pytest.raises(MessageSizeTooLargeError):
        producer_check(1_000_000, b"q1", value, headers)
    letter = limits.fit_deadletter(b"q1", value, [("trace", b"abc")], REASON, LIMIT)
    assert not letter.truncated
    assert letter.value == value


def test_a_dead_letter_exactly_at_the_budget_is_sent_whole() -> None:
    original = [("trace", b"abc")]
    length = value_filling(BUDGET, b"q1", [*original, *REASON])
    value = b"x" * length
    letter = limits.fit_deadletter(b"q1", value, original, REASON, LIMIT)
    assert letter == limits.DeadLetter(b"q1", value, [*original, *REASON], truncated=False)
    assert limits.record_size(letter.key, letter.value, letter.headers) == BUDGET


def test_one_byte_over_the_budget_is_truncated_to_the_longest_prefix_that_fits() -> None:
    original = [("trace", b"abc")]
    length = value_filling(BUDGET, b"q1", [*original, *REASON]) + 1
    value = bytes(range(256)) * (length // 256) + b"y" * (length % 256)
    letter = limits.fit_deadletter(b"q1", value, original, REASON, LIMIT)

    assert letter.truncated
    assert letter.key == b"q1"
    assert letter.headers == [
        *original,
        *REASON,
        ("x-scorer-truncated", b"true"),
        ("x-scorer-original-size", str(length).encode()),
    ]
    size = limits.record_size(letter.key, letter.value, letter.headers)
    assert size <= BUDGET
    # The longest prefix: one more byte would not fit.
    assert limits.record_size(letter.key, value[: len(letter.value) + 1], letter.headers) > BUDGET
    assert value.startswith(letter.value)
    producer_check(LIMIT, letter.key, letter.value, letter.headers)


def test_a_dead_letter_far_over_the_limit_keeps_where_it_came_from() -> None:
    value = b"z" * 5_000_000
    letter = limits.fit_deadletter(b"q1", value, [], REASON, LIMIT)
    headers = dict(letter.headers)
    assert headers["x-scorer-source-topic"] == b"retrieval.results"
    assert headers["x-scorer-source-partition"] == b"3"
    assert headers["x-scorer-source-offset"] == b"42"
    assert headers["x-scorer-error-class"] == b"InvalidJson"
    assert headers["x-scorer-original-size"] == b"5000000"
    assert BUDGET - 10 < limits.record_size(letter.key, letter.value, letter.headers) <= BUDGET
    assert len(letter.value) > 1_040_000


def test_original_headers_too_large_for_any_value_are_dropped_and_counted() -> None:
    original = [("big", b"h" * 700_000), ("bigger", b"h" * 700_000)]
    letter = limits.fit_deadletter(b"q1", b"v" * 10, original, REASON, LIMIT)
    assert letter.truncated
    assert letter.headers == [
        *REASON,
        ("x-scorer-truncated", b"true"),
        ("x-scorer-original-size", b"10"),
        ("x-scorer-dropped-headers", b"2"),
    ]
    assert letter.value == b"v" * 10
    assert limits.record_size(letter.key, letter.value, letter.headers) <= BUDGET


def test_a_key_too_large_for_any_record_is_cut_and_its_size_given() -> None:
    key = b"k" * 2_000_000
    letter = limits.fit_deadletter(key, b"value", [], REASON, LIMIT)
    assert dict(letter.headers)["x-scorer-original-key-size"] == b"2000000"
    assert letter.value == b""
    assert key.startswith(letter.key)
    assert limits.record_size(letter.key, letter.value, letter.headers) == BUDGET


def test_a_null_value_stays_null() -> None:
    letter = limits.fit_deadletter(None, None, [("h", b"x" * 2_000_000)], REASON, LIMIT)
    assert letter.value is None and letter.key is None
    assert limits.record_size(None, None, letter.headers) <= BUDGET


def rows(count: int, width: int) -> list[list]:
    return [
        ["retrieval.results", 1, offset, 0, f"r{offset}", "q" * width, [0.5] * 5, {}, None]
        for offset in range(count)
    ]


def test_rows_that_fit_are_one_record_as_before() -> None:
    batch = rows(10, 10)
    assert limits.split_rows(batch, b"run-1", LIMIT) == [orjson.dumps(batch)]


def test_rows_over_the_limit_split_in_order_into_records_that_fit() -> None:
    batch = rows(600, 3000)  # ~1.9 MB as one record
    records = limits.split_rows(batch, b"run-1", LIMIT)
    assert len(records) == 2
    assert [row for record in records for row in orjson.loads(record)] == batch
    for record in records:
        assert limits.record_size(b"run-1", record, []) <= BUDGET
    # Filled in turn: the first record could not take the second's first row.
    first = orjson.loads(records[0])
    with_next = orjson.dumps([*first, batch[len(first)]])
    assert limits.record_size(b"run-1", with_next, []) > BUDGET


def test_rows_split_at_the_exact_budget() -> None:
    row = rows(1, 10)[0]
    one = len(orjson.dumps(row))
    # n rows take 2 + n * one + (n - 1) bytes; a limit that holds exactly 3 of them.
    fixed = limits.record_size(b"run-1", b"", []) - 1 + 5
    limit = fixed + 2 + 3 * one + 2 + limits.SIZE_MARGIN
    records = limits.split_rows([row] * 7, b"run-1", limit)
    assert [len(orjson.loads(record)) for record in records] == [3, 3, 1]
    records = limits.split_rows([row] * 7, b"run-1", limit - 1)
    assert [len(orjson.loads(record)) for record in records] == [2, 2, 2, 1]


def test_a_single_row_larger_than_a_record_is_an_error_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="SCORER_PRODUCER_MAX_REQUEST_SIZE"):
        limits.split_rows(rows(2, 100_000), b"run-1", 65_536)


def golden_entry_of(judged: int) -> tuple[bytes, dict]:
    golden = events.decode_golden(
        orjson.dumps({"queryId": "q", "qrels": {f"{n:06d}" + "d" * 250: 3 for n in range(judged)}})
    )
    return b"q", events.golden_entry(golden)


def test_a_golden_query_whose_table_entry_cannot_fit_a_changelog_record_is_refused() -> None:
    key, entry = golden_entry_of(10_000)  # the schema's bound: 2.6 MB as a table entry
    with pytest.raises(events.RejectedEvent, match=r"table entry is \d+ bytes, over the"):
        check_entry_fits(key, entry, 1_048_588)
    key, small = golden_entry_of(3_000)  # under 1 MB: stored
    check_entry_fits(key, small, 1_048_588)
    size = limits.record_size(key, orjson.dumps(small), [])
    check_entry_fits(key, small, size + limits.SIZE_MARGIN)  # exactly at the budget
    with pytest.raises(events.RejectedEvent) as refused:
        check_entry_fits(key, small, size + limits.SIZE_MARGIN - 1)
    assert refused.value.error_class == "EntryTooLarge"


def test_a_truncated_dead_letter_is_counted_by_input() -> None:
    from scorer.settings import Settings
    from scorer.stream.results import Scoring
    from scorer.stream.telemetry import Telemetry

    settings = Settings(
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9092",
        producer_max_request_size=100_000,
        parking_max_bytes_per_query=80_000,
    )
    telemetry = Telemetry(settings.facet_allowlist, settings.facet_max_values)
    scoring = Scoring(settings, telemetry)
    error = events.RejectedEvent("InvalidJson", "not JSON")
    for value in (b"{" * 10, b"{" * 200_000):
        output = scoring.deadletter(error, "results", "results", 0, 7, b"q", value, [])
    assert len(output.value) < 100_000
    sample = telemetry.registry.get_sample_value
    assert sample("scorer_deadletters_truncated_total", {"topic": "results"}) == 1
    assert sample("scorer_deadletters_truncated_total", {"topic": "qrels"}) == 0
