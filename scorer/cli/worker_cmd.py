"""``scorer worker``: run the streaming scorer from settings."""

from __future__ import annotations

from typing import Any

import click

from scorer.settings import ConfigError, Settings
from scorer.settings import load_settings as settings_from_env


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

    from scorer.kafka.probe import BrokerUnavailable, probe_broker

    try:
        asyncio.run(probe_broker(settings.aiokafka_options(), timeout=15.0))
    except BrokerUnavailable as error:
        raise click.ClickException(
            f"{error} (check KAFKA_BOOTSTRAP_SERVERS, SCORER_KAFKA_SECURITY_PROTOCOL and the "
            "SCORER_KAFKA_SASL_* credentials)"
        ) from None


@click.command("worker")
@click.option("--loglevel", default="warning", show_default=True, help="Faust log level.")
def worker_command(loglevel: str) -> None:
    """Run the streaming scorer (configured by SCORER_* and KAFKA_BOOTSTRAP_SERVERS)."""
    from scorer.stream.app import create_app

    settings = load_settings()
    check_broker(settings)
    scorer = create_app(settings)
    make_worker(scorer.app, loglevel).execute_from_commandline()


def make_worker(app: Any, loglevel: str) -> Any:
    """A Faust worker for ``app`` without Faust's start-up spinner.

    At log levels of warning and above Faust feeds its spinner from a DEBUG
    handler and sets the root logger to DEBUG for good, so every ``log.debug``
    of Faust and aiokafka would build a record (8% of a worker's CPU, measured
    with py-spy in bench/stream.py).
    """
    import faust

    worker = faust.Worker(app, loglevel=loglevel)
    worker.spinner = None
    return worker
