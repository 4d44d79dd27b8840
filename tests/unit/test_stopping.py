"""The stop barrier (scorer.stream.faust_edge.stopping) against stand-ins for Faust's app, producer,
buffer and consumer, without Kafka: the stop's commit waits for a buffered write
already taken off the queue, transactional sends from other tasks are not made once
the commit has begun, the consumer's second commit is skipped, and a rebalance
commits as before."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from scorer.stream.faust_edge.recovery import Recovery
from scorer.stream.faust_edge.stopping import CommitsOnceAtStop, GracefulStop, install_graceful_stop


class Buffer:
    """Faust's ProducerBuffer: ``size`` counts the queued writes only."""

    def __init__(self) -> None:
        self.size = 0

    async def _send_pending(self, fut: Any) -> None:
        await fut


class Producer:
    def __init__(self, log: list[str]) -> None:
        self.buffer = Buffer()
        self.log = log

    async def send(self, topic, key, value, partition, timestamp, headers, *, transactional_id):
        await asyncio.sleep(0)
        self.log.append(f"sent {topic}")
        return asyncio.get_running_loop().create_future()


class FaustConsumer:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def commit_and_end_transactions(self) -> None:
        self.log.append("commit")
        await asyncio.sleep(0.01)


class Consumer(CommitsOnceAtStop, FaustConsumer):
    """The stop's side of the guarded consumer over that stand-in."""

    def __init__(self, log: list[str], stop: GracefulStop) -> None:
        super().__init__(log)
        self.graceful_stop = stop


class App:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.in_transaction = True
        self.should_stop = False
        self._producer: Producer | None = None

    def _new_producer(self) -> Producer:
        return Producer(self.log)

    async def on_stop(self) -> None:
        self.log.append("faust on_stop")

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = self._new_producer()
        return self._producer


def started(timeout: float = 60.0, recovery: Recovery | None = None) -> tuple[App, Any, Consumer]:
    app = App()
    stop = install_graceful_stop(app, timeout, recovery)
    return app, stop, Consumer(app.log, stop)


def test_the_stops_commit_waits_for_the_buffered_write_on_its_way() -> None:
    app, _, consumer = started()

    async def scenario() -> None:
        app.should_stop = True
        write_sent = asyncio.get_running_loop().create_future()
        # The buffer's sender has taken the write off the queue: size is 0 already.
        in_flight = asyncio.ensure_future(app.producer.buffer._send_pending(write_sent))
        await asyncio.sleep(0)
        commit = asyncio.ensure_future(consumer.commit_and_end_transactions())
        await asyncio.sleep(0.05)
        assert app.log == [], "the commit waits for the write"
        app.log.append("write sent")
        write_sent.set_result(None)
        await asyncio.gather(in_flight, commit)

    asyncio.run(scenario())
    assert app.log == ["write sent", "commit"]


def test_sends_from_other_tasks_are_not_made_once_the_stops_commit_began() -> None:
    app, stop, consumer = started(recovery=Recovery(exactly_once=True))

    async def timer_send() -> Any:
        return await app.producer.send("expiry", b"q", b"", 0, None, None, transactional_id="t-0")

    async def scenario() -> Any:
        app.should_stop = True
        commit = asyncio.ensure_future(consumer.commit_and_end_transactions())
        await asyncio.sleep(0.005)  # the commit is under way
        during = await asyncio.ensure_future(timer_send())
        await commit
        after = await asyncio.ensure_future(timer_send())
        return during, after

    during, after = asyncio.run(scenario())
    assert app.log == ["commit"]
    assert stop.refused == 2
    assert not during.done() and not after.done()


def test_the_consumers_second_commit_at_the_stop_is_skipped() -> None:
    app, _, consumer = started()

    async def scenario() -> None:
        app.should_stop = True
        await consumer.commit_and_end_transactions()
        await consumer.commit_and_end_transactions()

    asyncio.run(scenario())
    assert app.log == ["commit"]


def test_a_rebalance_commits_as_before_and_sends_go_through() -> None:
    app, stop, consumer = started()

    async def scenario() -> None:
        await consumer.commit_and_end_transactions()
        await consumer.commit_and_end_transactions()
        await app.producer.send("scored", b"k", b"v", None, None, None, transactional_id="t-0")

    asyncio.run(scenario())
    assert app.log == ["commit", "commit", "sent scored"]
    assert stop.refused == 0 and not stop.committed


def test_the_stop_starts_its_deadline_and_then_stops_faust() -> None:
    app, stop, _ = started(timeout=60.0)
    asyncio.run(app.on_stop())
    assert app.log == ["faust on_stop"]
    assert stop.started_at is not None


def test_a_stop_past_its_deadline_exits_1_with_one_error_line() -> None:
    program = (
        "import logging, time\n"
        "from scorer.stream.faust_edge.stopping import GracefulStop\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "GracefulStop(object(), timeout=0.5)._start_deadline()\n"
        "time.sleep(30)\n"
    )
    started_at = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 1
    assert time.monotonic() - started_at < 10
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "SCORER_STOP_TIMEOUT_SECONDS" in errors[0], done.stderr


def test_a_buffered_write_into_an_ended_transaction_asks_for_a_rebuild_instead_of_crashing() -> (
    None
):
    from aiokafka.errors import IllegalOperation, MessageSizeTooLargeError

    app = App()
    recovery = Recovery()
    recovery.exactly_once = True
    stops: list[str] = []
    recovery.stop_with(lambda: stops.append("stop"))
    install_graceful_stop(app, 60.0, recovery)
    buffer = app.producer.buffer

    async def failing(error: BaseException) -> None:
        future = asyncio.get_running_loop().create_future()
        future.set_exception(error)
        await buffer._send_pending(future)

    async def scenario() -> None:
        await failing(IllegalOperation("Can't send messages while not in transaction"))
        assert stops == ["stop"]
        assert recovery.requested is not None
        assert recovery.requested.startswith("buffered write: IllegalOperation")
        # Once a rebuild is asked for, the buffer's writes are dropped, not made.
        await failing(RuntimeError("never awaited"))
        assert stops == ["stop"]

    asyncio.run(scenario())

    # An error a rebuild would meet again still crashes the buffer, as in Faust.
    app = App()
    recovery = Recovery()
    recovery.exactly_once = True
    install_graceful_stop(app, 60.0, recovery)
    buffer = app.producer.buffer

    async def too_large() -> None:
        future = asyncio.get_running_loop().create_future()
        future.set_exception(MessageSizeTooLargeError())
        await buffer._send_pending(future)

    try:
        asyncio.run(too_large())
    except MessageSizeTooLargeError:
        pass
    else:
        raise AssertionError("a record too large was swallowed")
    assert recovery.requested is None
