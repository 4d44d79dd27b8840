"""``scorer worker`` builds its Faust worker without the start-up spinner, which
at warning level would leave the root logger at DEBUG for the process's life."""

from __future__ import annotations

import logging

import pytest

from scorer.cli.worker_cmd import make_worker
from scorer.settings import Settings
from scorer.stream.app import create_app


@pytest.mark.parametrize("level", [logging.WARNING, logging.ERROR])
def test_the_root_logger_keeps_the_chosen_level(tmp_path, level: int) -> None:
    app = create_app(Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", datadir=tmp_path)).app
    worker = make_worker(app, logging.getLevelName(level).lower())
    root = logging.getLogger("scorer-test-root")
    root.addHandler(logging.StreamHandler())
    root.setLevel(level)
    worker.on_setup_root_logger(root, level)
    assert root.level == level
    assert all(handler.level in (logging.NOTSET, level) for handler in root.handlers)


def test_faust_alone_would_turn_debug_on(tmp_path) -> None:
    """The reason for ``make_worker``: a plain ``faust.Worker`` at warning level."""
    import faust

    app = create_app(Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", datadir=tmp_path)).app
    worker = faust.Worker(app, loglevel="warning")
    root = logging.getLogger("scorer-test-root-faust")
    root.addHandler(logging.StreamHandler())
    worker.on_setup_root_logger(root, logging.WARNING)
    assert root.level == logging.DEBUG


def test_release_listeners_closes_only_the_listening_sockets_of_its_port() -> None:
    import socket

    from scorer.cli.worker_cmd import release_listeners

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    bound_only = socket.socket()
    bound_only.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        assert release_listeners(port) == 1
        assert listener.fileno() == -1
        assert other.fileno() >= 0
        again = socket.socket()
        again.bind(("127.0.0.1", port))  # the port is free for the next app's server
        again.close()
        assert release_listeners(port) == 0
    finally:
        for sock in (listener, other, bound_only):
            sock.close()


def test_a_start_that_fails_on_a_broker_error_is_kept_for_the_rebuild(
    tmp_path, monkeypatch
) -> None:
    """A rebuilt app starting as the broker woke up met empty metadata; mode logs the
    error and exits 1 without a crash reason, so the worker exited 1 (a churn run).
    The error is kept, and the recovery rebuilds on it (a bug of ours still stops)."""
    import asyncio

    import faust
    from aiokafka.errors import NodeNotReadyError

    from scorer.stream.faust_edge import Recovery

    app = create_app(Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", datadir=tmp_path)).app
    worker = make_worker(app, "warning")
    error = NodeNotReadyError("Attempt to send a request to node which is not ready")

    async def failing_start(self) -> None:
        raise error

    monkeypatch.setattr(faust.Worker, "start", failing_start)
    with pytest.raises(NodeNotReadyError):
        asyncio.run(worker.start())
    assert worker.start_error is error and worker.crash_reason is None
    assert Recovery(exactly_once=True).should_rebuild(worker.start_error)
    assert not Recovery(exactly_once=True).should_rebuild(ValueError("ours"))
