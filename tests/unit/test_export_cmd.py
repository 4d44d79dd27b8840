"""The time arguments of ``scorer export`` (the command itself: tests/integration)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from scorer.cli.export_cmd import Tally, parse_moment, select

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - timedelta(days=7)),
        ("24h", NOW - timedelta(hours=24)),
        ("90m", NOW - timedelta(minutes=90)),
        ("30s", NOW - timedelta(seconds=30)),
        ("2w", NOW - timedelta(weeks=2)),
        ("1.5h", NOW - timedelta(minutes=90)),
        ("2026-11-25", datetime(2026, 11, 25, tzinfo=UTC)),
        ("2026-11-25T10:00Z", datetime(2026, 11, 25, 10, tzinfo=UTC)),
        ("2026-11-25T10:00+01:00", datetime(2026, 11, 25, 9, tzinfo=UTC)),
        ("2026-11-25T10:00:00", datetime(2026, 11, 25, 10, tzinfo=UTC)),
    ],
)
def test_durations_count_back_from_now_and_times_without_a_zone_are_utc(
    text: str, expected: datetime
) -> None:
    got = parse_moment(text, NOW)
    assert got == expected
    assert got.utcoffset() is not None


def test_a_zone_is_kept_as_given() -> None:
    got = parse_moment("2026-11-25T10:00+01:00", NOW)
    assert got.utcoffset() == timezone(timedelta(hours=1)).utcoffset(None)


@pytest.mark.parametrize("text", ["last tuesday", "7 days", "d7", "-3h", ""])
def test_anything_else_is_refused_naming_both_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"neither a duration .* nor an ISO 8601 time"):
        parse_moment(text, NOW)


def test_select_keeps_the_asked_runs_valid_results_and_counts_the_rest() -> None:
    tally = Tally()
    good = b'{"resultId": "r1", "runId": "a", "queryId": "q", "ranked": ["d1", "d2"], "k": 5}'
    other = b'{"resultId": "r2", "runId": "b", "queryId": "q", "ranked": []}'
    assert select(good, frozenset({"a"}), tally) == (
        b'{"resultId":"r1","runId":"a","queryId":"q","ranked":["d1","d2"],"k":5}'
    )
    assert select(other, frozenset({"a"}), tally) is None
    assert select(other, frozenset(), tally) is not None
    for bad in (b"{truncated", b'{"resultId": "x"}', None, b"\xff"):
        assert select(bad, frozenset(), tally) is None
    assert (tally.other_runs, tally.invalid) == (1, 4)
