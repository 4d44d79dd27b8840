"""RetrievalResult's optional ``scores`` and ``confidence``, and ScoredResult's
``confidence``: what validates, what is rejected and with which reason."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from schemas import RetrievalResult, ScoredResult, describe_validation_error
from schemas.events import MAX_RANKED
from scorer.io.errors import InputError
from scorer.io.runs import iter_results_jsonl
from scorer.stream.events import RejectedEvent, decode_result, golden_entry, score_result

BASE = '"resultId": "r1", "runId": "v1", "queryId": "q1"'


def reason(json_text: str) -> str:
    with pytest.raises(ValidationError) as caught:
        RetrievalResult.model_validate_json(json_text)
    return describe_validation_error(caught.value)


def test_scores_and_confidence_are_optional_and_give_the_top_confidence() -> None:
    plain = RetrievalResult.model_validate_json(f'{{{BASE}, "ranked": ["a", "b"]}}')
    assert plain.scores is None and plain.confidence is None
    assert plain.top_confidence() is None
    scored = RetrievalResult.model_validate_json(
        f'{{{BASE}, "ranked": ["a", "b"], "scores": [12, 3.5]}}'
    )
    assert scored.scores == [12.0, 3.5]
    assert scored.top_confidence() == 12.0
    both = RetrievalResult.model_validate_json(
        f'{{{BASE}, "ranked": ["a"], "scores": [0.4], "confidence": -1.25}}'
    )
    assert both.top_confidence() == -1.25
    empty = RetrievalResult.model_validate_json(f'{{{BASE}, "ranked": [], "scores": []}}')
    assert empty.top_confidence() is None


def test_scores_of_another_length_than_ranked_are_rejected_with_the_reason() -> None:
    assert reason(f'{{{BASE}, "ranked": ["a", "b"], "scores": [1.0]}}') == (
        "scores: Value error, scores has 1 values but ranked has 2 ids "
        "(give one score per ranked id, or no scores)"
    )


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_score_or_confidence_is_rejected(value: str) -> None:
    assert reason(f'{{{BASE}, "ranked": ["a"], "scores": [{value}]}}') == (
        "scores.0: Input should be a finite number"
    )
    assert reason(f'{{{BASE}, "ranked": ["a"], "confidence": {value}}}') == (
        "confidence: Input should be a finite number"
    )


def test_scores_are_bounded_like_ranked() -> None:
    ids = ", ".join(f'"d{i}"' for i in range(MAX_RANKED + 1))
    scores = ", ".join("1.0" for _ in range(MAX_RANKED + 1))
    assert reason(f'{{{BASE}, "ranked": [{ids}], "scores": [{scores}]}}').startswith("ranked:")
    assert reason(f'{{{BASE}, "ranked": ["a"], "scores": [{scores}]}}').startswith(
        f"scores: List should have at most {MAX_RANKED} items"
    )


def test_the_worker_dead_letters_a_bad_score_with_its_reason() -> None:
    with pytest.raises(RejectedEvent) as caught:
        decode_result(f'{{{BASE}, "ranked": ["a"], "scores": [NaN]}}'.encode())
    assert caught.value.error_class == "SchemaViolation"
    assert caught.value.message == "scores.0: Input should be a finite number"


def test_scored_result_confidence_is_optional_so_the_live_payload_stays_valid() -> None:
    from schemas import GoldenQuery

    golden = GoldenQuery(query_id="q1", qrels={"a": 2})
    result = RetrievalResult(result_id="r1", run_id="v1", query_id="q1", ranked=["a"])
    payload = score_result(result, golden_entry(golden), 10, datetime(2026, 1, 1, tzinfo=UTC))
    scored = ScoredResult.model_validate_json(payload.payload)
    assert scored.confidence is None
    with_confidence = scored.model_copy(update={"confidence": 0.75})
    assert b'"confidence":0.75' in with_confidence.to_json_bytes()
    assert ScoredResult.model_validate_json(with_confidence.to_json_bytes()).confidence == 0.75


@pytest.mark.parametrize(
    "line",
    [
        f'{{{BASE}, "ranked": "a"}}',
        f'{{{BASE}, "ranked": ["a"], "scores": [1.0, 2.0]}}',
        '{"resultId": "r1", "ranked": ["a"]}',
    ],
)
def test_a_bad_result_is_described_alike_offline_and_live(tmp_path: Path, line: str) -> None:
    """One description of a bad event: the dead letter's reason is the run file's."""
    with pytest.raises(RejectedEvent) as live:
        decode_result(line.encode())
    path = tmp_path / "run.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(InputError) as offline:
        list(iter_results_jsonl(path))
    assert offline.value.reason == live.value.message
    assert str(offline.value) == f"{path}:1: {live.value.message}"
