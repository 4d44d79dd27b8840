"""``scorer eval`` end to end through click: both formats, --complete, --per-query,
several cutoffs and runs, standard input, warnings, errors, start-up imports."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import pytrec_eval
from click.testing import CliRunner

from scorer.cli import eval_run, main
from scorer.io import runs as run_reader

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
        seed_five = {name: summary["metrics"][name] for name in expected}
        assert seed_five == pytest.approx(expected, abs=1e-12)
        assert set(summary["metrics"]) == set(expected) | {"judgedAtK", "candidateNdcgAt10"}
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
    assert set(rows[0]) == {"runId", "queryId", "resultId", "retrievalMetrics", "judgmentMetrics"}
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
        # Both bad: the qrels are named, as they are read first.
        ("q1 0 a one\n", "q1 Q0 a 1 x r\n", "qrels.txt:1: grade 'one' is not an integer"),
        ("q1 0 a 1\nq1 a\n", "", "qrels.txt:2: expected 4 columns"),
        ("", "q1 0 a 1\n", "qrels.txt: file is empty"),
    ],
)
@pytest.mark.parametrize("big_run", [False, True])
def test_bad_input_exits_2_with_one_line_on_stderr(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    qrels_text: str,
    run_text: str,
    message: str,
    big_run: bool,
) -> None:
    if big_run:  # the qrels read in a thread while the run's first chunk is parsed
        monkeypatch.setattr(eval_run, "COLUMNAR_MIN_BYTES", 0)
        monkeypatch.setattr(run_reader, "COLUMNAR_MIN_BYTES", 0)
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


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_several_cutoffs_each_equal_trec_eval(tmp_path: Path) -> None:
    qrels, run = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    code, out, _ = run_eval(qrels, run, "--format", "json", "--k", "5,10,100")
    assert code == 0
    document = orjson.loads(out)
    assert document["k"] == [5, 10, 100]
    assert list(document["cutoffs"]) == ["5", "10", "100"]
    with qrels.open() as lines:
        judged = pytrec_eval.parse_qrel(lines)
    with run.open() as lines:
        ranked = pytrec_eval.parse_run(line for line in lines if "hybrid-v2" in line)
    for k in (5, 10, 100):
        one_k = orjson.loads(run_eval(qrels, run, "--format", "json", "--k", str(k))[1])
        assert document["cutoffs"][str(k)] == one_k  # each cutoff: the one-k document
        measures = {f"recall_{k}", f"P_{k}", f"success_{k}"}
        rows = pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(ranked).values()
        metrics = one_k["runs"]["hybrid-v2"]["metrics"]
        assert metrics["recallAtK"] == pytest.approx(
            sum(r[f"recall_{k}"] for r in rows) / len(rows), abs=1e-12
        )
        assert metrics["precisionAtK"] == pytest.approx(
            sum(r[f"P_{k}"] for r in rows) / len(rows), abs=1e-12
        )
        assert metrics["hitAtK"] == pytest.approx(
            sum(r[f"success_{k}"] for r in rows) / len(rows), abs=1e-12
        )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("10,x", "'x' is not an integer"),
        ("0", "0 is not in 1..1000"),
        ("10,10", "10 is given twice"),
    ],
)
def test_bad_cutoffs_are_usage_errors(value: str, problem: str) -> None:
    code, _, err = run_eval(EXAMPLES / "qrels.txt", EXAMPLES / "run.txt", "--k", value)
    assert code == 2
    assert problem in err


def test_short_flags_match_trec_eval_habits() -> None:
    qrels, run = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    short = run_eval(qrels, run, "-q", "-c", "--format", "json")
    long = run_eval(qrels, run, "--per-query", "--complete", "--format", "json")
    assert short == long
    document = orjson.loads(short[1])
    assert document["runs"]["bm25-v1"]["zeroFilled"] == 1
    assert len(document["results"]) == 24  # 12 judged queries x 2 runs, -c fills the gap


def test_a_big_run_reads_the_qrels_alongside_and_scores_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qrels, run = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    other = write(tmp_path, "other.txt", run.read_text().replace(" 1.", " 0.7"))
    for args in ([], ["-q", "-c"], ["--k", "5,10"]):
        small = run_eval(qrels, run, other, "--format", "json", *args)
        with monkeypatch.context() as patch:
            patch.setattr(eval_run, "COLUMNAR_MIN_BYTES", 0)
            patch.setattr(run_reader, "COLUMNAR_MIN_BYTES", 0)
            big = run_eval(qrels, run, other, "--format", "json", *args)
        assert big == small
        assert small[0] == 0


def test_reading_the_qrels_alongside_the_run_gives_the_same_evaluation() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from scorer.io import read_golden
    from scorer.offline.evaluation import evaluate_run_file_cutoffs

    qrels, run = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    golden = read_golden(qrels)
    expected = evaluate_run_file_cutoffs(golden, run, ks=[10], per_query=True)
    with ThreadPoolExecutor(1) as pool:
        later = pool.submit(read_golden, qrels).result
        got = evaluate_run_file_cutoffs(later, run, ks=[10], per_query=True)
    assert [e.as_json() for e in got] == [e.as_json() for e in expected]


def test_run_from_standard_input_equals_the_file() -> None:
    qrels, run = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    from_file = run_eval(qrels, run, "--format", "json")
    result = CliRunner().invoke(
        main, ["eval", str(qrels), "-", "--format", "json"], input=run.read_bytes()
    )
    assert (result.exit_code, result.stdout) == from_file[:2]


def test_a_bad_line_on_standard_input_is_named_stdin() -> None:
    result = CliRunner().invoke(
        main, ["eval", str(EXAMPLES / "qrels.txt"), "-"], input="q-001 Q0 a 1 nan r\n"
    )
    assert result.exit_code == 2
    assert result.stderr == "<stdin>:1: score is not a finite number\n"


def test_several_run_files_are_compared_with_the_first(tmp_path: Path) -> None:
    qrels = write(tmp_path, "qrels.txt", "".join(f"q{n} 0 d{n} 1\n" for n in range(30)))
    # Same tag in every file (as users leave it): runs are named file:tag.
    good = write(tmp_path, "good.txt", "".join(f"q{n} Q0 d{n} 1 2 run\n" for n in range(30)))
    bad = write(tmp_path, "bad.txt", "".join(f"q{n} Q0 x{n} 1 2 run\n" for n in range(30)))
    code, out, _ = run_eval(qrels, bad, good, "--format", "json", "--permutations", "999")
    assert code == 0
    document = orjson.loads(out)
    assert sorted(document["runs"]) == sorted([f"{bad}:run", f"{good}:run"])
    comparisons = document["comparisons"]
    assert (comparisons["baseline"], comparisons["permutations"]) == (f"{bad}:run", 999)
    (comparison,) = comparisons["runs"]
    assert (comparison["runA"], comparison["runB"], comparison["queries"]) == (
        f"{bad}:run",
        f"{good}:run",
        30,
    )
    mrr = comparison["metrics"]["mrr"]
    assert (mrr["a"], mrr["b"], mrr["delta"]) == (0.0, 1.0, 1.0)
    assert (mrr["wins"], mrr["losses"], mrr["ties"]) == (30, 0, 0)
    # Every flip of 30 differences of +1 but the observed one lowers |sum|.
    assert mrr["randomization"]["p"] == pytest.approx(1 / 1000)
    assert mrr["randomization"]["significant"] and mrr["tTest"]["significant"]
    table = run_eval(qrels, bad, good, "--permutations", "999")[1]
    assert f"runs against {bad}:run" in table
    assert "1.0000 (+1.0000)*†" in table


def test_alpha_decides_the_marker() -> None:
    qrels, run = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    document = orjson.loads(run_eval(qrels, run, "--format", "json", "--alpha", "0.5")[1])
    recall = document["comparisons"]["runs"][0]["metrics"]["recallAtK"]
    assert document["comparisons"]["alpha"] == 0.5
    assert recall["tTest"]["significant"] == (recall["tTest"]["pHolm"] < 0.5)
    strict = orjson.loads(run_eval(qrels, run, "--format", "json", "--alpha", "1e-9")[1])
    for entry in strict["comparisons"]["runs"][0]["metrics"].values():
        assert not entry["tTest"]["significant"] and not entry["randomization"]["significant"]


def test_zero_shared_query_ids_warn_on_stderr(tmp_path: Path) -> None:
    qrels = write(tmp_path, "qrels.txt", "q1 0 a 1\n")
    run = write(tmp_path, "run.txt", "other-1 Q0 a 1 2 r\nother-2 Q0 a 1 2 r\n")
    code, out, err = run_eval(qrels, run)
    assert code == 0
    assert "skipped: 2 rankings without qrels, 1 judged queries not in the run" in out
    assert err == (
        f"warning: run r ({run}) shares no query id with {qrels}: none of its 2 rankings "
        "was scored; check that the qrels and the run belong together (same topics, same ids)\n"
    )
    assert run_eval(EXAMPLES / "qrels.txt", EXAMPLES / "run.txt")[2] == ""


def test_start_up_imports_nothing_heavy_for_small_files() -> None:
    import subprocess
    import sys

    # The start-up contract without a timed test: what a small file's path imports.
    script = (
        "import sys\n"
        "from scorer.cli import main\n"
        "try:\n"
        f"    main(['eval', {str(EXAMPLES / 'qrels.txt')!r}, {str(EXAMPLES / 'run.txt')!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ['scipy', 'pyarrow', 'rich', 'numpy', 'pydantic', 'pandas']\n"
        "print(sorted(name for name in heavy if name in sys.modules), file=sys.stderr)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert completed.stderr.strip() == "[]"
    assert "runs against bm25-v1" in completed.stdout


def test_constants_written_for_start_up_equal_their_sources() -> None:
    from schemas.events import MAX_K
    from scorer.cli.eval_options import DEFAULT_K
    from scorer.cli.eval_options import MAX_K as EVAL_MAX_K
    from scorer.settings import Settings

    assert EVAL_MAX_K == MAX_K
    assert Settings.model_fields["default_retrieval_k"].default == DEFAULT_K
