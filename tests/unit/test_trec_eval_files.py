"""trec_eval's own test files (tests/data/trec_eval, from trec_eval 10.0) read and
scored as trec_eval reads and scores them, value for value against the outputs
trec_eval made of them: comment lines, ids holding '#', columns after a run's tag,
``-c``; by the line reader and by the columnar one. And what trec_eval's files may
hold that would otherwise be read wrong in silence: a byte order mark, a grade too
large for nDCG's gain."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from scorer.core.metrics import METRIC_NAMES
from scorer.io import InputError, read_golden
from scorer.io import qrels as qrels_reader
from scorer.io import runs as run_reader
from scorer.offline.evaluation import evaluate_run_file

DATA = Path(__file__).resolve().parents[1] / "data" / "trec_eval"
TOLERANCE = 5.01e-5
"""trec_eval prints 4 decimals."""
MEASURES = {
    "recall_10": "recallAtK",
    "P_10": "precisionAtK",
    "ndcg_cut_10": "ndcgAt10",  # qrels.test is binary: linear and exponential gains agree
    "recip_rank": "mrr",
    "success_10": "hitAtK",
}


@pytest.fixture(params=["line", "columnar"], autouse=True)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test with both readers: the columnar one for files of any size."""
    if request.param == "columnar":
        monkeypatch.setattr(run_reader, "COLUMNAR_MIN_BYTES", 0)
        monkeypatch.setattr(qrels_reader, "COLUMNAR_MIN_BYTES", 0)
    yield request.param


def trec_eval_output(name: str) -> dict[tuple[str, str], float]:
    """``(measure, query or "all") -> value`` of one of trec_eval's output files."""
    values = {}
    for line in (DATA / name).read_text().splitlines():
        measure, query, value = line.split()
        if measure not in ("runid", "relstring"):
            values[(measure, query)] = float(value)
    return values


def unzipped(name: str, folder: Path) -> Path:
    path = folder / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    return path


def scored(qrels: Path, run: Path, complete: bool = False):
    evaluation = evaluate_run_file(read_golden(qrels), run, k=10, complete=complete, per_query=True)
    (only,) = evaluation.runs.values()
    return only.summary()["metrics"], only.query_means()


@pytest.mark.parametrize("qrels", ["qrels.test", "qrels.test.with-comments"])
def test_the_default_measures_of_trec_evals_quicktest(qrels: str) -> None:
    expected = trec_eval_output("out.test")
    means, _ = scored(DATA / qrels, DATA / "results.test")
    assert means["precisionAtK"] == pytest.approx(expected[("P_10", "all")], abs=TOLERANCE)
    assert means["mrr"] == pytest.approx(expected[("recip_rank", "all")], abs=TOLERANCE)


def test_every_query_of_all_trec_agrees_value_for_value() -> None:
    expected = trec_eval_output("out.test.aq")
    means, per_query = scored(DATA / "qrels.test", DATA / "results.test")
    queries = {query for (_, query) in expected if query != "all"}
    assert set(per_query) == queries
    for measure, ours in MEASURES.items():
        slot = METRIC_NAMES.index(ours)
        for query in queries:
            assert per_query[query][slot] == pytest.approx(
                expected[(measure, query)], abs=TOLERANCE
            ), (measure, query)
        assert means[ours] == pytest.approx(expected[(measure, "all")], abs=TOLERANCE), measure


def test_a_run_with_columns_after_its_tag_and_queries_missing_under_c() -> None:
    """results.trunc: junk after the tag on every line (trec_eval ignores it), and a
    judged query it never ranks (``-c`` counts it as 0)."""
    expected = trec_eval_output("out.test.aqc")
    means, per_query = scored(DATA / "qrels.test", DATA / "results.trunc", complete=True)
    for measure, ours in MEASURES.items():
        assert means[ours] == pytest.approx(expected[(measure, "all")], abs=TOLERANCE), measure
        slot = METRIC_NAMES.index(ours)
        for query, values in per_query.items():
            assert values[slot] == pytest.approx(expected[(measure, query)], abs=TOLERANCE)


def test_ids_holding_a_hash_are_ids_not_comments(tmp_path: Path) -> None:
    """The msmarco ids of comment.test hold '#' (``doc_00_880019750#4_...``); graded
    0..3, relevant from grade 1 as in trec_eval."""
    expected = trec_eval_output("out.comment.test")
    qrels = unzipped("qrels.comment.test.gz", tmp_path)
    run = unzipped("results.comment.test.gz", tmp_path)
    means, per_query = scored(qrels, run)
    assert len(per_query) == expected[("num_q", "all")] == 31
    assert means["precisionAtK"] == pytest.approx(expected[("P_10", "all")], abs=TOLERANCE)
    assert means["mrr"] == pytest.approx(expected[("recip_rank", "all")], abs=TOLERANCE)


def test_comment_lines_are_skipped_and_only_in_the_first_column(tmp_path: Path) -> None:
    # The same judgments as qrels.test, three comment lines between them (and one id
    # spelled with a '#', "CR#93E-1860", which trec_eval's output shows changes nothing).
    with_comments = read_golden(DATA / "qrels.test.with-comments")
    plain = read_golden(DATA / "qrels.test")
    assert sorted(with_comments) == sorted(plain)  # a 4-token comment is no query '#'
    assert {q: len(j.qrels) for q, j in with_comments.items()} == {
        q: len(j.qrels) for q, j in plain.items()
    }
    assert with_comments["301"].qrels["CR#93E-1860"] == plain["301"].qrels["CR93E-1860"]
    run = tmp_path / "run.txt"
    run.write_text(
        "# a comment of six tokens 1.0\n"
        "q1 Q0 d1 1 2.0 tag\n"
        "#q1 Q0 d9 1 9.0 tag\n"
        "  #q2 Q0 d2 1 1.0 tag\n"  # indented: a query id that starts with '#'
    )
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("# judged by hand\nq1 0 d1 1\n  #q2 0 d2 1\n# q3 0 d3 1\n")
    golden = read_golden(qrels)
    assert sorted(golden) == ["#q2", "q1"]
    evaluation = evaluate_run_file(golden, run, k=10, per_query=True)
    (only,) = evaluation.runs.values()
    assert only.rollup.summary()["count"] == 2
    assert sorted(only.query_means()) == ["#q2", "q1"]


def test_a_byte_order_mark_changes_nothing(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    qrels.write_bytes(bom + (DATA / "qrels.test").read_bytes())
    run.write_bytes(bom + (DATA / "results.test").read_bytes())
    assert read_golden(qrels) == read_golden(DATA / "qrels.test")
    assert scored(qrels, run) == scored(DATA / "qrels.test", DATA / "results.test")
    commented = tmp_path / "commented"
    commented.write_bytes(bom + b"# first line a comment\n" + (DATA / "results.test").read_bytes())
    assert scored(qrels, commented) == scored(DATA / "qrels.test", DATA / "results.test")


def test_a_grade_too_large_for_the_gain_stops_with_its_line(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels"
    qrels.write_text("q1 0 d1 3\nq1 0 d2 1000\nq1 0 d3 1024\n")
    with pytest.raises(InputError) as error:
        read_golden(qrels)
    assert str(error.value) == (
        f"{qrels}:3: grade 1024 is above 1000, the largest this scorer takes "
        "(nDCG's gain 2^grade - 1 would overflow)"
    )
    qrels.write_text("q1 0 d1 1000\n" * 1 + "q1 0 d2 1000\nq1 0 d3 -5\n")
    run = tmp_path / "run"
    run.write_text("q1 Q0 d2 1 3.0 t\nq1 Q0 d1 2 2.0 t\n")
    means, _ = scored(qrels, run)
    assert means["ndcgAt10"] == pytest.approx(1.0)  # finite, whatever the grade


def test_rankings_that_repeat_an_id_where_they_are_scored_are_counted_and_warned_of(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from scorer.cli import main

    qrels = tmp_path / "qrels"
    qrels.write_text("q1 0 d1 1\nq2 0 d1 1\nq3 0 d1 1\n")
    run = tmp_path / "run"
    lines = [
        "q1 Q0 d1 1 9 r", "q1 Q0 d1 2 8 r", "q1 Q0 d2 3 7 r",  # d1 twice in the top
        "q2 Q0 d1 1 9 r", "q2 Q0 d2 2 8 r",  # no repeat
    ] + [f"q3 Q0 x{n} {n} {100 - n} r" for n in range(12)] + ["q3 Q0 x0 13 1 r"]  # fmt: skip
    run.write_text("\n".join(lines) + "\n")  # q3 repeats x0 at rank 13: past the top 10
    result = CliRunner().invoke(main, ["eval", str(qrels), str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    assert document["runs"]["r"]["rankingsRepeatingIds"] == 1
    assert result.stderr.splitlines() == [
        f"warning: run r ({run}): 1 rankings repeat an id in their top max(k, 10); each "
        "repeat keeps its rank and earns nothing (docs/metrics.md, convention 7); "
        "trec_eval refuses such a run"
    ]
    wide = CliRunner().invoke(main, ["eval", str(qrels), str(run), "--format", "json", "--k", "20"])
    assert orjson.loads(wide.stdout)["runs"]["r"]["rankingsRepeatingIds"] == 2
    clean = evaluate_run_file(read_golden(qrels), DATA / "results.test", k=10)
    assert clean.runs["STANDARD"].summary()["rankingsRepeatingIds"] == 0
