"""`scorer topics create` makes the scorer's topics once, and checks them on every later run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from scorer.kafka.topics import TopicMismatchError, ensure_topics
from scorer.settings import Settings
from tests.support.kafka import create_topics, settings_for

pytestmark = pytest.mark.integration

SCORER = Path(sys.executable).with_name("scorer")


def _scorer_env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "SCORER_STATE_DIR": str(settings.state_dir),
        "SCORER_PARTITIONS": str(settings.partitions),
        "SCORER_RESULTS_TOPIC": settings.results_topic,
        "SCORER_QRELS_TOPIC": settings.qrels_topic,
        "SCORER_SCORED_TOPIC": settings.scored_topic,
        "SCORER_DEADLETTER_TOPIC": settings.deadletter_topic,
        "SCORER_ROLLUP_TOPIC": settings.rollup_topic,
    }


def _on_broker(settings: Settings) -> dict[str, tuple[int, str]]:
    """Partition count and cleanup.policy of each scorer topic, read back from the broker."""
    names = [
        settings.results_topic,
        settings.qrels_topic,
        settings.scored_topic,
        settings.deadletter_topic,
        settings.rollup_topic,
    ]

    async def describe() -> dict[str, tuple[int, str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
        await admin.start()
        try:
            topics = await admin.describe_topics(names)
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
            )
        finally:
            await admin.close()
        policies = {
            resource["resource_name"]: entry["config_value"]
            for response in responses
            for resource in response.to_object()["resources"]
            for entry in resource["config_entries"]
            if entry["config_names"] == "cleanup.policy"
        }
        return {
            topic["topic"]: (len(topic["partitions"]), policies[topic["topic"]])
            for topic in topics
        }

    return asyncio.run(describe())


def test_topics_create_twice_gives_the_same_topics(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=3)
    env = _scorer_env(settings)

    first = subprocess.run([SCORER, "topics", "create"], env=env, capture_output=True, text=True)
    after_first = _on_broker(settings)
    second = subprocess.run([SCORER, "topics", "create"], env=env, capture_output=True, text=True)
    after_second = _on_broker(settings)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert first.stdout.count("created ") == 5
    assert second.stdout.count("exists ") == 5
    assert after_first == after_second == {
        settings.results_topic: (3, "delete"),
        settings.qrels_topic: (3, "compact"),
        settings.scored_topic: (3, "delete"),
        settings.deadletter_topic: (3, "delete"),
        settings.rollup_topic: (3, "delete"),
    }


def test_qrels_with_other_partition_count_than_results_is_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=2)
    create_topics(kafka_bootstrap, 5, settings.qrels_topic, compact=True)

    with pytest.raises(TopicMismatchError, match=rf"{settings.qrels_topic} \(5\)"):
        ensure_topics(settings)
    done = subprocess.run(
        [SCORER, "topics", "create"], env=_scorer_env(settings), capture_output=True, text=True
    )

    assert done.returncode == 1
    assert done.stderr.startswith("Error: topics ")
    assert "SCORER_PARTITIONS=2" in done.stderr


def test_other_topic_with_other_partition_count_is_reported_not_changed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=2)
    create_topics(kafka_bootstrap, 1, settings.scored_topic)

    done = subprocess.run(
        [SCORER, "topics", "create"], env=_scorer_env(settings), capture_output=True, text=True
    )

    assert done.returncode == 0, done.stderr
    assert "partitions=1" in done.stdout
    assert "differs from SCORER_PARTITIONS=2" in done.stdout
    assert _on_broker(settings)[settings.scored_topic] == (1, "delete")


def test_uncompacted_qrels_topic_is_refused(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=2)
    create_topics(kafka_bootstrap, 2, settings.qrels_topic)

    with pytest.raises(TopicMismatchError, match=r"cleanup\.policy=delete"):
        ensure_topics(settings)
