"""The columnar fast path of the TREC readers (scorer.io.columnar) against the
line-by-line readers: same rankings, same judgments, same order, and every file
it cannot read cleanly handed to the line reader, which names the bad line."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.cli import main
from scorer.io import InputError, columnar, iter_retrievals, read_golden
from scorer.io import qrels as qrels_reader
from scorer.io import runs as run_reader
from scorer.offline.evaluation import evaluate_run_file

QIDS = ["q1", "q2", "q10", "qé"]
DOCS = ["a", "b", "c", "d10", "d9", "Z", "é", "ü", "日本"]
TAGS = ["bm25", "dense"]
SCORES = ["1", "2", "2.0", "-0.0", "0", "0.5", "+3", ".25", "1e3", "-1.5", "7"]


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def oracle(text: str) -> list[tuple[str, str, list[str]]]:
    """What trec_eval makes of a run: per (tag, qid), in order of first appearance,
    docs by score descending, ties by docid descending; written independently of
    the readers."""
    lines: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for line in text.splitlines():
        if line.split():
            qid, _, doc, _, score, tag = line.split()
            lines.setdefault((tag, qid), []).append((float(score), doc))
    return [
        (tag, qid, [doc for _, doc in sorted(pairs, reverse=True)])
        for (tag, qid), pairs in lines.items()
    ]


def read_run(path: Path) -> list[tuple[str, str, list[str]]]:
    return [(r.run_id, r.query_id, r.ranked) for r in iter_retrievals(path, merge_blocks=True)]


@pytest.fixture(autouse=True, scope="module")
def columnar_for_small_files() -> Iterator[None]:
    """The fast path for files of any size (by default only from 4 MiB), so that
    these small files exercise it. Module-scoped: hypothesis tests take no
    function-scoped fixtures."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_reader, "COLUMNAR_MIN_BYTES", 0)
        patch.setattr(qrels_reader, "COLUMNAR_MIN_BYTES", 0)
        yield


@pytest.fixture
def line_reader_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path switched off: every chunk read line by line."""
    monkeypatch.setattr(columnar, "run_blocks", lambda raw: None)
    monkeypatch.setattr(columnar, "qrels_runs", lambda raw: None)


run_lines = st.lists(
    st.tuples(
        st.sampled_from(QIDS),
        st.sampled_from(DOCS),
        st.integers(0, 200),
        st.sampled_from(SCORES),
        st.sampled_from(TAGS),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(
    lines=run_lines,
    crlf=st.booleans(),
    blank=st.booleans(),
    chunk=st.sampled_from([16, 200, 1 << 26]),
)
def test_fast_path_ranks_as_trec_eval(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[tuple[str, str, int, str, str]],
    crlf: bool,
    blank: bool,
    chunk: int,
) -> None:
    end = "\r\n" if crlf else "\n"
    text = "".join(f"{q} Q0 {d} {r} {s} {t}{end}" for q, d, r, s, t in lines)
    if blank:
        text = end + text.replace(end, end + end, 1)
    raw = text.encode("utf-8")
    assert columnar.run_blocks(raw) is not None  # the fast path read it
    path = write(tmp_path_factory.mktemp("run"), "run.txt", raw)
    original = columnar.CHUNK_BYTES
    columnar.CHUNK_BYTES = chunk  # hypothesis and function-scoped fixtures do not mix
    try:
        assert read_run(path) == oracle(text)
    finally:
        columnar.CHUNK_BYTES = original


def test_fast_and_line_readers_agree_on_a_large_shuffled_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7)
    scores = ["1", "2", "0.5", "-0.0", "0"]
    lines = [
        f"q{q} Q0 d{rng.randrange(500)} {rank} "
        f"{rng.choice([*scores, f'{rng.random():.3f}'])} {rng.choice(TAGS)}\n"
        for q in range(300)
        for rank in range(40)
    ]
    rng.shuffle(lines)
    text = "".join(lines)
    path = write(tmp_path, "run.txt", text)
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 100_000)  # several chunks
    fast = read_run(path)
    assert fast == oracle(text)
    monkeypatch.setattr(columnar, "run_blocks", lambda raw: None)
    assert read_run(path) == fast


def test_a_contiguous_run_streams_without_interleaving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "".join(f"q{q} Q0 d{d} {d} {100 - d} r\n" for q in range(2000) for d in range(10))
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 4096)  # queries cut across chunks
    retrievals = list(iter_retrievals(write(tmp_path, "run.txt", text)))
    assert len(retrievals) == 2000
    assert all(r.ranked == [f"d{d}" for d in range(10)] for r in retrievals)


B_THEN_A = [("r", "q1", ["b", "a"])]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("q1\tQ0\ta\t1\t2\tr\nq1 Q0 b 2 3 r\n", B_THEN_A),
        ("q1  Q0 a 1 2 r\nq1 Q0 b 2 3 r\n", B_THEN_A),
        (" q1 Q0 a 1 2 r \nq1 Q0 b 2 3 r\n", B_THEN_A),
        ("q1 Q0 a 1 2 r\n     \nq1 Q0 b 2 3 r\n", B_THEN_A),
        ("q1 Q0 a 1 2 r\x0c\nq1 Q0 b 2 3 r\n", B_THEN_A),
        ("q1 Q0 a 1 2\x1fr\nq1 Q0 b 2 3 r\n", B_THEN_A),
        ("q1\xa0Q0 a 1 2 r\nq1 Q0 b 2 3 r\n", B_THEN_A),
        ("q1 Q0 a 1 2\u3000r\nq1 Q0 b 2 3 r\n", B_THEN_A),
        ("q1 Q0 a 1 2 r\rq1 Q0 b 2 3 r\r", B_THEN_A),
        ("q1 Q0 a 1 2 r\r\nq1 Q0 b 2 3 r\rq1 Q0 c 3 1 r\n", [("r", "q1", ["b", "a", "c"])]),
        # A byte order mark is dropped, not kept in the first query id.
        ("\ufeffq1 Q0 a 1 2 r\nq1 Q0 b 2 3 r\n", [("r", "q1", ["b", "a"])]),
        # Columns after the tag are ignored, as trec_eval ignores them.
        ("q1 Q0 a 1 2 r junk\nq1 Q0 b 2 3 r\n", [("r", "q1", ["b", "a"])]),
        ("q1 Q0 a 1 1_0 r\nq1 Q0 b 2 3 r\n", [("r", "q1", ["a", "b"])]),
        ("q1 Q0 a 1 \u0664 r\nq1 Q0 b 2 3 r\n", [("r", "q1", ["a", "b"])]),
    ],
)
def test_odd_but_valid_runs_are_read_line_by_line(
    tmp_path: Path, text: str, expected: list[tuple[str, str, list[str]]]
) -> None:
    assert columnar.run_blocks(text.encode("utf-8")) is None  # not for the fast path
    assert read_run(write(tmp_path, "run.txt", text)) == expected


def test_a_last_line_without_newline_is_read_fast(tmp_path: Path) -> None:
    text = "q1 Q0 a 1 2 r\nq1 Q0 b 2 3 r"
    assert columnar.run_blocks(text.encode()) is not None
    assert read_run(write(tmp_path, "run.txt", text)) == B_THEN_A


@pytest.mark.parametrize("score", ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999"])
def test_a_score_that_is_not_finite_is_rejected_by_both_readers(tmp_path: Path, score: str) -> None:
    text = f"q1 Q0 a 1 1 r\nq1 Q0 b 2 {score} r\nq1 Q0 c 3 2 r\n"
    assert columnar.run_blocks(text.encode()) is None  # the fast path hands it over
    path = write(tmp_path, "run.txt", text)
    with pytest.raises(InputError) as raised:
        list(iter_retrievals(path))
    assert str(raised.value) == f"{path}:2: score is not a finite number"


CLEAN_LINE = "q{q:05d} Q0 d{d} {d} {score} run\n"


def big_run(bad_line: str, before: int, after: int = 500) -> str:
    """``before`` clean lines, ``bad_line``, then ``after`` clean lines."""
    lines = [CLEAN_LINE.format(q=n // 10, d=n % 10, score=100 - n % 10) for n in range(before)]
    lines.append(bad_line)
    lines += [CLEAN_LINE.format(q=90_000 + n, d=0, score=1) for n in range(after)]
    return "".join(lines)


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("q1 Q0 b 17 0.5\n", "expected 6 columns (qid Q0 docid rank score tag), got 5"),
        ("q1 Q0 b 17 0.5\n", "expected 6 columns (qid Q0 docid rank score tag), got 5"),
        ("q1 Q0 b 17 high r\n", "score 'high' is not a number"),
        ("q1 Q0 b 17 nan(1) r\n", "score 'nan(1)' is not a number"),
        ("q1 Q0 b 17 0x1p3 r\n", "score '0x1p3' is not a number"),
        ("q1 Q0 b 17 nan r\n", "score is not a finite number"),
        ("q1 Q0 b 17 -inf r\n", "score is not a finite number"),
        ("q1 Q0 b 17 r\tx\n", "score 'r' is not a number"),
    ],
)
@pytest.mark.parametrize("chunk", [64 << 10, columnar.CHUNK_BYTES])
def test_a_bad_line_deep_in_a_big_run_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_line: str, message: str, chunk: int
) -> None:
    before = 40_000  # ~1 MB of clean lines: with 64 KiB chunks, many chunks read fast first
    path = write(tmp_path, "run.txt", big_run(bad_line, before))
    monkeypatch.setattr(columnar, "CHUNK_BYTES", chunk)
    with pytest.raises(InputError) as raised:
        list(iter_retrievals(path))
    assert str(raised.value) == f"{path}:{before + 1}: {message}"


def test_cli_exits_2_on_an_infinite_score(tmp_path: Path) -> None:
    qrels = write(tmp_path, "qrels.txt", "q1 0 a 1\n")
    run = write(tmp_path, "run.txt", "q1 Q0 a 1 1.5 r\nq1 Q0 b 2 inf r\n")
    result = CliRunner().invoke(main, ["eval", str(qrels), str(run)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"{run}:2: score is not a finite number\n"


def test_bytes_not_utf8_deep_in_a_big_run_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = 40_000
    data = big_run("q1 Q0 b 17 1 r\n", before).encode().replace(b" b 17", b" \xff 17")
    path = write(tmp_path, "run.txt", data)
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64 << 10)
    with pytest.raises(InputError) as raised:
        list(iter_retrievals(path))
    assert str(raised.value) == f"{path}:{before + 1}: is not UTF-8 text"


def test_cli_exits_2_naming_a_bad_line_deep_in_a_big_run(tmp_path: Path) -> None:
    qrels = write(tmp_path, "qrels.txt", "q00001 0 d1 1\n")
    run = write(tmp_path, "run.txt", big_run("q1 Q0 b 17 0.5\n", 60_000, after=20_000))
    result = CliRunner().invoke(main, ["eval", str(qrels), str(run)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"{run}:60001: expected 6 columns (qid Q0 docid rank score tag), got 5\n"
    )


def test_the_first_bad_line_is_named_while_later_chunks_are_parsed_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chunks are parsed a chunk ahead in a background thread: a later chunk with
    # a bad line may be parsed before an earlier one is read line by line.
    text = big_run("q1 Q0 b 17 0.5\n", 20_000, after=20_000) + "q2 Q0 b 17 high r\n"
    path = write(tmp_path, "run.txt", text)
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64 << 10)
    with pytest.raises(InputError) as raised:
        list(iter_retrievals(path))
    assert str(raised.value) == (
        f"{path}:20001: expected 6 columns (qid Q0 docid rank score tag), got 5"
    )


def test_a_bad_line_is_named_after_the_rankings_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chunk with the bad line is parsed in the background while the rankings
    # of the chunks before it are consumed: they all come first, then the error.
    text = big_run("q1 Q0 b 17 0.5\n", 20_000)
    path = write(tmp_path, "run.txt", text)
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64 << 10)
    seen: list[str] = []
    with pytest.raises(InputError) as raised:
        for retrieval in iter_retrievals(path):
            seen.append(retrieval.query_id)
    assert str(raised.value) == (
        f"{path}:20001: expected 6 columns (qid Q0 docid rank score tag), got 5"
    )
    # Those of every chunk before the bad line's (a chunk with a bad line is
    # read line by line, and yields nothing).
    assert len(seen) > 1000
    assert seen == [f"q{n:05d}" for n in range(len(seen))]
    assert not _reader_threads()


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("scorer-run-reader")]


def test_an_error_in_the_reading_thread_is_raised_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "run.txt", big_run("q1 Q0 b 17 0.5\n", 20_000))
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64 << 10)
    parse = columnar.run_blocks
    lines: list[int] = []  # of each chunk parsed

    def failing(raw: memoryview) -> object:
        lines.append(bytes(raw).count(b"\n"))
        if len(lines) == 3:
            raise MemoryError("out of memory in chunk 3")
        return parse(raw)

    monkeypatch.setattr(columnar, "run_blocks", failing)
    seen: list[str] = []
    with pytest.raises(MemoryError, match="chunk 3"):
        for retrieval in iter_retrievals(path):
            seen.append(retrieval.query_id)
    # The rankings of the two chunks before came first, but the last (its
    # lines may go on in the third chunk); 10 lines a query.
    assert seen == [f"q{n:05d}" for n in range(-(-sum(lines[:2]) // 10) - 1)]
    assert not _reader_threads()


def test_a_run_left_early_stops_its_reading_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "run.txt", big_run("q1 Q0 b 17 1 r\n", 20_000))
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64 << 10)
    rankings = iter_retrievals(path)
    next(rankings)
    assert _reader_threads()
    rankings.close()
    assert not _reader_threads()


def test_progress_is_told_every_byte_of_a_chunked_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "run.txt", big_run("q1 Q0 b 17 1 r\n", 20_000))
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64 << 10)
    seen: list[int] = []
    list(iter_retrievals(path, seen.append))
    assert len(seen) > 5
    assert seen == sorted(seen)
    assert seen[-1] == path.stat().st_size


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 26])
@pytest.mark.parametrize("end", ["\n", ""])
def test_line_chunks_of_a_mapped_file_and_of_a_pipe_are_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, end: str
) -> None:
    import os

    rng = random.Random(chunk)
    lines = ["x" * rng.choice([0, 1, 5, 30, 200]) for _ in range(300)]
    data = ("\n".join(lines) + end).encode()
    path = write(tmp_path, "lines.txt", data)
    monkeypatch.setattr(columnar, "CHUNK_BYTES", chunk)
    with path.open("rb", buffering=0) as file:
        mapped = list(columnar.line_chunks(file))  # all held: pages let go are read again
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        piped = list(columnar.line_chunks(pipe))
    for chunks in (mapped, piped):
        assert b"".join(chunks) == data
        assert all(bytes(c).endswith(b"\n") for c in chunks[:-1])
        assert all(len(c) for c in chunks)
    # A mapped chunk is as long as it can be: a line more would pass CHUNK_BYTES.
    assert all(len(c) <= chunk or c.tobytes().count(b"\n") <= 1 for c in mapped)
    del mapped, piped


def test_line_chunks_of_an_empty_file(tmp_path: Path) -> None:
    with write(tmp_path, "empty.txt", b"").open("rb", buffering=0) as file:
        assert list(columnar.line_chunks(file)) == []


def test_the_same_run_scores_the_same_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    rng = random.Random(3)
    qrels = "".join(
        f"q{q} 0 d{d} {rng.choice([0, 1, 2, 3])}\n" for q in range(200) for d in range(0, 60, 5)
    )
    run = "".join(
        f"q{q} Q0 d{d} {d} {rng.choice([1.0, 0.5, rng.random()])} {rng.choice(TAGS)}\n"
        for q in range(220)
        for d in range(60)
    )
    qrels_path, run_path = write(tmp_path, "qrels.txt", qrels), write(tmp_path, "run.txt", run)
    fast = evaluate_run_file(read_golden(qrels_path), run_path, per_query=True).as_json()
    monkeypatch.setattr(columnar, "run_blocks", lambda raw: None)
    monkeypatch.setattr(columnar, "qrels_runs", lambda raw: None)
    slow = evaluate_run_file(read_golden(qrels_path), run_path, per_query=True).as_json()
    assert fast == slow  # exactly: same values, same order of rows


# -- qrels ------------------------------------------------------------------------------------

qrels_lines = st.lists(
    st.tuples(
        st.sampled_from(QIDS),
        st.sampled_from(DOCS),
        st.sampled_from(["0", "1", "2", "3", "-1", "007", "-0", "12"]),
    ),
    min_size=1,
    max_size=40,
    unique_by=lambda line: (line[0], line[1]),
)


@settings(max_examples=150, deadline=None)
@given(lines=qrels_lines, chunk=st.sampled_from([16, 1 << 26]))
def test_fast_qrels_equal_line_qrels(
    tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[str, str, str]], chunk: int
) -> None:
    text = "".join(f"{q} 0 {d} {g}\n" for q, d, g in lines)
    path = write(tmp_path_factory.mktemp("qrels"), "qrels.txt", text)
    assert columnar.qrels_runs(text.encode()) is not None
    original = columnar.CHUNK_BYTES
    columnar.CHUNK_BYTES = chunk
    try:
        golden = read_golden(path)
    finally:
        columnar.CHUNK_BYTES = original
    expected: dict[str, dict[str, int]] = {}
    for q, d, g in lines:
        expected.setdefault(q, {})[d] = int(g)
    assert {q: j.qrels for q, j in golden.items()} == expected
    assert list(golden) == list(expected)  # order of first appearance
    assert all(list(golden[q].qrels) == list(expected[q]) for q in expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("q1 0 a +1\nq1 0 b 1_0\n", {"q1": {"a": 1, "b": 10}}),
        ("q1\t0 a 1\nq1 0  b 2\n", {"q1": {"a": 1, "b": 2}}),
        ("q1 0 a -99999999999999999999\n", {"q1": {"a": -99999999999999999999}}),
    ],
)
def test_odd_but_valid_qrels_read_as_int_reads_them(
    tmp_path: Path, text: str, expected: dict[str, dict[str, int]]
) -> None:
    assert columnar.qrels_runs(text.encode()) is None
    golden = read_golden(write(tmp_path, "qrels.txt", text))
    assert {q: j.qrels for q, j in golden.items()} == expected


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("q1 0 a 0x1\n", "grade '0x1' is not an integer"),
        ("q1 0 a\n", "expected 4 columns (qid iter docid grade), got 3"),
        ("q00003 0 d3 1\n", "d3 is judged twice for query q00003"),
    ],
)
def test_a_bad_qrels_line_deep_in_a_big_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_line: str, message: str
) -> None:
    before = 30_000
    lines = [f"q{n // 10:05d} 0 d{n % 10} {n % 4}\n" for n in range(before)]
    path = write(tmp_path, "qrels.txt", "".join([*lines, bad_line, "q9 0 x 1\n"]))
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64 << 10)
    with pytest.raises(InputError) as raised:
        read_golden(path)
    assert str(raised.value) == f"{path}:{before + 1}: {message}"


def test_non_ascii_spaces_are_every_one_str_split_knows() -> None:
    splits = [
        chr(code) for code in range(0x80, sys.maxunicode + 1) if len(f"a{chr(code)}b".split()) == 2
    ]
    assert "".join(splits) == columnar.NON_ASCII_SPACES


@pytest.mark.parametrize("block", [1, 3, 4, 1 << 20])
def test_control_bytes_are_counted_across_blocks(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    import numpy as np

    monkeypatch.setattr(columnar, "_BLOCK_BYTES", block)
    data = np.frombuffer(b"q1 Q0 a 1 2 r\nq1\tQ0 b 2 3 r\r\n\x1f \n", np.uint8)
    expected = sum(1 for byte in data.tolist() if byte < 0x20)
    assert columnar._count_below(data, 0x20) == expected == 6
    assert columnar._count_below(data[:0], 0x20) == 0


def test_long_runs_of_a_query_apart_in_one_chunk_are_merged(tmp_path: Path) -> None:
    # Runs of 10+ lines (grouped by run, not line by line), queries and tags recurring.
    text = "".join(
        f"q{q} Q0 d{(d * 7 + part) % 13} {d} {(d * 5) % 4} {tag}\n"
        for part in range(3)
        for q in range(5)
        for tag in TAGS
        for d in range(12)
    )
    raw = text.encode()
    assert columnar.run_blocks(raw) is not None
    assert read_run(write(tmp_path, "run.txt", text)) == oracle(text)
    # One chunk: merged without InterleavedRun.
    assert [(r.run_id, r.query_id, r.ranked) for r in iter_retrievals(tmp_path / "run.txt")] == (
        oracle(text)
    )


def test_the_fast_path_imports_neither_pandas_nor_pyarrow_compute(tmp_path: Path) -> None:
    import subprocess

    # pyarrow imports pandas (~0.5 s) from to_numpy, pa.array and pa.scalar, and
    # pyarrow.compute (~25 ms) from take and cast; the columnar reader goes around
    # them. Both orders of lines, and qrels.
    grouped = "".join(f"q{n // 3} Q0 d{n} {n} {9 - n % 3} r\n" for n in range(30))
    scattered = "".join(sorted(grouped.splitlines(keepends=True), key=lambda line: line[-8:]))
    run = write(tmp_path, "run.txt", grouped + scattered.replace(" r\n", " s\n"))
    qrels = write(tmp_path, "qrels.txt", "q1 0 d4 1\nq2 0 d7 2\n")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from scorer.io import columnar, iter_retrievals, read_golden\n"
        f"assert columnar.run_blocks(Path({str(run)!r}).read_bytes()) is not None\n"
        f"assert columnar.qrels_runs(Path({str(qrels)!r}).read_bytes()) is not None\n"
        f"read_golden(Path({str(qrels)!r}), columnar=True)\n"
        "print('pandas' in sys.modules, 'pyarrow.compute' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "False False", done.stderr


def test_a_mapped_file_comes_in_chunks_growing_from_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"".join(b"x" * 9 + b"\n" for _ in range(100))  # 10-byte lines
    monkeypatch.setattr(columnar, "FIRST_CHUNK_BYTES", 100)
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 400)
    with write(tmp_path, "lines.txt", data).open("rb", buffering=0) as file:
        sizes = [len(chunk) for chunk in columnar.line_chunks(file)]
    assert sizes == [100, 200, 400, 300]


@given(
    st.lists(st.sampled_from(DOCS + [f"d{n}" for n in range(30)]), min_size=1, max_size=40),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=-45, max_value=45),
)
def test_a_joined_ranking_reads_as_the_list_it_stands_for(
    ids: list[str], cut: int, position: int
) -> None:
    ranking = run_reader.JoinedRanking("\n".join(ids))
    assert len(ranking) == len(ids)
    assert ranking[:cut] == ids[:cut]  # the head, split no further than asked
    assert ranking[cut:] == ids[cut:]
    if -len(ids) <= position < len(ids):
        assert ranking[position] == ids[position]
    else:
        with pytest.raises(IndexError):
            ranking[position]
    assert list(ranking) == ids
    assert ranking == ids
    assert ranking != [*ids, "extra"]
    assert ranking == run_reader.JoinedRanking("\n".join(ids))


@given(
    st.lists(st.sampled_from([f"d{n}" for n in range(40)]), min_size=1, max_size=60),
    st.dictionaries(st.sampled_from([f"d{n}" for n in range(40)]), st.integers(0, 3)),
    st.integers(min_value=1, max_value=70),
)
def test_scoring_a_joined_ranking_gives_the_list_s_metrics(
    ids: list[str], qrels: dict[str, int], k: int
) -> None:
    from scorer.core.metrics import Judgments, score

    judgments = Judgments.from_qrels(qrels)
    joined = run_reader.JoinedRanking("\n".join(ids))
    assert score(joined, judgments, k) == score(ids, judgments, k)


def test_the_columnar_reader_gives_rankings_in_order_as_joined_rankings(tmp_path: Path) -> None:
    lines = [f"q{q} Q0 d{d} {d + 1} {100 - d} tag\n" for q in range(3) for d in range(20)]
    path = write(tmp_path, "run.txt", "".join(lines))
    blocks, _ = columnar.run_blocks(memoryview(path.read_bytes()))
    retrievals = [run_reader._retrieval(block) for block in blocks]
    assert all(isinstance(r.ranked, run_reader.JoinedRanking) for r in retrievals)
    assert [r.ranked for r in retrievals] == [[f"d{d}" for d in range(20)]] * 3
