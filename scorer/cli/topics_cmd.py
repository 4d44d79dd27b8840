"""``scorer topics create|list|describe``: the scorer's Kafka topics (brokers never
auto-create them), and what is in them: partitions, compaction, end offsets and
the lag of the worker's consumer group."""

from __future__ import annotations

import click
from aiokafka.errors import KafkaError

from scorer.kafka.probe import BrokerUnavailable
from scorer.kafka.topics import (
    TopicMismatchError,
    TopicReport,
    TopicState,
    describe_topics,
    ensure_topics,
)
from scorer.settings import Settings


@click.group("topics")
def topics_group() -> None:
    """Create and inspect the results, qrels, scored, dead-letter and rollup topics."""


@topics_group.command("create")
def create_command() -> None:
    """Create the missing topics (idempotent); existing ones are checked, never changed."""
    settings = Settings()
    for state in _ensure(settings):
        click.echo(_line(settings, state, "created" if state.created else "exists"))


def _ensure(settings: Settings) -> list[TopicState]:
    try:
        return ensure_topics(settings)
    except BrokerUnavailable as error:
        raise click.ClickException(
            f"{error} (is it running? `scorer kafka status`; else set KAFKA_BOOTSTRAP_SERVERS)"
        ) from None
    except TopicMismatchError as error:
        raise click.ClickException(str(error)) from None
    except KafkaError as error:
        raise click.ClickException(
            f"Kafka at {settings.bootstrap_servers} refused to set up the topics: {error}"
        ) from None


def _line(settings: Settings, state: TopicState, verdict: str) -> str:
    note = ""
    if state.partitions != settings.partitions:
        note = f"  (differs from SCORER_PARTITIONS={settings.partitions})"
    config = ",".join(f"{key}={value}" for key, value in state.config.items())
    return f"{verdict:8} {state.name:32} partitions={state.partitions} {config}{note}"


GROUP_HELP = "Consumer group whose lag to show (default: the worker's, SCORER_APP_ID)."


@topics_group.command("list")
@click.option("--group", default=None, help=GROUP_HELP)
def list_command(group: str | None) -> None:
    """One line per topic: the scorer's topics, then the worker's internal ones.

    Lag is the worker group's (records written but not yet consumed); ``-``
    where the group never committed (the topics it only writes to).
    """
    from scorer.cli.worker_cmd import load_settings

    settings = load_settings()
    reports = _describe(settings, None, group)
    width = max(len(report.name) for report in reports)
    click.echo(f"{'TOPIC':{width}}  PARTITIONS  CLEANUP  {'END OFFSETS':>11}  {'LAG':>8}")
    for report in reports:
        if not report.exists:
            click.echo(f"{report.name:{width}}  missing: create it with `scorer topics create`")
            continue
        click.echo(
            f"{report.name:{width}}  {len(report.partitions):>10}  {report.cleanup_policy:7}  "
            f"{report.end:>11}  {_lag(report.lag):>8}"
        )


@topics_group.command("describe")
@click.argument("topics", nargs=-1)
@click.option("--group", default=None, help=GROUP_HELP)
def describe_command(topics: tuple[str, ...], group: str | None) -> None:
    """Partitions, cleanup policy, end offset, committed offset and lag per partition.

    TOPICS default to the scorer's topics and the worker's internal ones. Exit
    code 1 when a topic named does not exist.
    """
    from scorer.cli.worker_cmd import load_settings

    settings = load_settings()
    reports = _describe(settings, list(topics) or None, group)
    for index, report in enumerate(reports):
        if index:
            click.echo()
        if not report.exists:
            click.echo(f"{report.name}: missing: create it with `scorer topics create`")
            continue
        click.echo(
            f"{report.name}: partitions={len(report.partitions)} "
            f"cleanup.policy={report.cleanup_policy} end={report.end} lag={_lag(report.lag)} "
            f"(group {group or settings.app_id})"
        )
        click.echo(f"  {'PARTITION':>9}  {'END':>10}  {'COMMITTED':>10}  {'LAG':>8}")
        for offsets in report.partitions:
            committed = "-" if offsets.committed is None else str(offsets.committed)
            click.echo(
                f"  {offsets.partition:>9}  {offsets.end:>10}  {committed:>10}  "
                f"{_lag(offsets.lag):>8}"
            )
    if topics and not all(report.exists for report in reports):
        raise SystemExit(1)


def _describe(settings: Settings, names: list[str] | None, group: str | None) -> list[TopicReport]:
    try:
        return describe_topics(settings, names, group)
    except BrokerUnavailable as error:
        raise click.ClickException(
            f"{error} (is it running? `scorer kafka status`; else set KAFKA_BOOTSTRAP_SERVERS)"
        ) from None
    except KafkaError as error:
        raise click.ClickException(
            f"Kafka at {settings.bootstrap_servers} refused to describe the topics: {error}"
        ) from None


def _lag(lag: int | None) -> str:
    return "-" if lag is None else str(lag)
