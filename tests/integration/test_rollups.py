"""Run rollups and the run API with two real workers sharing the partitions."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator

import orjson
import pytest
from scipy import stats

from schemas import RetrievalResult
from scorer.analysis.risk_sketch import RiskSketch
from scorer.core.metrics import METRIC_NAMES, retrieval_metrics
from scorer.core.rollup import RunRollup
from scorer.kafka.demo import DemoTraffic, _ranking
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from tests.integration.test_worker import offline_eval, wait_for, write_jsonl
from tests.support.kafka import settings_for
from tests.support.worker import SCORER, Worker, wait_all_committed, worker_env

pytestmark = pytest.mark.integration

RUNS = ("bm25-v1", "hybrid-v2", "hybrid-v2-rerank")


@pytest.fixture(scope="module")
def settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return settings_for(kafka_bootstrap, tmp_path_factory.mktemp("rollups"), partitions=4)


@pytest.fixture(scope="module")
def workers(settings: Settings) -> Iterator[list[Worker]]:
    ensure_topics(settings)
    pair = [Worker(settings, settings.state_dir).start() for _ in range(2)]
    for worker in pair:
        worker.wait_ready(90)
    yield pair
    for worker in pair:
        worker.stop()


@pytest.fixture(scope="module")
def traffic(settings, workers, tmp_path_factory):
    """The golden set and 900 results over three runs, replayed once for the module.
    ``results`` is the list of everything sent: tests that send more extend it."""
    demo = DemoTraffic.generate(queries=120, unjudged_share=0.0, seed=5)
    results = list(demo.results(limit=900))
    folder = tmp_path_factory.mktemp("files")
    golden_file = write_jsonl(folder / "golden.jsonl", demo.golden)
    results_file = write_jsonl(folder / "results.jsonl", results)
    replay(settings, "--golden", golden_file, "--results", results_file)
    expected = {run: sum(1 for r in results if r.run_id == run) for run in RUNS}
    for run, count in expected.items():
        wait_for(lambda run=run, count=count: run_count(workers[0], run) == count, 90, run)
    return demo, results, golden_file, results_file


def replay(settings: Settings, *args) -> None:
    done = subprocess.run(
        [SCORER, "replay", *map(str, args)],
        env=worker_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def run_count(worker: Worker, run_id: str) -> int:
    status, body = worker.get(f"/api/v1/evals/runs/{run_id}/metrics")
    return orjson.loads(body)["count"] if status == 200 else -1


def api(worker: Worker, path: str) -> tuple[int, dict]:
    status, body = worker.get(path)
    return status, orjson.loads(body)


def expected_rollups(demo: DemoTraffic, results) -> dict[str, RunRollup]:
    """Rollups computed in the test from the files, without the worker."""
    golden = {g.query_id: g for g in demo.golden}
    rollups = {run: RunRollup() for run in RUNS}
    for result in results:
        query = golden[result.query_id]
        values = retrieval_metrics(result.ranked, query.qrels, 10)
        rollups[result.run_id].add(values, {**(query.facets or {}), **(result.facets or {})})
    return rollups


def expected_sketches(demo: DemoTraffic, results) -> dict[str, RiskSketch]:
    """Risk–coverage sketches computed in the test from the files, without the worker."""
    golden = {g.query_id: g for g in demo.golden}
    sketches = {run: RiskSketch() for run in RUNS}
    for result in results:
        values = retrieval_metrics(result.ranked, golden[result.query_id].qrels, 10)
        sketches[result.run_id].add(result.top_confidence(), values)
    return sketches


def without_risk_coverage(document):
    """``document`` without its ``riskCoverage`` blocks, at any depth."""
    if isinstance(document, dict):
        return {k: without_risk_coverage(v) for k, v in document.items() if k != "riskCoverage"}
    return document


def assert_close(got, expected, path="") -> None:
    """Deep equality with floats within 1e-12."""
    if isinstance(expected, dict):
        assert set(got) == set(expected), path
        for key in expected:
            assert_close(got[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), path
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert_close(g, e, f"{path}[{i}]")
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, abs=1e-12), path
    else:
        assert got == expected, path


def test_both_workers_return_the_same_rollup_equal_to_the_files(settings, workers, traffic):
    demo, results, golden_file, results_file = traffic
    # The three runs hash to three of the four partitions, so each worker owns at
    # least one run, and every answer below for the other's run was forwarded.
    owners = {orjson.loads(workers[0].get(f"/router/rollups/{run}/")[1]) for run in RUNS}
    assert owners == {worker.url for worker in workers}
    offline = offline_eval(settings, golden_file, results_file)
    assert set(offline["runs"]) == set(RUNS)
    for run, rollup in expected_rollups(demo, results).items():
        answers = [api(worker, f"/api/v1/evals/runs/{run}/metrics") for worker in workers]
        assert answers[0] == answers[1]
        status, document = answers[0]
        assert status == 200
        # Same shape and numbers as `scorer eval --format json` for this run...
        # (Offline adds a risk-coverage block to the run and to each facet value; live,
        # the run's block is served apart, at /risk-coverage, and not per facet value.)
        keys = ("count", "metrics", "ci95", "facets")
        expected = without_risk_coverage({key: offline["runs"][run][key] for key in keys})
        assert_close({key: document[key] for key in expected}, expected)
        # ...and as a rollup computed here from the files.
        assert_close({key: document[key] for key in expected}, rollup.summary())
        assert document["runId"] == run
        assert document["updatedAt"]


def test_live_and_offline_agree_on_judged_at_k_and_candidate_ndcg(settings, workers, traffic):
    """The worker's run API and `scorer eval` on the same events: both issue #34 measures
    with their intervals, overall and per facet value, and not trivially (the demo's
    rankings hold unjudged ids and relevant ids out of order)."""
    _, _, golden_file, results_file = traffic
    offline = offline_eval(settings, golden_file, results_file)
    for run in RUNS:
        _, live = api(workers[0], f"/api/v1/evals/runs/{run}/metrics")
        aggregates = [(live, offline["runs"][run])] + [
            (live["facets"][facet][value], aggregate)
            for facet, by_value in offline["runs"][run]["facets"].items()
            for value, aggregate in by_value.items()
        ]
        for got, expected in aggregates:
            assert got["count"] == expected["count"]
            for name in ("judgedAtK", "candidateNdcgAt10"):
                assert got["metrics"][name] == pytest.approx(expected["metrics"][name], abs=1e-12)
                assert got["ci95"][name] == pytest.approx(expected["ci95"][name], abs=1e-12)
        means = live["metrics"]
        assert 0.0 < means["judgedAtK"] < 1.0, run
        assert means["ndcgAt10"] < means["candidateNdcgAt10"] <= 1.0, run


def test_risk_coverage_matches_the_offline_block_within_the_bound(settings, workers, traffic):
    """The demo's rankings carry scores: each run's /risk-coverage against the exact
    `scorer eval` block on the same files, and against a sketch built here."""
    demo, results, golden_file, results_file = traffic
    offline = offline_eval(settings, golden_file, results_file)
    sketches = expected_sketches(demo, results)
    for run in RUNS:
        answers = [api(worker, f"/api/v1/evals/runs/{run}/risk-coverage") for worker in workers]
        assert answers[0] == answers[1]
        status, document = answers[0]
        assert status == 200
        assert document["runId"] == run
        assert document["updatedAt"]
        exact = offline["runs"][run]["riskCoverage"]
        count = sum(1 for r in results if r.run_id == run)
        assert document["withConfidence"] == exact["withConfidence"] == count == 300
        assert document["withoutConfidence"] == exact["withoutConfidence"] == 0
        for name in ("miss", "ndcgLoss"):
            got, want = document[name], exact[name]
            low, high = document["sketch"]["aurcWithin"][name]
            assert low - 1e-12 <= want["aurc"] <= high + 1e-12, (run, name)
            low, high = document["sketch"]["optimalAurcWithin"][name]
            assert low - 1e-12 <= want["optimalAurc"] <= high + 1e-12, (run, name)
            # The worst case is the interval; measured on these 300 results per run:
            # at most 0.0024 (hybrid-v2-rerank's ndcgLoss), under 1e-4 for miss.
            assert got["aurc"] == pytest.approx(want["aurc"], abs=0.003), (run, name)
            assert got["eAurc"] == pytest.approx(want["eAurc"], abs=0.003), (run, name)
            assert [c for c, _ in got["curve"]] == [c for c, _ in want["curve"]]
            # The demo's confidence predicts misses.
            assert got["eAurc"] < 0.6 * got["aurc"], (run, name)
        assert_close(
            {key: document[key] for key in ("withConfidence", "miss", "ndcgLoss")},
            {key: sketches[run].summary()[key] for key in ("withConfidence", "miss", "ndcgLoss")},
        )
        assert_close(document["sketch"], sketches[run].bounds())


def test_rollups_survive_a_restart_without_double_counting(settings, workers, traffic):
    demo, results, _, _ = traffic
    before = {run: api(workers[1], f"/api/v1/evals/runs/{run}/metrics")[1] for run in RUNS}
    workers[0].stop()
    workers[0].start()
    for worker in workers:
        worker.wait_ready(90)
    wait_all_committed(settings)
    for run in RUNS:
        status, document = api(workers[0], f"/api/v1/evals/runs/{run}/metrics")
        assert status == 200
        assert document["count"] == before[run]["count"]
        assert_close(document["metrics"], before[run]["metrics"])

    extra = list(DemoTraffic(demo.golden, 0.0, seed=99).results(limit=30))
    extra = [r.model_copy(update={"result_id": f"extra-{r.result_id}"}) for r in extra]
    extra_file = write_jsonl(settings.state_dir / "extra.jsonl", extra)
    replay(settings, "--results", extra_file)
    results.extend(extra)
    for run in RUNS:
        added = sum(1 for r in extra if r.run_id == run)
        want = before[run]["count"] + added
        wait_for(lambda run=run, want=want: run_count(workers[1], run) == want, 60, run)
    wait_all_committed(settings)
    expected = expected_rollups(demo, results)
    for run in RUNS:
        document = api(workers[1], f"/api/v1/evals/runs/{run}/metrics")[1]
        assert_close(document["metrics"], expected[run].summary()["metrics"])


def test_results_their_producer_sent_again_count_once(settings, workers, traffic):
    """The same results replayed (same resultIds, new offsets: a producer's retry)
    are scored again but not counted again in the run rollups."""
    demo, results, _, _ = traffic
    before = {run: api(workers[0], f"/api/v1/evals/runs/{run}/metrics")[1] for run in RUNS}
    resent = results[-60:]
    replay(settings, "--results", write_jsonl(settings.state_dir / "resent.jsonl", resent))

    def dropped() -> float:
        return sum(worker.metric("scorer_rollup_resent_total") for worker in workers)

    wait_for(lambda: dropped() >= len(resent), 60, "resent results recognised")
    wait_all_committed(settings)
    assert dropped() == len(resent)
    expected = expected_rollups(demo, results)
    for run in RUNS:
        document = api(workers[1], f"/api/v1/evals/runs/{run}/metrics")[1]
        assert document["count"] == before[run]["count"] == expected[run].summary()["count"]
        assert_close(document["metrics"], expected[run].summary()["metrics"])


def test_risk_coverage_counts_each_result_once_after_restarts_and_resends(workers, traffic):
    """After the restart, the extra results and the producer's resends above."""
    demo, results, _, _ = traffic
    sketches = expected_sketches(demo, results)
    for run in RUNS:
        status, document = api(workers[0], f"/api/v1/evals/runs/{run}/risk-coverage")
        assert status == 200
        count = sum(1 for r in results if r.run_id == run)
        assert document["withConfidence"] == count == sketches[run].with_confidence
        for name in ("miss", "ndcgLoss"):
            assert_close(document[name], sketches[run].summary()[name])


def test_errors_answer_as_specified(workers):
    status, body = api(workers[0], "/api/v1/evals/runs/no-such-run/metrics")
    assert (status, body["status"]) == (404, 404)
    assert "no-such-run" in body["error"]
    status, body = api(workers[1], "/api/v1/evals/runs/" + "x" * 300 + "/metrics")
    assert status == 400
    assert "1 to 256" in body["error"]
    status, body = api(workers[1], "/api/v1/evals/runs/no-such-run/risk-coverage")
    assert (status, body["status"]) == (404, 404)
    assert "no-such-run" in body["error"]
    status, _ = api(workers[0], "/api/v1/evals/runs/" + "x" * 300 + "/risk-coverage")
    assert status == 400
    status, _ = api(workers[0], "/api/v1/evals/runs/no-such-run/compare/bm25-v1")
    assert status == 404
    assert workers[0].get("/api/v1/openapi.json")[0] == 200


def test_the_api_is_read_only(workers):
    import urllib.request

    request = urllib.request.Request(
        workers[0].url + "/api/v1/evals/runs/bm25-v1/metrics", data=b"{}", method="POST"
    )
    try:
        urllib.request.urlopen(request, timeout=5)
        status = 200
    except urllib.error.HTTPError as error:
        status = error.code
    assert status == 405


def test_compare_matches_an_independent_computation(workers, traffic):
    demo, results, _, _ = traffic
    a, b = "bm25-v1", "hybrid-v2-rerank"
    status, body = api(workers[1], f"/api/v1/evals/runs/{a}/compare/{b}")
    assert status == 200
    golden = {g.query_id: g.qrels for g in demo.golden}
    values = {run: [] for run in (a, b)}
    per_query = {run: {} for run in (a, b)}
    for result in results:
        if result.run_id in values:
            scores = list(retrieval_metrics(result.ranked, golden[result.query_id], 10))
            values[result.run_id].append(scores)
            per_query[result.run_id].setdefault(result.query_id, []).append(scores)
    shared = sorted(per_query[a].keys() & per_query[b].keys())
    assert body["paired"]["queries"] == len(shared) > 10
    for index, name in enumerate(METRIC_NAMES):
        xs = [row[index] for row in values[a]]
        ys = [row[index] for row in values[b]]
        welch = stats.ttest_ind(ys, xs, equal_var=False).confidence_interval(0.95)
        got = body["metrics"][name]
        assert got["delta"] == pytest.approx(sum(ys) / len(ys) - sum(xs) / len(xs), abs=1e-12)
        assert got["ci95"] == pytest.approx([welch.low, welch.high], abs=1e-9)

        def mean_of(run, query, index=index):
            rows = per_query[run][query]
            return sum(row[index] for row in rows) / len(rows)

        diffs = [mean_of(b, q) - mean_of(a, q) for q in shared]
        paired = stats.ttest_rel([mean_of(b, q) for q in shared], [mean_of(a, q) for q in shared])
        interval = paired.confidence_interval(0.95)
        got = body["paired"]["metrics"][name]
        assert got["delta"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-12)
        assert got["ci95"] == pytest.approx([interval.low, interval.high], abs=1e-9)
        assert got["wins"] == sum(1 for d in diffs if d > 0)
        assert got["losses"] == sum(1 for d in diffs if d < 0)


AA_PAIRS = [(f"aa{i}-a", f"aa{i}-b") for i in range(16)]
GAIN_PAIRS = [(f"gain{i}-a", f"gain{i}-b") for i in range(2)]
SKILLS = {"aa": (0.65, 0.65), "gain": (0.45, 0.8)}


def test_live_comparisons_keep_aa_pairs_undecided_and_find_real_gains(
    settings, workers, traffic, tmp_path
):
    """16 A/A run pairs (the same retriever twice, independent answers) and 2 with a real
    nDCG@10 gain, each pair's compare endpoint read after every 30 queries (read on the
    other worker, so half the reads are routed): the anytime-valid paired interval never
    calls an A/A pair different (at most one may, as alpha allows), and finds both
    gains."""
    demo = traffic[0]
    rng = random.Random(20261202)
    golden = list(demo.golden)
    rng.shuffle(golden)
    ever = {pair: False for pair in AA_PAIRS + GAIN_PAIRS}
    fixed_ever = dict(ever)
    sent: dict[str, int] = {}
    for start in range(0, len(golden), 30):
        chunk = []
        for pair in AA_PAIRS + GAIN_PAIRS:
            skills = SKILLS["gain" if pair in GAIN_PAIRS else "aa"]
            for query in golden[start : start + 30]:
                for run_id, skill in zip(pair, skills, strict=True):
                    ranked = _ranking(rng, query, skill, query.facets or {})
                    chunk.append(
                        RetrievalResult(
                            result_id=f"{run_id}-{query.query_id}",
                            run_id=run_id,
                            query_id=query.query_id,
                            ranked=ranked,
                        )
                    )
                    sent[run_id] = sent.get(run_id, 0) + 1
        replay(settings, "--results", write_jsonl(tmp_path / f"chunk-{start}.jsonl", chunk))
        for run_id, count in sent.items():
            wait_for(lambda r=run_id, c=count: run_count(workers[0], r) == c, 90, run_id)
        for pair in ever:
            status, body = api(workers[1], f"/api/v1/evals/runs/{pair[0]}/compare/{pair[1]}")
            assert status == 200, body
            paired = body["paired"]["metrics"]["ndcgAt10"]
            assert body["paired"]["queries"] == min(start + 30, len(golden))
            low, high = paired["anytime95"]
            ever[pair] |= low > 0 or high < 0
            low, high = paired["ci95"]
            fixed_ever[pair] |= low > 0 or high < 0
    called = [pair for pair in AA_PAIRS if ever[pair]]
    print(
        f"A/A pairs ever called different: anytime95 {len(called)} of {len(AA_PAIRS)}, "
        f"ci95 {sum(fixed_ever[pair] for pair in AA_PAIRS)}; gains found: "
        f"{sum(ever[pair] for pair in GAIN_PAIRS)} of {len(GAIN_PAIRS)}"
    )
    assert len(called) <= 1, called
    assert all(ever[pair] for pair in GAIN_PAIRS)
    # The fixed-horizon interval, read the same way, is never the safer of the two.
    assert sum(fixed_ever[pair] for pair in AA_PAIRS) >= len(called)


def mix_golden_sets(settings: Settings, workers: list[Worker], run: str) -> int:
    """Results of ``run`` over four new queries, scored against their qrels; then the
    qrels of two of them republished with other grades, and one more result of each
    query. Returns how many results were scored against qrels that have since changed
    (the earlier three of each of the two)."""
    from schemas import GoldenQuery

    folder = settings.state_dir
    queries = [f"{run}-q{n}" for n in range(4)]
    first = [GoldenQuery(query_id=q, qrels={f"{q}-d1": 3, f"{q}-d2": 1}) for q in queries]

    def result(n: int, query: str) -> RetrievalResult:
        return RetrievalResult(
            result_id=f"{run}-r{n}", run_id=run, query_id=query,
            ranked=[f"{query}-d2", f"{query}-d1", f"{query}-x"],
        )  # fmt: skip

    def stored() -> float:
        return sum(w.metric("scorer_qrels_total", {"outcome": "stored"}) for w in workers)

    before = stored()
    replay(settings, "--golden", write_jsonl(folder / f"{run}-golden.jsonl", first))
    wait_for(lambda: stored() >= before + len(first), 60, "first qrels stored")
    sent = [result(n, queries[n % 4]) for n in range(12)]  # three per query
    replay(settings, "--results", write_jsonl(folder / f"{run}-results-1.jsonl", sent))
    wait_for(lambda: run_count(workers[0], run) == 12, 60, "first results")
    assert api(workers[0], f"/api/v1/evals/runs/{run}/metrics")[1]["changedQrels"] == 0

    # Two queries' golden sets change (d2 becomes the best document).
    changed = [GoldenQuery(query_id=q, qrels={f"{q}-d1": 1, f"{q}-d2": 3}) for q in queries[:2]]
    before = stored()
    replay(settings, "--golden", write_jsonl(folder / f"{run}-golden-2.jsonl", changed))
    wait_for(lambda: stored() >= before + len(changed), 60, "changed qrels stored")
    later = [result(100 + n, queries[n]) for n in range(4)]  # one more per query
    replay(settings, "--results", write_jsonl(folder / f"{run}-results-2.jsonl", later))
    wait_for(lambda: run_count(workers[0], run) == 16, 60, "later results")
    wait_all_committed(settings)
    return 6


def test_a_run_scored_against_changed_qrels_says_how_many_results_mixed_golden_sets(
    settings, workers, traffic
):
    """The run API and the run list count the results scored against a golden set that
    has since changed, and the list warns; runs whose qrels never changed count 0."""
    changed = mix_golden_sets(settings, workers, "drift")
    for worker in workers:
        document = api(worker, "/api/v1/evals/runs/drift/metrics")[1]
        assert document["changedQrels"] == changed
        listed = {
            run["runId"]: run for run in api(worker, "/api/v1/evals/runs?limit=100")[1]["runs"]
        }
        assert listed["drift"]["changedQrels"] == changed
        assert listed["drift"]["warnings"][0].startswith(
            f"mixed golden sets: {changed} of 16 results"
        )
        for run in RUNS:  # the other runs' qrels never changed
            assert listed[run]["changedQrels"] == 0
