"""The risk–coverage block of ``scorer eval`` and of the notebook API: where the
confidence comes from (a TREC run's top line, a JSONL result's confidence or
scores[0], a notebook run's highest score), the design's worked example end to
end, per facet value, with --complete, and the AURC differences between runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

import scorer
from scorer.analysis.risk_coverage import loss_curve
from scorer.cli import main
from scorer.io import read_golden
from scorer.io import runs as run_reader
from scorer.offline.evaluation import evaluate_run_file

# docs/metrics.md's example at k = 1: top confidences 0.9, 0.8, 0.8, 0.1 and misses 0, 1, 0, 1.
QRELS = "q1 0 g1 2\nq2 0 g2 1\nq3 0 g3 3\nq4 0 g4 1\nq5 0 g5 1\n"
# Lines out of trec_eval's order: the confidence is the top score after ordering.
RUN = (
    "q1 Q0 x1 1 0.2 r\n"
    "q1 Q0 g1 2 0.9 r\n"
    "q2 Q0 g2 1 0.8 r\n"
    "q2 Q0 x2 2 0.8 r\n"  # tie at the top: docid descending puts x2 first, a miss
    "q3 Q0 g3 1 0.8 r\n"
    "q4 Q0 x4 1 0.1 r\n"
    "q4 Q0 g4 2 -5 r\n"
)
AURC = 0.2708333333333333
OPTIMAL = 0.2083333333333333


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def eval_json(*args: Any) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["eval", *map(str, args), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def test_a_trec_run_gives_the_worked_example_from_its_top_lines(tmp_path: Path) -> None:
    qrels, run = write(tmp_path, "qrels.txt", QRELS), write(tmp_path, "run.txt", RUN)
    document = eval_json(qrels, run, "--k", "1", "--per-query")
    block = document["runs"]["r"]["riskCoverage"]
    assert block["withConfidence"] == 4
    assert block["withoutConfidence"] == 0
    assert block["miss"]["aurc"] == pytest.approx(AURC, abs=1e-15)
    assert block["miss"]["optimalAurc"] == pytest.approx(OPTIMAL, abs=1e-15)
    assert block["miss"]["eAurc"] == 0.0625
    assert block["miss"]["curve"] == [[0.25, 0.0], [0.5, 0.25], [0.75, 1 / 3], [1.0, 0.5]]
    rows = document["results"]
    assert [row["confidence"] for row in rows] == [0.9, 0.8, 0.8, 0.1]
    ndcg_losses = [1.0 - row["retrievalMetrics"]["ndcgAt10"] for row in rows]
    expected = loss_curve([0.9, 0.8, 0.8, 0.1], ndcg_losses).as_json()
    assert block["ndcgLoss"] == expected
    assert 0.0 < expected["eAurc"] < expected["aurc"]


def test_the_columnar_reader_takes_the_same_confidences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qrels, run = write(tmp_path, "qrels.txt", QRELS), write(tmp_path, "run.txt", RUN)
    golden = read_golden(qrels)
    by_lines = evaluate_run_file(golden, run, k=1, per_query=True)
    monkeypatch.setattr(run_reader, "COLUMNAR_MIN_BYTES", 0)
    by_columns = evaluate_run_file(golden, run, k=1, per_query=True)
    assert by_columns.as_json() == by_lines.as_json()
    assert by_columns.as_json()["runs"]["r"]["riskCoverage"]["miss"]["eAurc"] == 0.0625


def test_the_order_of_a_runs_lines_changes_nothing(tmp_path: Path) -> None:
    qrels = write(tmp_path, "qrels.txt", QRELS)
    lines = RUN.splitlines(keepends=True)
    forward = eval_json(qrels, write(tmp_path, "a.txt", RUN), "--k", "1")
    backward = eval_json(qrels, write(tmp_path, "b.txt", "".join(reversed(lines))), "--k", "1")
    assert backward["runs"]["r"]["riskCoverage"] == forward["runs"]["r"]["riskCoverage"]


def result_line(result_id: str, query_id: str, ranked: list[str], **extra: Any) -> str:
    event = {"resultId": result_id, "runId": "v1", "queryId": query_id, "ranked": ranked}
    return orjson.dumps({**event, **extra}).decode() + "\n"


def test_jsonl_results_take_confidence_else_the_top_score_per_facet_value(
    tmp_path: Path,
) -> None:
    golden = write(
        tmp_path,
        "golden.jsonl",
        "".join(
            orjson.dumps(
                {"queryId": f"q{n}", "qrels": {f"g{n}": 1}, "facets": {"type": kind}}
            ).decode()
            + "\n"
            for n, kind in [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b")]
        ),
    )
    results = write(
        tmp_path,
        "results.jsonl",
        result_line("r1", "q1", ["g1", "x"], scores=[0.9, 0.1])
        + result_line("r2", "q2", ["x", "g2"], scores=[0.3, 0.2], confidence=0.8)
        + result_line("r3", "q3", ["g3"], confidence=0.8)
        + result_line("r4", "q4", ["x"], scores=[0.1])
        + result_line("r5", "q5", ["g5"]),  # no confidence: counted, left out
    )
    run = eval_json(golden, results, "--k", "1")["runs"]["v1"]
    block = run["riskCoverage"]
    assert (block["withConfidence"], block["withoutConfidence"]) == (4, 1)
    assert block["miss"]["aurc"] == pytest.approx(AURC, abs=1e-15)
    assert block["miss"]["eAurc"] == 0.0625
    facet_a = run["facets"]["type"]["a"]["riskCoverage"]
    assert facet_a["miss"]["curve"] == [[0.5, 0.0], [1.0, 0.5]]  # 0.9 hit, 0.8 miss
    facet_b = run["facets"]["type"]["b"]["riskCoverage"]
    assert (facet_b["withConfidence"], facet_b["withoutConfidence"]) == (2, 1)
    assert facet_b["miss"]["aurc"] == pytest.approx((0 + 0.5) / 2)


def test_complete_counts_zero_filled_queries_as_without_confidence(tmp_path: Path) -> None:
    qrels, run = write(tmp_path, "qrels.txt", QRELS), write(tmp_path, "run.txt", RUN)
    run_summary = eval_json(qrels, run, "--k", "1", "--complete")["runs"]["r"]
    assert run_summary["zeroFilled"] == 1
    block = run_summary["riskCoverage"]
    assert (block["withConfidence"], block["withoutConfidence"]) == (4, 1)
    assert block["miss"]["eAurc"] == 0.0625


def test_several_runs_compare_their_aurc_with_the_baseline(tmp_path: Path) -> None:
    qrels = write(tmp_path, "qrels.txt", QRELS)
    # Run s: the same rankings, confidence now ranks both misses last (E-AURC 0).
    better = RUN.replace(" r\n", " s\n").replace("q2 Q0 g2 1 0.8", "q2 Q0 g2 1 0.05")
    better = better.replace("q2 Q0 x2 2 0.8", "q2 Q0 x2 2 0.05")
    document = eval_json(qrels, write(tmp_path, "run.txt", RUN + better), "--k", "1")
    assert document["runs"]["s"]["riskCoverage"]["miss"]["eAurc"] == 0.0
    (comparison,) = document["comparisons"]["runs"]
    miss = comparison["riskCoverage"]["miss"]
    assert miss["a"] == pytest.approx(AURC, abs=1e-15)
    assert miss["b"] == pytest.approx(OPTIMAL, abs=1e-15)
    assert miss["delta"] == pytest.approx(OPTIMAL - AURC, abs=1e-15)
    assert set(comparison["riskCoverage"]) == {"miss", "ndcgLoss"}


def test_the_table_has_one_risk_coverage_line_per_run(tmp_path: Path) -> None:
    qrels, run = write(tmp_path, "qrels.txt", QRELS), write(tmp_path, "run.txt", RUN)
    result = CliRunner().invoke(main, ["eval", str(qrels), str(run), "--k", "1"])
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if line.startswith("risk-coverage")]
    assert len(lines) == 1
    assert lines[0].startswith("risk-coverage: AURC miss 0.2708 (E-AURC 0.0625), ndcgLoss ")
    assert lines[0].endswith("; 4 rankings with a confidence, 0 without")


def test_the_notebook_api_returns_the_same_block(tmp_path: Path) -> None:
    qrels = {"q1": {"g1": 2}, "q2": {"g2": 1}, "q3": {"g3": 3}, "q4": {"g4": 1}, "q5": {"g5": 1}}
    run = {
        "q1": {"x1": 0.2, "g1": 0.9},
        "q2": {"g2": 0.8, "x2": 0.8},
        "q3": {"g3": 0.8},
        "q4": {"x4": 0.1, "g4": -5.0},
    }
    from_python = scorer.evaluate(qrels, run, k=1)["runs"]["run"]["riskCoverage"]
    cli = eval_json(
        write(tmp_path, "qrels.txt", QRELS), write(tmp_path, "run.txt", RUN), "--k", "1"
    )
    assert from_python == cli["runs"]["r"]["riskCoverage"]
    compared = scorer.compare_runs(qrels, {"a": run, "b": run}, k=1)
    assert compared["comparisons"]["runs"][0]["riskCoverage"]["miss"]["delta"] == 0.0
