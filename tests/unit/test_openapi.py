"""The run API's OpenAPI document: valid, and committed as generated."""

from __future__ import annotations

import json
from pathlib import Path

from openapi_spec_validator import validate

from scorer.core.metrics import METRIC_NAMES
from scorer.stream.openapi import OPENAPI, openapi_text

COMMITTED = Path(__file__).parents[2] / "docs" / "openapi.json"


def test_the_document_is_valid_openapi():
    validate(json.loads(openapi_text()))


def test_the_committed_file_matches_the_code():
    assert COMMITTED.read_text() == openapi_text(), (
        "docs/openapi.json is stale: python -m scorer.stream.openapi > docs/openapi.json"
    )


def test_every_metric_is_described():
    metrics = OPENAPI["paths"]["/api/v1/evals/runs/{runId}/metrics"]["get"]
    example = metrics["responses"]["200"]["content"]["application/json"]["example"]
    assert set(example["metrics"]) == set(METRIC_NAMES)


def test_the_document_covers_every_run_route_of_the_worker(tmp_path):
    import re

    from scorer.settings import Settings
    from scorer.stream.app import create_app

    app = create_app(Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", datadir=tmp_path)).app
    served = {
        # Faust's {run_id} is the document's {runId}.
        re.sub(
            r"\{(\w+)\}", lambda m: "{" + re.sub(r"_(\w)", lambda c: c[1].upper(), m[1]) + "}", path
        )
        for path in app.web.views
        if path.startswith("/api/v1/evals/")
    }
    assert served == set(OPENAPI["paths"])
    assert "/api/v1/evals/runs/{runId}/risk-coverage" in served


def test_the_risk_coverage_example_is_the_worked_example_of_the_design():
    route = OPENAPI["paths"]["/api/v1/evals/runs/{runId}/risk-coverage"]["get"]
    example = route["responses"]["200"]["content"]["application/json"]["example"]
    assert example["miss"]["eAurc"] == 0.0625
    assert set(route["responses"]) == {"200", "400", "404"}


def test_the_run_list_is_paged_as_the_code_pages_it():
    from scorer.stream.run_list import DEFAULT_LIMIT, MAX_LIMIT

    route = OPENAPI["paths"]["/api/v1/evals/runs"]["get"]
    limit, offset = route["parameters"]
    assert limit["schema"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_LIMIT,
        "default": DEFAULT_LIMIT,
    }
    assert (MAX_LIMIT, DEFAULT_LIMIT) == (500, 50)
    assert offset["schema"]["default"] == 0
    assert set(route["responses"]) == {"200", "400", "503"}


def test_the_worker_serves_the_evals_page_at_the_root_and_at_evals(tmp_path):
    from scorer.settings import Settings
    from scorer.stream.app import create_app

    app = create_app(Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", datadir=tmp_path)).app
    assert {"/", "/evals", "/api/v1/evals/runs"} <= set(app.web.views)
