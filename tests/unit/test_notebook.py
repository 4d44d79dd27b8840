"""The Python API (scorer.evaluate, scorer.compare_runs): pytrec_eval/ranx dicts and
pandas DataFrames in, the CLI's JSON out, the numbers of pytrec_eval and ranx."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest
import pytrec_eval
from click.testing import CliRunner
from ranx import Qrels, Run
from ranx import evaluate as ranx_evaluate

import scorer
from scorer.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def random_collection(seed: int, queries: int = 40) -> tuple[dict, dict, dict]:
    rng = random.Random(seed)
    qrels, bm25, dense = {}, {}, {}
    for n in range(queries):
        query = f"q{n}"
        docs = [f"d{rng.randrange(60)}" for _ in range(30)]
        qrels[query] = {doc: rng.choice([0, 1, 2, 3]) for doc in docs[:12]}
        bm25[query] = {doc: rng.random() for doc in docs}
        dense[query] = {doc: rng.random() for doc in reversed(docs)}
    return qrels, bm25, dense


def test_evaluate_takes_pytrec_eval_dicts_and_gives_its_numbers() -> None:
    qrels, bm25, _ = random_collection(1)
    document = scorer.evaluate(qrels, bm25, k=5)
    metrics = document["runs"]["run"]["metrics"]
    rows = pytrec_eval.RelevanceEvaluator(qrels, {"recall_5", "P_5", "recip_rank"}).evaluate(bm25)
    assert metrics["recallAtK"] == pytest.approx(
        sum(r["recall_5"] for r in rows.values()) / len(rows), abs=1e-12
    )
    assert metrics["precisionAtK"] == pytest.approx(
        sum(r["P_5"] for r in rows.values()) / len(rows), abs=1e-12
    )
    assert metrics["mrr"] == pytest.approx(
        sum(r["recip_rank"] for r in rows.values()) / len(rows), abs=1e-12
    )
    ranx_ndcg = ranx_evaluate(Qrels(qrels), Run(bm25), "ndcg_burges@10")
    assert metrics["ndcgAt10"] == pytest.approx(ranx_ndcg, abs=1e-12)
    assert document["k"] == 5 and "comparisons" not in document


def test_evaluate_equals_the_cli_on_the_same_files(tmp_path: Path) -> None:
    qrels_path, run_path = EXAMPLES / "qrels.txt", EXAMPLES / "run.txt"
    with qrels_path.open() as lines:
        qrels = pytrec_eval.parse_qrel(lines)
    with run_path.open() as lines:
        run = pytrec_eval.parse_run(line for line in lines if "hybrid-v2" in line)
    (tmp_path / "run.txt").write_text(
        "".join(line for line in run_path.open() if "hybrid-v2" in line)
    )
    cli = CliRunner().invoke(
        main, ["eval", str(qrels_path), str(tmp_path / "run.txt"), "--format", "json", "-c"]
    )
    document = orjson.loads(cli.stdout)
    api = scorer.evaluate(qrels, run, k=[10], complete=True)
    assert api["runs"]["run"] == document["runs"]["hybrid-v2"]


def test_dataframes_with_trec_columns_equal_dicts() -> None:
    qrels, bm25, dense = random_collection(2)
    qrels_frame = pd.DataFrame(
        [(q, doc, grade) for q, judged in qrels.items() for doc, grade in judged.items()],
        columns=["qid", "docno", "label"],
    )
    run_frame = pd.DataFrame(
        [(q, doc, score, "bm25") for q, scored in bm25.items() for doc, score in scored.items()]
        + [(q, doc, s, "dense") for q, scored in dense.items() for doc, s in scored.items()],
        columns=["query_id", "doc_id", "score", "tag"],
    )
    from_frames = scorer.evaluate(qrels_frame, run_frame, k=[5, 10], permutations=500)
    from_dicts = scorer.compare_runs(
        qrels, {"bm25": bm25, "dense": dense}, [5, 10], permutations=500
    )
    assert from_frames == from_dicts
    assert from_frames["k"] == [5, 10]
    assert from_frames["cutoffs"]["10"]["comparisons"]["baseline"] == "bm25"


def test_compare_runs_holds_the_cli_comparison_keys() -> None:
    qrels, bm25, dense = random_collection(3)
    comparison = scorer.compare_runs(qrels, {"bm25": bm25, "dense": dense}, permutations=200)
    (entry,) = comparison["comparisons"]["runs"]
    assert (entry["runA"], entry["runB"], entry["queries"]) == ("bm25", "dense", 40)
    assert set(entry["metrics"]["ndcgAt10"]) == {
        "a", "b", "delta", "ci95", "wins", "losses", "ties", "tTest", "randomization"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("qrels", "run", "message"),
    [
        ({"q": {"d": 1.5}}, {"q": {"d": 1.0}}, "grade 1.5 is not an integer"),
        ({"q": {"d": 1}}, {"q": {"d": float("nan")}}, "score is not a finite number"),
        ({"q": {"d": 1}}, {"q": {"d": float("inf")}}, "score is not a finite number"),
    ],
)
def test_bad_values_raise_value_error(qrels: dict, run: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scorer.evaluate(qrels, run)


def test_a_frame_without_a_doc_column_says_which_columns_it_has() -> None:
    frame = pd.DataFrame({"qid": ["q"], "document": ["d"], "rel": [1]})
    with pytest.raises(ValueError, match=r"no doc column .* its columns: qid, document, rel"):
        scorer.evaluate(frame, {"q": {"d": 1.0}})


def test_pandas_is_imported_only_for_a_dataframe() -> None:
    script = (
        "import sys, scorer\n"
        "scorer.evaluate({'q': {'d': 1}}, {'q': {'d': 1.0}})\n"
        "print('pandas' in sys.modules, 'scipy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
