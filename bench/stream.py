"""Streaming benchmark: the scorer (both processing modes) beside a bare aiokafka pipe
and a Faust forwarder.

One run, one local broker (started here in a temporary state dir, stopped at the
end), the same payloads and the same partition count for three pipelines, each
a process of its own:

- ``pipe``: aiokafka consume, decode JSON, encode, produce (``bench/stream_pipe.py``),
  the limit of this client stack on this machine;
- ``pipe-eos``: the same pipe with Kafka transactions (read_committed inputs, one
  producer, a transaction per fetched batch, outputs read read_committed): what
  exactly-once costs this stack with no framework;
- ``faust``: a Faust agent forwarding every event unchanged
  (``bench/stream_forward.py``), the framework's own cost;
- ``scorer``, ``scorer-eos``: ``scorer worker`` with its real settings, qrels
  preloaded, at-least-once and exactly_once (outputs read read_committed).

After an untimed throughput run of each (the broker's JVM warms up), per
repetition (the order rotates), each pipeline gets:

1. throughput: N results are preloaded into its input topic, the process starts,
   and the rate is N over the time from its first to its last output record
   (record timestamps), with the process's CPU time per event until it is idle
   again (what follows the last output, such as a scorer's last rollup folds,
   is part of the backlog's cost);
2. latency: results offered at fixed rates (25%, 50%, 75% of the pipe's rate in
   the first repetition) for a while each; latency is from handing a result to
   the producer here to receiving its output record here.

Medians over the repetitions go to a table (printed, and written under
"Streaming" in docs/benchmarks.md) and a plot (docs/img/stream-bench.png).

    .venv/bin/python bench/stream.py            # ~25 minutes
    .venv/bin/python bench/stream.py --quick    # ~5 minutes
    .venv/bin/python bench/stream.py --only pipe --only scorer --baseline DIR
        # this scorer and the one of checkout DIR in every repetition (an A/B)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scorer.kafka.launcher import start_broker, stop_broker  # noqa: E402
from scorer.kafka.topics import ensure_topics  # noqa: E402
from scorer.settings import Settings  # noqa: E402
from scorer.stream.process import Worker, free_port  # noqa: E402

PIPELINES = ("pipe", "pipe-eos", "faust", "scorer", "scorer-eos")
EXTRA = ("pipe-eos-pp", "pipe-x2")
"""Run only when named with ``--only``: ``pipe-eos`` with a transactional producer per
input partition, as Faust's exactly_once has; ``pipe`` writing a second, small record
per event, as the scorer writes a per-query changelog record beside each scored
result (``bench/stream_pipe.py``)."""
BASELINE = "scorer-base"
"""With ``--baseline DIR``: the at-least-once scorer of another checkout, beside this one."""
SCORERS = ("scorer", "scorer-eos")
SAME_GUARANTEE_PIPE = {"scorer": "pipe", "scorer-eos": "pipe-eos"}
"""The bare pipe with the processing guarantee of each scorer mode."""
COLOURS = ["#888", "#bbb", "#4a7", "#37c", "#c73"]
LOADS = (0.25, 0.50, 0.75)
TYPES = ("factoid", "list", "comparison", "multi-hop", "how-to")
POPULARITY = ("head", "torso", "tail")
DYNAMISM = ("static", "slow-changing", "fast-changing")
RUN_IDS = ("bm25-v1", "hybrid-v2", "hybrid-v2-rerank")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- payloads


@dataclass
class Payloads:
    """A golden set and a pool of result documents over it (deterministic)."""

    golden: list[bytes]
    results: list[dict]

    @classmethod
    def generate(cls, queries: int, pool: int, seed: int = 11) -> Payloads:
        rng = random.Random(seed)
        golden, qrels_of = [], []
        for index in range(queries):
            query_id = f"q{index:06d}"
            qrels = {f"{query_id}-d{doc:03d}": rng.choice((0, 0, 1, 1, 2, 3)) for doc in range(20)}
            facets = {
                "type": rng.choice(TYPES),
                "popularity": rng.choice(POPULARITY),
                "dynamism": rng.choice(DYNAMISM),
            }
            golden.append(orjson.dumps({"queryId": query_id, "qrels": qrels, "facets": facets}))
            qrels_of.append((query_id, list(qrels)))
        results = []
        for index in range(pool):
            query_id, judged = rng.choice(qrels_of)
            size = rng.randint(10, 100)
            found = rng.sample(judged, rng.randint(0, min(size, 12)))
            distractors = size - len(found)
            ranked = found + [
                f"{query_id}-x{rng.randrange(10_000):04d}" for _ in range(distractors)
            ]
            rng.shuffle(ranked)
            document = {
                "resultId": "",
                "runId": RUN_IDS[index % len(RUN_IDS)],
                "queryId": query_id,
                "ranked": ranked,
            }
            if rng.random() < 0.5:
                document["facets"] = {"type": rng.choice(TYPES), "region": rng.choice("abc")}
            results.append(document)
        return cls(golden, results)

    def result(self, result_id: str, index: int) -> tuple[bytes, bytes]:
        """``(key, value)`` of a result with ``result_id`` (the pool's ``index`` modulo)."""
        document = self.results[index % len(self.results)]
        document["resultId"] = result_id
        document["timestamp"] = "2026-01-01T00:00:00+00:00"
        return document["queryId"].encode(), orjson.dumps(document)


# ---------------------------------------------------------------- pipelines


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    return cpu_seconds_of(Path(f"/proc/{pid}/stat"))


def main_thread_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process's main thread so far (its other threads: a
    scorer's Kafka consumer thread, Faust's, the metrics server). py-spy's samples
    cannot tell them apart: a thread waiting for the GIL is sampled where it waits."""
    return cpu_seconds_of(Path(f"/proc/{pid}/task/{pid}/stat"))


def cpu_seconds_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


SETTLE_SECONDS = 15.0
"""At most this long between the throughput run and the latency phases."""
DRAIN_SECONDS = 90.0
"""At most this long for a pipeline to finish what the latency phases gave it."""


async def settle(
    pid: int, idle_share: float = 0.05, window: float = 0.5, limit: float = SETTLE_SECONDS
) -> float:
    """Wait until the process has been idle (under ``idle_share`` of a core over a
    ``window``) or ``limit`` seconds passed; returns the seconds waited. After the
    throughput run, so that its CPU includes the backlog's tail (a scorer still folds
    its run rollups) and the latency phases measure a pipeline at its offered load;
    after the latency phases, so that the next repetition starts from an idle one."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = cpu_seconds(pid)
        await asyncio.sleep(window)
        if cpu_seconds(pid) - before < idle_share * window:
            break
    return time.monotonic() - started


@dataclass
class Pipeline:
    """One of the three pipelines: its topics and how to start and stop its process."""

    name: str
    input_topic: str
    output_topic: str
    start: Callable[[], int]
    """Starts the process, returns its pid."""
    stop: Callable[[], None]
    isolation_level: str = "read_uncommitted"
    """How its outputs are read (read_committed for exactly_once)."""
    ready_on_start: bool = False
    """``start`` returns once the process is ready to consume (scorer workers)."""


def pipe_pipeline(
    bootstrap: str,
    workdir: Path,
    exactly_once: bool = False,
    per_partition: bool = False,
    second_record: bool = False,
) -> Pipeline:
    process: list[subprocess.Popen[bytes]] = []
    name = ("pipe-eos-pp" if per_partition else "pipe-eos") if exactly_once else "pipe"
    if second_record:
        name = "pipe-x2"
    group = f"bench-{name}-{os.getpid()}"
    source, sink = f"bench.{name}.in", f"bench.{name}.out"
    mode = ["--exactly-once"] if exactly_once else []
    if per_partition:
        mode.append("--per-partition")
    if second_record:
        mode.append("--second-record")

    def start() -> int:
        log = (workdir / f"{name}.log").open("ab")
        process.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "stream_pipe.py"), bootstrap,
                 source, sink, group, *mode],
                stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        return process[-1].pid

    isolation = "read_committed" if exactly_once else "read_uncommitted"
    return Pipeline(name, source, sink, start, lambda: _stop(process), isolation)


def faust_pipeline(
    bootstrap: str, workdir: Path, partitions: int, extra_env: dict[str, str] | None = None
) -> Pipeline:
    process: list[subprocess.Popen[bytes]] = []
    env = {
        **os.environ,
        **(extra_env or {}),
        "BENCH_BOOTSTRAP": bootstrap,
        "BENCH_APP_ID": f"bench-forward-{os.getpid()}",
        "BENCH_INPUT": "bench.forward.in",
        "BENCH_OUTPUT": "bench.forward.out",
        "BENCH_PARTITIONS": str(partitions),
        "BENCH_DATADIR": str(workdir / "forward-data"),
    }

    def start() -> int:
        log = (workdir / "forward.log").open("ab")
        process.append(
            subprocess.Popen(
                # The log level the scorer runs with here (scorer.stream.process):
                # at warn or above Faust's worker sets the root logger to DEBUG for its
                # start-up spinner, and every debug call of Faust and aiokafka then
                # builds a log record (+0.2 ms per event measured, see docs/benchmarks.md).
                [sys.executable, str(ROOT / "bench" / "stream_forward.py"), "worker",
                 "--web-port", str(free_port()), "-l", "info"],
                env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        return process[-1].pid

    return Pipeline("faust", "bench.forward.in", "bench.forward.out", start, lambda: _stop(process))


def scorer_pipeline(
    name: str, settings: Settings, workdir: Path, code: Path | None = None
) -> Pipeline:
    """``scorer worker`` with ``settings``; ``code``: a checkout whose scorer runs
    instead of this one (``--baseline``; it comes first on the worker's PYTHONPATH)."""
    worker = Worker(settings, workdir, defaults=code is None)

    def start() -> int:
        saved = os.environ.get("PYTHONPATH")
        if code is not None:
            os.environ["PYTHONPATH"] = str(code)
        try:
            worker.start(ready_timeout=180)
        finally:
            if code is not None:
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
        assert worker.process is not None
        return worker.process.pid

    isolation = (
        "read_committed" if settings.processing_guarantee == "exactly_once" else "read_uncommitted"
    )
    return Pipeline(
        name,
        settings.results_topic,
        settings.scored_topic,
        start,
        lambda: worker.stop(),
        isolation,
        ready_on_start=True,
    )


def scorer_settings(bootstrap: str, state_dir: Path, name: str, **fields: object) -> Settings:
    prefix = f"bench.{name}"
    return Settings(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        state_dir=state_dir,
        app_id=f"bench-{name}",
        results_topic=f"{prefix}.results",
        qrels_topic=f"{prefix}.qrels",
        scored_topic=f"{prefix}.scored",
        deadletter_topic=f"{prefix}.deadletter",
        rollup_topic=f"{prefix}.by-run",
        **fields,
    )


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# ---------------------------------------------------------------- measuring


@dataclass
class Outputs:
    """Output records received from a pipeline: resultId -> (arrival, record timestamp)."""

    seen: dict[str, tuple[float, float]] = field(default_factory=dict)

    async def collect(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=200)
            arrival = time.time()
            for records in batches.values():
                for record in records:
                    result_id = orjson.loads(record.value)["resultId"]
                    self.seen.setdefault(result_id, (arrival, record.timestamp / 1000))

    async def wait_for_first(self, ids: list[str], timeout: float) -> int:
        """Wait until some id in ``ids`` arrived; return how many have by then."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            arrived = sum(1 for result_id in ids if result_id in self.seen)
            if arrived:
                return arrived
            await asyncio.sleep(0.02)
        return 0

    async def wait_for(self, ids: list[str], timeout: float) -> int:
        """Wait until every id in ``ids`` arrived (or ``timeout``); return how many did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            missing = sum(1 for result_id in ids if result_id not in self.seen)
            if not missing:
                return len(ids)
            await asyncio.sleep(0.25)
        return sum(1 for result_id in ids if result_id in self.seen)


@dataclass
class Figures:
    """What one repetition measured for one pipeline."""

    rate: float = 0.0
    cpu_us: float = 0.0
    broker_cpu_us: float = 0.0
    """The broker JVM's CPU per event over the same span (its appends, fetches and
    transactions for the pipeline, and the bench's own reads of the outputs)."""
    latency: dict[float, tuple[float, float, float] | None] = field(default_factory=dict)
    """load -> (p50, p95, p99) in ms; None when the pipeline could not keep up."""


def start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` into collapsed stacks at ``output`` until SIGINT."""
    output.parent.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--idle",
         "--nonblocking", "-o", str(output)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def send_paced(
    producer: AIOKafkaProducer,
    topic: str,
    payloads: Payloads,
    prefix: str,
    rate: float,
    seconds: float,
) -> dict[str, float]:
    """Offer results at ``rate`` per second for ``seconds``; return resultId -> send time."""
    sent: dict[str, float] = {}
    total = int(rate * seconds)
    start = time.monotonic()
    index = 0
    pending = []
    while index < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while index < due:
            result_id = f"{prefix}-{index}"
            key, value = payloads.result(result_id, index)
            sent[result_id] = time.time()
            pending.append(await producer.send(topic, key=key, value=value))
            index += 1
        if len(pending) > 500:
            await asyncio.gather(*pending)
            pending.clear()
        await asyncio.sleep(0.002)
    await asyncio.gather(*pending)
    return sent


async def preload(
    producer: AIOKafkaProducer, topic: str, payloads: Payloads, prefix: str, count: int
) -> list[str]:
    ids, pending = [], []
    for index in range(count):
        result_id = f"{prefix}-{index}"
        key, value = payloads.result(result_id, index)
        pending.append(await producer.send(topic, key=key, value=value))
        ids.append(result_id)
    await asyncio.gather(*pending)
    return ids


async def measure(
    pipeline: Pipeline,
    bootstrap: str,
    payloads: Payloads,
    rep: int,
    events: int,
    loads: dict[float, float],
    phase_seconds: float,
    partition_count: int,
    workdir: Path,
    broker_pid: int,
    profile: Path | None = None,
    latency: bool = True,
) -> Figures:
    """Throughput (preloaded) then, with ``latency``, latency at each offered load,
    for one pipeline.

    An empty ``loads`` is filled in from the rate measured here (the pipe, first)."""
    figures = Figures()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=1)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        fetch_max_wait_ms=50,
        isolation_level=pipeline.isolation_level,
    )
    await producer.start()
    await consumer.start()
    partitions = [TopicPartition(pipeline.output_topic, p) for p in range(partition_count)]
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    outputs = Outputs()
    collector = asyncio.create_task(outputs.collect(consumer))
    prefix = f"{pipeline.name}-r{rep}"
    try:
        ids = await preload(producer, pipeline.input_topic, payloads, f"{prefix}-t", events)
        pid = await asyncio.to_thread(pipeline.start)
        # CPU and profile from the first output on: start-up and recovery are not the pipe.
        if pipeline.ready_on_start:
            # A scorer worker returns from start() once ready (tables recovered): its
            # CPU from there on is the backlog's. Under exactly_once its first outputs
            # become visible only when their transaction commits, long after the
            # processing began, so the first output would be too late a mark.
            cpu_before, before = cpu_seconds(pid), 0
            main_before = main_thread_cpu_seconds(pid)
            broker_before = cpu_seconds(broker_pid)
            await outputs.wait_for_first(ids, timeout=180)
        else:
            before = await outputs.wait_for_first(ids, timeout=180)
            cpu_before = cpu_seconds(pid)
            main_before = main_thread_cpu_seconds(pid)
            broker_before = cpu_seconds(broker_pid)
        profiler = start_profiler(pid, profile / f"{prefix}.txt") if profile else None
        received = await outputs.wait_for(ids, timeout=60 + events / 50)
        cpu_at_last_output = cpu_seconds(pid)
        broker_at_last_output = cpu_seconds(broker_pid)
        # The backlog's cost includes what follows its last output (a scorer folds
        # the run rollups of its last batches then): CPU is counted until idle.
        settled = await settle(pid)
        cpu_after = cpu_seconds(pid)
        main_after = main_thread_cpu_seconds(pid)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        if received < len(ids):
            missing = [result_id for result_id in ids if result_id not in outputs.seen]
            print(
                f"  {pipeline.name}: only {received}/{len(ids)} outputs arrived; "
                f"missing e.g. {missing[:3]}"
            )
        stamps = [outputs.seen[i][1] for i in ids if i in outputs.seen]
        if len(stamps) < 2:
            raise RuntimeError(f"{pipeline.name} produced no output: see the logs in {workdir}")
        figures.rate = (len(stamps) - 1) / max(1e-3, max(stamps) - min(stamps))
        counted = max(1, received - before)
        figures.cpu_us = (cpu_after - cpu_before) / counted * 1e6
        to_last = (cpu_at_last_output - cpu_before) / counted * 1e6
        main = (main_after - main_before) / counted * 1e6
        figures.broker_cpu_us = (broker_at_last_output - broker_before) / counted * 1e6
        print(
            f"  {pipeline.name}: {figures.rate:,.0f} events/s, {figures.cpu_us:,.0f} µs CPU/event "
            f"({to_last:,.0f} up to the last output; idle {settled:.1f} s after it; "
            f"main thread {main:,.0f}; broker {figures.broker_cpu_us:,.0f} up to the last output)"
        )
        if not loads:
            loads.update({share: share * figures.rate for share in LOADS})
        if not latency:
            return figures
        for load, rate in loads.items():
            sent = await send_paced(
                producer, pipeline.input_topic, payloads, f"{prefix}-l{load}", rate, phase_seconds
            )
            drained = await outputs.wait_for(list(sent), timeout=max(20.0, phase_seconds * 2))
            if drained < len(sent):
                print(f"  {pipeline.name} at {rate:,.0f}/s: saturated ({drained}/{len(sent)})")
                figures.latency[load] = None
                for higher in loads:
                    if higher > load:
                        figures.latency[higher] = None
                break
            waits = [(outputs.seen[i][0] - t) * 1000 for i, t in sent.items()]
            figures.latency[load] = tuple(percentile(waits, q) for q in (0.5, 0.95, 0.99))
            p50, p95, p99 = figures.latency[load]
            print(
                f"  {pipeline.name} at {rate:,.0f}/s: "
                f"p50 {p50:.1f} ms, p95 {p95:.1f}, p99 {p99:.1f}"
            )
        # What a saturated phase left (or a scorer's last rollup folds) is finished
        # here, not inside the next repetition's throughput run.
        drained_for = await settle(pid, limit=DRAIN_SECONDS)
        print(f"  {pipeline.name}: idle {drained_for:.1f} s after the latency phases")
    finally:
        await asyncio.to_thread(pipeline.stop)
        collector.cancel()
        await producer.stop()
        await consumer.stop()
    return figures


# ---------------------------------------------------------------- setup


async def create_topics(bootstrap: str, partitions: int, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


async def preload_qrels(settings: Settings, payloads: Payloads) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    await producer.start()
    try:
        pending = [
            await producer.send(
                settings.qrels_topic, key=orjson.loads(value)["queryId"].encode(), value=value
            )
            for value in payloads.golden
        ]
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def load_qrels_into_worker(settings: Settings, workdir: Path, payloads: Payloads) -> None:
    """Fill the scorer's qrels table once (changelog-backed: later starts recover it)."""
    asyncio.run(preload_qrels(settings, payloads))
    worker = Worker(settings, workdir).start(ready_timeout=180)
    try:
        deadline = time.monotonic() + 300
        while worker.metric("scorer_qrels_total", {"outcome": "stored"}) < len(payloads.golden):
            if time.monotonic() > deadline:
                raise RuntimeError("the scorer did not store the preloaded qrels in 300 s")
            time.sleep(0.5)
    finally:
        worker.stop()


# ---------------------------------------------------------------- report


def median_latency(runs: list[Figures], load: float) -> tuple[float, float, float] | None:
    values = [run.latency.get(load) for run in runs]
    if not values or any(v is None for v in values):
        return None
    return tuple(statistics.median(v[i] for v in values) for i in range(3))  # type: ignore[index]


def table(
    results: dict[str, list[Figures]], loads: dict[float, float], meta: dict[str, object]
) -> str:
    pipe = statistics.median(r.rate for r in results["pipe"])
    faust_rate = statistics.median(r.rate for r in results["faust"])
    lines = [
        "| pipeline | events/s (median) | per rep | × pipe | × faust | CPU µs/event | "
        + " | ".join(f"p50/p95/p99 ms @ {int(f * 100)}% ({loads[f]:,.0f}/s)" for f in loads)
        + " |",
        "|---|---:|---|---:|---:|---:|" + "---|" * len(loads),
    ]
    for name in PIPELINES:
        runs = results[name]
        rate = statistics.median(r.rate for r in runs)
        cells = []
        for load in loads:
            m = median_latency(runs, load)
            cells.append("saturated" if m is None else f"{m[0]:.1f} / {m[1]:.1f} / {m[2]:.1f}")
        lines.append(
            f"| {name} | {rate:,.0f} | {', '.join(f'{r.rate:,.0f}' for r in runs)} "
            f"| {rate / pipe:.2f} | {rate / faust_rate:.2f} "
            f"| {statistics.median(r.cpu_us for r in runs):,.0f} | " + " | ".join(cells) + " |"
        )
    lines += ["", *targets(results)]
    lines += ["", ", ".join(f"{k}: {v}" for k, v in meta.items()) + "."]
    return "\n".join(lines)


def targets(results: dict[str, list[Figures]]) -> list[str]:
    """The hot-path targets, met or not, for each scorer mode against the bare pipe of
    its own guarantee (``pipe``, ``pipe-eos``): throughput at least 0.8x it; CPU per
    event at most 1.5x its (the at-least-once target; exactly_once's is shown); p99 at
    25% and 50% of the plain pipe's rate (the loads all modes are run at) at most 2x
    its (the exactly_once target; at-least-once's is
    shown)."""
    lines = [
        "| target (against the pipe of the same guarantee) | " + " | ".join(SCORERS) + " |",
        "|---|" + "---|" * len(SCORERS),
    ]

    Verdict = Callable[[str, list[Figures]], tuple[bool, str]]
    """(scorer mode, its repetitions) -> (met, the figure)."""

    def row(name: str, verdict: Verdict) -> None:
        cells = []
        for scorer in SCORERS:
            met, figure = verdict(scorer, results[scorer])
            cells.append(f"{'met' if met else '**not met**'} ({figure})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    def same(scorer: str) -> list[Figures]:
        return results[SAME_GUARANTEE_PIPE[scorer]]

    def rate_ratio(scorer: str, runs: list[Figures]) -> tuple[bool, str]:
        reference = statistics.median(r.rate for r in same(scorer))
        ratio = statistics.median(r.rate for r in runs) / reference
        return ratio >= 0.8, f"{ratio:.2f}x"

    def cpu_ratio(scorer: str, runs: list[Figures]) -> tuple[bool, str]:
        reference = statistics.median(r.cpu_us for r in same(scorer))
        ratio = statistics.median(r.cpu_us for r in runs) / reference
        return ratio <= 1.5, f"{ratio:.2f}x"

    def p99_ratio(load: float) -> Verdict:
        def verdict(scorer: str, runs: list[Figures]) -> tuple[bool, str]:
            mine, pipes = median_latency(runs, load), median_latency(same(scorer), load)
            if mine is None or pipes is None:
                return False, "saturated"
            ratio = mine[2] / pipes[2]
            return ratio <= 2.0, f"p99 {ratio:.1f}x"

        return verdict

    row("throughput ≥ 0.8x", rate_ratio)
    row("CPU per event ≤ 1.5x", cpu_ratio)
    row("at 25% of the pipe's rate: keeps up, p99 ≤ 2x", p99_ratio(0.25))
    row("at 50% of the pipe's rate: keeps up, p99 ≤ 2x", p99_ratio(0.50))
    return lines


def write_section(path: Path, heading: str, body: str) -> None:
    """Replace (or add) the ``## heading`` section of ``path``, leaving the others alone.

    The section's ``###`` subsections (written by hand) are kept after the new body."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == f"## {heading}"), None)
    section = [f"## {heading}", "", *body.splitlines(), ""]
    if start is None:
        lines = [*lines, "", *section]
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        kept = next((i for i in range(start + 1, end) if lines[i].startswith("### ")), end)
        lines = [*lines[:start], *section, *lines[kept:end], *lines[end:]]
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def ab_table(
    results: dict[str, list[Figures]],
    loads: dict[float, float],
    baseline: str,
    exactly_once: bool = False,
) -> str:
    """This scorer against the baseline's, repetition by repetition (they ran one after
    the other in each), and the medians of the ratios; ``exactly_once``: both scorers
    in that mode (``scorer-eos`` against the baseline)."""
    ours = results["scorer-eos" if exactly_once else "scorer"]
    theirs = results[BASELINE]
    mode = "exactly_once" if exactly_once else "at-least-once"
    lines = [
        f"\nscorer (this checkout) against {BASELINE} ({baseline}), {mode}:",
        "| rep | events/s | baseline | ratio | CPU µs | baseline | ratio | "
        + " | ".join(f"p99 @ {rate:,.0f}/s (baseline)" for rate in loads.values())
        + " |",
        "|---|---:|---:|---:|---:|---:|---:|" + "---|" * len(loads),
    ]
    rate_ratios, cpu_ratios = [], []
    for rep, (a, b) in enumerate(zip(ours, theirs, strict=True), 1):
        rate_ratios.append(a.rate / b.rate)
        cpu_ratios.append(a.cpu_us / b.cpu_us)
        cells = []
        for load in loads:
            x, y = a.latency.get(load), b.latency.get(load)
            cells.append(
                f"{'saturated' if x is None else f'{x[2]:.1f}'} "
                f"({'saturated' if y is None else f'{y[2]:.1f}'})"
            )
        lines.append(
            f"| {rep} | {a.rate:,.0f} | {b.rate:,.0f} | {rate_ratios[-1]:.2f} "
            f"| {a.cpu_us:,.0f} | {b.cpu_us:,.0f} | {cpu_ratios[-1]:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    lines.append(
        f"median ratios: events/s {statistics.median(rate_ratios):.2f}, "
        f"CPU per event {statistics.median(cpu_ratios):.2f}"
    )
    return "\n".join(lines)


def plot(results: dict[str, list[Figures]], loads: dict[float, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(PIPELINES)
    medians = [statistics.median(r.rate for r in results[n]) for n in names]
    left.bar(names, medians, color=COLOURS)
    for i, name in enumerate(names):
        left.scatter([i] * len(results[name]), [r.rate for r in results[name]], color="k", s=12)
    left.set_ylabel("events/s (bars: median, dots: repetitions)")
    left.set_title("Sustained throughput (preloaded topic)")
    for name, colour in zip(names, COLOURS, strict=True):
        xs, p50s, p99s = [], [], []
        for load, rate in loads.items():
            m = median_latency(results[name], load)
            if m is not None:
                xs.append(rate)
                p50s.append(m[0])
                p99s.append(m[2])
        right.plot(xs, p50s, "o-", color=colour, label=f"{name} p50")
        right.plot(xs, p99s, "s--", color=colour, label=f"{name} p99")
    right.set_yscale("log")
    right.set_xlabel("offered load, events/s (25/50/75% of the pipe's rate)")
    right.set_ylabel("end-to-end latency, ms")
    right.set_title("Latency at fixed offered loads (medians)")
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


# ---------------------------------------------------------------- main


def setting_argument(text: str) -> tuple[str, object]:
    """``FIELD=VALUE`` of ``--baseline-setting`` (Settings validates the value); a
    VALUE in brackets is a JSON array (``gc_thresholds=[10000,10,10]``)."""
    field, equals, value = text.partition("=")
    if not equals or not field:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIELD=VALUE")
    if value.startswith("["):
        try:
            return field, json.loads(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return field, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (fewer events, 2 reps)")
    parser.add_argument("--events", type=int, help="results preloaded per throughput run")
    parser.add_argument("--reps", type=int, help="repetitions")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--queries", type=int, default=5000, help="judged queries preloaded")
    parser.add_argument("--seconds", type=float, help="seconds per offered load")
    parser.add_argument(
        "--rates",
        type=float,
        nargs=3,
        help="offered loads in events/s (default: 25/50/75%% of pipe)",
    )
    parser.add_argument(
        "--only",
        choices=(*PIPELINES, *EXTRA, BASELINE),
        action="append",
        help="run only these (pipe-eos-pp and pipe-x2 only when named)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help=f"also run the scorer of the checkout DIR ({BASELINE}, at-least-once) in every "
        "repetition, and print this scorer against it (an A/B on a noisy machine; "
        "`git worktree add DIR COMMIT`); docs/ are left alone",
    )
    parser.add_argument(
        "--baseline-eos",
        action="store_true",
        help=f"with --baseline: {BASELINE} runs exactly_once and is compared with scorer-eos",
    )
    parser.add_argument(
        "--baseline-setting",
        action="append",
        default=[],
        type=setting_argument,
        metavar="FIELD=VALUE",
        help=f"with --baseline: a Settings field of {BASELINE} (e.g. "
        "caught_up_commit_seconds=0.1; with --baseline . an A/B of one setting)",
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy each throughput run into collapsed stacks here"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument(
        "--forward-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the Faust forwarder (BENCH_HOPS=2, BENCH_PROMETHEUS=1, "
        "BENCH_FAUST_SETTINGS=JSON: see bench/stream_forward.py)",
    )
    args = parser.parse_args()
    if args.baseline is not None:
        # The workers run in their own directories: "." there is not this one's.
        args.baseline = args.baseline.resolve()
    # 100,000 results make a throughput run of about 3-4 s at these rates; with 30,000
    # (about 1 s) a repetition of `pipe-eos` ranged 21,000-46,000 events/s in one run,
    # so that the median of three said little (docs/benchmarks.md).
    events = args.events or (3_000 if args.quick else 100_000)
    reps = args.reps or (2 if args.quick else 3)
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    extra = tuple(name for name in EXTRA if name in (args.only or ()))
    names = (*PIPELINES, *extra, BASELINE) if args.baseline else (*PIPELINES, *extra)
    only = args.only or list(names)
    if args.baseline and BASELINE not in only:
        only.append(BASELINE)

    payloads = Payloads.generate(args.queries, pool=5000)
    state_dir = Path(tempfile.mkdtemp(prefix="stream-bench-"))
    info = start_broker(state_dir)
    print(f"broker {info.bootstrap} (state in {state_dir})")
    try:
        scorers = {
            "scorer": scorer_settings(
                info.bootstrap, state_dir, "scorer", partitions=args.partitions
            ),
            "scorer-eos": scorer_settings(
                info.bootstrap,
                state_dir,
                "scorer-eos",
                partitions=args.partitions,
                processing_guarantee="exactly_once",
            ),
        }
        if args.baseline:
            scorers[BASELINE] = scorer_settings(
                info.bootstrap,
                state_dir,
                BASELINE,
                partitions=args.partitions,
                processing_guarantee="exactly_once" if args.baseline_eos else "at_least_once",
                **dict(args.baseline_setting),
            )
        asyncio.run(
            create_topics(
                info.bootstrap,
                args.partitions,
                [
                    f"bench.{name}.{end}"
                    for name in ("pipe", "pipe-eos", "pipe-eos-pp", "pipe-x2", "forward")
                    for end in ("in", "out")
                ]
                + ["bench.pipe-x2.out.second"],
            )
        )
        for settings in scorers.values():
            ensure_topics(settings)
        pipelines = {
            "pipe": pipe_pipeline(info.bootstrap, state_dir),
            "pipe-eos": pipe_pipeline(info.bootstrap, state_dir, exactly_once=True),
            "pipe-eos-pp": pipe_pipeline(
                info.bootstrap, state_dir, exactly_once=True, per_partition=True
            ),
            "pipe-x2": pipe_pipeline(info.bootstrap, state_dir, second_record=True),
            "faust": faust_pipeline(
                info.bootstrap,
                state_dir,
                args.partitions,
                dict(item.split("=", 1) for item in args.forward_env),
            ),
            **{
                name: scorer_pipeline(
                    name, settings, state_dir, args.baseline if name == BASELINE else None
                )
                for name, settings in scorers.items()
            },
        }
        for name, settings in scorers.items():
            if name in only:
                load_qrels_into_worker(settings, state_dir, payloads)
        results: dict[str, list[Figures]] = {name: [] for name in names}
        loads: dict[float, float] = dict(zip(LOADS, args.rates, strict=True)) if args.rates else {}

        def run(name: str, rep: int, into: dict[float, float], warm_up: bool = False) -> Figures:
            """:func:`measure` of one pipeline; a warm-up is throughput only, unprofiled."""
            profile = None if warm_up else args.profile
            return asyncio.run(
                measure(
                    pipelines[name], info.bootstrap, payloads, rep, events, into, seconds,
                    args.partitions, state_dir, info.pid, profile, latency=not warm_up,
                )
            )  # fmt: skip

        # The broker's JVM is cold at first: a pipeline measured on it ran at a
        # quarter of its later rate (the pipe: 7,621 then 30,957 and 31,543 events/s),
        # and the offered loads were set from that. One untimed throughput run each.
        print(f"warm-up: {', '.join(n for n in names if n in only)}")
        for name in names:
            if name in only:
                run(name, -1, {}, warm_up=True)
        for rep in range(reps):
            shift = rep % len(names)
            order = names[shift:] + names[:shift]
            if rep == 0:
                order = ("pipe", *(n for n in order if n != "pipe"))
            print(f"repetition {rep + 1}/{reps}: {', '.join(n for n in order if n in only)}")
            for name in order:
                if name in only:
                    results[name].append(run(name, rep, loads))
    finally:
        stop_broker(state_dir)
    if args.baseline:
        print(ab_table(results, loads, str(args.baseline), args.baseline_eos))
    if set(only) != set(PIPELINES):
        for name in only:
            print(name, [(r.rate, r.cpu_us, r.latency) for r in results[name]])
        return
    meta = {
        "command": f"`bench/stream.py{' --quick' if args.quick else ''}`",
        "repetitions": reps,
        "preloaded results": f"{events:,}",
        "partitions": args.partitions,
        "judged queries": f"{args.queries:,} × 20 judgments",
        "ranked ids": "10-100",
        "seconds per load": seconds,
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    text = table(results, loads, meta)
    print()
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "benchmarks.md", "Streaming", streaming_section(text))
        plot(results, loads, ROOT / "docs" / "img" / "stream-bench.png")


def streaming_section(table_text: str) -> str:
    return "\n".join(
        [
            "`bench/stream.py` runs five pipelines on one local broker with the same payloads",
            "(JSON results of 10-100 ranked ids with facets, all judged) and the same partition",
            "count, each in a process of its own: `pipe` is a bare aiokafka consume → decode →",
            "encode → produce loop (the limit of this client stack), `pipe-eos` the same loop",
            "with Kafka transactions (one producer, a transaction per fetched batch,",
            "read_committed: what exactly-once costs this stack bare), `faust` a stock Faust agent",
            "that forwards events unchanged (what a user would write with Faust, with its 1.5 s",
            "fetch wait), `scorer` and `scorer-eos` the real `scorer worker` with its qrels",
            "preloaded, at-least-once and exactly_once (read_committed). Throughput: results",
            "preloaded into the input topic, then the count over the time from the first to the",
            "last output record; CPU per event from the process's CPU time (a scorer's from",
            "ready on) until the process is idle again (a scorer folds the rollups of its last",
            "batches after their outputs). Each pipeline first gets one untimed run (the",
            "broker's JVM starts cold). Latency: from handing a result to the producer to",
            "receiving its output record, at offered loads of 25/50/75% of the pipe's rate,",
            "once the pipeline is idle after the throughput run. Medians of interleaved",
            "repetitions; the machine is small and shared, so read the ratios, not the absolute",
            "numbers. *saturated*: the offered load is above the pipeline's capacity and the",
            "backlog did not drain in time.",
            "",
            table_text,
            "",
            "![throughput and latency](img/stream-bench.png)",
        ]
    )


if __name__ == "__main__":
    main()
