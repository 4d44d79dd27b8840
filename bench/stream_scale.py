"""One scorer worker against two, on the same preloaded backlog, in one run.

A local broker is started here; the golden set is loaded into the workers'
qrels table once. Per repetition (the order alternates), N results are
preloaded into the results topic and either one worker or two workers of the
same group score them: the rate is N over the span of the output records'
timestamps, the CPU per event is the workers' CPU time summed (from each one's
ready on, until all are idle again) over the events. Workers started together
still join the group one after the other, so the span holds a rebalance: the
steady rate leaves the first and the last tenth of the outputs out (0.8 N over
the time from the 10th to the 90th percentile of their timestamps), which
shows how the workers share a backlog once the group has settled. Medians go to a table,
printed and written under "Streaming: one worker or two" in docs/benchmarks.md.

    .venv/bin/python bench/stream_scale.py             # 3 reps of 100,000
    .venv/bin/python bench/stream_scale.py --events 40000 --reps 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from stream import (  # noqa: E402
    Outputs,
    Payloads,
    cpu_seconds,
    load_qrels_into_worker,
    preload,
    scorer_settings,
    settle,
    write_section,
)

from scorer.kafka.launcher import start_broker, stop_broker  # noqa: E402
from scorer.kafka.topics import ensure_topics  # noqa: E402
from scorer.settings import Settings  # noqa: E402
from scorer.stream.process import Worker  # noqa: E402


class Figures(NamedTuple):
    rate: float
    """Events per second over the whole span of the outputs."""
    steady: float
    """Events per second between the 10th and the 90th percentile of the outputs."""
    cpu_us: float
    """CPU µs per event, all workers."""


def steady_rate(stamps: list[float]) -> float:
    """0.8 of the events over the time from the 10th to the 90th percentile of
    their output timestamps (the rebalance at the start and the tail left out)."""
    ordered = sorted(stamps)
    low, high = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
    return 0.8 * len(ordered) / max(1e-3, high - low)


async def one_rep(
    settings: Settings, workdir: Path, payloads: Payloads, workers: int, rep: int, events: int
) -> Figures:
    """The figures of ``workers`` workers scoring a preloaded backlog."""
    bootstrap = settings.bootstrap_servers
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=50)
    await producer.start()
    await consumer.start()
    partitions = [TopicPartition(settings.scored_topic, p) for p in range(settings.partitions)]
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    outputs = Outputs()
    collector = asyncio.create_task(outputs.collect(consumer))
    running: list[Worker] = []
    try:
        ids = await preload(
            producer, settings.results_topic, payloads, f"w{workers}-r{rep}", events
        )

        # Started together, so that they join the group in one rebalance and share the
        # backlog from the start (one started after the other would find it half done).
        starting = [Worker(settings, workdir) for _ in range(workers)]
        running.extend(starting)

        def start(worker: Worker) -> float:
            """Start ``worker``; its CPU time once it is ready (recovery is not scoring)."""
            worker.start(180)
            assert worker.process is not None
            return cpu_seconds(worker.process.pid)

        # CPU from each worker's ready on, until all are idle again: a fast worker
        # can score the whole backlog before its peer is ready, so a window opened at
        # the first output (as before 2026-12-02) missed the work (0 µs per event).
        cpu_before = sum(
            await asyncio.gather(*(asyncio.to_thread(start, worker) for worker in starting))
        )
        received = await outputs.wait_for(ids, timeout=120 + events / 100)
        for worker in running:
            assert worker.process is not None
            await settle(worker.process.pid)
        cpu_after = sum(cpu_seconds(w.process.pid) for w in running if w.process)
        stamps = [outputs.seen[i][1] for i in ids if i in outputs.seen]
        if received < len(ids):
            raise RuntimeError(f"{workers} worker(s) scored {received}/{len(ids)}")
        rate = (len(stamps) - 1) / max(1e-3, max(stamps) - min(stamps))
        cpu_us = (cpu_after - cpu_before) / received * 1e6
        figures = Figures(rate, steady_rate(stamps), cpu_us)
        print(
            f"  {workers} worker(s): {rate:,.0f} events/s, steady {figures.steady:,.0f}, "
            f"{cpu_us:,.0f} µs CPU/event"
        )
        return figures
    finally:
        await asyncio.to_thread(lambda: [w.stop() for w in running])
        collector.cancel()
        await producer.stop()
        await consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    payloads = Payloads.generate(5000, pool=5000)
    state_dir = Path(tempfile.mkdtemp(prefix="stream-scale-"))
    info = start_broker(state_dir)
    figures: dict[int, list[Figures]] = {1: [], 2: []}
    try:
        settings = scorer_settings(info.bootstrap, state_dir, "scale", partitions=args.partitions)
        ensure_topics(settings)
        load_qrels_into_worker(settings, state_dir, payloads)
        for rep in range(args.reps):
            for workers in (1, 2) if rep % 2 == 0 else (2, 1):
                figures[workers].append(
                    asyncio.run(one_rep(settings, state_dir, payloads, workers, rep, args.events))
                )
    finally:
        stop_broker(state_dir)
    one = statistics.median(f.rate for f in figures[1])
    one_steady = statistics.median(f.steady for f in figures[1])
    lines = [
        "| workers | events/s (median) | per rep | × one worker | steady events/s (median) "
        "| per rep | × one worker | CPU µs/event (all workers) |",
        "|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for workers, runs in figures.items():
        rate = statistics.median(f.rate for f in runs)
        steady = statistics.median(f.steady for f in runs)
        lines.append(
            f"| {workers} | {rate:,.0f} | {', '.join(f'{f.rate:,.0f}' for f in runs)} "
            f"| {rate / one:.2f} | {steady:,.0f} | {', '.join(f'{f.steady:,.0f}' for f in runs)} "
            f"| {steady / one_steady:.2f} | {statistics.median(f.cpu_us for f in runs):,.0f} |"
        )
    lines += [
        "",
        f"command: `bench/stream_scale.py --events {args.events} --reps {args.reps}`, "
        f"partitions: {args.partitions}, cores: {os.cpu_count()}, "
        f"date: {time.strftime('%Y-%m-%d')}.",
    ]
    text = "\n".join(lines)
    print()
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "benchmarks.md", "Streaming: one worker or two", text)


if __name__ == "__main__":
    main()
