"""The worker's logic without a broker: decode, join, score, park, dead-letter."""

from __future__ import annotations

from datetime import timedelta, timezone

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import GoldenQuery, RetrievalResult, ScoredResult
from scorer.core.metrics import Judgments, retrieval_metrics
from scorer.stream import events
from scorer.stream.stored import decode_parked, encode_parked

GOLDEN = GoldenQuery(
    query_id="q1", qrels={"A": 3, "B": 2, "C": 1, "Z": 0}, facets={"type": "factoid", "x": "g"}
)


def result(**overrides: object) -> RetrievalResult:
    fields = {"result_id": "r1", "run_id": "run", "query_id": "q1", "ranked": ["B", "X", "A", "C"]}
    return RetrievalResult(**(fields | overrides))


def test_table_entry_keeps_relevant_grades_the_other_judged_ids_and_the_ideal_dcg():
    entry = events.golden_entry(GOLDEN)
    assert entry["grades"] == {"A": 3, "B": 2, "C": 1}
    assert entry["others"] == {id: 0 for id in GOLDEN.qrels if GOLDEN.qrels[id] == 0}
    assert entry["idcg"] == pytest.approx(7 + 3 / 1.584962500721156 + 1 / 2, abs=1e-12)
    assert entry["facets"] == {"type": "factoid", "x": "g"}


def test_the_table_entry_holds_the_judgments_offline_scoring_prepares():
    # One preparation: the entry, after a JSON round trip through the changelog,
    # gives back exactly what `scorer eval` scores against.
    stored = orjson.loads(orjson.dumps(events.golden_entry(GOLDEN)))
    assert events.judgments_of(stored) == Judgments.from_qrels(GOLDEN.qrels)


def test_scored_document_has_the_wire_keys_in_order_and_the_metric_objects_of_as_wire():
    entry = events.golden_entry(GOLDEN)
    scored = events.score_result(result(confidence=0.5), entry, 10, "2026-01-01T00:00:00+00:00")
    wire = orjson.loads(scored.payload)
    assert list(wire) == [
        "resultId", "runId", "queryId", "facets", "k", *scored.values.as_wire(),
        "qrelsFingerprint", "scorerVersion", "scoredAt", "confidence",
    ]  # fmt: skip
    assert {group: wire[group] for group in scored.values.as_wire()} == scored.values.as_wire()
    assert scored.confidence == 0.5


def test_judgments_cache_makes_an_entrys_judgments_once_and_again_for_a_new_entry():
    cache = events.JudgmentsCache()
    entry = events.golden_entry(GOLDEN)
    first = cache.of("q1", entry)
    assert first == events.judgments_of(entry)
    assert cache.of("q1", entry) is first
    republished = events.golden_entry(GoldenQuery(query_id="q1", qrels={"A": 1}))
    assert cache.of("q1", republished) == Judgments.from_qrels({"A": 1})


def test_scored_result_matches_the_metric_core_and_the_wire_schema():
    entry = events.golden_entry(GOLDEN)
    scored = events.score_result(result(k=4), entry, default_k=10)
    document = ScoredResult.model_validate_json(scored.payload)
    expected = retrieval_metrics(["B", "X", "A", "C"], GOLDEN.qrels, 4)
    wire = orjson.loads(scored.payload)
    assert list(wire["retrievalMetrics"]) == [
        "recallAtK",
        "precisionAtK",
        "ndcgAt10",
        "mrr",
        "hitAtK",
    ]
    assert wire["judgmentMetrics"] == {"judgedAtK": 0.75, "candidateNdcgAt10": 1.0}
    assert (
        *document.retrieval_metrics.model_dump().values(),
        *document.judgment_metrics.model_dump().values(),
    ) == tuple(expected)
    assert round(document.retrieval_metrics.ndcg_at_10, 3) == 0.738
    assert document.k == 4
    assert document.qrels_fingerprint == events.qrels_fingerprint(GOLDEN.qrels)


def test_the_scored_event_carries_the_confidence_it_used():
    entry = events.golden_entry(GOLDEN)
    scores = [0.9, 0.5, 0.4, 0.1]
    by_scores = ScoredResult.model_validate_json(
        events.score_result(result(scores=scores), entry, 10).payload
    )
    given = ScoredResult.model_validate_json(
        events.score_result(result(scores=scores, confidence=0.3), entry, 10).payload
    )
    without = orjson.loads(events.score_result(result(), entry, 10).payload)
    assert (by_scores.confidence, given.confidence) == (0.9, 0.3)
    assert "confidence" not in without


def test_default_k_applies_when_the_result_sets_none():
    scored = events.score_result(result(), events.golden_entry(GOLDEN), default_k=2)
    assert orjson.loads(scored.payload)["k"] == 2
    assert scored.values.precision_at_k == 0.5


def test_result_facets_override_golden_facets():
    scored = events.score_result(result(facets={"type": "list"}), events.golden_entry(GOLDEN), 10)
    assert scored.facets == {"type": "list", "x": "g"}


def test_empty_ranking_is_a_total_miss_not_an_error():
    scored = events.score_result(result(ranked=[]), events.golden_entry(GOLDEN), 10)
    assert tuple(scored.values) == (0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0)


def test_fingerprint_ignores_key_order_and_sees_grade_changes():
    assert events.qrels_fingerprint({"a": 1, "b": 2}) == events.qrels_fingerprint({"b": 2, "a": 1})
    assert events.qrels_fingerprint({"a": 1}) != events.qrels_fingerprint({"a": 2})


@pytest.mark.parametrize(
    ("raw", "error_class", "fragment"),
    [
        (b"{not json", "InvalidJson", "Invalid JSON"),
        (b"\xff\xfe\x00", "InvalidJson", "Invalid JSON"),
        (b"[]", "SchemaViolation", "object"),
        (None, "EmptyValue", "null"),
        (b'{"resultId":"r","runId":"x","queryId":"q","ranked":[1]}', "SchemaViolation", "ranked.0"),
        (b'{"resultId":"","runId":"x","queryId":"q","ranked":[]}', "SchemaViolation", "resultId"),
        (b'{"resultId":"r","runId":"x","queryId":"q","ranked":[],"k":0}', "SchemaViolation", "k"),
        (b'{"resultId":"r","runId":"x","queryId":"q","ranked":[],"k":"5"}', "SchemaViolation", "k"),
        (b"[" * 5000 + b"]" * 5000, "InvalidJson", "recursion"),
    ],
)
def test_undecodable_results_are_rejected_with_a_reason(raw, error_class, fragment):
    with pytest.raises(events.RejectedEvent) as caught:
        events.decode_result(raw)
    assert caught.value.error_class == error_class
    assert fragment in caught.value.message
    assert "\n" not in caught.value.message


def test_oversized_ranking_is_rejected():
    ids = orjson.dumps([f"d{i}" for i in range(1001)])
    raw = b'{"resultId":"r","runId":"x","queryId":"q","ranked":' + ids + b"}"
    with pytest.raises(events.RejectedEvent, match="ranked"):
        events.decode_result(raw)


def test_grades_outside_0_to_3_are_rejected_on_the_wire():
    with pytest.raises(events.RejectedEvent, match=r"qrels\.A"):
        events.decode_golden(b'{"queryId":"q","qrels":{"A":4}}')
    with pytest.raises(events.RejectedEvent, match=r"qrels\.A"):
        events.decode_golden(b'{"queryId":"q","qrels":{"A":-1}}')


def test_record_key_must_be_the_query_id():
    events.check_key(b"q1", "q1")
    with pytest.raises(events.RejectedEvent, match="not the event's queryId"):
        events.check_key(b"q2", "q1")
    with pytest.raises(events.RejectedEvent, match="null"):
        events.check_key(None, "q1")


def test_deadletter_headers_keep_the_originals_and_say_why_and_where():
    error = events.RejectedEvent("InvalidJson", "bad")
    headers = dict(events.deadletter_headers(error, "t", 3, 42, [("trace", b"abc")]))
    assert headers == {
        "trace": b"abc",
        "x-scorer-error-class": b"InvalidJson",
        "x-scorer-error-message": b"bad",
        "x-scorer-source-topic": b"t",
        "x-scorer-source-partition": b"3",
        "x-scorer-source-offset": b"42",
    }


def test_parking_is_bounded_per_query_and_evicts_the_oldest():
    parked: list = []
    for i in range(3):
        decision = events.park(parked, b"{}", f"r{i}", now=float(i), max_per_query=2, partition=1)
        parked = decision.parked
    assert [item.result_id for item in parked] == ["r1", "r2"]
    assert [item.result_id for item in decision.evicted] == ["r0"]
    assert parked[0].partition == 1


def test_parked_items_read_back_from_a_changelog_are_named() -> None:
    stored = [1, [["r1", 2.5, '{"a": 1}', 3]]]  # what a JSON replay of the table gives
    (item,) = decode_parked(stored)
    assert (item.result_id, item.parked_at, item.raw, item.partition) == ("r1", 2.5, '{"a": 1}', 3)
    assert decode_parked(None) == []


def test_expiry_splits_at_the_ttl():
    parked = decode_parked([1, [["old", 0.0, "{}", 0], ["young", 9.0, "{}", 0]]])
    keep, expired = events.split_expired(parked, now=10.0, ttl=10.0)
    assert [i.result_id for i in keep] == ["young"]
    assert [i.result_id for i in expired] == ["old"]


def test_a_redelivered_result_is_not_parked_twice():
    first = events.park([], b"{}", "r1", now=0.0, max_per_query=5, partition=0)
    again = events.park(first.parked, b"{}", "r1", now=1.0, max_per_query=5, partition=0)
    assert again.parked == first.parked
    assert (again.evicted, again.added) == ([], False)


def test_scored_at_is_the_time_given_as_a_datetime_or_as_its_iso_text():
    from datetime import UTC, datetime

    entry = events.golden_entry(GOLDEN)
    at = datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    from_datetime = orjson.loads(events.score_result(result(), entry, 10, at).payload)
    from_text = orjson.loads(events.score_result(result(), entry, 10, at.isoformat()).payload)
    assert from_datetime["scoredAt"] == from_text["scoredAt"] == "2026-03-04T05:06:07.890000+00:00"
    assert from_datetime == from_text


def parked_of(raws: list[bytes], max_bytes: int | None, max_per_query: int = 100):
    """Park ``raws`` in turn (result ids r0, r1, ...); the decisions made."""
    parked: list = []
    decisions = []
    for i, raw in enumerate(raws):
        decision = events.park(parked, raw, f"r{i}", float(i), max_per_query, 0, max_bytes)
        parked = decision.parked
        decisions.append(decision)
    return decisions


def changelog_size(parked: list) -> int:
    """Bytes of the parked list as Faust's json codec writes it to the changelog."""
    from faust.utils import json as faust_json

    return len(faust_json.dumps(encode_parked(parked)))


def test_the_parked_list_size_is_its_changelog_value_size():
    parked = parked_of([b'{"a": "\xc3\xa9\\n"}', b'{"b": 1}', b"{}"], max_bytes=None)[-1].parked
    sizes = [events.parked_item_size(item) for item in parked]
    assert events.parked_list_size(sizes) == changelog_size(parked)
    assert events.parked_list_size([]) == changelog_size([])


def test_parking_is_bounded_per_query_in_bytes_and_evicts_the_oldest_first():
    raw = b'{"x": "' + b"a" * 400_000 + b'"}'
    _, second, third = parked_of([raw, raw, raw], max_bytes=900_000)
    assert [item.result_id for item in second.parked] == ["r0", "r1"]
    assert second.evicted == []
    # Three would be 1.2 MB: the oldest goes, as unjudged.
    assert [item.result_id for item in third.parked] == ["r1", "r2"]
    assert [item.result_id for item in third.evicted] == ["r0"]
    assert third.added and not third.oversized
    assert changelog_size(third.parked) <= 900_000


def test_the_byte_bound_holds_at_the_exact_boundary():
    raw = b'{"x": "' + b"a" * 1000 + b'"}'
    two = parked_of([raw, raw], max_bytes=None)[-1].parked
    exact = changelog_size(two)
    kept = parked_of([raw, raw], max_bytes=exact)[-1]
    assert (len(kept.parked), kept.evicted) == (2, [])
    cut = parked_of([raw, raw], max_bytes=exact - 1)[-1]
    assert [item.result_id for item in cut.parked] == ["r1"]
    assert [item.result_id for item in cut.evicted] == ["r0"]


def test_a_result_larger_than_the_byte_bound_alone_is_never_parked():
    small = b'{"x": 1}'
    big = b'{"x": "' + b"a" * 2000 + b'"}'
    one_big = parked_of([big], max_bytes=None)[-1].parked
    limit = changelog_size(one_big)
    fits = parked_of([big], max_bytes=limit)[-1]
    assert fits.added and [item.result_id for item in fits.parked] == ["r0"]
    decisions = parked_of([small, big], max_bytes=limit - 1)
    refused = decisions[-1]
    assert (refused.added, refused.oversized) == (False, True)
    assert refused.evicted == []
    # What was parked stays parked.
    assert [item.result_id for item in refused.parked] == ["r0"]


def test_the_count_and_byte_bounds_apply_together():
    raw = b'{"x": "' + b"a" * 100 + b'"}'
    decisions = parked_of([raw] * 5, max_bytes=10_000, max_per_query=3)
    assert [item.result_id for item in decisions[-1].parked] == ["r2", "r3", "r4"]
    assert [item.result_id for item in decisions[-1].evicted] == ["r1"]


offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))


@settings(max_examples=500, deadline=None)
@given(st.datetimes(timezones=st.one_of(st.none(), offsets)), st.booleans())
def test_the_scored_timestamp_is_the_read_timestamps_isoformat(when, as_z):
    # The model reads the wire's text into its own tzinfo class; the scored document
    # carries the datetime for orjson to write, which must be the text isoformat() gives.
    text = when.isoformat()
    if as_z and text.endswith("+00:00"):
        text = text[: -len("+00:00")] + "Z"
    wire = orjson.dumps({"resultId": "r1", "runId": "run", "queryId": "q1", "ranked": ["A"],
                         "timestamp": text})  # fmt: skip
    read = events.decode_result(wire)
    scored = events.score_result(read, events.golden_entry(GOLDEN), 10, "2026-01-01T00:00:00")
    assert orjson.loads(scored.payload)["timestamp"] == read.timestamp.isoformat()
    assert read.timestamp == when
