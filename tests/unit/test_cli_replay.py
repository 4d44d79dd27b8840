"""``scorer replay`` reads what ``scorer eval`` reads: TREC qrels and TREC runs become
wire events, JSONL lines go as they are, and a bad file stops before anything is sent."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from scorer.cli import main
from scorer.cli.replay_cmd import BadLine, golden_records, result_records

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_trec_qrels_become_golden_queries_keyed_by_query_id() -> None:
    expected: dict[str, dict[str, int]] = {}
    for line in (EXAMPLES / "qrels.txt").read_text().splitlines():
        query_id, _, doc, grade = line.split()
        expected.setdefault(query_id, {})[doc] = int(grade)
    records = golden_records(EXAMPLES / "qrels.txt")
    assert [key for key, _ in records] == list(expected)
    assert {key: orjson.loads(value) for key, value in records} == {
        query_id: {"queryId": query_id, "qrels": qrels} for query_id, qrels in expected.items()
    }


def test_a_trec_run_becomes_one_result_per_tag_and_query_ranked_as_eval_ranks() -> None:
    records = result_records(EXAMPLES / "run.txt")
    pairs = {(line.split()[5], line.split()[0]) for line in (EXAMPLES / "run.txt").open()}
    assert len(records) == len(pairs)
    first_key, first_value = records[0]
    first = orjson.loads(first_value)
    assert first_key == "q-001"
    assert first["resultId"] == "bm25-v1/q-001" and first["runId"] == "bm25-v1"
    assert first["ranked"][:3] == ["doc-938#c2", "doc-889#c3", "doc-6499#c1"]
    events = [orjson.loads(value) for _, value in records]
    assert {(event["runId"], event["queryId"]) for event in events} == pairs
    assert all(key == event["queryId"] for (key, _), event in zip(records, events, strict=True))


def test_trec_run_order_is_by_score_then_docid_descending(tmp_path: Path) -> None:
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 a 1 1.0 t\nq1 Q0 b 2 3.0 t\nq1 Q0 c 3 3.0 t\n")
    ((key, value),) = result_records(run)
    assert key == "q1"
    assert orjson.loads(value)["ranked"] == ["c", "b", "a"]  # trec_eval's order


def test_jsonl_lines_are_sent_as_they_are() -> None:
    lines = [line for line in (EXAMPLES / "golden.jsonl").read_bytes().splitlines() if line]
    assert [value for _, value in golden_records(EXAMPLES / "golden.jsonl")] == lines


def test_a_grade_outside_the_wire_bounds_names_file_and_query(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq2 0 d2 4\n")
    with pytest.raises(BadLine) as raised:
        golden_records(qrels)
    assert raised.value.message == (
        f"{qrels}: query q2: qrels.d2: Input should be less than or equal to 3"
    )


def test_the_wrong_kind_of_file_exits_2_before_connecting() -> None:
    result = CliRunner().invoke(
        main,
        ["replay", "--golden", str(EXAMPLES / "run.txt")],
        env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert result.exit_code == 2
    assert result.stderr == (
        f"{EXAMPLES / 'run.txt'}: is a TREC run, expected qrels (a TREC qrels file or a JSONL "
        "golden set)\n"
    )


def test_a_run_prefix_renames_every_run_and_keeps_the_rest_of_each_result() -> None:
    import orjson
    import pytest

    from scorer.cli.replay_cmd import BadLine, with_run_prefix
    from scorer.stream.events import decode_result

    line = (
        b'{"resultId": "r-1", "runId": "bm25-v1", "queryId": "q-1", "ranked": ["d1", "d2"], "k": 5}'
    )
    [(key, value)] = with_run_prefix([("q-1", line)], "examples-")
    renamed = decode_result(value)
    assert key == "q-1"
    assert (renamed.run_id, renamed.result_id, renamed.ranked, renamed.k) == (
        "examples-bm25-v1", "r-1", ["d1", "d2"], 5,
    )  # fmt: skip
    assert orjson.loads(value)["runId"] == "examples-bm25-v1"
    with pytest.raises(BadLine, match="--run-prefix"):
        with_run_prefix([("q-1", line)], "x" * 300)
