"""Where the integration tests find a real Kafka broker, and how they use it.

A broker is taken from, in order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` (CI: ``.ci/run`` starts one with ``scorer kafka up``);
2. testcontainers' Kafka module, when a Docker engine answers a ping;
3. the project's launcher (``scorer.kafka.launcher``) in a temporary state dir.

The SCRAM listener comes from ``KAFKA_SASL_BOOTSTRAP_SERVERS``,
``KAFKA_SASL_USERNAME`` and ``KAFKA_SASL_PASSWORD`` when all three are set
(``eval "$(scorer kafka env)"`` sets them), else from the launcher.
Nothing here skips: a broker that cannot be had is a test failure with the reason.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scorer.kafka.launcher import BrokerInfo, SaslListener, start_broker, stop_broker
from scorer.settings import Settings

TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.9.0"  # Apache Kafka 3.9 inside


def unique_name(prefix: str) -> str:
    """A topic, group or app name no other test (or earlier run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def settings_for(bootstrap: str, state_dir: Path, **overrides: Any) -> Settings:
    """Settings pointing at ``bootstrap``, with an app id and topic names of their own.

    ``overrides`` are Settings fields (e.g. ``partitions=2``) and win over the
    generated names.
    """
    tag = uuid.uuid4().hex[:10]
    fields: dict[str, Any] = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "state_dir": state_dir,
        "app_id": f"scorer-test-{tag}",
        "results_topic": f"results-{tag}",
        "qrels_topic": f"qrels-{tag}",
        "scored_topic": f"scored-{tag}",
        "deadletter_topic": f"deadletter-{tag}",
        "rollup_topic": f"rollup-{tag}",
    }
    fields.update(overrides)
    return Settings(**fields)


def create_topics(
    broker: str | Mapping[str, object], partitions: int, *names: str, compact: bool = False
) -> None:
    """Create ``names`` with ``partitions`` each (brokers never auto-create topics).

    ``broker`` is a bootstrap address or aiokafka connection options.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    config = {"cleanup.policy": "compact"} if compact else {}

    async def create() -> None:
        options = {"bootstrap_servers": broker} if isinstance(broker, str) else dict(broker)
        admin = AIOKafkaAdminClient(**options)
        await admin.start()
        try:
            response = await admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=config) for name in names]
            )
        finally:
            await admin.close()
        failed = [error for error in response.to_object()["topic_errors"] if error["error_code"]]
        assert not failed, f"creating topics failed: {failed}"

    asyncio.run(create())


def sasl_from_env() -> SaslListener | None:
    """The SCRAM listener named by the environment, if all of it is set."""
    bootstrap = os.environ.get("KAFKA_SASL_BOOTSTRAP_SERVERS")
    username = os.environ.get("KAFKA_SASL_USERNAME")
    password = os.environ.get("KAFKA_SASL_PASSWORD")
    if not (bootstrap and username and password):
        return None
    return SaslListener(bootstrap, "SCRAM-SHA-256", username, password)


def docker_answers() -> bool:
    """True when a Docker engine answers a ping within two seconds."""
    try:
        import docker

        return bool(docker.from_env(timeout=2).ping())
    except Exception:
        return False


@contextmanager
def testcontainers_kafka() -> Iterator[str]:
    """A throwaway Kafka container's bootstrap address (needs a Docker engine)."""
    from testcontainers.community.kafka import KafkaContainer

    with KafkaContainer(TESTCONTAINERS_IMAGE).with_kraft() as container:
        yield container.get_bootstrap_server()


class LazyBroker:
    """The launcher's broker (with a SCRAM listener), started on first use only.

    Sessions whose tests need no broker, or find one in the environment,
    never pay for a JVM. ``close`` stops it and removes its log dir.
    """

    def __init__(self, state_dir_factory: Callable[[], Path]) -> None:
        self._state_dir_factory = state_dir_factory
        self._state_dir: Path | None = None
        self._info: BrokerInfo | None = None

    def get(self) -> BrokerInfo:
        """The running broker; raises ``LauncherError`` when it cannot start."""
        if self._info is None:
            self._state_dir = self._state_dir or self._state_dir_factory()
            self._info = start_broker(self._state_dir, sasl=True)
        return self._info

    def close(self) -> None:
        if self._state_dir is not None:
            stop_broker(self._state_dir)
            self._info = None
