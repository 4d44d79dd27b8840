"""``scorer eval`` end to end through click: both formats, --complete, --per-query, errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import pytrec_eval
from click.testing import CliRunner

from scorer.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TREC_MEASURES = {"P_10", "recall_10", "success_10", "recip_rank"}


def run_eval(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["eval", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def trec_eval_means(qrels_path: Path, run_path: Path, tag: str, complete: bool) -> dict[str, float]:
    """Means as trec_eval computes them, via pytrec_eval and its own file parsers."""
    with qrels_path.open() as lines:
        qrels = pytrec_eval.parse_qrel(lines)
    with run_path.open() as lines:
        run = pytrec_eval.parse_run(line for line in lines if line.split()[5] == tag)
    binary = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)
    gains = {q: {d: 2**g - 1 if g > 0 else g for d, g in j.items()} for q, j in qrels.items()}
    graded = pytrec_eval.RelevanceEvaluator(gains, {"ndcg_cut_10"}).evaluate(run)
    count = len(qrels) if complete else len(binary)

    def mean(table: dict[str, dict[str, float]], measure: str) -> float:
        return sum(row[measure] for row in table.values()) / count

    return {
        "recallAtK": mean(binary, "recall_10"),
        "precisionAtK": mean(binary, "P_10"),
        "ndcgAt10": mean(graded, "ndcg_cut_10"),
        "mrr": mean(binary, "recip_rank"),
        "hitAtK": mean(binary, "success_10"),
    }


@pytest.mark.parametrize("complete", [False, True])
def test_json_means_equal_trec_eval_on_the_example_run(complete: bool) -> None:
    qrels, run = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    flags = ["--complete"] if complete else []
    code, out, _ = run_eval(qrels, run, "--format", "json", *flags)
    assert code == 0
    document = orjson.loads(out)
    assert document["k"] == 10
    assert sorted(document["runs"]) == ["bm25-v1", "hybrid-v2"]
    for tag, summary in document["runs"].items():
        expected = trec_eval_means(qrels, run, tag, complete)
        assert summary["metrics"] == pytest.approx(expected, abs=1e-12)
        assert set(summary) >= {"count", "metrics", "ci95", "facets", "skipped"}
    bm25 = document["runs"]["bm25-v1"]
    # The example's bm25 run returned nothing for one judged query.
    assert bm25["count"] == (12 if complete else 11)
    assert bm25["skipped"]["judgedQueriesNotInRun"] == (0 if complete else 1)
    assert "results" not in document


def test_json_per_query_rows_and_facets_from_jsonl() -> None:
    code, out, _ = run_eval(
        EXAMPLES / "golden.jsonl", EXAMPLES / "results.jsonl", "--format", "json", "--per-query"
    )
    assert code == 0
    document = orjson.loads(out)
    hybrid = document["runs"]["hybrid-v2"]
    assert hybrid["skipped"]["resultsWithoutQrels"] == 1
    assert set(hybrid["facets"]) == {"type", "popularity", "dynamism"}
    per_facet = sum(agg["count"] for agg in hybrid["facets"]["type"].values())
    assert per_facet == hybrid["count"] == 12
    rows = document["results"]
    assert len(rows) == 24
    assert set(rows[0]) == {"runId", "queryId", "resultId", "retrievalMetrics"}
    total_miss = next(row for row in rows if row["resultId"] == "r-0004")
    assert total_miss["retrievalMetrics"]["hitAtK"] == 0


def test_table_format_shows_each_run_and_facet_value() -> None:
    code, out, _ = run_eval(EXAMPLES / "golden.jsonl", EXAMPLES / "results.jsonl")
    assert code == 0
    assert "run bm25-v1" in out
    assert "run hybrid-v2" in out
    assert "multi-hop" in out
    assert "nDCG@10" in out
    assert "skipped: 1 rankings without qrels, 0 judged queries not in the run" in out


def test_table_per_query_lists_each_ranking() -> None:
    code, out, _ = run_eval(
        EXAMPLES / "golden.jsonl", EXAMPLES / "results.jsonl", "--per-query", "--k", "5"
    )
    assert code == 0
    assert "per query" in out
    assert "r-0024" in out
    assert "k=5" in out


@pytest.mark.parametrize(
    ("qrels_text", "run_text", "message"),
    [
        ("q1 0 a 1\n", "q1 Q0 a 1 1.0 r\nq1 Q0 b 2 0.5\n", "run.txt:2: expected 6 columns"),
        ("q1 0 a 1\n", "q1 Q0 a 1 x r\n", "run.txt:1: score 'x' is not a number"),
        ("q1 0 a 1\nq1 a\n", "q1 Q0 a 1 1 r\n", "qrels.txt:2: expected 4 columns"),
        ("q1 0 a one\n", "q1 Q0 a 1 1 r\n", "qrels.txt:1: grade 'one' is not an integer"),
        ("", "q1 Q0 a 1 1 r\n", "qrels.txt: file is empty"),
        ("q1 0 a 1\n", "", "run.txt: file is empty"),
        ("q1 Q0 a 1 1 r\n", "q1 Q0 a 1 1 r\n", "qrels.txt: is a TREC run, expected qrels"),
        ("q1 0 a 1\n", "q1 0 a 1\n", "run.txt: is a TREC qrels, expected rankings"),
    ],
)
def test_bad_input_exits_2_with_one_line_on_stderr(
    tmp_path: Path, qrels_text: str, run_text: str, message: str
) -> None:
    (tmp_path / "qrels.txt").write_text(qrels_text)
    (tmp_path / "run.txt").write_text(run_text)
    code, out, err = run_eval(tmp_path / "qrels.txt", tmp_path / "run.txt")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(str(tmp_path / message))
    assert "Traceback" not in err


def test_missing_file_exits_2(tmp_path: Path) -> None:
    code, _, err = run_eval(tmp_path / "nope.txt", EXAMPLES / "run.txt")
    assert code == 2
    assert err == f"{tmp_path / 'nope.txt'}: cannot read the file: No such file or directory\n"


def test_bad_line_through_a_real_process(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "run.txt").write_text("q-001 Q0 a 1 1.0 r\n" * 16 + "q-001 Q0 b 17 0.5\n")
    completed = subprocess.run(
        [sys.executable, "-m", "scorer.cli", "eval", str(EXAMPLES / "qrels.txt"), "run.txt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert (
        completed.stderr == "run.txt:17: expected 6 columns (qid Q0 docid rank score tag), got 5\n"
    )
