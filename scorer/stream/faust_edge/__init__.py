"""Everything that reaches into Faust's or aiokafka's private names, behind ``install``.

The rest of the worker talks to Faust through its public API (``faust.App``,
topics, tables, agents, web views). What Faust 0.15.3 gets wrong for this
worker is fixed here, through Faust's class hooks where it has one; each
private name used is listed, with why and which test covers it, in
docs/faust-internals.md.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from scorer.stream.faust_edge.consumer import GuardedConsumer, GuardedConsumerThread
from scorer.stream.faust_edge.ledger import InputLedger, LedgerCollector


def install(app: Any, registry: CollectorRegistry, fetch_max_wait_ms: int = 1500) -> InputLedger:
    """Make ``app``'s consumer the guarded one; returns its input ledger, whose
    series are registered in ``registry``."""
    ledger = InputLedger()
    thread = type(
        "GuardedConsumerThread", (GuardedConsumerThread,), {"fetch_max_wait_ms": fetch_max_wait_ms}
    )
    app.transport.Consumer = type(
        "GuardedConsumer", (GuardedConsumer,), {"Thread": thread, "ledger": ledger}
    )
    registry.register(LedgerCollector(ledger))
    return ledger
