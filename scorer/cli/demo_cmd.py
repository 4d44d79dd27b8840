"""``scorer demo``: the whole product on one machine, on its embedded default.

Brings up the local broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` names one),
creates the topics, starts a worker, sends a golden set and then realistic
traffic at a steady rate, says where to look, and runs until Ctrl-C (or
``--duration``), then stops everything it started. SIGTERM and SIGHUP (a
``kill``, a closed terminal) stop it the same way as Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from scorer.settings import Settings

BAD_EVENTS = (b"{truncated", b'{"resultId": 7}', b"\x00\xff not json")
OUTCOMES = ("scored", "unjudged", "deadletter", "parked")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def interrupt(signum: int, frame: object) -> None:
    """Turn a stop signal into the ``KeyboardInterrupt`` that Ctrl-C raises."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` like Ctrl-C inside the block, so
    the ``finally`` that stops the worker and the broker runs whichever way the demo
    is stopped (Python's default for both is to die on the spot). The previous
    handlers come back on exit."""
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_until_stopped(work: Any) -> None:
    """Run the coroutine ``work`` until it ends or a stop signal arrives.

    Inside the event loop a stop signal cancels ``work`` (its clients close as on
    any cancellation) instead of raising ``KeyboardInterrupt`` wherever the loop
    happens to be: raised inside asyncio's or aiokafka's own machinery, that left
    the demo hanging, and a worker running, when a SIGTERM came right after start.
    The signals are blocked while the loop starts and stops, so none falls between
    the two ways of handling them; one that comes then is ignored (the demo is
    stopping anyway)."""

    async def until_stopped() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, task.cancel)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        try:
            await work
        except asyncio.CancelledError:
            pass  # a stop signal: the demo goes on to stop what it started
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        asyncio.run(until_stopped())
    finally:
        ignore_stop_signals()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def ignore_stop_signals() -> None:
    """Ignore further stop signals: the clean-up they would cut short is bounded."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def start_local_broker(settings: Settings) -> tuple[str, bool]:
    """``(bootstrap, started_here)``: the configured broker, else the local one."""
    from scorer.kafka.launcher import LauncherError, broker_status, start_broker

    if settings.kafka_bootstrap_servers:
        return settings.kafka_bootstrap_servers, False
    running = broker_status(settings.state_dir)
    if running is not None:
        return running.bootstrap, False
    from scorer.kafka.launcher import cache_dir

    if any(cache_dir().glob("kafka_2.13-*.jar")):
        click.echo("starting the local Kafka broker...")
    else:
        click.echo("starting the local Kafka broker (this first start downloads its jars)...")
    try:
        return start_broker(settings.state_dir).bootstrap, True
    except LauncherError as error:
        raise click.ClickException(str(error)) from None


def wait_ready(url: str, worker: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-10:]
            raise click.ClickException("the worker exited:\n" + "\n".join(tail))
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(url + "/readyz", timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.5)
    raise click.ClickException(f"the worker was not ready after {timeout:.0f}s; see {log}")


def port_taken(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (another demo's worker)."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def outcome_line(url: str, parking_ttl: float | None = None) -> str:
    """Scored / unjudged / dead-letter / parked counts read from the worker's /metrics
    (``parking_ttl``: said after the parked count, which is not an outcome yet)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "scorer_results_total":
                counts[sample.labels["outcome"]] = sample.value
            elif sample.name == "scorer_parked_results":
                counts["parked"] = sample.value
    line = "  ".join(f"{name} {counts.get(name, 0):.0f}" for name in OUTCOMES)
    if parking_ttl is not None:
        line += f" (waiting for their qrels; unjudged after {parking_ttl:.0f} s)"
    return line


async def report_progress(url: str, parking_ttl: float, every: float = 10.0) -> None:
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(OSError):
            click.echo(await asyncio.to_thread(outcome_line, url, parking_ttl))


async def send_traffic(
    settings: Settings, queries: int, rate: float, unjudged: float, bad_share: float,
    duration: float | None,
) -> None:  # fmt: skip
    """The golden set, then results at ``rate`` per second, with a share of bad events."""
    from scorer.kafka.demo import DemoTraffic
    from scorer.kafka.producer import make_producer, paced

    traffic = DemoTraffic.generate(queries=queries, unjudged_share=unjudged)
    rng = random.Random(1)
    producer = make_producer(settings)
    await producer.start()
    try:
        for golden in traffic.golden:
            await producer.send(
                settings.qrels_topic, golden.to_json_bytes(), golden.query_id.encode()
            )
        await producer.flush()
        stop_at = None if duration is None else time.monotonic() + duration
        records = ((r.query_id, r.to_json_bytes()) for r in traffic.results())
        async for key, value in paced(records, rate):
            if stop_at is not None and time.monotonic() >= stop_at:
                break
            if rng.random() < bad_share:
                value = rng.choice(BAD_EVENTS)
            await producer.send(settings.results_topic, value, key.encode())
    finally:
        await producer.stop()


async def with_progress(url: str, work: Any, parking_ttl: float) -> None:
    """Run ``work`` while printing the worker's outcome counts every few seconds."""
    reporter = asyncio.create_task(report_progress(url, parking_ttl))
    try:
        await work
    finally:
        reporter.cancel()


@click.command("demo")
@click.option("--rate", type=float, default=50.0, show_default=True, help="Results per second.")
@click.option("--queries", type=int, default=500, show_default=True, help="Golden-set size.")
@click.option("--unjudged", type=float, default=0.3, show_default=True, help="Share without qrels.")
@click.option("--bad-share", type=float, default=0.002, show_default=True, help="Share malformed.")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
def demo_command(
    rate: float, queries: int, unjudged: float, bad_share: float, duration: float | None
) -> None:
    """Run broker, topics, worker and sample traffic; print where to look."""
    from scorer.cli.worker_cmd import load_settings

    settings = load_settings()
    with stop_signals_interrupt(), contextlib.suppress(KeyboardInterrupt):
        # A stop signal is how the demo is meant to end, at any moment: run_demo
        # has stopped what it started and said so; exit 0, not click's "Aborted!".
        run_demo(settings, queries, rate, unjudged, bad_share, duration)


def where_to_look(url: str, bootstrap: str, settings: Settings, log: Path) -> str:
    """What the demo prints once the worker is ready: the evals page first."""
    return f"""
evals page      {url}/
scorer demo is running (Ctrl-C stops it)
  broker        {bootstrap}
  metrics       {url}/metrics
  run list      {url}/api/v1/evals/runs
  run rollup    {url}/api/v1/evals/runs/hybrid-v2/metrics
  compare runs  {url}/api/v1/evals/runs/bm25-v1/compare/hybrid-v2-rerank
  risk–coverage {url}/api/v1/evals/runs/bm25-v1/risk-coverage
  scored topic  {settings.scored_topic}   dead letters  {settings.deadletter_topic}
  worker log    {log}
"""


def run_demo(
    settings: Settings, queries: int, rate: float, unjudged: float, bad_share: float,
    duration: float | None,
) -> None:  # fmt: skip
    """The demo's body; whatever ends it (``KeyboardInterrupt`` included), the worker
    and a broker started here are stopped before it returns or raises."""
    from scorer.kafka.launcher import stop_broker
    from scorer.kafka.topics import ensure_topics

    started_broker = False
    worker = None
    try:
        if port_taken(settings.web_host, settings.web_port):
            raise click.ClickException(
                f"port {settings.web_port} on {settings.web_host} is taken (another scorer demo "
                "or worker runs there): stop it first, or give this one its own port and group "
                "(SCORER_WEB_PORT=6067 SCORER_APP_ID=demo-2)"
            )
        bootstrap, started_broker = start_local_broker(settings)
        settings = settings.model_copy(update={"kafka_bootstrap_servers": bootstrap})
        ensure_topics(settings)
        log = settings.state_dir / "demo-worker.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
        with log.open("wb") as handle:  # this run's lines only (a failure quotes them)
            # A session of its own: Ctrl-C or a hang-up reaches the demo only, which
            # then stops the worker once, with SIGTERM (a clean Faust shutdown).
            worker = subprocess.Popen(
                [sys.executable, "-m", "scorer.cli", "worker"],
                env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        url = f"http://{settings.web_host}:{settings.web_port}"
        wait_ready(url, worker, log, timeout=120)
        click.echo(where_to_look(url, bootstrap, settings, log))
        run_until_stopped(
            with_progress(
                url,
                send_traffic(settings, queries, rate, unjudged, bad_share, duration),
                settings.parking_ttl_seconds,
            )
        )
        if duration is not None:
            time.sleep(2)  # let the worker drain what was just sent
        with contextlib.suppress(OSError):
            click.echo(outcome_line(url, settings.parking_ttl_seconds))
    finally:
        ignore_stop_signals()
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        if started_broker:
            stop_broker(settings.state_dir)
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            click.echo("demo stopped")
