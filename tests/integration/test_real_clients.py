"""Every result counted once, whatever the producer (DESIGN.md, "Any producer (pinned)").

Real workers driven by producers nobody on the project wrote: librdkafka (through
confluent-kafka) and the Java client from the broker's own jars
(``tests/support/clients.py``). Each test asserts, on its own query, result and run
ids:

- the scored topic, read ``read_committed`` and deduplicated by resultId, holds
  exactly the committed results sent (and, under exactly_once, no duplicate);
- no result of an aborted transaction is scored;
- the run API's count and means equal the Python metric code's
  (``scorer.core.metrics`` and ``scorer.core.rollup``, what ``scorer eval`` runs) on the
  committed results;
- no result whose qrels exist is counted unjudged, nothing valid is dead-lettered
  (the workers' ``scorer_results_total``);
- every worker process is still running at the end.

1. codecs: gzip, snappy, lz4, zstd from each client, in both processing modes;
2. transactions with aborts from each client, in both modes;
3. partitioners: librdkafka's default (consistent_random, crc32), murmur2_random
   and the Java client's RoundRobinPartitioner, results and qrels keyed by
   queryId, one and three workers, across a restart: misplaced records are
   counted (``scorer_misplaced_total{topic}``) and every result is scored;
4. the rollup race: 10 concurrent producers at 400 results/s each; 200 runs of
   100 results with the run list read while they are folded in;
5. records at the broker's size limit (a result, a bad result, a bad qrels
   record) do not crash the worker and end scored or dead-lettered.

One worker per processing mode serves groups 1, 2 and 4; groups 3 and 5 start
their own. Waits are conditions with deadlines: a wait gives up early once its
figure has not moved for ``STALL`` seconds while the worker group has committed
everything it read (the worker is done: the figure will not change). Every test
prints its figures (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from schemas import GoldenQuery, RetrievalResult
from scorer.core.metrics import METRIC_NAMES, retrieval_metrics
from scorer.core.rollup import RunRollup
from scorer.kafka.demo import DemoTraffic
from scorer.kafka.launcher import ensure_jars
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from tests.support.clients import (
    Delivered,
    JavaClient,
    Librdkafka,
    Record,
    TopicReader,
    murmur2_partition,
    topic_max_message_bytes,
    transactional_steps,
)
from tests.support.kafka import settings_for
from tests.support.worker import Worker, uncommitted_records, wait_all_committed

pytestmark = pytest.mark.integration

PARTITIONS = 4
MODES = ("at_least_once", "exactly_once")
CODECS = ("gzip", "snappy", "lz4", "zstd")
STALL = 6.0
"""Seconds a figure may stay still, the group having committed all it read, before a
wait gives up."""
ROUND_ROBIN = "org.apache.kafka.clients.producer.RoundRobinPartitioner"
LIBRDKAFKA = Librdkafka()
MURMUR2 = {"partitioner": "murmur2_random"}
"""librdkafka placed as the Java client and aiokafka place: the tests of groups 1, 2, 4
and 5 keep misplacement (group 3) out of their figures."""


# ---------------------------------------------------------------- workers


def metrics_of(worker: Worker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every ``scorer_`` sample of a worker's /metrics, by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = worker.get("/metrics")
    if status != 200:
        return {}
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.startswith("scorer_"):
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@dataclass
class Stack:
    """Topics of its own, its workers, and readers of the scored and dead-letter topics."""

    settings: Settings
    workers: list[Worker]
    scored: TopicReader
    deadletters: TopicReader
    retired: Counter = field(default_factory=Counter)
    """Samples of worker incarnations stopped on purpose (a restart), kept in totals."""
    crashes: list[str] = field(default_factory=list)
    not_ready: list[int] = field(default_factory=list)
    """Ready workers each time the group settled with some not ready (no partitions)."""

    @classmethod
    def start(cls, bootstrap: str, state_dir: Path, mode: str, workers: int = 1) -> Stack:
        settings = settings_for(
            bootstrap,
            state_dir,
            partitions=PARTITIONS,
            processing_guarantee=mode,
            broker_session_timeout=6.0,
        )
        ensure_topics(settings)
        group = [Worker(settings, state_dir).launch() for _ in range(workers)]
        stack = cls(
            settings,
            group,
            TopicReader(bootstrap, settings.scored_topic, PARTITIONS),
            TopicReader(bootstrap, settings.deadletter_topic, PARTITIONS),
        )
        stack.wait_group()
        return stack

    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap_servers

    def total(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A counter summed over the workers (and their earlier incarnations)."""
        wanted = set((labels or {}).items())
        samples = Counter(self.retired)
        for worker in self.workers:
            samples.update(metrics_of(worker))
        return sum(
            value for (got, tags), value in samples.items() if got == name and wanted <= set(tags)
        )

    def misplaced(self, topic: str, logical: str) -> float:
        """``scorer_misplaced_total`` of one input (labelled by topic name or input name)."""
        return sum(self.total("scorer_misplaced_total", {"topic": t}) for t in (topic, logical))

    def restart(self, index: int) -> None:
        """SIGTERM one worker, start it again, wait until the group has settled."""
        worker = self.workers[index]
        self.retired.update(metrics_of(worker))
        worker.stop()
        worker.launch()
        self.wait_group()

    def wait_group(self, timeout: float = 120.0) -> None:
        """Until every worker is ready, or (a worker the assignment left without
        partitions answers /readyz 503) every one answers /healthz and which are ready
        has not changed for 5 s, at least one being ready."""
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            dead = self.dead()
            assert not dead, dead
            ready = tuple(w.get("/readyz")[0] == 200 for w in self.workers)
            healthy = all(w.get("/healthz")[0] == 200 for w in self.workers)
            if all(ready):
                return
            if ready != last:
                last, since = ready, time.monotonic()
            elif healthy and any(ready) and time.monotonic() - since > 5:
                self.not_ready.append(sum(ready))
                return
            time.sleep(0.3)
        raise AssertionError(f"worker group not ready after {timeout}s: ready {last}")

    def dead(self) -> list[str]:
        return [
            f"worker {w.port} exited with {w.process.returncode}:\n{w.tail(15)}"
            for w in self.workers
            if w.process is not None and w.process.poll() is not None
        ]

    def revive(self) -> None:
        """Start again any worker that died (in an earlier test): each test starts with
        a running group, and a crash is reported by the test that caused it."""
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is not None:
                self.crashes.append(worker.tail(15))
                worker.launch()
        self.wait_group()

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.scored.close()
        self.deadletters.close()


@pytest.fixture(scope="session")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> JavaClient:
    """ScorerProducer.java compiled once per session against the broker's jars."""
    return JavaClient.compile(ensure_jars(), tmp_path_factory.mktemp("java"))


@pytest.fixture(scope="module", params=MODES)
def stack(request, kafka_bootstrap: str, tmp_path_factory) -> Iterator[Stack]:
    """One worker per processing mode, shared by the tests of groups 1, 2 and 4."""
    mode = request.param
    running = Stack.start(kafka_bootstrap, tmp_path_factory.mktemp(f"clients-{mode}"), mode)
    yield running
    running.close()


@pytest.fixture
def shared(stack: Stack) -> Stack:
    stack.revive()
    return stack


def client_of(name: str, java_client: JavaClient):
    return java_client if name == "java" else LIBRDKAFKA


# ---------------------------------------------------------------- traffic


@dataclass
class Traffic:
    """A judged golden set and results over it, every id prefixed by ``tag``."""

    tag: str
    golden: list[GoldenQuery]
    results: list[RetrievalResult]

    @classmethod
    def demo(cls, queries: int, results: int, seed: int, tag: str | None = None) -> Traffic:
        tag = tag or f"t{uuid.uuid4().hex[:8]}"
        demo = DemoTraffic.generate(queries=queries, unjudged_share=0.0, seed=seed)
        golden = [g.model_copy(update={"query_id": f"{tag}-{g.query_id}"}) for g in demo.golden]
        stream = [
            r.model_copy(
                update={
                    "query_id": f"{tag}-{r.query_id}",
                    "result_id": f"{tag}-{r.result_id}",
                    "run_id": f"{tag}-{r.run_id}",
                }
            )
            for r in demo.results(limit=results)
        ]
        return cls(tag, golden, stream)

    def qrels_records(self, settings: Settings) -> list[Record]:
        return [
            Record(settings.qrels_topic, g.query_id.encode(), g.to_json_bytes())
            for g in self.golden
        ]

    def result_records(
        self, settings: Settings, results: Iterable[RetrievalResult] | None = None
    ) -> list[Record]:
        return [
            Record(settings.results_topic, r.query_id.encode(), r.to_json_bytes())
            for r in (self.results if results is None else results)
        ]


def result_id_of(delivered: Delivered) -> str:
    return orjson.loads(delivered.value)["resultId"]


def expected_runs(golden: Sequence[GoldenQuery], results: Iterable[RetrievalResult]) -> dict:
    """Per run, the summary the Python metric code gives (``scorer eval``'s rollup)."""
    by_query = {g.query_id: g for g in golden}
    rollups: dict[str, RunRollup] = {}
    for result in results:
        query = by_query[result.query_id]
        values = retrieval_metrics(result.ranked, query.qrels, result.k or 10)
        facets = {**(query.facets or {}), **(result.facets or {})}
        rollups.setdefault(result.run_id, RunRollup()).add(values, facets)
    return {run: rollup.summary() for run, rollup in rollups.items()}


def aiokafka_send(settings: Settings, records: Sequence[Record]) -> None:
    """Records through the project's own client (murmur2, as ``scorer replay`` sends)."""

    async def run() -> None:
        producer = AIOKafkaProducer(**settings.aiokafka_options(), acks="all")
        await producer.start()
        try:
            futures = [await producer.send(r.topic, r.value, key=r.key) for r in records]
            for future in futures:
                await future
        finally:
            await producer.stop()

    asyncio.run(run())


# ---------------------------------------------------------------- waiting and checking


def wait_settled(
    stack: Stack,
    done: Callable[[], bool],
    figure: Callable[[], Hashable],
    timeout: float = 120.0,
) -> bool:
    """Until ``done()``; False once ``figure()`` stalled for ``STALL`` seconds with the
    group's inputs all committed, or at the deadline."""
    deadline = time.monotonic() + timeout
    last, since = figure(), time.monotonic()
    topics = [stack.settings.results_topic, stack.settings.qrels_topic]
    while time.monotonic() < deadline:
        if done():
            return True
        now = figure()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 3 and stack.dead():
            return done()  # a dead worker moves no figure
        elif time.monotonic() - since > STALL and not uncommitted_records(stack.settings, topics):
            return done()
        time.sleep(0.25)
    return done()


def load_qrels(
    stack: Stack, send: Callable[[], object], count: int, timeout: float = 60.0
) -> float:
    """Send a golden set (``send``) and wait until the workers stored ``count`` queries
    more; the number stored is returned (checked by the tests' figures, not here)."""
    before = stack.total("scorer_qrels_total", {"outcome": "stored"})
    send()

    def stored() -> float:
        return stack.total("scorer_qrels_total", {"outcome": "stored"}) - before

    wait_settled(stack, lambda: stored() >= count, stored, timeout)
    return stored()


def scored_copies(stack: Stack, tag: str) -> Counter[str]:
    """Copies per resultId on the scored topic (read committed) of queries ``tag``-*."""
    prefix = f"{tag}-".encode()
    return Counter(
        orjson.loads(record.value())["resultId"]
        for record in stack.scored.records(lambda r: (r.key() or b"").startswith(prefix))
    )


def api_run(worker: Worker, run_id: str) -> dict | None:
    status, body = worker.get(f"/api/v1/evals/runs/{run_id}/metrics")
    return orjson.loads(body) if status == 200 else None


@dataclass
class Check:
    """What one test found: figures (printed) and problems (asserted empty)."""

    name: str
    figures: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def expect(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)

    def finish(self) -> None:
        print(f"\n[{self.name}] {self.figures}")
        assert not self.problems, (
            f"{len(self.problems)} problems: " + " | ".join(self.problems) + f" || {self.figures}"
        )


def check_counted_once(
    check: Check,
    stack: Stack,
    traffic: Traffic,
    delivered: Sequence[Delivered],
    before: dict[str, float],
) -> None:
    """The assertions of every test of this module, on ``traffic``'s ids (see the module
    docstring); ``before`` holds the counters as they were before the test sent."""
    mode = stack.settings.processing_guarantee
    committed = {result_id_of(d) for d in delivered if d.committed}
    aborted = {result_id_of(d) for d in delivered if not d.committed} - committed
    check.figures.update(sent=len(delivered), committed=len(committed), aborted=len(aborted))

    def copies() -> Counter[str]:
        return scored_copies(stack, traffic.tag)

    wait_settled(stack, lambda: committed <= set(copies()), lambda: len(copies()))
    try:
        wait_all_committed(stack.settings, 60)
    except AssertionError as error:
        check.problems.append(str(error))
    stack.scored.caught_up()
    got = copies()
    scored = set(got)
    duplicates = sum(n - 1 for n in got.values())
    check.figures.update(
        scored_distinct=len(scored & committed),
        aborted_scored=len(scored & aborted),
        missing=len(committed - scored),
        duplicates=duplicates,
    )
    check.expect(
        scored & committed == committed,
        f"scored {len(scored & committed)} of {len(committed)} committed results "
        f"(missing e.g. {sorted(committed - scored)[:3]})",
    )
    check.expect(
        not scored & aborted,
        f"{len(scored & aborted)} results of aborted transactions scored "
        f"(e.g. {sorted(scored & aborted)[:3]})",
    )
    check.expect(not scored - committed - aborted, f"unknown results scored: {scored - committed}")
    if mode == "exactly_once":
        check.expect(duplicates == 0, f"{duplicates} duplicates under exactly_once")

    results = [r for r in traffic.results if r.result_id in committed]
    check_run_api(check, stack, traffic.golden, results)

    unjudged = stack.total("scorer_results_total", {"outcome": "unjudged"}) - before["unjudged"]
    deadletter = (
        stack.total("scorer_results_total", {"outcome": "deadletter"}) - before["deadletter"]
    )
    check.figures.update(unjudged=unjudged, deadletter=deadletter)
    check.expect(unjudged == 0, f"{unjudged:.0f} results counted unjudged (their qrels exist)")
    check.expect(deadletter == 0, f"{deadletter:.0f} valid results dead-lettered")
    check_alive(check, stack)


def check_run_api(
    check: Check, stack: Stack, golden: Sequence[GoldenQuery], results: Sequence[RetrievalResult]
) -> None:
    """Per run, the run API's count equals the results' and its means the metric code's."""
    expected = expected_runs(golden, results)
    worker = stack.workers[-1]

    def counts() -> dict[str, int | None]:
        return {run: (api_run(worker, run) or {}).get("count") for run in expected}

    wanted = {run: summary["count"] for run, summary in expected.items()}
    wait_settled(stack, lambda: counts() == wanted, lambda: tuple(counts().values()), 90)
    got = counts()
    check.figures["run_api_counts"] = {
        run.removeprefix(f"{run.split('-')[0]}-"): f"{got[run]}/{wanted[run]}" for run in expected
    }
    check.expect(got == wanted, f"run API counts {got}, expected {wanted}")
    for run, summary in expected.items():
        document = api_run(worker, run)
        if document is None or document["count"] != summary["count"]:
            continue
        for alias in METRIC_NAMES:
            mean, want = document["metrics"][alias], summary["metrics"][alias]
            check.expect(
                mean == pytest.approx(want, abs=1e-9), f"{run} {alias}: API {mean}, expected {want}"
            )


def check_alive(check: Check, stack: Stack) -> None:
    dead = stack.dead()
    check.figures["workers_running"] = f"{len(stack.workers) - len(dead)}/{len(stack.workers)}"
    check.expect(not dead, "worker died: " + " // ".join(dead))


def counters(stack: Stack) -> dict[str, float]:
    return {
        outcome: stack.total("scorer_results_total", {"outcome": outcome})
        for outcome in ("scored", "unjudged", "deadletter")
    }


# ---------------------------------------------------------------- 1. codecs


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_every_codec_is_scored_once(shared: Stack, java_client, client: str, codec: str):
    producer = client_of(client, java_client)
    config = {"compression.type": codec, **(MURMUR2 if client == "librdkafka" else {})}
    traffic = Traffic.demo(queries=60, results=200, seed=len(codec))
    check = Check(f"{client} {codec} {shared.settings.processing_guarantee}")
    before = counters(shared)
    stored = load_qrels(
        shared,
        lambda: producer.send(shared.bootstrap, traffic.qrels_records(shared.settings), config),
        len(traffic.golden),
    )
    check.figures["qrels_stored"] = f"{stored:.0f}/{len(traffic.golden)}"
    check.expect(stored == len(traffic.golden), f"qrels stored {stored:.0f}")
    delivered = producer.send(shared.bootstrap, traffic.result_records(shared.settings), config)
    check_counted_once(check, shared, traffic, delivered, before)
    check.finish()


# ---------------------------------------------------------------- 2. transactions


TRANSACTIONS = (True, False, True, True, False, True, False, True, True, False)
"""Commit (True) or abort each transaction of 20 results: 6 committed, 4 aborted."""


@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_results_of_aborted_transactions_are_never_scored(shared: Stack, java_client, client: str):
    producer = client_of(client, java_client)
    placement = MURMUR2 if client == "librdkafka" else {}
    traffic = Traffic.demo(queries=50, results=20 * len(TRANSACTIONS), seed=3)
    check = Check(f"{client} transactions {shared.settings.processing_guarantee}")
    before = counters(shared)
    stored = load_qrels(
        shared,
        lambda: producer.send(shared.bootstrap, traffic.qrels_records(shared.settings), placement),
        len(traffic.golden),
    )
    check.figures["qrels_stored"] = f"{stored:.0f}/{len(traffic.golden)}"
    records = traffic.result_records(shared.settings)
    steps = transactional_steps(
        (records[20 * i : 20 * (i + 1)], commit) for i, commit in enumerate(TRANSACTIONS)
    )
    config = {"transactional.id": f"{traffic.tag}-{client}", **placement}
    delivered = producer.send(shared.bootstrap, steps, config)
    check_counted_once(check, shared, traffic, delivered, before)
    check.finish()


# ---------------------------------------------------------------- 3. partitioners


PARTITIONERS = {
    "librdkafka-consistent_random": ("librdkafka", {}),
    "librdkafka-murmur2_random": ("librdkafka", MURMUR2),
    "java-RoundRobinPartitioner": ("java", {"partitioner.class": ROUND_ROBIN}),
}


@pytest.fixture(scope="module", params=[1, 3], ids=["1worker", "3workers"])
def group(request, kafka_bootstrap: str, tmp_path_factory) -> Iterator[Stack]:
    count = request.param
    running = Stack.start(
        kafka_bootstrap, tmp_path_factory.mktemp(f"placed-{count}"), "at_least_once", count
    )
    yield running
    running.close()


def misplaced(delivered: Iterable[Delivered]) -> int:
    return sum(1 for d in delivered if d.partition != murmur2_partition(d.key, PARTITIONS))


@pytest.mark.parametrize("partitioner", list(PARTITIONERS))
def test_misplaced_records_are_counted_and_scored_across_a_restart(
    group: Stack, java_client, partitioner: str
):
    """Half the queries have their qrels sent by the same client and partitioner as
    their results, half by the project's producer (murmur2, as ``scorer replay``);
    half the results go before a worker restarts, half after."""
    group.revive()
    client, config = PARTITIONERS[partitioner]
    producer = client_of(client, java_client)
    settings = group.settings
    traffic = Traffic.demo(queries=60, results=160, seed=17)
    check = Check(f"{partitioner} x{len(group.workers)} workers")
    before = counters(group)
    misplaced_before = {
        "results": group.misplaced(settings.results_topic, "results"),
        "qrels": group.misplaced(settings.qrels_topic, "qrels"),
    }
    qrels = traffic.qrels_records(settings)
    same, project = qrels[::2], qrels[1::2]
    sent_qrels: list[Delivered] = []

    def send_qrels() -> None:
        sent_qrels.extend(producer.send(group.bootstrap, same, config))
        aiokafka_send(settings, project)

    stored = load_qrels(group, send_qrels, len(qrels))
    check.figures["qrels_stored"] = f"{stored:.0f}/{len(qrels)}"
    records = traffic.result_records(settings)
    half = len(records) // 2
    delivered = producer.send(group.bootstrap, records[:half], config)
    wait_settled(
        group,
        lambda: len(scored_copies(group, traffic.tag)) >= half,
        lambda: len(scored_copies(group, traffic.tag)),
        60,
    )
    check.figures["scored_before_restart"] = f"{len(scored_copies(group, traffic.tag))}/{half}"
    group.restart(0)
    if group.not_ready:
        check.figures["ready_after_restart"] = f"{group.not_ready[-1]}/{len(group.workers)}"
    delivered += producer.send(group.bootstrap, records[half:], config)
    check_counted_once(check, group, traffic, delivered, before)

    wrong = {"results": misplaced(delivered), "qrels": misplaced(sent_qrels)}
    counted = {
        "results": group.misplaced(settings.results_topic, "results") - misplaced_before["results"],
        "qrels": group.misplaced(settings.qrels_topic, "qrels") - misplaced_before["qrels"],
    }
    check.figures.update(misplaced_sent=wrong, misplaced_counted=counted)
    for topic in ("results", "qrels"):
        if wrong[topic]:
            check.expect(
                counted[topic] >= wrong[topic],
                f"scorer_misplaced_total for {topic}: {counted[topic]:.0f}, "
                f"{wrong[topic]} {topic} records sent off their murmur2 partition",
            )
        else:
            check.expect(counted[topic] == 0, f"{counted[topic]:.0f} {topic} counted misplaced")
    check.finish()


# ---------------------------------------------------------------- 4. the rollup race


PRODUCERS = 10
PER_PRODUCER = 2_000
RATE = 400.0


@pytest.mark.parametrize("stack", ["at_least_once"], indirect=True)
@pytest.mark.parametrize("repetition", [1, 2])
def test_concurrent_producers_are_each_counted_once(shared: Stack, repetition: int):
    traffic = Traffic.demo(queries=200, results=PRODUCERS * PER_PRODUCER, seed=40 + repetition)
    check = Check(f"{PRODUCERS} producers x {PER_PRODUCER} at {RATE:.0f}/s, #{repetition}")
    before = counters(shared)
    stored = load_qrels(
        shared,
        lambda: LIBRDKAFKA.send(shared.bootstrap, traffic.qrels_records(shared.settings), MURMUR2),
        len(traffic.golden),
    )
    check.figures["qrels_stored"] = f"{stored:.0f}/{len(traffic.golden)}"
    records = traffic.result_records(shared.settings)
    slices = [records[i::PRODUCERS] for i in range(PRODUCERS)]
    delivered: list[list[Delivered]] = [[] for _ in slices]
    errors: list[BaseException] = []

    def feed(index: int) -> None:
        try:
            delivered[index] = LIBRDKAFKA.send(shared.bootstrap, slices[index], MURMUR2, rate=RATE)
        except BaseException as error:
            errors.append(error)

    started = time.monotonic()
    threads = [threading.Thread(target=feed, args=(i,)) for i in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    check.figures["send_seconds"] = round(time.monotonic() - started, 1)
    assert not errors, errors
    check_counted_once(check, shared, traffic, [d for part in delivered for d in part], before)
    check.finish()


RUNS = 200
QUERIES = 100
CHUNK = 30


def ranking(rng: random.Random, query: GoldenQuery) -> list[str]:
    found = [doc for doc in query.qrels if rng.random() < 0.5][:6]
    ranked = found + [f"{query.query_id}-x{i:03d}" for i in range(10 - len(found))]
    rng.shuffle(ranked)
    return ranked


def run_list(worker: Worker) -> tuple[int, dict[str, int]]:
    """The run list (every page): status, and count per run id."""
    runs: dict[str, int] = {}
    offset: int | None = 0
    while offset is not None:
        status, body = worker.get(f"/api/v1/evals/runs?limit=500&offset={offset}")
        if status != 200:
            return status, runs
        page = orjson.loads(body)
        runs.update({run["runId"]: run["count"] for run in page["runs"]})
        offset = page["nextOffset"]
    return 200, runs


@pytest.mark.parametrize("stack", ["at_least_once"], indirect=True)
def test_many_runs_read_while_folded_count_exactly(shared: Stack):
    """200 runs x 100 queries, one result per query and run, sent in chunks of 30
    queries with the run list read between chunks."""
    tag = f"t{uuid.uuid4().hex[:8]}"
    demo = DemoTraffic.generate(queries=QUERIES, unjudged_share=0.0, seed=77)
    golden = [g.model_copy(update={"query_id": f"{tag}-{g.query_id}"}) for g in demo.golden]
    rng = random.Random(78)
    results = [
        RetrievalResult(
            result_id=f"{tag}-r{run:03d}-{query.query_id}",
            run_id=f"{tag}-r{run:03d}",
            query_id=query.query_id,
            ranked=ranking(rng, query),
        )
        for query in golden
        for run in range(RUNS)
    ]
    traffic = Traffic(tag, golden, results)
    check = Check(f"{RUNS} runs x {QUERIES} results, list read every {CHUNK} queries")
    before = counters(shared)
    stored = load_qrels(
        shared,
        lambda: LIBRDKAFKA.send(shared.bootstrap, traffic.qrels_records(shared.settings), MURMUR2),
        len(golden),
    )
    check.figures["qrels_stored"] = f"{stored:.0f}/{len(golden)}"
    delivered: list[Delivered] = []
    reads = []
    for first in range(0, QUERIES, CHUNK):
        chunk = results[first * RUNS : (first + CHUNK) * RUNS]
        delivered += LIBRDKAFKA.send(
            shared.bootstrap, traffic.result_records(shared.settings, chunk), MURMUR2
        )
        status, runs = run_list(shared.workers[0])
        reads.append((status, sum(1 for run in runs if run.startswith(tag))))
    check.figures["list_reads"] = reads
    check_counted_once(check, shared, traffic, delivered, before)
    status, runs = run_list(shared.workers[0])
    ours = {run: count for run, count in runs.items() if run.startswith(tag)}
    short = {run: count for run, count in ours.items() if count != QUERIES}
    check.figures["run_list"] = f"{len(ours)} runs listed, {len(short)} not at {QUERIES}"
    check.expect(status == 200 and len(ours) == RUNS, f"run list {status}: {len(ours)} runs")
    check.expect(not short, f"run list counts off: {dict(list(short.items())[:5])}")
    # The run API's check above prints only a summary for 200 runs.
    counts = check.figures.pop("run_api_counts")
    wrong = {run: c for run, c in counts.items() if c != f"{QUERIES}/{QUERIES}"}
    check.figures["run_api"] = (
        f"{RUNS - len(wrong)}/{RUNS} runs exact; off: {dict(list(wrong.items())[:5])}"
    )
    check.finish()


# ---------------------------------------------------------------- 5. size limits


SIZE_CASES = ("result", "bad-result", "bad-qrels")


def oversized(case: str, settings: Settings, tag: str, size: int, query: GoldenQuery) -> Record:
    """A record of ``size`` bytes (value): a valid result padded with a field the schema
    ignores, or undecodable bytes on the results or qrels topic, each naming ``tag``."""
    marker = f"{tag}-big".encode()
    if case == "result":
        result = RetrievalResult(
            result_id=f"{tag}-big",
            run_id=f"{tag}-big-run",
            query_id=query.query_id,
            ranked=list(query.qrels)[:10],
        )
        document = orjson.loads(result.to_json_bytes())
        document["padding"] = ""
        overhead = len(orjson.dumps(document))
        document["padding"] = "x" * (size - overhead)
        value = orjson.dumps(document)
        return Record(settings.results_topic, query.query_id.encode(), value)
    value = b"\xff" + marker + b"\x00" * (size - len(marker) - 1)
    topic = settings.results_topic if case == "bad-result" else settings.qrels_topic
    return Record(topic, marker, value)


@pytest.mark.parametrize("case", SIZE_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_a_record_at_the_size_limit_does_not_stop_the_worker(
    kafka_bootstrap: str, tmp_path: Path, mode: str, case: str
):
    stack = Stack.start(kafka_bootstrap, tmp_path, mode)
    try:
        settings = stack.settings
        limit = topic_max_message_bytes(kafka_bootstrap, settings.results_topic)
        size = limit - 400  # the value; key and the batch's framing take the rest
        traffic = Traffic.demo(queries=40, results=80, seed=9)
        check = Check(f"{case} of {size:,} bytes (limit {limit:,}) {mode}")
        before = counters(stack)
        config = {**MURMUR2, "message.max.bytes": 2 * limit}
        qrels = traffic.qrels_records(settings)
        stored = load_qrels(stack, lambda: LIBRDKAFKA.send(kafka_bootstrap, qrels[:20], config), 20)
        check.figures["qrels_stored_before"] = f"{stored:.0f}/20"
        big = oversized(case, settings, traffic.tag, size, traffic.golden[0])
        (sent,) = LIBRDKAFKA.send(kafka_bootstrap, [big], config)
        check.figures["big_record"] = f"{sent.topic}/{sent.partition}@{sent.offset}"
        # Later qrels (their results are scored only if the qrels still get stored)
        # and later results, over all 40 queries.
        stored = load_qrels(stack, lambda: LIBRDKAFKA.send(kafka_bootstrap, qrels[20:], config), 20)
        check.figures["qrels_stored_after"] = (
            "n/a (worker dead)" if stack.dead() else f"{stored:.0f}/20"
        )
        later = LIBRDKAFKA.send(kafka_bootstrap, traffic.result_records(settings), config)

        later_ids = {result_id_of(d) for d in later}

        def found() -> list[str]:
            where = []
            if case == "result" and f"{traffic.tag}-big" in scored_copies(stack, traffic.tag):
                where.append("scored")
            for record in stack.deadletters.records(lambda r: r.key() == sent.key):
                headers = {value for _, value in record.headers() or []}
                if str(sent.offset).encode() in headers or big.value[:100] in record.value():
                    where.append(f"deadletter({len(record.value()):,} bytes)")
            return where

        def done() -> bool:
            return bool(found()) and later_ids <= set(scored_copies(stack, traffic.tag))

        wait_settled(stack, done, lambda: (len(found()), len(scored_copies(stack, traffic.tag))))
        scored = set(scored_copies(stack, traffic.tag))
        check.figures.update(
            big_record_ends=found() or "nowhere",
            later_scored=f"{len(later_ids & scored)}/{len(later_ids)}",
        )
        check.expect(bool(found()), "the record at the limit is neither scored nor dead-lettered")
        check.expect(
            later_ids <= scored, f"later results scored: {len(later_ids & scored)}/{len(later_ids)}"
        )
        unjudged = stack.total("scorer_results_total", {"outcome": "unjudged"})
        check.figures["unjudged"] = unjudged - before["unjudged"]
        check.expect(unjudged == before["unjudged"], f"{unjudged:.0f} counted unjudged")
        check_alive(check, stack)
        check.finish()
    finally:
        stack.close()
