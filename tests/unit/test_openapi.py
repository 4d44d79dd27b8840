"""The run API's OpenAPI document: valid, and committed as generated."""

from __future__ import annotations

import json
from pathlib import Path

from openapi_spec_validator import validate

from scorer.metrics import METRIC_NAMES
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
