"""``scorer worker``: run the streaming scorer from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from pydantic import ValidationError

if TYPE_CHECKING:
    from scorer.settings import Settings


def load_settings() -> Settings:
    """Settings from the environment, or a one-line error naming the bad variable."""
    from scorer.settings import Settings

    try:
        return Settings()
    except ValidationError as error:
        first = error.errors()[0]
        name = "SCORER_" + "_".join(str(p) for p in first["loc"]).upper()
        raise click.ClickException(f"bad configuration {name}: {first['msg']}") from None


@click.command("worker")
@click.option("--loglevel", default="warning", show_default=True, help="Faust log level.")
def worker_command(loglevel: str) -> None:
    """Run the streaming scorer (configured by SCORER_* and KAFKA_BOOTSTRAP_SERVERS)."""
    import faust

    from scorer.stream.app import create_app

    scorer = create_app(load_settings())
    worker = faust.Worker(scorer.app, loglevel=loglevel)
    worker.execute_from_commandline()
