"""``scorer replay``: send a golden set and/or results into the topics.

It takes the files ``scorer eval`` takes, detected the same way
(:func:`scorer.io.detect_kind`): a JSONL golden set or TREC qrels for the
qrels topic, JSONL results or a TREC run for the results topic. JSONL lines
are validated and sent unchanged; TREC files become the wire events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from schemas import GoldenQuery, RetrievalResult, describe_validation_error
from schemas.events import MAX_RANKED
from scorer.io import FileKind, InputError, detect_kind, iter_retrievals, read_golden
from scorer.stream.events import RejectedEvent, decode_golden, decode_result


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


def golden_records(path: Path) -> list[tuple[str, bytes]]:
    """``(queryId, GoldenQuery JSON)`` of a JSONL golden set or a TREC qrels file.

    Raises :class:`BadLine` (``file[:line]: what is wrong``) for an unreadable,
    malformed or wrong-kind file, or judgments outside the wire's bounds (grades
    0..3): the worker would dead-letter them.
    """
    try:
        if detect_kind(path) is FileKind.GOLDEN_JSONL:
            return list(keyed_lines(path, decode_golden))
        golden = read_golden(path)
    except InputError as error:
        raise BadLine(str(error)) from None
    records = []
    for query_id, judged in golden.items():
        try:
            event = GoldenQuery(query_id=query_id, qrels=judged.qrels, facets=judged.facets or None)
        except ValidationError as error:
            raise BadLine(f"{path}: query {query_id}: {describe_validation_error(error)}") from None
        records.append((query_id, event.to_json_bytes()))
    return records


def result_records(path: Path) -> list[tuple[str, bytes]]:
    """``(queryId, RetrievalResult JSON)`` of a JSONL results file or a TREC run.

    A TREC run gives one result per (tag, qid): run id the tag, result id
    ``tag/qid`` (replaying the file again is deduplicated by the worker), ranked
    as ``scorer eval`` ranks it, cut to the wire's 1000 ids (the largest k).
    Raises :class:`BadLine` as :func:`golden_records` does.
    """
    try:
        if detect_kind(path) is FileKind.RESULTS_JSONL:
            return list(keyed_lines(path, decode_result))
        retrievals = list(iter_retrievals(path, merge_blocks=True))
    except InputError as error:
        raise BadLine(str(error)) from None
    records = []
    for retrieval in retrievals:
        try:
            event = RetrievalResult(
                result_id=f"{retrieval.run_id}/{retrieval.query_id}",
                run_id=retrieval.run_id,
                query_id=retrieval.query_id,
                ranked=retrieval.ranked[:MAX_RANKED],
            )
        except ValidationError as error:
            raise BadLine(
                f"{path}: run {retrieval.run_id} query {retrieval.query_id}: "
                f"{describe_validation_error(error)}"
            ) from None
        records.append((retrieval.query_id, event.to_json_bytes()))
    return records


@click.command("replay")
@click.option("--golden", type=click.Path(path_type=Path), help="Golden set: JSONL or TREC qrels.")
@click.option("--results", type=click.Path(path_type=Path), help="Results: JSONL or a TREC run.")
@click.option("--rate", type=float, default=None, help="Results per second (default: no limit).")
@click.option(
    "--run-prefix",
    default="",
    help="Put this in front of every run id (keeps a replay apart from live runs of the "
    "same name, e.g. the demo's).",
)
def replay_command(
    golden: Path | None, results: Path | None, rate: float | None, run_prefix: str
) -> None:
    """Send the files `scorer eval` reads into Kafka, keyed by queryId.

    Formats are detected from the content, as `scorer eval` does. The golden
    set goes first, so the results find their qrels; everything is validated
    before anything is sent, and JSONL lines are sent unchanged (but for
    ``--run-prefix``). Says which runs the results go to: results already scored
    under the same run ids are counted with them.
    """
    from scorer.cli.worker_cmd import load_settings
    from scorer.kafka.producer import make_producer, send_all

    if golden is None and results is None:
        raise click.UsageError("give --golden FILE, --results FILE, or both")
    settings = load_settings()
    batches = []
    if golden is not None:
        batches.append((settings.qrels_topic, golden_records(golden), None))
    runs: dict[str, int] = {}
    if results is not None:
        records = result_records(results)
        if run_prefix:
            records = with_run_prefix(records, run_prefix)
        for _, value in records:
            run_id = decode_result(value).run_id
            runs[run_id] = runs.get(run_id, 0) + 1
        batches.append((settings.results_topic, records, rate))

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
    if runs:
        listed = ", ".join(f"{run} ({count})" for run, count in sorted(runs.items()))
        click.echo(
            f"runs: {listed}; results already scored under these run ids count with them"
            + ("" if run_prefix else " (--run-prefix NAME- keeps a replay apart)")
        )


def with_run_prefix(records: list[tuple[str, bytes]], prefix: str) -> list[tuple[str, bytes]]:
    """``records`` (results) with ``prefix`` in front of each run id; raises
    :class:`BadLine` when a prefixed run id is over the wire's bound."""
    prefixed = []
    for key, value in records:
        result = decode_result(value)
        try:
            renamed = RetrievalResult.model_validate(
                {**result.model_dump(by_alias=True), "runId": prefix + result.run_id}
            )
        except ValidationError as error:
            raise BadLine(f"--run-prefix {prefix!r}: {describe_validation_error(error)}") from None
        prefixed.append((key, renamed.to_json_bytes()))
    return prefixed
