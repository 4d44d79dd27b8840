"""State size and recovery of the qrels table: memory and RocksDB stores.

For each size (judged queries, 20 judgments each) and store, on a local broker
started here: the table's changelog is written directly (the records the
worker itself would write, in the partitions it would write them to), then a
real ``scorer worker`` starts and the time from its start to ``/readyz`` 200
(recovery done, partitions assigned) is taken, with its resident memory beside
an empty worker's. RocksDB is started twice: cold (empty data directory, a new
host) and warm (restart on the same data directory).

    .venv/bin/python bench/stream_state.py                   # 100k and 1M
    .venv/bin/python bench/stream_state.py --sizes 100000    # one size
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.partitioner import DefaultPartitioner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scorer.core.metrics import ideal_dcg  # noqa: E402
from scorer.kafka.launcher import start_broker, stop_broker  # noqa: E402
from scorer.kafka.topics import ensure_topics  # noqa: E402
from scorer.settings import Settings  # noqa: E402
from scorer.stream.events import qrels_fingerprint  # noqa: E402
from scorer.stream.process import Worker  # noqa: E402

FACETS = {"type": ("factoid", "list", "how-to"), "popularity": ("head", "tail")}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def dir_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def table_entry(rng: random.Random, query_id: str) -> dict:
    """What ``events.golden_entry`` stores for a query of 20 judgments (grades 0-3)."""
    qrels = {f"{query_id}-d{doc:02d}": rng.choice((0, 0, 1, 1, 2, 3)) for doc in range(20)}
    return {
        "grades": {doc: grade for doc, grade in qrels.items() if grade >= 1},
        "idcg": ideal_dcg(qrels),
        "facets": {facet: rng.choice(values) for facet, values in FACETS.items()},
        "fingerprint": qrels_fingerprint(qrels),
    }


async def write_changelog(settings: Settings, queries: int) -> int:
    """Write ``queries`` table entries to the qrels changelog; return the bytes written."""
    topic = f"{settings.app_id}-qrels-changelog"
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, settings.partitions, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, acks="all", linger_ms=20,
        max_batch_size=512 * 1024, compression_type=None,
    )  # fmt: skip
    partitioner = DefaultPartitioner()
    partitions = list(range(settings.partitions))
    rng = random.Random(5)
    written = 0
    await producer.start()
    try:
        pending = []
        for index in range(queries):
            query_id = f"q{index:07d}"
            # The worker writes a query's entry to the partition its results arrive on.
            partition = partitioner(query_id.encode(), partitions, partitions)
            key = orjson.dumps(query_id)
            value = orjson.dumps(table_entry(rng, query_id))
            written += len(key) + len(value)
            pending.append(await producer.send(topic, key=key, value=value, partition=partition))
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return written


def start_timed(worker: Worker, timeout: float) -> float:
    """Seconds from starting ``worker`` to its /readyz answering 200."""
    started = time.monotonic()
    worker.start(ready_timeout=timeout)
    return time.monotonic() - started


def measure(bootstrap: str, workdir: Path, store: str, queries: int, timeout: float) -> dict:
    tag = f"{store.split(':')[0]}-{queries}"
    settings = Settings(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        state_dir=workdir,
        app_id=f"state-{tag}",
        results_topic=f"state.{tag}.results",
        qrels_topic=f"state.{tag}.qrels",
        scored_topic=f"state.{tag}.scored",
        deadletter_topic=f"state.{tag}.deadletter",
        rollup_topic=f"state.{tag}.by-run",
        store=store,
    )
    ensure_topics(settings)
    began = time.monotonic()
    changelog_bytes = asyncio.run(write_changelog(settings, queries)) if queries else 0
    print(f"  {tag}: changelog written in {time.monotonic() - began:.0f} s", flush=True)
    worker = Worker(settings, workdir)
    figures: dict[str, object] = {"store": store, "queries": queries}
    try:
        figures["cold_s"] = start_timed(worker, timeout)
        assert worker.process is not None
        time.sleep(2)
        figures["rss_mib"] = rss_mib(worker.process.pid)
        figures["judged"] = worker.metric("scorer_judged_queries")
        figures["gc_s"] = [
            worker.metric("scorer_gc_seconds_total", {"generation": str(g)}) for g in range(3)
        ]
        figures["changelog_mib"] = changelog_bytes / 2**20
        data = workdir / f"data-{worker.port}"
        if store.startswith("rocksdb"):
            worker.stop()
            figures["disk_mib"] = dir_mib(data)
            figures["warm_s"] = start_timed(worker, timeout)
            assert worker.process is not None
            time.sleep(2)
            figures["warm_rss_mib"] = rss_mib(worker.process.pid)
    finally:
        worker.stop()
        shutil.rmtree(workdir / f"data-{worker.port}", ignore_errors=True)
    print(f"  {figures}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--stores", nargs="+", default=["memory://", "rocksdb://"])
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for ready")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="state-bench-"))
    info = start_broker(workdir)
    print(f"broker {info.bootstrap} (state in {workdir})", flush=True)
    rows = []
    try:
        for store in args.stores:
            rows.append(measure(info.bootstrap, workdir, store, 0, args.timeout))
            for size in args.sizes:
                rows.append(measure(info.bootstrap, workdir, store, size, args.timeout))
    finally:
        stop_broker(workdir)
    empty = {row["store"]: row["rss_mib"] for row in rows if row["queries"] == 0}
    print()
    print(
        "| store | judged queries | changelog MiB | worker RSS MiB (table: Δ vs empty) "
        "| bytes/query in RAM | on disk MiB | recovery to ready, s | warm restart, s "
        "| collector to ready, s (gen 0/1/2) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        if not row["queries"]:
            continue
        delta = row["rss_mib"] - empty[row["store"]]
        print(
            f"| {row['store']} | {row['queries']:,} | {row['changelog_mib']:.0f} "
            f"| {row['rss_mib']:.0f} ({delta:+.0f}) | {delta * 2**20 / row['queries']:,.0f} "
            f"| {row.get('disk_mib', float('nan')):.0f} | {row['cold_s']:.1f} "
            f"| {row.get('warm_s', float('nan')):.1f} "
            f"| {sum(row['gc_s']):.1f} ({' / '.join(f'{g:.1f}' for g in row['gc_s'])}) |"
        )
    print(f"empty worker RSS MiB: {empty}")


if __name__ == "__main__":
    main()
