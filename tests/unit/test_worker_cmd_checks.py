"""``scorer worker`` refuses a web port already in use in one line, before anything
else (no broker needed to see it)."""

from __future__ import annotations

import socket

from click.testing import CliRunner

from scorer.cli import main
from scorer.cli.worker_cmd import ready_lines
from scorer.settings import Settings


def test_a_web_port_in_use_is_one_line_and_exit_1(monkeypatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setenv("SCORER_WEB_PORT", str(port))
        monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # never reached
        result = CliRunner().invoke(main, ["worker"])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: web port 127.0.0.1:{port} is in use (stop what holds it, or set "
        "SCORER_WEB_PORT)\n"
    )


def test_the_ready_lines_say_where_the_worker_listens() -> None:
    settings = Settings(web_port=7070, app_id="scorer-a")
    assert ready_lines(settings) == [
        "scorer worker ready: group scorer-a reads retrieval.results and retrieval.qrels, "
        "writes retrieval.scored",
        "listening on http://127.0.0.1:7070: /metrics, run API "
        "/api/v1/evals/runs/{runId}/metrics, /readyz",
    ]
