"""The run list of ``GET /api/v1/evals/runs``: merging workers' lists, paging, its shape."""

from __future__ import annotations

import jsonschema
import pytest

from scorer.stream.openapi import OPENAPI
from scorer.stream.run_list import Paging, merge_runs, other_hosts, page_of, run_entry
from scorer.stream.stored import decode_run_state, new_run_state

LIST_SCHEMA = OPENAPI["paths"]["/api/v1/evals/runs"]["get"]["responses"]["200"]["content"][
    "application/json"
]


def entry(run_id: str, count: int, updated_at: str | None) -> dict:
    return {"runId": run_id, "count": count, "updatedAt": updated_at}


def test_a_run_entry_reads_the_count_and_update_time_of_the_state():
    state = new_run_state()
    state["rollup"]["overall"][0] = 12
    state["updatedAt"] = "2026-11-30T12:00:00+00:00"
    listed = run_entry("bm25-v1", state)
    assert {k: listed[k] for k in ("runId", "count", "updatedAt")} == entry(
        "bm25-v1", 12, "2026-11-30T12:00:00+00:00"
    )


def test_a_run_entry_carries_the_headline_metrics_with_the_runs_own_intervals():
    from scorer.core.rollup import RunRollup
    from scorer.stream.run_state import run_document

    rollup = RunRollup()
    for values in ([1.0, 0.5, 0.8, 1.0, 1.0], [0.0, 0.1, 0.2, 0.5, 0.0], [0.5, 0.3, 0.6, 1.0, 1.0]):
        rollup.add(values, {"type": "faq"})
    state = new_run_state()
    state["rollup"] = rollup.to_state()
    listed = run_entry("r", state)
    document = run_document("r", state, 100)
    assert set(listed["metrics"]) == {"ndcgAt10", "recallAtK", "hitAtK", "judgedAtK"}
    for name in listed["metrics"]:
        assert listed["metrics"][name] == document["metrics"][name]
        assert listed["ci95"][name] == document["ci95"][name]


def test_merged_runs_are_newest_first_with_ties_by_run_id_and_never_updated_last():
    first = [entry("b", 1, "2026-11-30T10:00:00+00:00"), entry("idle", 0, None)]
    second = [
        entry("c", 5, "2026-11-30T11:00:00+00:00"),
        entry("a", 2, "2026-11-30T10:00:00+00:00"),
    ]
    assert [e["runId"] for e in merge_runs([first, second])] == ["c", "a", "b", "idle"]


def test_a_run_held_by_two_workers_is_listed_once_as_its_freshest_copy():
    owner = [entry("bm25-v1", 40, "2026-11-30T10:00:05+00:00")]
    standby = [entry("bm25-v1", 38, "2026-11-30T10:00:04+00:00")]
    same_time = [entry("bm25-v1", 39, "2026-11-30T10:00:05+00:00")]
    assert merge_runs([standby, owner, same_time]) == owner
    assert merge_runs([owner, standby]) == owner


def test_pages_cover_the_list_once_and_say_where_the_next_starts():
    runs = [entry(f"run-{i}", i, f"2026-11-30T10:00:{59 - i:02d}+00:00") for i in range(5)]
    first = page_of(runs, Paging(limit=2, offset=0))
    assert [e["runId"] for e in first["runs"]] == ["run-0", "run-1"]
    assert (first["total"], first["nextOffset"]) == (5, 2)
    last = page_of(runs, Paging(limit=2, offset=4))
    assert [e["runId"] for e in last["runs"]] == ["run-4"]
    assert last["nextOffset"] is None
    assert page_of(runs, Paging(limit=2, offset=9))["runs"] == []


def test_paging_defaults_to_50_from_the_start_and_takes_the_query_string():
    assert Paging.from_query({}) == Paging(limit=50, offset=0)
    assert Paging.from_query({"limit": "500", "offset": "20"}) == Paging(limit=500, offset=20)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": "501"}, "limit must be 1 to 500, got 501"),
        ({"limit": "0"}, "limit must be 1 to 500, got 0"),
        ({"offset": "-1"}, "offset must be a whole number >= 0, got '-1'"),
        ({"limit": "ten"}, "limit must be a whole number >= 0, got 'ten'"),
    ],
)
def test_bad_paging_says_which_parameter_and_why(query, message):
    with pytest.raises(ValueError, match=message):
        Paging.from_query(query)


def test_a_page_has_the_shape_of_the_openapi_document():
    runs = merge_runs([[entry("a", 3, "2026-11-30T10:00:00+00:00"), entry("b", 0, None)]])
    jsonschema.validate(page_of(runs, Paging(limit=1)), LIST_SCHEMA["schema"])
    jsonschema.validate(LIST_SCHEMA["example"], LIST_SCHEMA["schema"])


def test_the_other_owners_are_every_assigned_host_but_this_one():
    hosts = ["http://127.0.0.1:6066", "http://127.0.0.1:6067", "http://10.0.0.5:6066"]
    assert other_hosts(hosts, "http://127.0.0.1:6066") == hosts[1:]
    assert other_hosts(["http://127.0.0.1:6066/"], "http://127.0.0.1:6066") == []
    assert other_hosts([], "http://127.0.0.1:6066") == []


def test_the_list_warns_of_a_run_the_golden_set_covers_under_half_of() -> None:
    from scorer.stream.run_list import JUDGED_WARN_BELOW, JUDGED_WARN_MIN_COUNT, warnings_of

    low = {"ndcgAt10": 0.3, "judgedAtK": 0.42}
    (warning,) = warnings_of(JUDGED_WARN_MIN_COUNT, low)
    assert warning.startswith("low judged coverage: judged@k 0.42, ")
    assert warnings_of(JUDGED_WARN_MIN_COUNT - 1, low) == []  # too few results to say
    assert warnings_of(100, {"judgedAtK": JUDGED_WARN_BELOW}) == []
    assert warnings_of(100, {"ndcgAt10": 0.3}) == []  # a state from before judged@k


def test_a_run_entry_carries_its_warnings() -> None:
    from scorer.core.rollup import RunRollup

    rollup = RunRollup()
    for _ in range(30):  # judged@k (slot 5) 0.2 in every result
        rollup.add([0.0, 0.0, 0.0, 0.0, 0.0, 0.2, 0.0], {})
    state = new_run_state()
    state["rollup"] = rollup.to_state()
    listed = run_entry("r", state)
    assert listed["metrics"]["judgedAtK"] == pytest.approx(0.2)
    assert len(listed["warnings"]) == 1 and "judged@k 0.20" in listed["warnings"][0]


def test_the_list_warns_of_a_run_that_mixes_golden_sets() -> None:
    from scorer.core.rollup import RunRollup
    from scorer.stream.run_list import warnings_of

    (warning,) = warnings_of(40, {"judgedAtK": 0.9}, changed_qrels=12)
    assert warning == (
        "mixed golden sets: 12 of 40 results were scored against qrels that have since changed"
    )
    assert warnings_of(40, {"judgedAtK": 0.9}, changed_qrels=0) == []
    rollup = RunRollup()
    for _ in range(30):
        rollup.add([0.0, 0.0, 0.0, 0.0, 0.0, 0.2, 0.0], {})
    state = new_run_state()
    state["rollup"] = rollup.to_state()
    state["changedQrels"] = 7
    listed = run_entry("r", state)
    assert listed["changedQrels"] == 7
    assert [w.split(":")[0] for w in listed["warnings"]] == [
        "mixed golden sets",
        "low judged coverage",
    ]
    del state["changedQrels"], state["v"]  # as stored before golden-set versions
    assert run_entry("r", decode_run_state(state))["changedQrels"] == 0
