"""``scorer worker`` refuses a web port already in use in one line, before anything
else (no broker needed to see it), makes its data directory on a fresh checkout, and
knows what to say once ready."""

from __future__ import annotations

import socket

import click
import pytest
from click.testing import CliRunner

from scorer.cli import main
from scorer.cli.worker_cmd import make_data_dir, ready_lines
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
        f"Error: web port 127.0.0.1:{port} is in use (stop what holds it, or set SCORER_WEB_PORT)\n"
    )


def test_the_ready_lines_say_where_the_worker_listens() -> None:
    settings = Settings(web_port=7070, app_id="scorer-a")
    assert ready_lines(settings) == [
        "scorer worker ready: group scorer-a reads retrieval.results and retrieval.qrels, "
        "writes retrieval.scored",
        "listening on http://127.0.0.1:7070: /metrics, run API "
        "/api/v1/evals/runs/{runId}/metrics, /readyz",
    ]


def test_the_data_directory_is_made_with_its_parents(tmp_path) -> None:
    settings = Settings(state_dir=tmp_path / "fresh" / ".scorer")
    make_data_dir(settings)
    assert (tmp_path / "fresh" / ".scorer" / "data").is_dir()


def test_a_data_directory_that_cannot_be_made_is_one_line(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    settings = Settings(datadir=tmp_path / "file" / "data")
    with pytest.raises(click.ClickException) as raised:
        make_data_dir(settings)
    assert raised.value.message == (
        f"cannot create the data directory {tmp_path}/file/data: Not a directory "
        "(set SCORER_DATADIR or SCORER_STATE_DIR)"
    )


def test_the_ready_lines_wait_for_readiness_and_an_unready_worker_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import io

    from scorer.cli import worker_cmd

    monkeypatch.setattr(worker_cmd, "NOT_READY_AFTER_SECONDS", 0.05)
    answers = iter(
        [(False, "input topic missing: retrieval.results (run scorer topics create)")] * 8
    )
    out = io.StringIO()
    readiness = lambda: next(answers, (True, "consuming"))  # noqa: E731
    asyncio.run(worker_cmd.announce_when_ready(readiness, ["ready!", "where"], out, poll=0.01))
    assert out.getvalue().splitlines() == [
        "scorer worker started, not ready yet: input topic missing: retrieval.results "
        "(run scorer topics create)",
        "ready!",
        "where",
    ]


def test_a_member_the_assignment_left_idle_is_ready_and_says_so() -> None:
    from types import SimpleNamespace

    from scorer.stream.web import is_ready

    def app(generation: int, assigned: set) -> SimpleNamespace:
        return SimpleNamespace(
            tables=SimpleNamespace(recovery=SimpleNamespace(completed=SimpleNamespace(
                is_set=lambda: True))),
            rebalancing=False,
            consumer=SimpleNamespace(assignment=lambda: assigned),
            consumer_generation_id=generation,
        )  # fmt: skip

    assert is_ready(app(0, set())) == (False, "no partitions assigned yet")
    ready, why = is_ready(app(4, set()))
    assert ready and why.startswith("idle: ")
    assert is_ready(app(4, {("results", 0)})) == (True, "consuming")
