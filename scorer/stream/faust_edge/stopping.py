"""A graceful stop (SIGTERM, SIGINT): one commit, after everything produced is sent, in
bounded time.

How Faust 0.15.3 stops (``App.on_stop``, then the app's children): it stops the
fetcher and the flow, waits for the events in hand (``Consumer.wait_empty``), and
then commits with ``start_new_transaction=False``
(``Consumer.commit_and_end_transactions``): under exactly_once every partition
with new offsets has its transaction committed and *not* begun again. Only after
that does it stop the agents, the timers and the producer buffer, which go on
sending meanwhile:

- the producer buffer (table changelog writes) is flushed before that commit, but
  ``ProducerBuffer.flush`` counts only the queued writes, not the one its sender
  task has just taken off the queue, and gives up after 0.1 s without progress:
  that write reaches aiokafka after its transaction has ended;
- a timer (the parking sweep) sends while the commit runs or after it.

aiokafka then raises ``IllegalOperation("Can't send messages while not in
transaction")``: in the buffer's sender task it crashes ``ProducerBuffer``, in a
timer it crashes the app, and the worker exits 1 (issue 18). Faust also commits
a second time when the consumer itself stops; anything acked between the two
commits was acked after the flow had stopped.

:class:`GracefulStop` makes the stop's commit a barrier. Before it, the buffer
is drained (empty, and no write of it still on its way to aiokafka) and every
transactional send in progress has returned; while it runs, transactional sends
from any other task are not made; after it, none is made at all (each is logged
and left unsent on purpose: it belongs to no committed input, and a timer's
command is sent again by the partition's next owner). The consumer's later
commit is skipped. A stop that takes longer than ``timeout`` seconds (a broker
that does not answer) ends the process with exit code 1 and nothing committed:
the work since the last commit is redone by the next owner.

Installed by :func:`install_graceful_stop`, before the app starts; the
consumer's side is :class:`CommitsOnceAtStop`, a base of the guarded consumer. Faust names
it touches: ``App._new_producer``, ``App.on_stop``, ``Producer.send``,
``ProducerBuffer._send_pending`` and ``ProducerBuffer.size``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

logger = logging.getLogger(__name__)

DRAIN_POLL_SECONDS = 0.005


class GracefulStop:
    """The stop barrier and the stop deadline of one Faust app."""

    def __init__(self, app: Any, timeout: float, recovery: Any = None) -> None:
        self.app = app
        self.timeout = timeout
        self.recovery = recovery
        """The app's ``faust_edge.Recovery``: a buffered write that fails on a
        recoverable producer error asks it for a rebuild instead of crashing the
        producer buffer (None: errors crash it, as in Faust)."""
        self.committed = False
        """The stop's commit has run: no transactional send is made any more."""
        self.refused = 0
        """Transactional sends left unsent because the stop had committed."""
        self.started_at: float | None = None
        self._committing: asyncio.Task[Any] | None = None
        self._in_flight = 0
        self._watchdog: threading.Timer | None = None

    # ------------------------------------------------------------ installation

    def install(self) -> None:
        app = self.app
        new_producer: Callable[[], Any] = app._new_producer
        on_stop: Callable[[], Awaitable[None]] = app.on_stop

        def new_stopping_producer() -> Any:
            return self._guard_producer(new_producer())

        async def on_stop_with_deadline() -> None:
            self._start_deadline()
            await on_stop()

        app._new_producer = new_stopping_producer
        app.on_stop = on_stop_with_deadline

    def _guard_producer(self, producer: Any) -> Any:
        """Count the buffered writes and transactional sends on their way to aiokafka;
        refuse transactional sends once the stop has begun committing."""
        buffer = producer.buffer
        send_pending = buffer._send_pending

        async def counted_send_pending(fut: Any) -> None:
            recovery = self.recovery
            if recovery is not None and recovery.requested is not None:
                return  # the app is being rebuilt: the next one writes it again
            self._in_flight += 1
            try:
                await send_pending(fut)
            except Exception as error:
                # A crashed buffer would crash the app (exit 1) while it stops to be
                # rebuilt: a write into a fenced or ended transaction is one of these.
                if recovery is None or not recovery.request(error, "buffered write"):
                    raise
            finally:
                self._in_flight -= 1

        buffer._send_pending = counted_send_pending
        if self.recovery is None or not self.recovery.exactly_once:
            return producer
        send = producer.send

        async def send_unless_committed(
            topic: str,
            key: bytes | None,
            value: bytes | None,
            partition: int | None,
            timestamp: float | None,
            headers: Any,
            *,
            transactional_id: str | None = None,
        ) -> Any:
            if transactional_id is not None and not self.admits_send(topic):
                # Never resolved: the record is not sent, and nothing waits for it.
                return asyncio.get_running_loop().create_future()
            with self.sending():
                return await send(
                    topic,
                    key,
                    value,
                    partition,
                    timestamp,
                    headers,
                    transactional_id=transactional_id,
                )

        producer.send = send_unless_committed
        return producer

    async def commit_once(self, commit_and_end_transactions: Callable[[], Awaitable[None]]) -> None:
        """The consumer's ``commit_and_end_transactions`` (``GuardedConsumer``'s): the
        stop commits once, after a drain; rebalances commit as before."""
        if not self.app.should_stop:  # a rebalance (Faust's wait_empty ends with it too)
            await commit_and_end_transactions()
            return
        if self.committed:
            logger.info(
                "Stop: the consumer's own commit is skipped (the stop has committed; "
                "anything acked since was acked after the flow stopped)"
            )
            return
        await self._drain()
        self._committing = asyncio.current_task()
        try:
            await commit_and_end_transactions()
        finally:
            self.committed = True
            self._committing = None
        logger.info(
            "Stop: events in hand finished, their records sent, offsets committed "
            "%.2f s after the stop began",
            self.elapsed(),
        )

    # ------------------------------------------------------------ the barrier

    def admits_send(self, topic: str) -> bool:
        """Whether a transactional send to ``topic`` from the current task may be made
        (see :meth:`_refuses`); a refused one is counted and logged."""
        if not self._refuses(asyncio.current_task()):
            return True
        self.refused += 1
        logger.info(
            "Not sent to %s: the stop has committed the transactions (left "
            "uncommitted on purpose; the partition's next owner redoes it)",
            topic,
        )
        return False

    @contextlib.contextmanager
    def sending(self) -> Iterator[None]:
        """Around a transactional send on its way to aiokafka: the stop's commit waits
        for it (:meth:`_drain`)."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1

    def _refuses(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether a transactional send from ``task`` must not be made: the stop's
        commit has run, or is running in another task."""
        return self.committed or (self._committing is not None and task is not self._committing)

    async def _drain(self) -> None:
        """Wait until the producer buffer is empty and no write or transactional send
        is on its way to aiokafka (the stop's deadline bounds the wait)."""
        buffer = self.app.producer.buffer
        while buffer.size or self._in_flight:
            await asyncio.sleep(DRAIN_POLL_SECONDS)

    # ------------------------------------------------------------ the deadline

    def elapsed(self) -> float:
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at

    def _start_deadline(self) -> None:
        if self.started_at is not None:
            return
        self.started_at = time.monotonic()
        logger.info(
            "Stop: finishing the events in hand, then committing (at most %.0f s, "
            "SCORER_STOP_TIMEOUT_SECONDS)",
            self.timeout,
        )
        watchdog = self._watchdog = threading.Timer(self.timeout, self._give_up)
        watchdog.daemon = True
        watchdog.start()

    def stopped(self) -> None:
        """The app has stopped within its deadline (the process goes on: an in-process
        rebuild): the deadline no longer applies."""
        if self._watchdog is not None:
            self._watchdog.cancel()

    def _give_up(self) -> None:
        """The stop outlived its deadline: exit now, leaving the uncommitted work to be
        redone by the next owner (a thread: the event loop may be the one stuck)."""
        logger.error(
            "Stop: not finished after %.0f s (SCORER_STOP_TIMEOUT_SECONDS); exiting "
            "without %s; the next owner of the partitions redoes the uncommitted work",
            self.timeout,
            "leaving the consumer group" if self.committed else "committing",
        )
        logging.shutdown()
        os._exit(1)


def install_graceful_stop(app: Any, timeout: float, recovery: Any = None) -> GracefulStop:
    """Install the stop barrier and deadline on ``app`` (a Faust app, not started);
    ``recovery``: see :attr:`GracefulStop.recovery`."""
    stop = GracefulStop(app, timeout, recovery)
    stop.install()
    return stop


class CommitsOnceAtStop:
    """A base for a Faust consumer class, before Faust's consumer in the bases: the
    commit that ends the transactions (a revoke, a stop) is Faust's, but a stop's is
    made once, after the drain (:meth:`GracefulStop.commit_once`)."""

    graceful_stop: GracefulStop | None = None

    async def commit_and_end_transactions(self) -> None:
        commit = super().commit_and_end_transactions  # type: ignore[misc]
        if self.graceful_stop is None:
            await commit()
        else:
            await self.graceful_stop.commit_once(commit)
