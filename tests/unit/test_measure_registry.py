"""The metric registry: a measure added as one spec plus its kernel lines appears
everywhere the measures are listed (wire, OpenAPI, histograms, folds, compare, page,
tables), with nothing else edited."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scorer.core import measures
from scorer.core.metrics import MetricValues

ROOT = Path(__file__).resolve().parents[2]

NEW_SPEC = """    Measure(len(MEASURES_SO_FAR), "filledAtK", "filled_at_k", "Filled@k", "filled@k",
            RETRIEVAL, "Share of the top-k slots the ranking fills."),
"""
# The test measure: min(returned, k) / k, computed in the kernel's return.
NEW_KERNEL_LINE = "        min(len(ranked), k) / k,\n"
KERNEL_ANCHOR = "        # A measure added to the registry returns its value here, in its slot.\n"

PROBE = r"""
import json
from scorer.cli.eval_run import _HEADINGS
from scorer.analysis.compare import compare_runs
from scorer.core.metrics import retrieval_metrics
from scorer.core.rollup import RunRollup
from scorer.stream.openapi import OPENAPI
from scorer.page import page_html
from scorer.stream.run_state import RunBatch, query_means
from scorer.stream.stored import RollupRow
from scorer.stream.telemetry import Telemetry
from prometheus_client import generate_latest

values = retrieval_metrics(["a", "x", "b"], {"a": 1, "b": 2, "c": 1}, k=4)
telemetry = Telemetry(["type"], 10)
telemetry.observe_scored(values, {"type": "faq"})
exposition = generate_latest(telemetry.registry).decode()
batch = RunBatch(load_run=lambda key: None, load_query=lambda key: None, max_queries=10)
row = RollupRow("t", 0, 1, 0, "r1", "q1", list(values), {"type": "faq"})
batch.add_row(b"run", row)
batch.add_row(b"run", RollupRow("t", 0, 2, 0, "r2", "q1", list(values)[:-1], {}))
state = batch.finish("now")[b"run"]
run = RunRollup.from_state(state["rollup"])
rollup = RunRollup()
rollup.add(values, {"type": "faq"})
compared = compare_runs(rollup.overall, rollup.overall, {"q": list(values)}, {"q": list(values)})
schema = OPENAPI["components"]["schemas"] if "components" in OPENAPI else {}
print(json.dumps({
    "fields": list(type(values)._fields),
    "wire": values.as_wire(),
    "openapi": json.dumps(OPENAPI),
    "histogram": [line for line in exposition.splitlines() if "filled_at_k_sum" in line],
    "fold": rollup.summary()["metrics"],
    "facet": rollup.summary()["facets"]["type"]["faq"]["metrics"],
    "batch": run.summary(),
    "query": query_means(batch.queries["run\x1fq1"]),
    "compare": sorted(compared["metrics"]),
    "paired": sorted(compared["paired"]["metrics"]),
    "page": page_html(),
    "headings": list(_HEADINGS),
}))
"""


@pytest.fixture(scope="module")
def with_new_measure(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The probe's findings in a copy of the package with one measure added."""
    copy = tmp_path_factory.mktemp("registry")
    for package in ("scorer", "schemas"):
        skip = shutil.ignore_patterns("__pycache__")
        shutil.copytree(ROOT / package, copy / package, ignore=skip)
    registry = copy / "scorer" / "core" / "measures.py"
    text = registry.read_text()
    anchor = ")  # fmt: skip\n"
    assert text.count(anchor) == 1
    spec = NEW_SPEC.replace("len(MEASURES_SO_FAR)", str(len(measures.MEASURES)))
    registry.write_text(text.replace(anchor, spec + anchor))
    kernel = copy / "scorer" / "core" / "metrics.py"
    text = kernel.read_text()
    assert text.count(KERNEL_ANCHOR) == 1
    kernel.write_text(text.replace(KERNEL_ANCHOR, NEW_KERNEL_LINE + KERNEL_ANCHOR))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_added_measure_is_a_field_and_on_the_wire(with_new_measure: dict) -> None:
    assert with_new_measure["fields"][-1] == "filled_at_k"
    # 3 ids returned, k = 4.
    assert with_new_measure["wire"]["retrievalMetrics"]["filledAtK"] == 0.75


def test_an_added_measure_is_in_openapi_histograms_and_tables(with_new_measure: dict) -> None:
    assert '"filledAtK"' in with_new_measure["openapi"]
    assert (
        'scorer_retrieval_filled_at_k_sum{facet="all",value="all"} 0.75'
        in (with_new_measure["histogram"])
    )
    assert (
        'scorer_retrieval_filled_at_k_sum{facet="type",value="faq"} 0.75'
        in (with_new_measure["histogram"])
    )
    assert with_new_measure["headings"][-1] == "filled@k"


def test_an_added_measure_folds_in_rollups_queries_and_compare(with_new_measure: dict) -> None:
    assert with_new_measure["fold"]["filledAtK"] == 0.75
    assert with_new_measure["facet"]["filledAtK"] == 0.75
    # The second row was made without it (one value short): unseen, not a zero.
    batch = with_new_measure["batch"]
    assert batch["count"] == 2
    assert batch["metrics"]["filledAtK"] == 0.75
    assert batch["metrics"]["recallAtK"] == pytest.approx(2 / 3)
    assert len(with_new_measure["query"]) == len(measures.MEASURES) + 1
    assert "filledAtK" in with_new_measure["compare"]
    assert "filledAtK" in with_new_measure["paired"]


def test_an_added_measure_is_a_page_column(with_new_measure: dict) -> None:
    assert '["filledAtK","Filled@k"]' in with_new_measure["page"]


def test_the_registry_is_what_metric_values_and_the_kernel_use() -> None:
    assert MetricValues._fields == tuple(m.field for m in measures.MEASURES)
    assert tuple(m.wire for m in measures.MEASURES) == measures.METRIC_NAMES
    assert [m.slot for m in measures.MEASURES] == list(range(len(measures.MEASURES)))
    assert measures.GROUPS[measures.RETRIEVAL] == measures.MEASURES[:5]
