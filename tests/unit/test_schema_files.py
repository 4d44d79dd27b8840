"""The committed JSON Schema files are what the models generate today."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from click.testing import CliRunner

from schemas import WIRE_MODELS, RetrievalResult
from scorer.cli import main
from scorer.cli.schemas_cmd import SCHEMA_DIR, schema_files


def test_committed_schema_files_match_the_models() -> None:
    generated = schema_files()
    assert sorted(generated) == sorted(f"{model.__name__}.schema.json" for model in WIRE_MODELS)
    for name, text in generated.items():
        committed = (SCHEMA_DIR / name).read_text(encoding="utf-8")
        assert committed == text, f"{name} is stale: run `scorer schemas export`"


def test_schema_files_are_valid_json_schema_and_accept_a_real_event() -> None:
    schema = json.loads((SCHEMA_DIR / "RetrievalResult.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    event = RetrievalResult(result_id="r1", run_id="v1", query_id="q1", ranked=["a"], k=5)
    jsonschema.validate(json.loads(event.to_json_bytes()), schema)
    assert not jsonschema.Draft202012Validator(schema).is_valid({"resultId": "r1"})


def test_export_writes_and_check_compares(tmp_path: Path) -> None:
    runner = CliRunner()
    stale = runner.invoke(main, ["schemas", "check", "--dir", str(tmp_path)])
    assert stale.exit_code == 1
    assert "run `scorer schemas export`" in stale.output
    exported = runner.invoke(main, ["schemas", "export", "--out", str(tmp_path)])
    assert exported.exit_code == 0
    assert (tmp_path / "ScoredResult.schema.json").read_text().endswith("}\n")
    assert runner.invoke(main, ["schemas", "check", "--dir", str(tmp_path)]).exit_code == 0
