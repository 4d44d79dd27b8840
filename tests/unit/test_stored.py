"""The stored records' codecs (scorer.stream.stored): every format an earlier version
wrote decodes to what that version read from it, this version's records round-trip,
and a later version's are refused with a message naming the record and its version.

The old records below are the bytes earlier versions wrote, taken from running
their code (the commit is named with each); the expected values are what the
version before this one (e43c5a6) made of them."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from faust.utils import json as faust_json
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import GoldenQuery, RetrievalResult
from scorer.core.metrics import Judgments
from scorer.stream import events, run_state, seen
from scorer.stream.run_list import run_entry
from scorer.stream.stored import (
    ROW_RESULT_ID,
    ParkedItem,
    RollupRow,
    SourcePosition,
    UnknownVersion,
    decode_parked,
    decode_qrels_entry,
    decode_rollup_record,
    decode_run_state,
    encode_parked,
    encode_qrels_entry,
    encode_rollup_records,
    new_run_state,
    rollup_row,
)
from scorer.stream.testing import Pipeline, Record


def changelog(value: Any) -> Any:
    """``value`` as a table's changelog carries it and a replay gives it back."""
    return orjson.loads(faust_json.dumps(value))


# ------------------------------------------------------------------ rollup records

VALUES_1 = [1.0, 0.5, 0.5, 1.0, 1.0]  # five measures: the rows predate the other two
VALUES_2 = [1.0, 0.5, 1.0, 1.0, 1.0]

OLD_ROLLUP_RECORDS = {
    # 26621c3 (before the confidence): eight items a row.
    "eight items": (
        b'[["results",2,40,0,"r1","q1",[1.0,0.5,0.5,1.0,1.0],{"type":"faq"}],'
        b'["results",2,41,0,"r2","q1",[1.0,0.5,1.0,1.0,1.0],{"type":"faq"}]]',
        [
            ["results", 2, 40, 0, "r1", "q1", VALUES_1, {"type": "faq"}, None, None],
            ["results", 2, 41, 0, "r2", "q1", VALUES_2, {"type": "faq"}, None, None],
        ],
    ),
    # f8d7a2c (before the qrels fingerprint): nine items a row.
    "nine items": (
        b'[["results",2,40,0,"r1","q1",[1.0,0.5,0.5,1.0,1.0],{"type":"faq"},0.75],'
        b'["results",2,41,0,"r2","q1",[1.0,0.5,1.0,1.0,1.0],{"type":"faq"},null]]',
        [
            ["results", 2, 40, 0, "r1", "q1", VALUES_1, {"type": "faq"}, 0.75, None],
            ["results", 2, 41, 0, "r2", "q1", VALUES_2, {"type": "faq"}, None, None],
        ],
    ),
    # e43c5a6 (untagged): ten items with a fingerprint, nine without, in one record.
    "ten and nine items": (
        b'[["results",2,40,0,"r1","q1",[1.0,0.5,0.5,1.0,1.0],{"type":"faq"},0.75,'
        b'"a1b2c3d4e5f60718"],'
        b'["results",2,41,0,"r2","q1",[1.0,0.5,1.0,1.0,1.0],{"type":"faq"},null]]',
        [
            ["results", 2, 40, 0, "r1", "q1", VALUES_1, {"type": "faq"}, 0.75, "a1b2c3d4e5f60718"],
            ["results", 2, 41, 0, "r2", "q1", VALUES_2, {"type": "faq"}, None, None],
        ],
    ),
}

FOLDED_ROLLUP = {
    "overall": [
        2,
        [2.0, 1.0, 1.5, 2.0, 2.0, 0.0, 0.0],
        [2.0, 0.5, 1.25, 2.0, 2.0, 0.0, 0.0],
        [0, 0, 0, 0, 0, 2, 2],
    ],
    "facets": {
        "type": {
            "faq": [
                2,
                [2.0, 1.0, 1.5, 2.0, 2.0, 0.0, 0.0],
                [2.0, 0.5, 1.25, 2.0, 2.0, 0.0, 0.0],
                [0, 0, 0, 0, 0, 2, 2],
            ]
        }
    },
}
"""The rollup of the two rows above, as e43c5a6 folded it (the two measures the rows
predate unseen)."""

SKETCH_OF_R1 = {
    "buckets": [[39986, 1, 0, 0.5]],
    "lossBins": [[50, 1, 0.5]],
    "withoutConfidence": 1,
    "folded": None,
}
"""The risk sketch of r1 (confidence 0.75) and r2 (none)."""
NO_CONFIDENCE = {"buckets": [], "lossBins": [], "withoutConfidence": 2, "folded": None}


@pytest.mark.parametrize("name", OLD_ROLLUP_RECORDS)
def test_a_rollup_record_of_an_earlier_version_decodes_to_ten_item_rows(name: str) -> None:
    raw, rows = OLD_ROLLUP_RECORDS[name]
    assert decode_rollup_record(raw) == rows


@pytest.mark.parametrize(
    ("name", "risk"),
    [
        ("eight items", NO_CONFIDENCE),
        ("nine items", SKETCH_OF_R1),
        ("ten and nine items", SKETCH_OF_R1),
    ],
)
def test_a_rollup_record_of_an_earlier_version_folds_as_it_did(name: str, risk: dict) -> None:
    batch = run_state.RunBatch(lambda key: None, lambda key: None, 100, now=1000.0)
    for row in decode_rollup_record(OLD_ROLLUP_RECORDS[name][0]):
        assert batch.add_row(b"run-a", row)
    assert changelog(batch.finish("t")[b"run-a"]) == {
        "v": 1,
        "rollup": FOLDED_ROLLUP,
        "risk": risk,
        "watermarks": {"results/2": [41, 0]},
        "updatedAt": "t",
        "queries": 1,
        "history": [[900.0, 2.0, 1.5]],
        "changedQrels": 0,
    }


def test_a_rollup_record_of_this_version_leads_with_its_version() -> None:
    row = RollupRow("results", 2, 40, 0, "r1", "q1", [0.5], {}, None, "ab")
    [raw] = encode_rollup_records([row])
    assert raw == b'[1,[["results",2,40,0,"r1","q1",[0.5],{},null,"ab"]]]'
    assert row.position == ("results", 2, 40, 0) and row.position.stream == "results/2"
    assert RollupRow(*range(10))[ROW_RESULT_ID] == RollupRow(*range(10)).result_id


def test_the_results_paths_plain_row_is_a_rollup_row() -> None:
    position = SourcePosition("results", 2, 40, 1)
    plain = rollup_row(position, "r1", "q1", [0.5], {"t": "x"}, 0.25, "ab")
    assert type(plain) is tuple
    assert RollupRow(*plain) == RollupRow(*position, "r1", "q1", [0.5], {"t": "x"}, 0.25, "ab")
    assert RollupRow(*rollup_row(position, "r1", "q1", [], {})) == RollupRow(
        *position, "r1", "q1", [], {}
    )
    assert encode_rollup_records([plain]) == encode_rollup_records([RollupRow(*plain)])


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
rows = st.builds(
    RollupRow,
    text,
    st.integers(0, 2**15),
    st.integers(0, 2**62),
    st.integers(0, 2**31),
    text,
    text,
    st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=8),
    st.dictionaries(text, text, max_size=4),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
    st.none() | st.text("0123456789abcdef", min_size=16, max_size=16),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(rows, min_size=1, max_size=30), st.sampled_from([None, 65_536, 2_000]))
def test_rollup_rows_round_trip_whole_or_split(items: list[RollupRow], limit: int | None) -> None:
    try:
        records = encode_rollup_records(items, b"run", limit)
    except ValueError:
        assert limit == 2_000  # a row too large for a record of its own
        return
    assert [RollupRow(*row) for raw in records for row in decode_rollup_record(raw)] == items


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            b'[2,[["results",2,40,0,"r1","q1",[0.5],{},null,null]]]',
            "rollup record of unknown version 2",
        ),
        (b'{"resultId":"r1","runId":"run-a"}', "rollup record of no known format: dict"),
        (
            b'[["results",2,40,0,"r1","q1",[0.5],{},null,null,"x"]]',
            "rollup row of no known format: list of 11 items",
        ),
    ],
)
def test_a_rollup_record_of_an_unknown_format_is_refused(raw: bytes, message: str) -> None:
    with pytest.raises(UnknownVersion, match=message) as refused:
        decode_rollup_record(raw)
    assert "\n" not in str(refused.value)


def test_the_fold_refuses_a_record_of_a_later_version_as_it_refused_an_undecodable_one() -> None:
    """The batch fails whole (nothing written): the worker stops on it, logged, as it
    did on a record it could not decode before versions."""
    pipeline = Pipeline()
    pipeline.topic(pipeline.settings.rollup_topic, 0).append(Record(0, b"run-a", b"[9,[]]"))
    with pytest.raises(UnknownVersion, match="rollup record of unknown version 9"):
        pipeline.fold()
    assert pipeline.tables["rollups"].data == {}


# ------------------------------------------------------------------ run states

OLD_RUN_STATES = {
    # 26621c3: no risk sketch, no trend history, no changed-qrels count.
    "before the sketch": (
        b'{"rollup":{"overall":[2,[2.0,1.0,1.5,2.0,2.0],[2.0,0.5,1.25,2.0,2.0]],'
        b'"facets":{"type":{"faq":[2,[2.0,1.0,1.5,2.0,2.0],[2.0,0.5,1.25,2.0,2.0]]}}},'
        b'"watermarks":{"results/2":[41,0]},"updatedAt":"2026-12-01T00:00:00+00:00","queries":1}'
    ),
    # f8d7a2c: the sketch, no history.
    "before the history": (
        b'{"rollup":{"overall":[2,[2.0,1.0,1.5,2.0,2.0],[2.0,0.5,1.25,2.0,2.0]],'
        b'"facets":{"type":{"faq":[2,[2.0,1.0,1.5,2.0,2.0],[2.0,0.5,1.25,2.0,2.0]]}}},'
        b'"risk":{"buckets":[[39986,1,0,0.5]],"lossBins":[[50,1,0.5]],"withoutConfidence":1,'
        b'"folded":null},"watermarks":{"results/2":[41,0]},'
        b'"updatedAt":"2026-12-01T00:00:00+00:00","queries":1}'
    ),
    # 5773066: the history, no changed-qrels count.
    "before golden-set versions": (
        b'{"rollup":{"overall":[2,[2.0,1.0,1.5,2.0,2.0,0.0,0.0],[2.0,0.5,1.25,2.0,2.0,0.0,0.0],'
        b'[0,0,0,0,0,2,2]],"facets":{"type":{"faq":[2,[2.0,1.0,1.5,2.0,2.0,0.0,0.0],'
        b'[2.0,0.5,1.25,2.0,2.0,0.0,0.0],[0,0,0,0,0,2,2]]}}},"risk":{"buckets":[[39986,1,0,0.5]],'
        b'"lossBins":[[50,1,0.5]],"withoutConfidence":1,"folded":null},'
        b'"watermarks":{"results/2":[41,0]},"updatedAt":"2026-12-01T00:00:00+00:00","queries":1,'
        b'"history":[[900.0,2.0,1.5]]}'
    ),
    # e43c5a6: every key, untagged.
    "untagged": (
        b'{"rollup":{"overall":[2,[2.0,1.0,1.5,2.0,2.0,0.0,0.0],[2.0,0.5,1.25,2.0,2.0,0.0,0.0],'
        b'[0,0,0,0,0,2,2]],"facets":{"type":{"faq":[2,[2.0,1.0,1.5,2.0,2.0,0.0,0.0],'
        b'[2.0,0.5,1.25,2.0,2.0,0.0,0.0],[0,0,0,0,0,2,2]]}}},"risk":{"buckets":[[39986,1,0,0.5]],'
        b'"lossBins":[[50,1,0.5]],"withoutConfidence":1,"folded":null},'
        b'"watermarks":{"results/2":[41,0]},"updatedAt":"2026-12-01T00:00:00+00:00","queries":1,'
        b'"history":[[900.0,2.0,1.5]],"changedQrels":0}'
    ),
}
EMPTY_SKETCH = {"buckets": [], "lossBins": [], "withoutConfidence": 0, "folded": None}
READ_AS = {
    # (risk sketch, trend history) as e43c5a6 read them: the sketch's counts and the trend.
    "before the sketch": (EMPTY_SKETCH, (0, 0), []),
    "before the history": (SKETCH_OF_R1, (1, 1), []),
    "before golden-set versions": (SKETCH_OF_R1, (1, 1), [[900.0, 2.0, 1.5]]),
    "untagged": (SKETCH_OF_R1, (1, 1), [[900.0, 2.0, 1.5]]),
}


@pytest.mark.parametrize("name", OLD_RUN_STATES)
def test_a_run_state_of_an_earlier_version_decodes_with_what_was_added_since(name: str) -> None:
    old = orjson.loads(OLD_RUN_STATES[name])
    risk, _, history = READ_AS[name]
    assert decode_run_state(old) == {
        **old,
        "v": 1,
        "risk": risk,
        "history": history,
        "changedQrels": 0,
    }


@pytest.mark.parametrize("name", OLD_RUN_STATES)
def test_a_run_state_of_an_earlier_version_reads_as_it_did(name: str) -> None:
    state = decode_run_state(orjson.loads(OLD_RUN_STATES[name]))
    _, (with_confidence, without), history = READ_AS[name]
    document = run_state.run_document("run-a", state, 100)
    assert (document["count"], document["metrics"]["ndcgAt10"]) == (2, 0.75)
    assert document["changedQrels"] == 0
    assert document["pairedQueries"] == {"tracked": 1, "limit": 100}
    assert document["updatedAt"] == "2026-12-01T00:00:00+00:00"
    risk = run_state.risk_document("run-a", state)
    assert (risk["withConfidence"], risk["withoutConfidence"]) == (with_confidence, without)
    trend = [[start, total / count, count] for start, count, total in history]
    assert run_state.trend_of(state) == trend == run_entry("run-a", state)["trend"]


@pytest.mark.parametrize("name", OLD_RUN_STATES)
def test_a_run_state_of_an_earlier_version_folds_on_as_it_did(name: str) -> None:
    old = orjson.loads(OLD_RUN_STATES[name])
    batch = run_state.RunBatch({b"run-a": old}.get, lambda key: None, 100, now=2000.0)
    row = ["results", 2, 42, 0, "r3", "q2", [0.0] * 7, {"type": "faq"}, 0.25, "ffee00112233aabb"]
    assert batch.add_row(b"run-a", row)
    sketch = READ_AS[name][0]
    # What e43c5a6 wrote after this fold, tagged (and with a changed-qrels count).
    rollup = orjson.loads(orjson.dumps(FOLDED_ROLLUP).replace(b"[2,", b"[3,"))
    assert changelog(batch.finish("t")[b"run-a"]) == {
        "v": 1,
        "rollup": rollup,
        "risk": {
            "buckets": [[39931, 1, 1, 1.0], *sketch["buckets"]],
            "lossBins": [*sketch["lossBins"], [99, 1, 1.0]],
            "withoutConfidence": sketch["withoutConfidence"],
            "folded": None,
        },
        "watermarks": {"results/2": [42, 0]},
        "updatedAt": "t",
        "queries": 2,
        "history": [*READ_AS[name][2], [1800.0, 1.0, 0.0]],
        "changedQrels": 0,
    }


def test_a_run_state_of_this_version_is_read_as_it_is() -> None:
    state = new_run_state()
    assert state["v"] == 1 and decode_run_state(state) is state
    replayed = changelog(state)
    assert decode_run_state(replayed) is replayed and replayed == state


def test_a_run_state_of_an_unknown_format_is_refused() -> None:
    later = {**new_run_state(), "v": 2}
    with pytest.raises(
        UnknownVersion, match=r"^run state of unknown version 2: written by a later version"
    ):
        decode_run_state(later)
    with pytest.raises(
        UnknownVersion, match=r"run state of no known format: untagged, keys \['count'\]"
    ):
        decode_run_state({"count": 3})


# ------------------------------------------------------------------ parked lists

RAW_RESULT = '{"resultId":"r1","runId":"run-a","queryId":"q9","ranked":["d1","d2"]}'
OLD_PARKED = (
    # e43c5a6: the items untagged (four fields each since the parked table existed).
    b'[["r1",1796354016.2648053,"{\\"resultId\\":\\"r1\\",\\"runId\\":\\"run-a\\",'
    b'\\"queryId\\":\\"q9\\",\\"ranked\\":[\\"d1\\",\\"d2\\"]}",2]]'
)


def test_a_parked_list_of_an_earlier_version_decodes_to_its_items() -> None:
    (item,) = decode_parked(orjson.loads(OLD_PARKED))
    assert item == ParkedItem("r1", 1796354016.2648053, RAW_RESULT, 2)
    assert decode_parked([]) == [] and decode_parked(None) == []


def test_a_parked_list_of_an_earlier_version_is_released_by_its_qrels() -> None:
    pipeline = Pipeline()
    pipeline.tables["parked"].data["q9"] = orjson.loads(OLD_PARKED)
    pipeline.crash()  # started over the table: its count read from the old list
    assert pipeline.parked.value == 1
    pipeline.judge(GoldenQuery(query_id="q9", qrels={"d2": 1}))
    pipeline.settle()
    [scored] = pipeline.scored()
    assert (scored["resultId"], scored["retrievalMetrics"]["mrr"]) == ("r1", 0.5)
    assert pipeline.tables["parked"].data == {} and pipeline.run("run-a")["count"] == 1


parked_items = st.lists(
    st.builds(ParkedItem, text, st.floats(0, 2e9), text, st.integers(0, 1000)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=100, deadline=None)
@given(parked_items)
def test_a_parked_list_round_trips_in_memory_and_through_the_changelog(items: list) -> None:
    stored = encode_parked(items)
    assert stored[0] == 1
    assert decode_parked(stored) == items == decode_parked(changelog(stored))
    sizes = [events.parked_item_size(item) for item in items]
    assert events.parked_list_size(sizes) == len(faust_json.dumps(stored))


def test_a_parked_list_of_an_unknown_format_is_refused() -> None:
    with pytest.raises(UnknownVersion, match="parked list of unknown version 2"):
        decode_parked([2, [["r1", 1.0, "{}", 0]]])
    with pytest.raises(UnknownVersion, match="parked item of no known format: list of 3 items"):
        decode_parked([["r1", 1.0, "{}"]])  # no parked table ever held these


# ------------------------------------------------------------------ qrels entries

OLD_QRELS = {
    # f461a0c: before the other judged ids were kept.
    "before others": b'{"grades":{"d1":3,"d2":1},"idcg":7.630929753571458,"facets":{"type":"faq"},'
    b'"fingerprint":"c2dde8c87db78438"}',
    # e43c5a6: untagged.
    "untagged": b'{"grades":{"d1":3,"d2":1},"others":{"d3":0},"idcg":7.630929753571458,'
    b'"facets":{"type":"faq"},"fingerprint":"c2dde8c87db78438"}',
}
JUDGED_AT_K = {"before others": 1 / 3, "untagged": 2 / 3}
"""judged@3 of the result below as e43c5a6 scored it: an entry without ``others`` counts
its relevant ids only."""
GOLDEN = GoldenQuery(query_id="q1", qrels={"d1": 3, "d2": 1, "d3": 0}, facets={"type": "faq"})
RESULT = RetrievalResult(
    result_id="r1", run_id="run-a", query_id="q1", ranked=["d3", "d1", "x", "d2"], k=3
)


@pytest.mark.parametrize("name", OLD_QRELS)
def test_a_qrels_entry_of_an_earlier_version_scores_as_it_did(name: str) -> None:
    old = orjson.loads(OLD_QRELS[name])
    entry = decode_qrels_entry(old)
    assert entry == {"others": {}, **old, "v": 1}
    scored = orjson.loads(events.score_result(RESULT, entry, 10, "t").payload)
    assert scored["retrievalMetrics"] == {
        "recallAtK": 0.5,
        "precisionAtK": 1 / 3,
        "ndcgAt10": 0.6352023920551748,
        "mrr": 0.5,
        "hitAtK": 1,
    }
    assert scored["judgmentMetrics"] == {"judgedAtK": JUDGED_AT_K[name], "candidateNdcgAt10": 1.0}
    assert (scored["facets"], scored["qrelsFingerprint"]) == ({"type": "faq"}, "c2dde8c87db78438")


def test_a_qrels_entry_of_an_earlier_version_in_the_table_scores_results() -> None:
    pipeline = Pipeline()
    pipeline.tables["qrels"].data["q1"] = orjson.loads(OLD_QRELS["before others"])
    pipeline.feed([RESULT])
    [scored] = pipeline.scored()
    assert scored["judgmentMetrics"]["judgedAtK"] == 1 / 3


def test_a_qrels_entry_of_this_version_round_trips() -> None:
    entry = events.golden_entry(GOLDEN)
    assert entry["v"] == 1 and decode_qrels_entry(entry) is entry
    replayed = changelog(entry)
    assert decode_qrels_entry(replayed) == entry
    assert events.judgments_of(decode_qrels_entry(replayed)) == Judgments.from_qrels(GOLDEN.qrels)
    judgments = Judgments.from_qrels({"d1": 2})
    assert encode_qrels_entry(judgments, None, "ff")["facets"] == {}
    assert math.isclose(encode_qrels_entry(judgments, None, "ff")["idcg"], 3.0)


def test_a_qrels_entry_of_an_unknown_format_is_refused() -> None:
    with pytest.raises(UnknownVersion, match="qrels entry of unknown version 2"):
        decode_qrels_entry({**events.golden_entry(GOLDEN), "v": 2})


# ------------------------------------------------------------------ seen blocks


def test_a_seen_block_of_an_unknown_version_is_refused_by_name() -> None:
    entries = {"run\x1fr1": run_state.SeenEntry("results/0", 1, 0, 10.0, 0)}
    block = seen.encode_block(10.0, 0, entries)
    later = bytes([3]) + block[1:]
    with pytest.raises(UnknownVersion, match="rollup_seen block of unknown version 3"):
        seen.decode_block("k", later)
    with pytest.raises(UnknownVersion, match="rollup_seen block of unknown version 3"):
        seen.Block(later)
    assert seen.decode_block("k", block) is block
