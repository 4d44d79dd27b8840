"""Prometheus rules and the Grafana dashboard against a real Prometheus.

``promtool`` checks the configs and rules. Then one stack serves the module:
a real broker, a ``scorer worker`` process fed with ``scorer replay``, and
Debian's ``prometheus`` scraping it every second with the project's rules
(evaluated every second). Every PromQL expression of the rule files and the
dashboard is evaluated through the HTTP API and must return series, and the
recorded rolling means must equal the means of the scored events read back
from the scored topic.

Why a warm-up: a histogram child is created by its first observation, so the
first scrape of a (facet, value) series already holds results that ``rate()``
cannot see (it counts increases between samples), and a first scrape in the
middle of a burst would split it unpredictably. So the worker first scores one
perfect result per golden query with nobody scraping it; only then does
Prometheus get it as a target, and only after Prometheus has scraped that
state is the measured traffic sent. Expected means are over the measured
traffic. In production this is the first scrape interval of a new facet value
after a worker start.

Set ``SCORER_PLOT_PNG=path`` to draw the rolling curves from this run
(``bench/plot_prometheus.py``).
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import yaml
from aiokafka import AIOKafkaProducer

from schemas import GoldenQuery, RetrievalResult, ScoredResult
from scorer.analysis.risk_coverage import RiskCoverage
from scorer.core.metrics import MetricValues
from scorer.kafka.demo import DemoTraffic
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from scorer.stream.telemetry import ALL, METRIC_SERIES
from tests.integration.prom_support import (
    JOB,
    PROMETHEUS_DIR,
    RULES_DIR,
    Expression,
    PrometheusServer,
    QueryError,
    binary,
    comparisons_as_bool,
    dashboard_expressions,
    install_config,
    label_values_call,
    rule_expressions,
    substitute,
    write_targets,
)
from tests.support.kafka import settings_for
from tests.support.worker import SCORER, Worker, consume, worker_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PARKING_TTL = 3.0
MEASURED_RESULTS = 600
BAD_RESULTS = (b"{not json", b'{"resultId": "r-only"}', b"[]")
BAD_GOLDEN = (b'{"queryId": "no-qrels"}',)
DASHBOARD_VARIABLES = {"facet": "type", "value": ".*", "__rate_interval": "1m"}
MEASURED_WINDOWS = ("5m", "1h")
TOLERANCE = 1e-9


def promtool() -> str:
    try:
        return binary("promtool")
    except FileNotFoundError as error:
        pytest.fail(str(error), pytrace=False)


def test_promtool_accepts_both_configs_and_all_rules() -> None:
    for config in ("prometheus.yml", "prometheus.local.yml"):
        checked = subprocess.run(
            [promtool(), "check", "config", str(PROMETHEUS_DIR / config)],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    rule_files = sorted(str(path) for path in RULES_DIR.glob("*.yml"))
    checked = subprocess.run(
        [promtool(), "check", "rules", *rule_files], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("SUCCESS") == len(rule_files) == 2


def test_rules_follow_the_naming_convention_and_alerts_are_documented() -> None:
    for expression in rule_expressions():
        name = expression.origin.rsplit(": ", 1)[1]
        if expression.kind == "record":
            level, metric, operations = name.split(":")
            assert level and metric.startswith(("scorer_", "retrieval_scorer_")) and operations
    for path in RULES_DIR.glob("*.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    assert rule["annotations"]["summary"], rule["alert"]
                    assert rule["annotations"]["description"], rule["alert"]
                    assert rule["labels"]["severity"] in ("warning", "critical")


def test_dashboard_uses_only_its_own_variables_and_no_run_id() -> None:
    expressions = dashboard_expressions()
    assert len(expressions) > 20
    for expression in expressions:
        assert "run_id" not in expression.promql, expression.origin
        assert "runId" not in expression.promql, expression.origin
        leftover = substitute(expression.promql, DASHBOARD_VARIABLES)
        assert "$" not in leftover, f"{expression.origin}: unknown variable in {leftover}"


def test_comparisons_turn_into_bool_only_at_the_top_level() -> None:
    assert comparisons_as_bool('a{x!="1"} > 0.9 * b and c >= 100') == (
        'a{x!="1"} > bool 0.9 * b and c >= bool 100'
    )
    assert comparisons_as_bool("up == bool 0") == "up == bool 0"
    assert comparisons_as_bool("count(x > 1) < 2") == "count(x > 1) < bool 2"


@dataclass
class LiveStack:
    """The running stack and what the test sent through it."""

    prometheus: PrometheusServer
    worker: Worker
    settings: Settings
    measured: list[ScoredResult]
    """Scored events of the measured traffic, read back from the scored topic."""
    measured_scored: int
    measured_unjudged: int
    sent_results: int
    """Every event sent to the results topic: warm-up, measured and bad ones."""
    sent_scored: int
    """Results of the warm-up and measured traffic that had qrels."""


def golden_set() -> list[GoldenQuery]:
    """Demo golden queries that each have a relevant id (so a perfect ranking scores > 0)."""
    golden = DemoTraffic.generate(queries=60, seed=11).golden
    return [query for query in golden if any(grade >= 1 for grade in query.qrels.values())]


def perfect_result(query: GoldenQuery, run_id: str = "warmup") -> RetrievalResult:
    relevant = sorted((doc for doc, g in query.qrels.items() if g >= 1), key=query.qrels.get)
    return RetrievalResult(
        result_id=f"{run_id}-{query.query_id}",
        run_id=run_id,
        query_id=query.query_id,
        ranked=relevant[::-1][:10],
    )


WATCHED = (("watch-base", "watch-worse"), ("watch-aa-1", "watch-aa-2"))
"""A candidate that lost everything, and an A/A pair (the same rankings twice)."""


def watched_results(golden: list[GoldenQuery]) -> list[RetrievalResult]:
    """The watched pairs' traffic: per query, the perfect ranking for the baseline and
    both A/A runs, and a ranking of nothing relevant for the worse candidate."""
    results = []
    for query in golden:
        for run_id in ("watch-base", "watch-aa-1", "watch-aa-2"):
            results.append(perfect_result(query, run_id))
        results.append(
            RetrievalResult(
                result_id=f"watch-worse-{query.query_id}",
                run_id="watch-worse",
                query_id=query.query_id,
                ranked=["nothing-relevant"],
            )
        )
    return results


def write_jsonl(path: Path, events: list[GoldenQuery] | list[RetrievalResult]) -> Path:
    path.write_bytes(b"".join(event.to_json_bytes() + b"\n" for event in events))
    return path


def replay(settings: Settings, *args: str) -> None:
    completed = subprocess.run(
        [SCORER, "replay", *args], env=worker_env(settings), capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr


def produce_raw(settings: Settings, topic: str, values: tuple[bytes, ...]) -> None:
    """Send ``values`` unvalidated (the worker must dead-letter them)."""

    async def send() -> None:
        producer = AIOKafkaProducer(**settings.aiokafka_options(), acks="all")
        await producer.start()
        try:
            for index, value in enumerate(values):
                await producer.send_and_wait(topic, key=f"bad-{index}".encode(), value=value)
        finally:
            await producer.stop()

    asyncio.run(send())


@pytest.fixture(scope="module")
def live(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    workdir = tmp_path_factory.mktemp("prometheus-stack")
    settings = settings_for(
        kafka_bootstrap, workdir, partitions=2, parking_ttl_seconds=PARKING_TTL,
        watch_pairs=WATCHED, watch_seconds=1.0,
    )  # fmt: skip
    ensure_topics(settings)
    worker = Worker(settings, workdir)
    prometheus = None
    try:
        worker.start()
        config = install_config(workdir / "prometheus", targets=[])
        prometheus = PrometheusServer(config, workdir / "prometheus").start()

        golden = golden_set()
        # The watched pairs' results go with the warm-up: before the windows' first scrape.
        warmup = [perfect_result(query) for query in golden] + watched_results(golden)
        replay(
            settings,
            "--golden", str(write_jsonl(workdir / "golden.jsonl", golden)),
            "--results", str(write_jsonl(workdir / "warmup.jsonl", warmup)),
        )  # fmt: skip
        wait_for_worker(worker, len(warmup))
        write_targets(workdir / "prometheus", [f"127.0.0.1:{worker.port}"])
        prometheus.wait_until(f'up{{job="{JOB}"}}', 1.0, timeout=30)
        prometheus.wait_until(
            'sum(scorer_retrieval_ndcg_at_10_count{facet="all"})', len(warmup), timeout=30
        )
        time.sleep(5.0)  # more scrapes of the warm-up state before the measured traffic

        traffic = DemoTraffic(golden=golden, unjudged_share=0.25, seed=11)
        results = list(traffic.results(limit=MEASURED_RESULTS))
        judged_ids = {query.query_id for query in golden}
        judged = [result for result in results if result.query_id in judged_ids]
        replay(settings, "--results", str(write_jsonl(workdir / "results.jsonl", results)))
        produce_raw(settings, settings.results_topic, BAD_RESULTS)
        produce_raw(settings, settings.qrels_topic, BAD_GOLDEN)

        scored_total = len(warmup) + len(judged)
        unjudged_total = len(results) - len(judged)
        measured_scored = len(judged)
        records = consume(settings, settings.scored_topic, scored_total, timeout=120)
        scored = [ScoredResult.model_validate_json(record.value) for record in records]
        measured_ids = {result.result_id for result in judged}
        measured = [event for event in scored if event.result_id in measured_ids]
        assert len(scored) == scored_total and len(measured) == len(judged)

        prometheus.wait_until(
            'sum(scorer_retrieval_ndcg_at_10_count{facet="all"})', scored_total, timeout=60
        )
        prometheus.wait_until(
            'sum(scorer_results_total{outcome="unjudged"})', unjudged_total, timeout=60
        )
        prometheus.wait_until(
            'sum(scorer_results_total{outcome="deadletter"})', len(BAD_RESULTS), timeout=60
        )
        prometheus.wait_until(
            'sum(scorer_qrels_total{outcome="deadletter"})', len(BAD_GOLDEN), timeout=60
        )
        time.sleep(3.0)  # rule evaluations after the last change
        yield LiveStack(
            prometheus, worker, settings, measured, measured_scored, unjudged_total,
            sent_results=len(warmup) + len(results) + len(BAD_RESULTS), sent_scored=scored_total,
        )  # fmt: skip
        plot_to = os.environ.get("SCORER_PLOT_PNG")
        if plot_to:
            subprocess.run(
                [sys.executable, str(ROOT / "bench" / "plot_prometheus.py"),
                 "--url", prometheus.url, "--minutes", "5", "--out", plot_to],
                check=True,
            )  # fmt: skip
    finally:
        if prometheus is not None:
            prometheus.stop()
        worker.stop()


def wait_for_worker(worker: Worker, scored: int, timeout: float = 60.0) -> None:
    """Wait until the worker's own /metrics count ``scored`` results."""
    deadline = time.monotonic() + timeout
    while worker.metric("scorer_results_total", {"outcome": "scored"}) != scored:
        assert time.monotonic() < deadline, f"worker did not score {scored} results in time"
        time.sleep(0.2)


def expected_means(events: list[ScoredResult], allowlist: tuple[str, ...]) -> dict:
    """``{(metric, facet, value): mean}`` as the worker labels each scored event."""
    sums: dict[tuple[str, str, str], float] = defaultdict(float)
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for event in events:
        pairs = [(ALL, ALL)] + [(f, v) for f, v in event.facets.items() if f in allowlist]
        for metric in METRIC_SERIES:
            group = (
                event.retrieval_metrics
                if metric in type(event.retrieval_metrics).model_fields
                else event.judgment_metrics
            )
            value = float(getattr(group, metric))
            for facet, label_value in pairs:
                sums[metric, facet, label_value] += value
                counts[metric, facet, label_value] += 1
    return {key: sums[key] / counts[key] for key in sums}


@pytest.mark.parametrize("window", MEASURED_WINDOWS)
def test_rolling_means_equal_the_means_of_the_scored_events(live: LiveStack, window: str) -> None:
    expected = expected_means(live.measured, live.settings.facet_allowlist)
    assert {facet for _, facet, _ in expected} == {"all", "type", "popularity", "dynamism"}
    for metric in METRIC_SERIES:
        recorded = live.prometheus.values(
            f"facet_value:scorer_retrieval_{metric}:mean_rate{window}", ("facet", "value")
        )
        wanted = {(f, v): mean for (m, f, v), mean in expected.items() if m == metric}
        assert recorded.keys() == wanted.keys(), metric
        for pair, mean in wanted.items():
            assert math.isclose(recorded[pair], mean, rel_tol=TOLERANCE, abs_tol=1e-12), (
                f"{metric} {pair} over {window}: Prometheus {recorded[pair]!r}, events {mean!r}"
            )


def harmonic(n: int) -> float:
    return math.fsum(1.0 / i for i in range(1, n + 1))


def bucketed_aurcs(events: list[ScoredResult], allowlist: tuple[str, ...], edges) -> dict:
    """``{(series, facet, value): value}`` computed here from the scored events, as the
    recording rules define them but with exact harmonic numbers: per label pair, the
    AURC of miss and of ndcgLoss with each confidence bucket a tie group, and the
    optimal AURC of miss."""
    by_pair: dict[tuple[str, str], list[tuple[int, int, float]]] = defaultdict(list)
    for event in events:
        if event.confidence is None:
            continue
        metrics = event.retrieval_metrics
        loss = (1 - metrics.hit_at_k, 1.0 - metrics.ndcg_at_10)
        bucket = bisect_left(edges, event.confidence)
        pairs = [(ALL, ALL)] + [(f, v) for f, v in event.facets.items() if f in allowlist]
        for pair in pairs:
            by_pair[pair].append((bucket, *loss))
    out = {}
    for (facet, value), rows in by_pair.items():
        n = len(rows)
        for index, series in ((1, "miss_aurc"), (2, "ndcg_loss_aurc")):
            total = above = 0.0
            counted = 0
            for bucket in sorted({row[0] for row in rows}, reverse=True):
                losses = [row[index] for row in rows if row[0] == bucket]
                c, loss_sum = len(losses), math.fsum(losses)
                span = harmonic(counted + c) - harmonic(counted)
                total += (above - counted * loss_sum / c) * span + loss_sum
                counted += c
                above += loss_sum
            out[series, facet, value] = total / n
        misses = sum(row[1] for row in rows)
        hits = n - misses
        optimal = (misses - hits * (harmonic(n) - harmonic(hits))) / n
        out["miss_optimal_aurc", facet, value] = optimal
    return out


# The rules' harmonic numbers (ln(x + 0.5) + gamma) and increase()'s extrapolation
# (the same factor for every counter of a scrape, which the formula's +0.5 terms do
# not cancel) move the recorded values: by at most 1.0e-4 here, over 12 facet values.
AURC_TOLERANCE = 1e-3


@pytest.mark.parametrize("window", MEASURED_WINDOWS)
def test_rolling_aurc_equals_the_bucketed_aurc_of_the_scored_events(live: LiveStack, window):
    settings = live.settings
    expected = bucketed_aurcs(
        live.measured, settings.facet_allowlist, settings.risk_confidence_edges
    )
    assert {facet for _, facet, _ in expected} == {"all", "type", "popularity", "dynamism"}
    for series in ("miss_aurc", "ndcg_loss_aurc", "miss_optimal_aurc"):
        recorded = live.prometheus.values(
            f"facet_value:scorer_retrieval_{series}:rate{window}", ("facet", "value")
        )
        wanted = {(f, v): aurc for (s, f, v), aurc in expected.items() if s == series}
        assert recorded.keys() == wanted.keys(), series
        for pair, aurc in wanted.items():
            assert abs(recorded[pair] - aurc) < AURC_TOLERANCE, (
                f"{series} {pair} over {window}: Prometheus {recorded[pair]!r}, events {aurc!r}"
            )
    # Against the exact AURC (every result its own rank) of all the measured events:
    # 0.05-wide buckets cost little on the demo's confidences (measured: miss 2.6e-5
    # off an AURC of 0.0071, ndcgLoss 0.0035 off 0.474).
    exact = RiskCoverage()
    for event in live.measured:
        metrics = event.retrieval_metrics
        exact.add(
            event.confidence,
            MetricValues(0.0, 0.0, metrics.ndcg_at_10, 0.0, metrics.hit_at_k, 0.0, 0.0),
        )
    overall = exact.curves()
    for series, loss, tolerance in (
        ("miss_aurc", "miss", 0.001),
        ("ndcg_loss_aurc", "ndcgLoss", 0.01),
    ):
        recorded = live.prometheus.values(
            f'facet_value:scorer_retrieval_{series}:rate{window}{{facet="all"}}', ("value",)
        )
        assert abs(recorded[("all",)] - overall[loss].aurc) < tolerance, (series, window)
    recorded = live.prometheus.values(
        f'facet_value:scorer_retrieval_miss_optimal_aurc:rate{window}{{facet="all"}}', ("value",)
    )
    assert abs(recorded[("all",)] - overall["miss"].optimal_aurc) < AURC_TOLERANCE


# rate() extrapolates a counter whose first sample in the window is above zero
# by half a scrape interval, and one that starts at zero by nothing: ratios of
# such counters (scored was 60 after the warm-up, unjudged 0) are off by up to
# interval / 2 / sampled span, about 2% here.
RATE_TOLERANCE = 0.05


def test_judged_coverage_is_scored_over_scored_and_unjudged(live: LiveStack) -> None:
    expected = live.measured_scored / (live.measured_scored + live.measured_unjudged)
    for window in MEASURED_WINDOWS:
        (coverage,) = live.prometheus.values(
            f"job:scorer_judged_coverage:ratio_rate{window}"
        ).values()
        assert math.isclose(coverage, expected, rel_tol=RATE_TOLERANCE), (window, coverage)


def test_throughput_counts_every_consumed_result(live: LiveStack) -> None:
    """Counts, not rates: two rate() series extrapolate over windows that start at
    different samples, so their ratio drifts with the machine's load; the counters,
    read at one instant after the traffic has settled, are exact."""
    rates = live.prometheus.values("job:scorer_results:rate5m", ("outcome",))
    assert set(rates) == {("scored",), ("unjudged",), ("deadletter",), ("duplicate",)}
    outcomes = live.prometheus.values(
        f'sum by (outcome) (scorer_results_total{{job="{JOB}"}})', ("outcome",)
    )
    assert outcomes == {
        ("scored",): live.sent_scored,
        ("unjudged",): live.measured_unjudged,
        ("deadletter",): len(BAD_RESULTS),
        ("duplicate",): 0,  # no result was sent twice
    }
    consumed = live.prometheus.values(
        f'sum by (topic) (scorer_inputs_total{{job="{JOB}"}})', ("topic",)
    )
    # Every result consumed ended scored, unjudged or dead-lettered (none parked now).
    assert consumed[("results",)] == live.sent_results == sum(outcomes.values())


def test_dead_letters_fire_their_alert_and_nothing_else_fires(live: LiveStack) -> None:
    breakdown = live.prometheus.values(
        "job_topic_error:scorer_deadletters:rate5m", ("topic", "error")
    )
    assert {topic for topic, _ in breakdown} == {"results", "qrels"}
    firing = {
        rule["name"]
        for group in live.prometheus.api("rules", type="alert")["groups"]
        for rule in group["rules"]
        if rule["state"] != "inactive"
    }
    assert firing == {"ScorerDeadLetters", "RetrievalCandidateWorse"}


def test_a_watched_candidate_that_lost_fires_and_an_aa_pair_stays_silent(live: LiveStack) -> None:
    firing = live.prometheus.api("alerts")["alerts"]
    worse = {
        (alert["labels"]["baseline"], alert["labels"]["candidate"], alert["labels"]["metric"])
        for alert in firing
        if alert["labels"]["alertname"] == "RetrievalCandidateWorse"
    }
    assert worse == {
        ("watch-base", "watch-worse", "ndcgAt10"),
        ("watch-base", "watch-worse", "recallAtK"),
    }
    verdicts = live.prometheus.values(
        'scorer_watch_verdict{facet="all"}', ("baseline", "metric", "design")
    )
    for (baseline, metric, design), verdict in verdicts.items():
        if baseline == "watch-aa-1":
            assert verdict == 0, (metric, design)
        elif metric in ("ndcgAt10", "recallAtK", "hitAtK", "mrr"):
            assert verdict == -1, (metric, design)
    lower = live.prometheus.values(
        'scorer_watch_lower{facet="all", baseline="watch-aa-1"}', ("metric", "design")
    )
    upper = live.prometheus.values(
        'scorer_watch_upper{facet="all", baseline="watch-aa-1"}', ("metric", "design")
    )
    assert len(lower) == len(upper) == 10
    assert all(lower[key] < 0 < upper[key] for key in lower)
    # The run list (the page's landing view) says the same from the worker's last read.
    status, body = live.worker.get("/api/v1/evals/runs?limit=500")
    assert status == 200
    listed = {run["runId"]: run for run in orjson.loads(body)["runs"]}
    (lost,) = listed["watch-worse"]["watched"]
    assert lost["baseline"] == "watch-base"
    assert {"ndcgAt10", "recallAtK", "hitAtK", "mrr"} <= set(lost["worse"])
    assert listed["watch-worse"]["warnings"][-1].startswith(
        "worse than watch-base (watched pair, anytime-valid) on "
    )
    assert listed["watch-aa-2"]["watched"] == [
        {"baseline": "watch-aa-1", "worse": [], "better": []}
    ]
    assert not any(w.startswith("worse than") for w in listed["watch-aa-2"]["warnings"])
    assert "watched" not in listed["watch-base"]


def test_every_rule_evaluates_without_error(live: LiveStack) -> None:
    rules = [rule for group in live.prometheus.api("rules")["groups"] for rule in group["rules"]]
    assert len(rules) == len(rule_expressions())
    broken = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
    assert not broken


def evaluate(prometheus: PrometheusServer, expression: Expression) -> int:
    """Series count of ``expression`` in the form that returns series whatever the data's
    state: alerts with bool comparisons, ``absent(x)`` as ``x``, Grafana variables filled."""
    promql = substitute(expression.promql, DASHBOARD_VARIABLES)
    if expression.kind == "variable":
        call = label_values_call(promql)
        assert call is not None, f"{expression.origin}: not a label_values() query"
        selector, label = call
        return len(prometheus.label_values(label, selector))
    if expression.kind == "alert":
        promql = comparisons_as_bool(promql)
        if promql.startswith("absent(") and promql.endswith(")"):
            assert prometheus.query(promql) == [], f"{expression.origin}: absent while present"
            promql = promql[len("absent(") : -1]
    try:
        return len(prometheus.query(promql))
    except QueryError as error:
        raise AssertionError(f"{expression.origin}: {promql}\n{error}") from None


@pytest.mark.parametrize(
    "expression", rule_expressions() + dashboard_expressions(), ids=lambda e: e.origin
)
def test_expression_returns_series(live: LiveStack, expression: Expression) -> None:
    assert evaluate(live.prometheus, expression) > 0, (
        f"{expression.origin}: no series for {expression.promql}"
    )
