"""Which producer errors rebuild the app in-process, and how often (faust_edge.recovery)."""

from __future__ import annotations

import logging

import pytest
from aiokafka.errors import (
    IllegalOperation,
    KafkaError,
    KafkaTimeoutError,
    NotLeaderForPartitionError,
    ProducerFenced,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnknownError,
    UnknownTopicOrPartitionError,
)
from prometheus_client import CollectorRegistry, generate_latest

from scorer.stream.faust_edge.recovery import (
    Recovery,
    RecoveryCollector,
    TransactionProducerGone,
    is_recoverable,
)


@pytest.mark.parametrize(
    ("error", "exactly_once", "expected"),
    [
        (ProducerFenced(), True, True),
        (IllegalOperation("Can't send messages while not in transaction"), True, True),
        (TransactionProducerGone("its input partition was revoked"), True, True),
        # No transaction to lose under at-least-once: the same error is a bug there.
        (ProducerFenced(), False, False),
        (IllegalOperation("x"), False, False),
        (KafkaTimeoutError(), False, True),
        (KafkaTimeoutError(), True, True),
        (RequestTimedOutError(), False, True),
        (NotLeaderForPartitionError(), True, True),
        # A rebuild would meet these again.
        (TopicAuthorizationFailedError(), True, False),
        (TransactionalIdAuthorizationFailed(), True, False),
        (ValueError("a bug of ours"), True, False),
        (KeyError("x"), False, False),
        (None, True, False),
    ],
)
def test_what_is_recovered(error: BaseException | None, exactly_once: bool, expected: bool) -> None:
    assert is_recoverable(error, exactly_once) is expected


def test_any_broker_error_of_a_transaction_commit_is_recovered_under_exactly_once() -> None:
    # After a broker stall past the transaction timeout, EndTxn answered an error code
    # aiokafka does not know (UnknownError) and its sender routine died with a plain
    # KafkaError: the transaction's outcome is unknown, a new producer settles it.
    dead_sender = KafkaError("Unexpected error during batch delivery")
    assert is_recoverable(dead_sender, True, committing=True)
    assert is_recoverable(UnknownError(), True, committing=True)
    assert not is_recoverable(dead_sender, True)  # elsewhere: not known to be the producer
    assert not is_recoverable(dead_sender, False, committing=True)  # no transaction
    assert not is_recoverable(TransactionalIdAuthorizationFailed(), True, committing=True)
    assert not is_recoverable(ValueError("ours"), True, committing=True)


def test_unknown_topic_is_retriable_in_aiokafka_so_it_is_recovered() -> None:
    # Documented as such: a topic deleted under a running worker is retried by a
    # rebuild, within the budget, then the worker stops.
    assert UnknownTopicOrPartitionError.retriable
    assert is_recoverable(UnknownTopicOrPartitionError(), False)


def test_a_request_logs_once_stops_the_worker_once_and_blocks_readiness(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recovery = Recovery()
    recovery.exactly_once = True
    stops: list[int] = []
    recovery.stop_with(lambda: stops.append(1))
    assert recovery.readiness_reason() is None
    with caplog.at_level(logging.WARNING, logger="scorer.stream.faust_edge.recovery"):
        assert recovery.request(ProducerFenced(), "commit")
        assert recovery.request(IllegalOperation("late send"), "send")
    assert stops == [1]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "ProducerFenced" in warnings[0].getMessage()
    assert "commit" in warnings[0].getMessage()
    reason = recovery.readiness_reason()
    assert reason is not None and reason.startswith("recovering in-process from commit: ")


def test_an_unrecoverable_error_is_not_taken() -> None:
    recovery = Recovery()
    recovery.exactly_once = True
    stops: list[int] = []
    recovery.stop_with(lambda: stops.append(1))
    assert not recovery.request(ValueError("bug"), "send")
    assert recovery.requested is None and stops == []
    assert not recovery.should_rebuild(None)
    assert not recovery.should_rebuild(ValueError("bug"))
    assert recovery.counts == {}


def test_rebuilds_are_counted_by_reason_and_capped_per_window() -> None:
    now = [0.0]
    recovery = Recovery(clock=lambda: now[0])
    recovery.exactly_once = True
    for n in range(Recovery.budget):
        now[0] = n * 10.0
        assert recovery.request(ProducerFenced(), "commit")
        assert recovery.should_rebuild(None)
        recovery.reset()
    assert recovery.counts == {"ProducerFenced": Recovery.budget}
    # One more inside the window stops the worker for its supervisor ...
    now[0] = 100.0
    assert recovery.request(ProducerFenced(), "commit")
    assert not recovery.should_rebuild(None)
    recovery.reset()
    # ... but once the first ones are older than the window, rebuilding goes on.
    now[0] = Recovery.window + 15.0
    assert recovery.should_rebuild(KafkaTimeoutError())  # a crash Faust met first
    assert recovery.counts == {"ProducerFenced": Recovery.budget, "KafkaTimeoutError": 1}


def test_the_counter_survives_the_apps_it_rebuilds() -> None:
    recovery = Recovery()
    recovery.exactly_once = True
    for _ in range(2):
        recovery.request(ProducerFenced(), "commit")
        recovery.should_rebuild(None)
        recovery.reset()
    # Each app has its own registry; both read the same process-wide record.
    for _ in range(2):
        registry = CollectorRegistry()
        registry.register(RecoveryCollector(recovery))
        text = generate_latest(registry).decode()
        assert 'scorer_worker_recoveries_total{reason="ProducerFenced"} 2.0' in text
        assert "scorer_worker_recovering 0.0" in text
    recovery.request(IllegalOperation("x"), "send")
    assert registry.get_sample_value("scorer_worker_recovering") == 1.0
