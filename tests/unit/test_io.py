"""Offline readers: format detection, trec_eval ordering, and one-line errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scorer.io import (
    FileKind,
    InputError,
    InterleavedRun,
    columnar,
    detect_kind,
    iter_retrievals,
    read_golden,
    trec_order,
)
from scorer.io import runs as run_reader


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_kind_is_detected_from_the_first_non_blank_line(tmp_path: Path) -> None:
    assert detect_kind(write(tmp_path, "a", "\n\nq1 0 d1 1\n")) is FileKind.TREC_QRELS
    assert detect_kind(write(tmp_path, "b", "q1 Q0 d1 1 2.5 run\n")) is FileKind.TREC_RUN
    golden = '{"queryId": "q1", "qrels": {"d1": 1}}\n'
    assert detect_kind(write(tmp_path, "c.txt", golden)) is FileKind.GOLDEN_JSONL
    result = '{"resultId": "r", "runId": "x", "queryId": "q1", "ranked": []}\n'
    assert detect_kind(write(tmp_path, "d.json", result)) is FileKind.RESULTS_JSONL


def test_trec_qrels_take_any_integer_grade(tmp_path: Path) -> None:
    path = write(tmp_path, "qrels.txt", "q1 0 a 4\nq1 0 b -1\n\nq2 0 c 0\nq1 0 d 2\n")
    golden = read_golden(path)
    assert golden["q1"].qrels == {"a": 4, "b": -1, "d": 2}
    assert golden["q2"].qrels == {"c": 0}
    assert golden["q1"].facets == {}


def test_golden_jsonl_keeps_facets(tmp_path: Path) -> None:
    line = '{"queryId": "q1", "qrels": {"a": 3, "b": 0}, "facets": {"type": "factoid"}}\n'
    golden = read_golden(write(tmp_path, "golden.jsonl", line))
    assert golden["q1"].qrels == {"a": 3, "b": 0}
    assert golden["q1"].facets == {"type": "factoid"}


def test_trec_run_is_ordered_by_score_desc_then_docid_desc(tmp_path: Path) -> None:
    # The rank column disagrees on purpose: trec_eval ignores it.
    text = "".join(
        f"q1 Q0 {doc} {rank} {score} bm25\n"
        for doc, rank, score in [
            ("b", 1, "1.0"),
            ("a", 2, "2.0"),
            ("c", 3, "1.0"),
            ("z", 4, "0.5"),
            ("d", 5, "1.0"),
        ]
    )
    (retrieval,) = iter_retrievals(write(tmp_path, "run.txt", text))
    assert retrieval.ranked == ["a", "d", "c", "b", "z"]
    assert (retrieval.run_id, retrieval.query_id) == ("bm25", "q1")


def test_trec_order_matches_pytrec_eval_on_ties() -> None:
    import pytrec_eval

    docs = ["a", "b", "c", "d"]
    scores = [1.0, 1.0, 1.0, 0.0]
    ranked = trec_order(docs, scores)
    for position, doc in enumerate(ranked, 1):
        evaluator = pytrec_eval.RelevanceEvaluator({"q": {doc: 1}}, {"recip_rank"})
        measured = evaluator.evaluate({"q": dict(zip(docs, scores, strict=True))})
        assert measured["q"]["recip_rank"] == 1 / position


def test_several_tags_are_several_runs(tmp_path: Path) -> None:
    text = "q1 Q0 a 1 2 bm25\nq1 Q0 b 2 1 bm25\nq1 Q0 b 1 2 dense\nq2 Q0 c 1 1 dense\n"
    retrievals = list(iter_retrievals(write(tmp_path, "run.txt", text)))
    assert [(r.run_id, r.query_id, r.ranked) for r in retrievals] == [
        ("bm25", "q1", ["a", "b"]),
        ("dense", "q1", ["b"]),
        ("dense", "q2", ["c"]),
    ]


def test_interleaved_trec_run_is_merged_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "q1 Q0 a 1 3 r\nq2 Q0 x 1 1 r\nq1 Q0 b 2 4 r\n"
    path = write(tmp_path, "run.txt", text)
    expected = [("q1", ["b", "a"]), ("q2", ["x"])]
    # A small file is read whole, so a query's lines are merged wherever they are;
    assert [(r.query_id, r.ranked) for r in iter_retrievals(path)] == expected
    # so are they within one chunk read by pyarrow.
    monkeypatch.setattr(run_reader, "COLUMNAR_MIN_BYTES", 0)
    assert [(r.query_id, r.ranked) for r in iter_retrievals(path)] == expected
    # Across chunks (here, one line each) the stream cannot merge them.
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 8)
    with pytest.raises(InterleavedRun):
        list(iter_retrievals(path))
    merged = list(iter_retrievals(path, merge_blocks=True))
    assert [(r.query_id, r.ranked) for r in merged] == expected


def test_jsonl_results_keep_ids_k_facets_and_empty_rankings(tmp_path: Path) -> None:
    lines = (
        '{"resultId": "r1", "runId": "v1", "queryId": "q1", "ranked": ["a", "b"], '
        '"k": 5, "facets": {"type": "x"}}\n'
        '{"resultId": "r2", "runId": "v1", "queryId": "q2", "ranked": []}\n'
    )
    first, second = iter_retrievals(write(tmp_path, "results.jsonl", lines))
    assert (first.result_id, first.k, first.facets, first.ranked) == (
        "r1",
        5,
        {"type": "x"},
        ["a", "b"],
    )
    assert (second.result_id, second.k, second.facets, second.ranked) == ("r2", None, None, [])


def test_progress_is_told_bytes_read(tmp_path: Path) -> None:
    path = write(tmp_path, "run.txt", "q1 Q0 a 1 1 r\n" * 10)
    seen: list[int] = []
    list(iter_retrievals(path, seen.append))
    assert seen[-1] == path.stat().st_size


@pytest.mark.parametrize(
    ("name", "text", "reader", "message"),
    [
        (
            "run.txt",
            "q1 Q0 a 1 1.0 r\n\nq1 Q0 b 2 0.5\n",
            iter_retrievals,
            "run.txt:3: expected 6 columns (qid Q0 docid rank score tag), got 5",
        ),
        (
            "run.txt",
            "q1 Q0 a 1 high r\n",
            iter_retrievals,
            "run.txt:1: score 'high' is not a number",
        ),
        (
            "qrels.txt",
            "q1 0 a 1\nq1 0 b 1 x\n",
            read_golden,
            "qrels.txt:2: expected 4 columns (qid iter docid grade), got 5",
        ),
        (
            "qrels.txt",
            "q1 0 a 1\nq1 0 b 1.5\n",
            read_golden,
            "qrels.txt:2: grade '1.5' is not an integer",
        ),
        (
            "qrels.txt",
            "q1 0 a 1\nq1 0 a 2\n",
            read_golden,
            "qrels.txt:2: a is judged twice for query q1",
        ),
        (
            "golden.jsonl",
            '{"queryId": "q1", "qrels": {"a": 1}}\n{"queryId": "q2", "qrels": {"a": 9}}\n',
            read_golden,
            "golden.jsonl:2: qrels.a: Input should be less than or equal to 3",
        ),
        (
            "golden.jsonl",
            '{"queryId": "q1", "qrels": {}}\n{"queryId": "q1", "qrels": {}}\n',
            read_golden,
            "golden.jsonl:2: query q1 appears again (first on line 1)",
        ),
        (
            "results.jsonl",
            '{"resultId": "r", "runId": "v", "queryId": "q", "ranked": []}\n{"resultId": 1}\n',
            iter_retrievals,
            "results.jsonl:2: resultId: Input should be a valid string (and 3 more)",
        ),
        (
            "results.jsonl",
            '{"resultId": "r", "runId": "v", "queryId": "q", "ranked": []}\n{not json\n',
            iter_retrievals,
            "results.jsonl:2: Invalid JSON: key must be a string at line 1 column 2",
        ),
        ("empty.txt", "", read_golden, "empty.txt: file is empty (only blank or comment lines)"),
        (
            "blank.txt",
            "\n  \n",
            iter_retrievals,
            "blank.txt: file is empty (only blank or comment lines)",
        ),
        (
            "qrels-as-run.txt",
            "q1 0 a 1\n",
            iter_retrievals,
            "qrels-as-run.txt: is a TREC qrels, expected rankings (a TREC run or JSONL results)",
        ),
        (
            "run-as-qrels.txt",
            "q1 Q0 a 1 1 r\n",
            read_golden,
            "run-as-qrels.txt: is a TREC run, expected qrels "
            "(a TREC qrels file or a JSONL golden set)",
        ),
        (
            "odd.txt",
            "a b c\n",
            read_golden,
            "odd.txt:1: expected 4 columns (TREC qrels: qid iter docid grade) or 6 (TREC run: "
            "qid Q0 docid rank score tag) or a JSON object, got 3 columns",
        ),
    ],
)
def test_bad_input_says_file_line_and_what_is_wrong(
    tmp_path: Path, name: str, text: str, reader: Callable[[Path], object], message: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(InputError) as raised:
        result = reader(path)
        if isinstance(result, Iterator):
            list(result)
    assert str(raised.value) == str(tmp_path / message)


def test_missing_and_unreadable_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the file: No such file or directory"):
        read_golden(tmp_path / "missing.txt")
    with pytest.raises(InputError, match="cannot read the file: Is a directory"):
        list(iter_retrievals(tmp_path))
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(InputError, match="is not UTF-8 text"):
        read_golden(binary)


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_the_line_reader_reads_every_line_end_and_numbers_lines_alike(
    tmp_path: Path, end: str
) -> None:
    """Universal newlines, as trec_eval's fgets-and-strip reads CRLF files; a lone CR
    ends a line too. Blank and comment lines are skipped but keep the numbering."""
    lines = ["q1 Q0 a 1 2.0 r", "", "# a comment", "q1 Q0 b 2 3.0 r", "q2 Q0 c 1 1 r"]
    path = write(tmp_path, "run.txt", end.join(lines) + end)
    assert [(r.query_id, list(r.ranked), r.confidence) for r in iter_retrievals(path)] == [
        ("q1", ["b", "a"], 3.0),
        ("q2", ["c"], 1.0),
    ]
    bad = write(tmp_path, "bad.txt", end.join([*lines[:4], "q2 Q0 c 1", lines[4]]) + end)
    with pytest.raises(InputError, match=r"bad\.txt:5: expected 6 columns"):
        list(iter_retrievals(bad))
