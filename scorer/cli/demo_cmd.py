"""``scorer demo``: the whole product on one machine, on its embedded default.

Brings up the local broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` names one),
creates the topics, starts a worker, sends a golden set and then realistic
traffic at a steady rate, says where to look, and runs until Ctrl-C (or
``--duration``), then stops everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import click

from scorer.settings import Settings

BAD_EVENTS = (b"{truncated", b'{"resultId": 7}', b"\x00\xff not json")
OUTCOMES = ("scored", "unjudged", "deadletter", "parked")


def start_local_broker(settings: Settings) -> tuple[str, bool]:
    """``(bootstrap, started_here)``: the configured broker, else the local one."""
    from scorer.kafka.launcher import LauncherError, broker_status, start_broker

    if settings.kafka_bootstrap_servers:
        return settings.kafka_bootstrap_servers, False
    running = broker_status(settings.state_dir)
    if running is not None:
        return running.bootstrap, False
    click.echo("starting the local Kafka broker (the first start downloads its jars)...")
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


def outcome_line(url: str) -> str:
    """Scored / unjudged / dead-letter / parked counts read from the worker's /metrics."""
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
    return "  ".join(f"{name} {counts.get(name, 0):.0f}" for name in OUTCOMES)


async def report_progress(url: str, every: float = 10.0) -> None:
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(OSError):
            click.echo(await asyncio.to_thread(outcome_line, url))


async def send_traffic(
    settings: Settings, queries: int, rate: float, unjudged: float, bad_share: float,
    duration: float | None,
) -> None:  # fmt: skip
    """The golden set, then results at ``rate`` per second, with a share of bad events."""
    from scorer.demo import DemoTraffic
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


async def with_progress(url: str, work: Any) -> None:
    """Run ``work`` while printing the worker's outcome counts every few seconds."""
    reporter = asyncio.create_task(report_progress(url))
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
    from scorer.kafka.launcher import stop_broker
    from scorer.kafka.topics import ensure_topics

    settings = load_settings()
    bootstrap, started_broker = start_local_broker(settings)
    settings = settings.model_copy(update={"kafka_bootstrap_servers": bootstrap})
    worker = None
    try:
        ensure_topics(settings)
        log = settings.state_dir / "demo-worker.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
        with log.open("ab") as handle:
            worker = subprocess.Popen(
                [sys.executable, "-m", "scorer.cli", "worker"],
                env=env, stdout=handle, stderr=subprocess.STDOUT,
            )  # fmt: skip
        url = f"http://{settings.web_host}:{settings.web_port}"
        wait_ready(url, worker, log, timeout=120)
        click.echo(
            f"""
scorer demo is running (Ctrl-C stops it)
  broker        {bootstrap}
  metrics       {url}/metrics
  run rollup    {url}/api/v1/evals/runs/hybrid-v2/metrics
  compare runs  {url}/api/v1/evals/runs/bm25-v1/compare/hybrid-v2-rerank
  scored topic  {settings.scored_topic}   dead letters  {settings.deadletter_topic}
  worker log    {log}
"""
        )
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                with_progress(
                    url, send_traffic(settings, queries, rate, unjudged, bad_share, duration)
                )
            )
        if duration is not None:
            time.sleep(2)  # let the worker drain what was just sent
        with contextlib.suppress(OSError):
            click.echo(outcome_line(url))
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        if started_broker:
            stop_broker(settings.state_dir)
        click.echo("demo stopped")
