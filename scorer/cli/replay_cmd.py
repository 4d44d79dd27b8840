"""``scorer replay``: send a JSONL golden set and/or JSONL results into the topics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from scorer.stream.core import RejectedEvent, decode_golden, decode_result


class BadLine(click.ClickException):
    """A line that is not a valid event: ``file:line: what is wrong``, exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


def keyed_lines(path: Path, decode: Callable[[bytes], Any]) -> Iterator[tuple[str, bytes]]:
    """``(queryId, line)`` of each non-blank line, validated as the worker would."""
    try:
        handle = path.open("rb")
    except OSError as error:
        raise BadLine(f"{path}: cannot read: {error.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                event = decode(line)
            except RejectedEvent as error:
                raise BadLine(f"{path}:{number}: {error.message}") from None
            yield event.query_id, line


@click.command("replay")
@click.option("--golden", type=click.Path(path_type=Path), help="JSONL golden set (qrels topic).")
@click.option("--results", type=click.Path(path_type=Path), help="JSONL results (results topic).")
@click.option("--rate", type=float, default=None, help="Results per second (default: no limit).")
def replay_command(golden: Path | None, results: Path | None, rate: float | None) -> None:
    """Send the offline file formats into Kafka, keyed by queryId.

    The golden set goes first, so the results find their qrels; lines are
    validated before anything is sent, and sent unchanged.
    """
    from scorer.cli.worker_cmd import load_settings
    from scorer.kafka.producer import make_producer, send_all

    if golden is None and results is None:
        raise click.UsageError("give --golden FILE, --results FILE, or both")
    settings = load_settings()
    batches = []
    if golden is not None:
        batches.append((settings.qrels_topic, list(keyed_lines(golden, decode_golden)), None))
    if results is not None:
        batches.append((settings.results_topic, list(keyed_lines(results, decode_result)), rate))

    async def send() -> list[int]:
        producer = make_producer(settings)
        await producer.start()
        try:
            return [
                await send_all(producer, topic, records, pace) for topic, records, pace in batches
            ]
        finally:
            await producer.stop()

    for (topic, _, _), count in zip(batches, asyncio.run(send()), strict=True):
        click.echo(f"sent {count} events to {topic}")
