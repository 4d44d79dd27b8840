"""``scorer worker``: run the streaming scorer from settings."""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import click

from scorer.settings import ConfigError, Settings
from scorer.settings import load_settings as settings_from_env

logger = logging.getLogger(__name__)


def load_settings() -> Settings:
    """Settings from the environment, or a one-line CLI error naming the bad variable."""
    try:
        return settings_from_env()
    except ConfigError as error:
        raise click.ClickException(str(error)) from None


def check_broker(settings: Settings) -> None:
    """Fail now, in one line, when the broker cannot be reached or refuses the login:
    Faust would only log the cause and retry forever."""
    import asyncio

    from scorer.kafka.probe import BrokerUnavailable, probe_broker, wait_for_group_coordinator

    try:
        asyncio.run(probe_broker(settings.aiokafka_options(), timeout=15.0))
    except BrokerUnavailable as error:
        raise click.ClickException(
            f"{error} (check KAFKA_BOOTSTRAP_SERVERS, SCORER_KAFKA_SECURITY_PROTOCOL and the "
            "SCORER_KAFKA_SASL_* credentials)"
        ) from None
    asyncio.run(wait_for_group_coordinator(settings.aiokafka_options(), settings.app_id))


def check_web_port(settings: Settings) -> None:
    """Fail now, in one line, when the web port cannot be bound: Faust would find out
    only after recovering its tables, and say so in a long traceback. Binds as
    aiohttp does (``SO_REUSEADDR``), so a port in TIME_WAIT passes."""
    try:
        infos = socket.getaddrinfo(
            settings.web_host, settings.web_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as error:
        raise click.ClickException(
            f"cannot resolve SCORER_WEB_HOST={settings.web_host}: {error.strerror}"
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            why = "is in use" if error.errno == errno.EADDRINUSE else f"cannot be bound: {error}"
            raise click.ClickException(
                f"web port {settings.web_host}:{settings.web_port} {why} (stop what holds it, "
                "or set SCORER_WEB_PORT)"
            ) from None


def make_data_dir(settings: Settings) -> None:
    """Create the worker's data directory with its parents (Faust creates only the last
    level, and a fresh checkout has no ``.scorer``), or fail in one line."""
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise click.ClickException(
            f"cannot create the data directory {settings.data_dir}: "
            f"{error.strerror or error} (set SCORER_DATADIR or SCORER_STATE_DIR)"
        ) from None


@click.command("worker")
@click.option("--loglevel", default="warning", show_default=True, help="Faust log level.")
def worker_command(loglevel: str) -> None:
    """Run the streaming scorer (configured by SCORER_* and KAFKA_BOOTSTRAP_SERVERS)."""
    from scorer.stream.faust_edge.versions import VersionMismatch, check_versions

    try:
        check_versions()
    except VersionMismatch as error:
        raise click.ClickException(str(error)) from None
    settings = load_settings()
    check_web_port(settings)
    make_data_dir(settings)
    check_broker(settings)
    run_rebuilding(settings, loglevel)


def run_rebuilding(settings: Settings, loglevel: str) -> None:
    """Run the scorer's Faust app in a worker until it stops; when it stopped on a
    recoverable producer error (``scorer.stream.faust_edge.recovery``: a fenced
    transaction, a delivery timeout), build a new app on a new event loop in this
    process and run that one. Exits as the last worker did (SystemExit)."""
    from scorer.kafka.topics import create_missing_topics
    from scorer.stream.app import create_app, internal_topics
    from scorer.stream.faust_edge import Recovery

    recovery = Recovery()
    scorer = create_app(settings, recovery)
    created = create_missing_topics(settings, internal_topics(scorer))
    if created:
        print(f"scorer worker: created its internal topics {', '.join(created)}", flush=True)
    asyncio.set_event_loop(asyncio.new_event_loop())
    while True:
        worker = make_worker(scorer.app, loglevel, settings, scorer.readiness, recovery)
        started = time.monotonic()
        failure: BaseException | None = None
        try:
            worker.execute_from_commandline()
        except SystemExit:
            failure = worker.crash_reason or worker.start_error
            if worker.signalled or not recovery.should_rebuild(failure):
                raise
            if worker.start_error is not None:
                # A rebuilt app that could not start (the broker just woke up and its
                # metadata was empty: NodeNotReadyError, in a churn run) tries again
                # after a pause, within the recovery budget; before, the worker exited 1.
                time.sleep(START_RETRY_SECONDS)
        scorer.parts.edge.stop.stopped()  # its deadline must not end the next app
        why = recovery.requested or f"crash: {failure!r}"
        logger.info(
            "Rebuilding the app in-process (recovery %d, after %.0f s): %s",
            sum(recovery.counts.values()),
            time.monotonic() - started,
            why,
        )
        recovery.reset()
        released = release_listeners(settings.web_port)
        if released:
            logger.info("Closed %d listening socket(s) the stopped app left open", released)
        asyncio.set_event_loop(asyncio.new_event_loop())
        scorer = create_app(settings, recovery)


START_RETRY_SECONDS = 1.0
"""The pause before another app is built after one failed to start on a recoverable
error."""


def release_listeners(port: int) -> int:
    """Close the listening TCP sockets of this process on ``port`` and return how many.

    A stopped app leaves its web server's socket open when its stop did not get to
    the web server (a crash during the stop: mode then closes the event loop with the
    server still bound), and the next app's web server could not bind its port."""
    import gc

    closed = 0
    for thing in gc.get_objects():
        try:
            # type() first: isinstance on a dead weakref proxy raises ReferenceError.
            if not issubclass(type(thing), socket.socket) or thing.fileno() < 0:
                continue
            if thing.type != socket.SOCK_STREAM or thing.getsockname()[1] != port:
                continue
            if not thing.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                continue
        except (OSError, IndexError, TypeError, ReferenceError):
            continue
        thing.close()
        closed += 1
    return closed


def ready_lines(settings: Settings) -> list[str]:
    """What the worker prints once it is up: that it is ready, and where it listens."""
    url = f"http://{settings.web_host}:{settings.web_port}"
    return [
        f"scorer worker ready: group {settings.app_id} reads {settings.results_topic} and "
        f"{settings.qrels_topic}, writes {settings.scored_topic}",
        f"listening on {url}: /metrics, run API /api/v1/evals/runs/{{runId}}/metrics, /readyz",
    ]


NOT_READY_AFTER_SECONDS = 5.0
"""How long a started worker may stay unready before it says why."""


async def announce_when_ready(
    readiness: Callable[[], tuple[bool, str]], lines: list[str], out: Any, poll: float = 0.25
) -> None:
    """Print ``lines`` once ``readiness()`` says ready (what ``/readyz`` answers); if it
    is not after :data:`NOT_READY_AFTER_SECONDS`, say once why, in one line, and go
    on waiting (a worker started before its input topics exist)."""
    waited = 0.0
    said_why = False
    while True:
        ready, why = readiness()
        if ready:
            for line in lines:
                print(line, file=out, flush=True)
            return
        if not said_why and waited >= NOT_READY_AFTER_SECONDS:
            print(f"scorer worker started, not ready yet: {why}", file=out, flush=True)
            said_why = True
        await asyncio.sleep(poll)
        waited += poll


def make_worker(
    app: Any,
    loglevel: str,
    settings: Settings | None = None,
    readiness: Callable[[], tuple[bool, str]] | None = None,
    recovery: Any = None,
) -> Any:
    """A Faust worker for ``app`` without Faust's start-up spinner, that prints
    ``ready_lines(settings)`` (when given) once ``readiness`` says it is ready (at
    start without it), and stops on Ctrl-C without mode's ``-INT- -INT-`` banner.

    At log levels of warning and above Faust feeds its spinner from a DEBUG
    handler and sets the root logger to DEBUG for good, so every ``log.debug``
    of Faust and aiokafka would build a record (8% of a worker's CPU, measured
    with py-spy in bench/stream.py).

    ``recovery`` (a ``faust_edge.Recovery``) stops it cleanly when the app asks to be
    rebuilt; ``worker.signalled`` says whether a signal stopped it instead.
    """
    import faust

    class Worker(faust.Worker):
        signalled = False
        start_error: BaseException | None = None
        """The exception its start ended with (mode logs it and exits 1; it sets no
        crash reason)."""

        async def start(self) -> None:
            try:
                await super().start()
            except Exception as error:
                self.start_error = error
                raise

        def _schedule_shutdown(self, signal: signal.Signals) -> None:
            self.signalled = True
            super()._schedule_shutdown(signal)

        def stop_to_rebuild(self) -> None:
            """Stop as a signal would, without saying a signal came."""

            async def stop() -> None:
                await self.stop()
                if self._starting_fut is not None and not self._starting_fut.done():
                    self._starting_fut.cancel()

            self._stopping_to_rebuild = asyncio.ensure_future(stop())

        def _on_startup_end_spinner(self) -> None:
            super()._on_startup_end_spinner()
            if settings is None:
                return
            if readiness is None:
                for line in ready_lines(settings):
                    print(line, file=self.stdout, flush=True)
                return
            self._announcing = asyncio.ensure_future(
                announce_when_ready(readiness, ready_lines(settings), self.stdout)
            )

        def _on_sigint(self) -> None:
            self._schedule_shutdown(signal.SIGINT)

    worker = Worker(app, loglevel=loglevel)
    worker.spinner = None
    if recovery is not None:
        recovery.stop_with(worker.stop_to_rebuild)
    return worker
