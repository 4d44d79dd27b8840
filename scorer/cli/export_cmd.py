"""``scorer export``: the retrieval results on Kafka as a JSONL file ``scorer eval`` reads.

What-if scoring of real traffic: read what production sent to the results topic
(some runs, a time range), then score it offline against another golden set::

    scorer export --run bm25-v1 --since 7d -o last-week.jsonl
    scorer eval new-qrels.txt last-week.jsonl

The export is a snapshot: it reads from the first record at or after ``--since``
(the record's Kafka timestamp) up to the end each partition had when the export
began, or to ``--until``, and stops; it never follows. Records are read
``read_committed`` and validated as the worker validates them; a record the
worker would dead-letter is skipped and counted, so that ``scorer eval`` never
meets it. Each line is the event as compact JSON (``resultId``, ``k``, facets
and confidence kept), so ``scorer eval`` scores every result as the live worker
did, a query asked twice counting twice.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import click

RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
PROGRESS_SECONDS = 2.0


def parse_moment(value: str, now: datetime) -> datetime:
    """``7d``, ``24h``, ``90m``, ``30s``, ``2w`` (that long before ``now``), or an ISO 8601
    date or time (``2026-11-25``, ``2026-11-25T10:00``, ``...Z`` or ``+01:00``; UTC
    when no zone is given)."""
    relative = RELATIVE.match(value.strip())
    if relative:
        amount, unit = relative.groups()
        return now - timedelta(seconds=float(amount) * UNIT_SECONDS[unit])
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{value!r} is neither a duration (7d, 24h, 90m) nor an ISO 8601 time "
            "(2026-11-25, 2026-11-25T10:00Z)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class Moment(click.ParamType):
    name = "time"

    def convert(self, value: Any, param: Any, ctx: Any) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_moment(str(value), datetime.now(UTC))
        except ValueError as error:
            self.fail(str(error), param, ctx)


class Tally:
    """What an export read, wrote and skipped."""

    def __init__(self) -> None:
        self.records_read = 0
        self.written = 0
        self.other_runs = 0
        self.invalid = 0
        self.after_until = 0


def select(value: bytes | None, runs: frozenset[str], tally: Tally) -> bytes | None:
    """The event's line for the export, or None (not a valid result, or another run)."""
    from pydantic import ValidationError

    from schemas import RetrievalResult

    if value is None:
        tally.invalid += 1
        return None
    try:
        result = RetrievalResult.model_validate_json(value)
    except (ValidationError, ValueError):
        tally.invalid += 1
        return None
    if runs and result.run_id not in runs:
        tally.other_runs += 1
        return None
    return result.to_json_bytes()


async def export_results(
    settings: Any,
    out: IO[bytes],
    runs: frozenset[str],
    since: datetime | None,
    until: datetime | None,
    progress: Callable[[int, int], None] | None = None,
) -> Tally:
    """Write the results topic's valid results of ``runs`` (all when empty), with record
    timestamps in [``since``, ``until``), to ``out``, one JSON line each. Reads each
    partition up to the end it had at the start."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from scorer.kafka.topics import partition_counts

    topic = settings.results_topic
    consumer = AIOKafkaConsumer(
        **settings.aiokafka_options(),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    tally = Tally()
    try:
        partitions = (await partition_counts(settings.aiokafka_options(), [topic])).get(topic)
        if not partitions:
            raise click.ClickException(f"topic {topic} does not exist (SCORER_RESULTS_TOPIC)")
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        if since is not None:
            found = await consumer.offsets_for_times(
                {tp: int(since.timestamp() * 1000) for tp in tps}
            )
            starts = {tp: ends[tp] if found[tp] is None else found[tp].offset for tp in tps}
        for tp in tps:
            consumer.seek(tp, starts[tp])
        total = sum(max(0, ends[tp] - starts[tp]) for tp in tps)
        pending = {tp for tp in tps if starts[tp] < ends[tp]}
        until_ms = None if until is None else int(until.timestamp() * 1000)
        done_offsets = 0
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=1000)
            for tp, records in batches.items():
                for record in records:
                    if record.offset >= ends[tp]:
                        break
                    tally.records_read += 1
                    if until_ms is not None and record.timestamp >= until_ms:
                        tally.after_until += 1
                        continue
                    line = select(record.value, runs, tally)
                    if line is not None:
                        out.write(line + b"\n")
                        tally.written += 1
            done_offsets = 0
            for tp in tps:
                position = await consumer.position(tp) if tp in pending else ends[tp]
                done_offsets += max(0, min(position, ends[tp]) - starts[tp])
                if tp in pending and position >= ends[tp]:
                    pending.discard(tp)
            if progress is not None:
                progress(done_offsets, total)
    finally:
        await consumer.stop()
    return tally


@click.command("export")
@click.option("--run", "runs", multiple=True, help="Only this run's results (repeatable).")
@click.option("--since", type=Moment(), help="From this time on: 7d, 24h, or 2026-11-25T10:00Z.")
@click.option("--until", type=Moment(), help="Before this time (default: the end at the start).")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, allow_dash=True), default="-",
    show_default=True, help="The JSONL file to write (- is standard output).",
)  # fmt: skip
def export_command(
    runs: tuple[str, ...], since: datetime | None, until: datetime | None, output: str
) -> None:
    """Write the results on the results topic as JSONL that `scorer eval` scores.

    Reads a snapshot of the topic (to its end at the start, never following),
    read_committed; records are selected by their Kafka timestamp. Progress and a
    summary go to standard error.
    """
    from scorer.cli.worker_cmd import check_broker, load_settings

    if since is not None and until is not None and until <= since:
        raise click.BadParameter("--until must be after --since", param_hint="--until")
    settings = load_settings()
    check_broker(settings)
    started = time.monotonic()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_SECONDS and total:
            last[0] = now
            click.echo(f"export: {done:,} of {total:,} records read ({done / total:.0%})", err=True)

    def run(out: IO[bytes]) -> Tally:
        return asyncio.run(export_results(settings, out, frozenset(runs), since, until, progress))

    if output == "-":
        tally = run(sys.stdout.buffer)
        sys.stdout.buffer.flush()
        where = "standard output"
    else:
        path = Path(output)
        try:
            with path.open("wb") as out:
                tally = run(out)
        except OSError as error:
            raise click.ClickException(f"cannot write {output}: {error.strerror}") from None
        where = output
    parts = [f"export: {tally.written:,} results to {where}"]
    parts.append(f"from {tally.records_read:,} records of {settings.results_topic}")
    skipped = []
    if tally.other_runs:
        skipped.append(f"{tally.other_runs:,} of other runs")
    if tally.invalid:
        skipped.append(f"{tally.invalid:,} not valid results (the worker dead-letters them)")
    if tally.after_until:
        skipped.append(f"{tally.after_until:,} after --until")
    if skipped:
        parts.append("skipped " + ", ".join(skipped))
    click.echo("; ".join(parts) + f" ({time.monotonic() - started:.1f} s)", err=True)
