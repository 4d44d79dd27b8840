"""``scorer kafka up|down|status|env``: the local single-node broker (no Docker needed)."""

from __future__ import annotations

import shlex
import time

import click

from scorer.kafka.launcher import (
    BrokerInfo,
    LauncherError,
    broker_dir,
    broker_status,
    start_broker,
    stop_broker,
)
from scorer.settings import Settings


@click.group("kafka")
def kafka_group() -> None:
    """Run a local Apache Kafka broker (KRaft, from Maven Central jars) in the state dir."""


@kafka_group.command("up")
@click.option("--sasl", is_flag=True, help="Also serve SASL_PLAINTEXT with a SCRAM-SHA-256 user.")
@click.option("--port", type=click.IntRange(1, 65535), help="PLAINTEXT port (default: a free one).")
@click.option("--timeout", type=float, default=90.0, show_default=True, help="Seconds to wait.")
def up_command(sasl: bool, port: int | None, timeout: float) -> None:
    """Start the broker in the background and wait until it serves clients."""
    state_dir = Settings().state_dir
    already = broker_status(state_dir)
    started = time.monotonic()
    try:
        info = start_broker(state_dir, sasl=sasl, port=port, timeout=timeout)
    except LauncherError as error:
        raise click.ClickException(str(error)) from None
    if already is None:
        click.echo(f"Kafka {info.version} up in {time.monotonic() - started:.1f}s (pid {info.pid})")
    else:
        click.echo(f"Kafka {info.version} already running (pid {info.pid})")
    _describe(info)


@kafka_group.command("down")
def down_command() -> None:
    """Stop the broker (SIGTERM, then SIGKILL) and delete its log dir."""
    state_dir = Settings().state_dir
    try:
        info = stop_broker(state_dir)
    except OSError as error:
        raise click.ClickException(f"could not stop the broker of {state_dir}: {error}") from None
    if info is None:
        click.echo(f"no Kafka broker was running for {state_dir}")
    else:
        click.echo(f"Kafka stopped (pid {info.pid}); removed {broker_dir(state_dir) / 'data'}")


@kafka_group.command("status")
def status_command() -> None:
    """Say whether the broker runs and where; exit code 1 when it does not."""
    state_dir = Settings().state_dir
    info = broker_status(state_dir)
    if info is None:
        click.echo(f"Kafka is not running for {state_dir} (start it with `scorer kafka up`)")
        raise SystemExit(1)
    click.echo(f"Kafka {info.version} running (pid {info.pid})")
    _describe(info)


@kafka_group.command("env")
def env_command() -> None:
    """Print shell exports of the running broker's addresses, for `eval "$(scorer kafka env)"`.

    Sets KAFKA_BOOTSTRAP_SERVERS, and with a --sasl broker also
    KAFKA_SASL_BOOTSTRAP_SERVERS, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD.
    """
    state_dir = Settings().state_dir
    info = broker_status(state_dir)
    if info is None or not info.bootstrap:
        raise click.ClickException(f"no Kafka broker runs for {state_dir}: run `scorer kafka up`")
    exports = {"KAFKA_BOOTSTRAP_SERVERS": info.bootstrap}
    if info.sasl is not None:
        exports.update(
            KAFKA_SASL_BOOTSTRAP_SERVERS=info.sasl.bootstrap,
            KAFKA_SASL_USERNAME=info.sasl.username,
            KAFKA_SASL_PASSWORD=info.sasl.password,
        )
    for name, value in exports.items():
        click.echo(f"export {name}={shlex.quote(value)}")


def _describe(info: BrokerInfo) -> None:
    click.echo(f"bootstrap: {info.bootstrap}")
    if info.sasl is not None:
        click.echo(
            f"sasl:      {info.sasl.bootstrap} ({info.sasl.mechanism}, user {info.sasl.username}; "
            f"password in {broker_dir(Settings().state_dir) / 'broker.json'})"
        )
    click.echo(f"log:       {info.log_file}")
