"""Input partitions held until Faust has sought them (scorer.stream.faust_edge.resume), against a
stand-in consumer that plays the order of Faust 0.15.3's recovery: changelog
partitions resumed and the flow resumed to read them, then the input partitions
resumed, the seek to committed offsets, the stream queues emptied, the flow resumed."""

from __future__ import annotations

import asyncio

from faust.types import TP

from scorer.stream.faust_edge.resume import HoldsInputsUntilSeeked

INPUTS = {TP("results", 0), TP("results", 1), TP("qrels", 0)}
CHANGELOGS = {TP("app-qrels-changelog", 0), TP("app-qrels-changelog", 1)}


class FaustConsumer:
    """What Faust's consumer does with these calls: the active partitions fetch."""

    def __init__(self) -> None:
        self.assigned = INPUTS | CHANGELOGS
        self.active: set[TP] = set()
        self.seeks = 0
        self.flow_active = False
        self.log: list[str] = []

    def _is_changelog_tp(self, tp: TP) -> bool:
        return tp.topic.endswith("-changelog")

    def assignment(self) -> set[TP]:
        return self.assigned

    def resume_partitions(self, tps) -> None:
        self.active |= set(tps)

    seek_gate: asyncio.Event | None = None
    """When set, the seek waits for it (the broker's answer)."""

    async def perform_seek(self) -> None:
        if self.seek_gate is not None:
            await self.seek_gate.wait()
        # Fetching inputs now would queue events that the flow resume then drops.
        self.log.append(f"seek with inputs active: {sorted(self.active & INPUTS)}")
        self.seeks += 1

    def resume_flow(self) -> None:
        self.flow_active = True

    async def on_partitions_revoked(self, revoked) -> None:
        self.log.append("revoked")

    async def on_partitions_assigned(self, assigned, generation_id: int = 0) -> None:
        self.log.append(f"assigned {generation_id}")


class Consumer(HoldsInputsUntilSeeked, FaustConsumer):
    """The hold over that stand-in, as the guarded consumer has it over Faust's."""


def recover(consumer: Consumer, *, seek: bool = True) -> None:
    """Faust's recovery calls, in its order."""
    consumer.resume_partitions(CHANGELOGS)
    consumer.resume_flow()
    consumer.resume_partitions(INPUTS)
    if seek:
        asyncio.run(consumer.perform_seek())
        consumer.resume_flow()


def test_inputs_fetch_only_after_the_seek_and_the_flow_resume() -> None:
    consumer = Consumer()
    held = consumer.held_inputs
    consumer.resume_partitions(CHANGELOGS)
    assert consumer.active == CHANGELOGS  # recovery reads changelogs before any seek
    consumer.resume_flow()
    consumer.resume_partitions(INPUTS)
    assert consumer.active == CHANGELOGS
    asyncio.run(consumer.perform_seek())
    assert consumer.log == ["seek with inputs active: []"]
    assert consumer.active == CHANGELOGS
    consumer.resume_flow()
    assert consumer.active == INPUTS | CHANGELOGS
    assert consumer.flow_active
    assert held.releases == 1
    assert not held.held


def test_a_flow_resume_before_any_seek_releases_nothing() -> None:
    consumer = Consumer()
    held = consumer.held_inputs
    recover(consumer, seek=False)
    consumer.resume_flow()
    assert consumer.active == CHANGELOGS
    assert held.held == INPUTS
    assert held.releases == 0


def test_a_partition_revoked_while_held_is_not_resumed() -> None:
    consumer = Consumer()
    recover(consumer, seek=False)
    consumer.assigned = (INPUTS - {TP("results", 1)}) | CHANGELOGS
    asyncio.run(consumer.perform_seek())
    consumer.resume_flow()
    assert consumer.active == (INPUTS - {TP("results", 1)}) | CHANGELOGS


def test_every_rebalance_waits_for_its_own_seek() -> None:
    consumer = Consumer()
    held = consumer.held_inputs
    recover(consumer)
    assert held.releases == 1
    consumer.active.clear()  # the next rebalance pauses everything again
    consumer.resume_partitions(INPUTS)
    consumer.resume_flow()  # the earlier seek does not count for this assignment
    assert consumer.active == set()
    asyncio.run(consumer.perform_seek())
    consumer.resume_flow()
    assert consumer.active == INPUTS
    assert held.releases == 2
    assert consumer.log == ["seek with inputs active: []"] * 2


def test_a_seek_that_ends_after_a_rebalance_releases_nothing() -> None:
    """A recovery's seek still waiting for the broker when the next assignment comes:
    the new recovery's first flow resume (before its tables are recovered) used to
    release the inputs on the strength of the old seek (a churn run: qrels processed
    before their partition's parked results were recovered, 202 results parked)."""
    consumer = Consumer()
    held = consumer.held_inputs

    async def rebalance_during_the_seek() -> None:
        consumer.resume_partitions(CHANGELOGS)
        consumer.resume_flow()
        consumer.resume_partitions(INPUTS)
        consumer.seek_gate = asyncio.Event()
        seek = asyncio.ensure_future(consumer.perform_seek())
        await asyncio.sleep(0)  # the seek is waiting for the broker
        await consumer.on_partitions_revoked(set())
        await consumer.on_partitions_assigned(INPUTS | CHANGELOGS, 8)
        consumer.seek_gate.set()
        await seek  # the old seek ends now
        consumer.seek_gate = None
        consumer.resume_flow()  # the new recovery starts reading its changelogs

    asyncio.run(rebalance_during_the_seek())
    assert consumer.active == CHANGELOGS
    assert held.releases == 0 and held.held == INPUTS
    recover(consumer)  # the new assignment's recovery, its own seek
    assert consumer.active == INPUTS | CHANGELOGS
    assert held.releases == 1
    assert consumer.log[-1] == "seek with inputs active: []"
