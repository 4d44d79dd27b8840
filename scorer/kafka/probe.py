"""One clear answer to "can these options reach and log in to Kafka?".

aiokafka clients report a refused login or an unreachable broker only as
"Unable to bootstrap" (the cause goes to its log); ``probe_broker`` connects
to the bootstrap addresses itself and raises with the cause in the message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError

_CONNECTION_OPTIONS = (
    "security_protocol",
    "ssl_context",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
)


class BrokerUnavailable(RuntimeError):
    """No bootstrap address accepted a connection (and login); the message says why."""


async def probe_broker(options: Mapping[str, object], timeout: float = 10.0) -> str:
    """Connect (and authenticate) to the first answering bootstrap address; return it.

    ``options`` are aiokafka client keyword arguments, e.g.
    ``Settings.aiokafka_options()``. Raises ``BrokerUnavailable`` naming every
    address and the last cause, e.g. ``SaslAuthenticationFailed: ... invalid
    credentials``.
    """
    bootstrap = str(options["bootstrap_servers"])
    connection = {key: options[key] for key in _CONNECTION_OPTIONS if key in options}
    causes: list[str] = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(host, int(port), request_timeout_ms=int(timeout * 1000), **connection),
                timeout,
            )
        except (OSError, KafkaError, TimeoutError, ValueError) as error:
            named = isinstance(error, KafkaError)  # its text starts with its class name
            causes.append(str(error) if named else f"{type(error).__name__}: {error}")
            continue
        conn.close()
        return address.strip()
    raise BrokerUnavailable(f"cannot use Kafka at {bootstrap}: {causes[-1]}")


async def wait_for_group_coordinator(
    options: Mapping[str, object], group_id: str, timeout: float = 30.0
) -> bool:
    """Wait until the broker names a coordinator for ``group_id``; False after
    ``timeout`` (the caller goes on: the consumer retries by itself).

    A fresh broker has no coordinator until it has created its offsets topic, and
    aiokafka's consumer logs each refused lookup meanwhile at ERROR level (``Group
    Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError``),
    which pages whoever alerts on ERROR lines at every first deploy. Asked here
    first, quietly, the consumer finds the coordinator at its first try."""
    from aiokafka import AIOKafkaClient

    client = AIOKafkaClient(**options)
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        await client.bootstrap()
        while True:
            try:
                await client.coordinator_lookup(0, group_id)  # 0: a consumer group
                return True
            except KafkaError:  # CoordinatorNotAvailable, NotCoordinator: not yet
                if asyncio.get_running_loop().time() >= deadline:
                    return False
                await asyncio.sleep(0.5)
    finally:
        await client.close()
