"""``scorer tail``: follow the scored topic (and the dead-letter topic) in the terminal.

One readable line per event, or with ``--json`` one JSON object per line for
pipes. It reads as the scorer's consumers should: ``read_committed`` (with
``SCORER_PROCESSING_GUARANTEE=exactly_once`` a result is shown once its
transaction commits), joining no consumer group, so it never moves the
worker's offsets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click
import orjson

from scorer.stream.events import DEADLETTER_HEADER_PREFIX

PREVIEW_BYTES = 80
"""How much of a dead letter's original bytes a line shows."""


@dataclass(frozen=True)
class EventFilter:
    """Which scored events to show: any of ``runs`` (all when empty), and every facet of
    ``facets`` with that value. Dead letters carry no trustworthy run or facets and
    are always shown."""

    runs: frozenset[str] = frozenset()
    facets: tuple[tuple[str, str], ...] = ()

    def admits(self, scored: dict[str, Any]) -> bool:
        if self.runs and scored.get("runId") not in self.runs:
            return False
        facets = scored.get("facets") or {}
        return all(facets.get(key) == value for key, value in self.facets)


def parse_facet(value: str) -> tuple[str, str]:
    """``key=value`` as a pair; a ``click.BadParameter`` otherwise."""
    key, sep, facet_value = value.partition("=")
    if not sep or not key or not facet_value:
        raise click.BadParameter(f"{value!r} is not key=value (e.g. --facet type=factoid)")
    return key, facet_value


def scored_line(scored: dict[str, Any]) -> str:
    """One line for a scored event: time scored, run, query, the five metrics, facets."""
    k = scored["k"]
    metrics = scored["retrievalMetrics"]
    when = datetime.fromisoformat(scored["scoredAt"]).astimezone(UTC).strftime("%H:%M:%S")
    facets = "".join(f" {key}={value}" for key, value in sorted(scored.get("facets", {}).items()))
    return (
        f"{when} scored     run={scored['runId']} query={scored['queryId']} "
        f"ndcg@10={metrics['ndcgAt10']:.3f} recall@{k}={metrics['recallAtK']:.3f} "
        f"precision@{k}={metrics['precisionAtK']:.3f} mrr={metrics['mrr']:.3f} "
        f"hit@{k}={metrics['hitAtK']}{facets}"
    )


def deadletter_fields(headers: list[tuple[str, bytes]]) -> dict[str, str]:
    """The scorer's dead-letter headers (``x-scorer-error-class`` ...) by camelCase name."""
    fields = {}
    for name, value in headers:
        if name.startswith(DEADLETTER_HEADER_PREFIX):
            head, *rest = name.removeprefix(DEADLETTER_HEADER_PREFIX).split("-")
            fields[head + "".join(part.title() for part in rest)] = value.decode(errors="replace")
    return fields


def deadletter_line(timestamp_ms: int, headers: list[tuple[str, bytes]], value: bytes) -> str:
    """One line for a dead letter: when, where it came from, why, and its first bytes."""
    fields = deadletter_fields(headers)
    when = datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%H:%M:%S")
    source = (
        f"{fields.get('sourceTopic', '?')}[{fields.get('sourcePartition', '?')}]"
        f"@{fields.get('sourceOffset', '?')}"
    )
    preview = value[:PREVIEW_BYTES] + (b"..." if len(value) > PREVIEW_BYTES else b"")
    return (
        f"{when} deadletter from={source} error={fields.get('errorClass', '?')}: "
        f"{fields.get('errorMessage', '')} value={preview!r}"
    )


def deadletter_json(headers: list[tuple[str, bytes]], value: bytes | None) -> bytes:
    """A dead letter as one JSON object: its scorer headers and its bytes, as text when
    they are UTF-8 (``value``), else losslessly in base64 (``valueBase64``, and
    ``value`` null): a pipe gets back exactly the bytes that were rejected."""
    document: dict[str, Any] = {"deadLetter": deadletter_fields(headers)}
    try:
        document["value"] = None if value is None else value.decode()
    except UnicodeDecodeError:
        document["value"] = None
        document["valueBase64"] = base64.b64encode(value).decode()
    return orjson.dumps(document)


@click.command("tail")
@click.option("--deadletter", is_flag=True, help="Follow the dead-letter topic too.")
@click.option("--run", "runs", multiple=True, help="Only this run's events (repeatable).")
@click.option(
    "--facet", "facets", multiple=True, help="Only events with this facet, key=value (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (for pipes).")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest event, not the next one.")
@click.option("--max-count", "-n", type=click.IntRange(min=1), help="Stop after this many events.")
@click.option(
    "--read-uncommitted", is_flag=True, help="Show events of open or aborted transactions too."
)
def tail_command(
    deadletter: bool,
    runs: tuple[str, ...],
    facets: tuple[str, ...],
    as_json: bool,
    from_beginning: bool,
    max_count: int | None,
    read_uncommitted: bool,
) -> None:
    """Follow the scored events (and dead letters) as they arrive, until Ctrl-C.

    Filters apply to scored events; dead letters are shown unfiltered.
    """
    from scorer.cli.worker_cmd import check_broker, load_settings

    event_filter = EventFilter(frozenset(runs), tuple(parse_facet(facet) for facet in facets))
    settings = load_settings()
    check_broker(settings)
    topics = [settings.scored_topic] + ([settings.deadletter_topic] if deadletter else [])

    async def follow() -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            *topics,
            **settings.aiokafka_options(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
            isolation_level="read_uncommitted" if read_uncommitted else "read_committed",
        )
        await consumer.start()
        shown = 0
        try:
            async for record in consumer:
                line = event_output(record, settings.deadletter_topic, event_filter, as_json)
                if line is None:
                    continue
                click.echo(line)
                shown += 1
                if max_count is not None and shown >= max_count:
                    return
        finally:
            await consumer.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(follow())


def event_output(
    record: Any, deadletter_topic: str, event_filter: EventFilter, as_json: bool
) -> str | None:
    """What to print for ``record`` (an aiokafka ``ConsumerRecord``), or None to skip it."""
    value: bytes = record.value or b""
    if record.topic == deadletter_topic:
        headers = list(record.headers or [])
        if as_json:
            return deadletter_json(headers, value).decode()
        return deadletter_line(record.timestamp, headers, value)
    try:
        scored = orjson.loads(value)
        if not event_filter.admits(scored):
            return None
        return value.decode() if as_json else scored_line(scored)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        return f"unreadable event at {record.topic}[{record.partition}]@{record.offset}: {error!r}"
