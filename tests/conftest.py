"""Session-wide fixtures: a real Kafka broker for the integration tests.

``kafka_bootstrap`` and ``kafka_sasl`` find or start one (see
``tests/support/kafka.py`` for the order); ``kafka_settings`` gives each test
a ``Settings`` of its own on that broker (unique app id and topic names,
``tmp_path`` as state dir). A broker that cannot be had fails the test with
the reason: integration tests never skip silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scorer.kafka.launcher import LauncherError, SaslListener
from scorer.settings import Settings
from tests.support.kafka import (
    LazyBroker,
    docker_answers,
    sasl_from_env,
    settings_for,
    testcontainers_kafka,
)


@pytest.fixture(scope="session")
def _launcher_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LazyBroker]:
    broker = LazyBroker(lambda: tmp_path_factory.mktemp("kafka-state"))
    yield broker
    broker.close()


@pytest.fixture(scope="session")
def kafka_bootstrap(_launcher_broker: LazyBroker) -> Iterator[str]:
    """The PLAINTEXT bootstrap address of a real broker, for the whole session."""
    from_env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if from_env:
        yield from_env
        return
    if docker_answers():
        with testcontainers_kafka() as bootstrap:
            yield bootstrap
        return
    try:
        info = _launcher_broker.get()
    except LauncherError as error:
        pytest.fail(
            f"no Kafka broker: KAFKA_BOOTSTRAP_SERVERS is unset, no Docker engine answers, "
            f"and the launcher failed: {error}",
            pytrace=False,
        )
    yield info.bootstrap


@pytest.fixture(scope="session")
def kafka_sasl(_launcher_broker: LazyBroker) -> SaslListener:
    """A SASL_PLAINTEXT listener with a SCRAM-SHA-256 user (address and credentials)."""
    from_env = sasl_from_env()
    if from_env is not None:
        return from_env
    try:
        sasl = _launcher_broker.get().sasl
    except LauncherError as error:
        pytest.fail(
            f"no SASL Kafka broker: KAFKA_SASL_* is unset and the launcher failed: {error}",
            pytrace=False,
        )
    assert sasl is not None, "the launcher broker is always started with SASL in tests"
    return sasl


@pytest.fixture
def kafka_settings(kafka_bootstrap: str, tmp_path: Path) -> Settings:
    """Settings on the session's broker with an app id and topics no other test uses."""
    return settings_for(kafka_bootstrap, tmp_path)
