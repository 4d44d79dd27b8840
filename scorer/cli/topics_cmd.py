"""``scorer topics create``: the scorer's Kafka topics (brokers never auto-create them)."""

from __future__ import annotations

import click
from aiokafka.errors import KafkaError

from scorer.kafka.probe import BrokerUnavailable
from scorer.kafka.topics import TopicMismatchError, TopicState, ensure_topics
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
