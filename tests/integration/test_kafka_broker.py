"""The broker the tests get is a real Kafka: clients round-trip records and SCRAM logins work."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from scorer.kafka.launcher import SaslListener
from scorer.kafka.probe import BrokerUnavailable, probe_broker
from tests.support.kafka import create_topics, unique_name

pytestmark = pytest.mark.integration


async def _round_trip(options: dict[str, object], topic: str, records: list[bytes]) -> list[bytes]:
    producer = AIOKafkaProducer(acks="all", **options)
    await producer.start()
    try:
        for index, value in enumerate(records):
            await producer.send_and_wait(topic, value, key=f"q{index % 2}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, group_id=unique_name("group"), auto_offset_reset="earliest", **options
    )
    await consumer.start()
    received: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            while len(received) < len(records):
                batches = await consumer.getmany(timeout_ms=1000)
                received += [message.value for batch in batches.values() for message in batch]
    finally:
        await consumer.stop()
    return received


def _sasl_options(sasl: SaslListener, password: str) -> dict[str, object]:
    return {
        "bootstrap_servers": sasl.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": sasl.mechanism,
        "sasl_plain_username": sasl.username,
        "sasl_plain_password": password,
    }


def test_records_produced_come_back_to_a_consumer(kafka_bootstrap: str) -> None:
    topic = unique_name("roundtrip")
    create_topics(kafka_bootstrap, 2, topic)
    records = [f"event-{index}".encode() for index in range(20)]

    received = asyncio.run(_round_trip({"bootstrap_servers": kafka_bootstrap}, topic, records))

    assert sorted(received) == sorted(records)


def test_scram_user_produces_and_consumes_on_the_sasl_listener(kafka_sasl: SaslListener) -> None:
    options = _sasl_options(kafka_sasl, kafka_sasl.password)
    assert asyncio.run(probe_broker(options)) == kafka_sasl.bootstrap
    topic = unique_name("sasl")
    create_topics(options, 1, topic)

    received = asyncio.run(_round_trip(options, topic, [b"secret-1", b"secret-2"]))

    assert sorted(received) == [b"secret-1", b"secret-2"]


def test_wrong_scram_password_fails_naming_the_refused_login(kafka_sasl: SaslListener) -> None:
    options = _sasl_options(kafka_sasl, kafka_sasl.password + "-wrong")

    with pytest.raises(BrokerUnavailable) as refused:
        asyncio.run(probe_broker(options))

    message = str(refused.value)
    assert kafka_sasl.bootstrap in message
    assert "SaslAuthenticationFailed" in message
    assert "invalid credentials" in message


def test_unreachable_broker_fails_naming_the_address() -> None:
    with pytest.raises(BrokerUnavailable, match=r"127\.0\.0\.1:1: ConnectionRefusedError"):
        asyncio.run(probe_broker({"bootstrap_servers": "127.0.0.1:1"}))
