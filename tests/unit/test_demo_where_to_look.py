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


def test_a_second_demo_on_a_taken_port_stops_with_one_line_before_anything_starts(
    tmp_path: Path,
) -> None:
    import socket

    import click
    import pytest

    from scorer.cli.demo_cmd import run_demo

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        settings = Settings(
            KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9", datadir=tmp_path, web_port=port,
            web_host="127.0.0.1", state_dir=tmp_path,
        )  # fmt: skip
        with pytest.raises(click.ClickException) as stopped:
            run_demo(settings, 10, 1.0, 0.0, 0.0, 1.0)
    message = stopped.value.message
    assert message.startswith(f"port {port} on 127.0.0.1 is taken (another scorer demo")
    assert "SCORER_WEB_PORT" in message and "\n" not in message
    assert not (tmp_path / "demo-worker.log").exists()  # nothing was started


def test_the_status_line_says_what_parked_means() -> None:
    import http.server
    import threading

    from scorer.cli.demo_cmd import outcome_line

    body = (
        b'scorer_results_total{outcome="scored"} 12.0\n'
        b'scorer_results_total{outcome="unjudged"} 3.0\n'
        b"scorer_parked_results 40.0\n"
    )

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        line = outcome_line(f"http://127.0.0.1:{server.server_port}", 300.0)
    finally:
        server.shutdown()
    assert line == (
        "scored 12  unjudged 3  deadletter 0  parked 40 "
        "(waiting for their qrels; unjudged after 300 s)"
    )
