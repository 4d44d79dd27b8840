"""What ``scorer demo`` (``make run``) prints once the worker is ready."""

from __future__ import annotations

from pathlib import Path

from scorer.cli.demo_cmd import where_to_look
from scorer.settings import Settings


def test_the_evals_page_url_is_the_first_line_printed(tmp_path: Path):
    settings = Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9092", datadir=tmp_path)
    text = where_to_look("http://127.0.0.1:6066", "127.0.0.1:9092", settings, tmp_path / "w.log")
    lines = text.strip().splitlines()
    assert lines[0] == "evals page      http://127.0.0.1:6066/"
    assert lines[1] == "scorer demo is running (Ctrl-C stops it)"
    assert "  run list      http://127.0.0.1:6066/api/v1/evals/runs" in lines
