"""The evals page in a real browser (Debian's headless Chromium, driven by Selenium)
against two live workers sharing the partitions, fed demo traffic.

Chromium and chromedriver come from ``make chromium-install``. Set
``EVALS_SCREENSHOTS`` to a folder to save the three views there (docs/ holds them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from selenium import webdriver
from selenium.common.exceptions import (
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from scorer.cli import main
from scorer.core.metrics import METRIC_NAMES
from scorer.kafka.demo import DemoTraffic
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from tests.integration.test_rollups import mix_golden_sets, replay
from tests.integration.test_worker import wait_for, write_jsonl
from tests.support.kafka import settings_for
from tests.support.worker import Worker
from tests.unit.test_cli_eval_html import EMBEDDED

pytestmark = pytest.mark.integration

RUNS = ("bm25-v1", "hybrid-v2", "hybrid-v2-rerank")
FIRST_RESULTS = 240
MORE_RESULTS = 30


@pytest.fixture(scope="module")
def settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return settings_for(
        kafka_bootstrap,
        tmp_path_factory.mktemp("evals-page"),
        partitions=4,
        run_history_seconds=2.0,
    )


@pytest.fixture(scope="module")
def workers(settings: Settings) -> Iterator[list[Worker]]:
    ensure_topics(settings)
    pair = [Worker(settings, settings.state_dir).launch() for _ in range(2)]
    try:
        for worker in pair:
            worker.wait_ready(90)
        yield pair
    finally:
        for worker in pair:
            worker.stop()


@pytest.fixture(scope="module")
def traffic(settings: Settings, workers: list[Worker], tmp_path_factory) -> DemoTraffic:
    """The golden set and the first results, scored before the page is opened."""
    demo = DemoTraffic.generate(queries=80, unjudged_share=0.0, seed=17)
    folder = tmp_path_factory.mktemp("files")
    results = list(demo.results(limit=FIRST_RESULTS))
    replay(
        settings,
        "--golden",
        write_jsonl(folder / "golden.jsonl", demo.golden),
        "--results",
        write_jsonl(folder / "results.jsonl", results),
    )
    wait_for(lambda: total_count(workers[0]) == FIRST_RESULTS, 90, "the first results scored")
    return demo


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.fail("chromium or chromedriver not on PATH: run `make chromium-install`")
    options = Options()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,1400",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: WebDriver, workers: list[Worker], traffic: DemoTraffic) -> Iterator[WebDriver]:
    """The browser on the second worker's page; afterwards, no console errors."""
    browser.get(workers[1].url + "/")
    yield browser
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


def api(worker: Worker, path: str) -> dict:
    status, body = worker.get(path)
    assert status == 200, body
    return orjson.loads(body)


def total_count(worker: Worker) -> int:
    status, body = worker.get("/api/v1/evals/runs")
    return sum(run["count"] for run in orjson.loads(body)["runs"]) if status == 200 else -1


def wait(driver: WebDriver, css: str, timeout: float = 15.0):
    try:
        return WebDriverWait(driver, timeout).until(lambda d: d.find_element(By.CSS_SELECTOR, css))
    except TimeoutException:
        problem = driver.find_element(By.ID, "problem").text
        raise AssertionError(f"{css} did not render; the page says: {problem!r}") from None


def listed_runs(driver: WebDriver) -> list[tuple[str, int]]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    return [
        (
            row.find_element(By.CSS_SELECTOR, "[data-run]").get_attribute("data-run"),
            int(row.find_element(By.CSS_SELECTOR, "td.number").get_attribute("data-value")),
        )
        for row in rows
    ]


def shown(cell) -> float:
    """The exact number behind a cell, after checking the text shows it to 4 places."""
    value = float(cell.get_attribute("data-value"))
    assert float(cell.text.replace("+", "")) == pytest.approx(value, abs=5.01e-5)
    return value


def screenshot(driver: WebDriver, name: str) -> None:
    folder = os.environ.get("EVALS_SCREENSHOTS")
    if folder:
        driver.save_screenshot(str(Path(folder) / name))


def test_every_worker_lists_every_run_of_the_cluster(workers: list[Worker], traffic):
    sent = list(traffic.results(limit=FIRST_RESULTS))
    expected = {run: sum(1 for r in sent if r.run_id == run) for run in RUNS}
    assert sum(expected.values()) == FIRST_RESULTS and min(expected.values()) > 0
    for worker in workers:
        listed = api(worker, "/api/v1/evals/runs")
        assert {run["runId"]: run["count"] for run in listed["runs"]} == expected
        assert listed["total"] == 3 and listed["nextOffset"] is None
        updated = [run["updatedAt"] for run in listed["runs"]]
        assert updated == sorted(updated, reverse=True)
    first, second = (api(workers[0], f"/api/v1/evals/runs?limit=2&offset={o}") for o in (0, 2))
    assert [r["runId"] for r in first["runs"] + second["runs"]] == [
        r["runId"] for r in api(workers[0], "/api/v1/evals/runs")["runs"]
    ]
    assert (first["nextOffset"], second["nextOffset"]) == (2, None)


def test_the_run_list_shows_the_runs_the_api_lists_newest_first(page, workers):
    wait(page, "#runs tbody tr")
    listed = api(workers[1], "/api/v1/evals/runs")["runs"]
    assert listed_runs(page) == [(run["runId"], run["count"]) for run in listed]
    # The landing view answers "how is each run doing" without opening it: the headline
    # metrics with their intervals, as the API lists them.
    for run in listed:
        row = page.find_element(By.CSS_SELECTOR, f'#runs td[data-run="{run["runId"]}"]')
        cells = row.find_elements(By.XPATH, "./following-sibling::td[@data-metric]")
        assert [c.get_attribute("data-metric") for c in cells] == [
            "ndcgAt10",
            "recallAtK",
            "hitAtK",
            "judgedAtK",
        ]
        for cell in cells:
            name = cell.get_attribute("data-metric")
            assert float(cell.get_attribute("data-value")) == run["metrics"][name]
            low, high = run["ci95"][name]
            assert cell.text.endswith(f"[{low:.4f}, {high:.4f}]")
        # Its warnings, as the API gives them.
        warned = row.find_element(By.XPATH, "./following-sibling::td[@data-warnings]")
        assert int(warned.get_attribute("data-warnings")) == len(run["warnings"])
        shown_warnings = warned.find_elements(By.CLASS_NAME, "warning")
        assert [w.get_attribute("title") for w in shown_warnings] == run["warnings"]
    assert "UTC" in page.find_element(By.ID, "status").text
    for run in listed:  # each run's trend line holds the API's buckets
        line = page.find_element(
            By.XPATH, f'//td[@data-run="{run["runId"]}"]/following-sibling::td/*[name()="svg"]'
        )
        assert int(line.get_attribute("data-points")) == len(run["trend"]) >= 1
    screenshot(page, "evals-list.png")


def test_a_run_shows_the_api_numbers_and_its_risk_coverage_chart(page, workers):
    wait(page, "#runs tbody tr")
    link = page.find_element(By.LINK_TEXT, "hybrid-v2")
    link.send_keys(Keys.ENTER)  # keyboard, not a click
    wait(page, "#run-metrics")
    metrics = api(workers[0], "/api/v1/evals/runs/hybrid-v2/metrics")
    risk = api(workers[0], "/api/v1/evals/runs/hybrid-v2/risk-coverage")
    assert page.find_element(By.ID, "run-id").text == "hybrid-v2"
    for name in METRIC_NAMES:
        cell = page.find_element(By.CSS_SELECTOR, f'#run-metrics tr[data-metric="{name}"] td')
        assert shown(cell) == metrics["metrics"][name]
    for facet, values in metrics["facets"].items():
        rows = page.find_elements(By.CSS_SELECTOR, f"#facet-{facet} tbody tr")
        assert {row.find_element(By.TAG_NAME, "th").text for row in rows} == set(values)
        bars = page.find_elements(
            By.CSS_SELECTOR, f'svg[aria-labelledby="chart-{facet}-title"] rect'
        )
        assert len(bars) == len(values)
    for loss in ("miss", "ndcgLoss"):
        aurc, optimal, e_aurc = page.find_elements(
            By.CSS_SELECTOR, f'#risk-table tr[data-loss="{loss}"] td'
        )
        assert shown(aurc) == risk[loss]["aurc"]
        assert shown(optimal) == risk[loss]["optimalAurc"]
        assert shown(e_aurc) == risk[loss]["eAurc"]
        curve = page.find_element(By.CSS_SELECTOR, f"#risk-chart path.curve.{loss}")
        d = curve.get_attribute("d")
        assert len(risk[loss]["curve"]) > 10
        assert d.count("L") == len(risk[loss]["curve"]) - 1 and d.startswith("M")
    # The nDCG loss split, overall and per facet value, from the API's means.
    split = page.find_elements(By.CSS_SELECTOR, "#loss-split tbody tr")
    assert len(split) == 1 + sum(len(values) for values in metrics["facets"].values())
    for row in split:
        facet, value = row.get_attribute("data-facet"), row.get_attribute("data-value")
        means = (metrics if facet == "all" else metrics["facets"][facet][value])["metrics"]
        first = row.find_element(By.CSS_SELECTOR, 'td[data-loss="firstStage"]')
        ordering = row.find_element(By.CSS_SELECTOR, 'td[data-loss="ordering"]')
        assert float(first.get_attribute("data-value")) == 1 - means["candidateNdcgAt10"]
        assert float(ordering.get_attribute("data-value")) == (
            means["candidateNdcgAt10"] - means["ndcgAt10"]
        )
        assert float(ordering.get_attribute("data-value")) >= 0
    screenshot(page, "evals-run.png")


def test_a_facet_table_sorts_from_the_keyboard(page):
    wait(page, "#runs tbody tr")
    page.find_element(By.LINK_TEXT, "bm25-v1").send_keys(Keys.ENTER)
    wait(page, "#run-metrics")
    table = page.find_element(By.CSS_SELECTOR, "table[id^=facet-]")
    table_id = table.get_attribute("id")
    button = table.find_element(By.CSS_SELECTOR, "button[id$=-sort-ndcgAt10]")
    button.send_keys(Keys.ENTER)  # the table is drawn again, sorted
    table = page.find_element(By.ID, table_id)
    header = table.find_element(By.CSS_SELECTOR, "th[aria-sort=descending]")
    assert "nDCG@10" in header.text
    column = [c.text for c in table.find_elements(By.CSS_SELECTOR, "thead th")].index(header.text)
    values = [
        float(row.find_elements(By.CSS_SELECTOR, "th, td")[column].get_attribute("data-value"))
        for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]
    assert len(values) >= 2 and values == sorted(values, reverse=True)


def test_two_runs_picked_from_the_list_are_compared_with_the_api_numbers(page, workers):
    wait(page, "#runs tbody tr")
    Select(page.find_element(By.ID, "pick-a")).select_by_value("bm25-v1")
    Select(page.find_element(By.ID, "pick-b")).select_by_value("hybrid-v2-rerank")
    page.find_element(By.ID, "compare-button").click()
    wait(page, "#compare-table")
    comparison = api(workers[0], "/api/v1/evals/runs/bm25-v1/compare/hybrid-v2-rerank")
    for name in METRIC_NAMES:
        row = page.find_element(By.CSS_SELECTOR, f'#compare-table tr[data-metric="{name}"]')
        a, b, delta, paired, wins, losses, ties = row.find_elements(
            By.CSS_SELECTOR, "td.number[data-value]"
        )
        assert shown(a) == comparison["metrics"][name]["a"]
        assert shown(b) == comparison["metrics"][name]["b"]
        assert shown(delta) == comparison["metrics"][name]["delta"]
        expected = comparison["paired"]["metrics"][name]
        assert shown(paired) == expected["delta"]
        assert [int(c.text) for c in (wins, losses, ties)] == [
            expected["wins"],
            expected["losses"],
            expected["ties"],
        ]
        # Decided by the anytime-valid paired interval, not the fixed-horizon one.
        low, high = expected["anytime95"]
        significant = low > 0 or high < 0
        verdict = row.find_elements(By.TAG_NAME, "td")[-1].text
        assert verdict.startswith("yes") == significant, (name, expected)
        unpaired_cell, paired_cell = row.find_elements(By.CSS_SELECTOR, "td.anytime")
        for cell, bounds in (
            (unpaired_cell, comparison["metrics"][name]["anytime95"]),
            (paired_cell, expected["anytime95"]),
        ):
            assert cell.text == f"[{bounds[0]:.4f}, {bounds[1]:.4f}]"
    assert "anytime-valid" in page.find_element(By.ID, "main").text
    paths = page.find_elements(By.CSS_SELECTOR, "#trajectory-chart path.bound")
    assert len(paths) == 2
    assert len(comparison["paired"]["trajectory"]["ndcgAt10"]) > 5
    facet_rows = page.find_elements(By.CSS_SELECTOR, "#facet-compare tbody tr")
    family = comparison["facets"]["family"]
    assert family > 0 and len(facet_rows) == family
    screenshot(page, "evals-compare.png")


def test_the_run_list_refreshes_itself_while_runs_are_scored(
    page, workers, settings, traffic, tmp_path
):
    wait(page, "#runs tbody tr")
    before = dict(listed_runs(page))
    more = list(traffic.results(limit=FIRST_RESULTS + MORE_RESULTS))[FIRST_RESULTS:]
    replay(settings, "--results", write_jsonl(tmp_path / "more.jsonl", more))
    grown = {run: before[run] + sum(1 for r in more if r.run_id == run) for run in RUNS}
    try:
        WebDriverWait(page, 30, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: dict(listed_runs(d)) == grown
        )
    except (TimeoutException, WebDriverException):
        raise AssertionError(f"the list shows {listed_runs(page)}, expected {grown}") from None
    listed = api(workers[1], "/api/v1/evals/runs")["runs"]
    assert listed_runs(page) == [(run["runId"], run["count"]) for run in listed]


def test_the_offline_report_of_scorer_eval_renders_without_a_worker(browser, tmp_path):
    report = tmp_path / "report.html"
    examples = Path(__file__).resolve().parents[2] / "examples"
    result = CliRunner().invoke(
        main,
        ["eval", str(examples / "qrels.txt"), str(examples / "run.txt"), "--html", str(report)],
    )
    assert result.exit_code == 0, result.output
    (document,) = (orjson.loads(match) for match in EMBEDDED.findall(report.read_text()) if match)
    browser.get(report.as_uri())
    wait(browser, "#runs tbody tr")
    assert listed_runs(browser) == [(run, body["count"]) for run, body in document["runs"].items()]
    browser.get(report.as_uri() + "#/compare/bm25-v1/hybrid-v2")
    wait(browser, "#compare-table")
    (comparison,) = document["comparisons"]["runs"]
    for name in METRIC_NAMES:
        row = browser.find_element(By.CSS_SELECTOR, f'#compare-table tr[data-metric="{name}"]')
        a, b, paired, *_ = row.find_elements(By.CSS_SELECTOR, "td.number[data-value]")
        expected = comparison["metrics"][name]
        assert (shown(a), shown(b), shown(paired)) == (
            expected["a"],
            expected["b"],
            expected["delta"],
        )
    browser.get(report.as_uri() + "#/run/bm25-v1")
    path = wait(browser, "#risk-chart path.curve.miss").get_attribute("d")
    assert path.count("L") == len(document["runs"]["bm25-v1"]["riskCoverage"]["miss"]["curve"]) - 1
    means = document["runs"]["bm25-v1"]["metrics"]
    overall = browser.find_element(By.CSS_SELECTOR, '#loss-split tr[data-facet="all"]')
    first = overall.find_element(By.CSS_SELECTOR, 'td[data-loss="firstStage"]')
    ordering = overall.find_element(By.CSS_SELECTOR, 'td[data-loss="ordering"]')
    assert float(first.get_attribute("data-value")) == 1 - means["candidateNdcgAt10"]
    assert float(ordering.get_attribute("data-value")) == (
        means["candidateNdcgAt10"] - means["ndcgAt10"]
    )
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


def test_a_run_that_mixes_golden_sets_is_flagged_in_the_list_and_its_view(page, workers, settings):
    """Run last: it adds a run to the list."""
    changed = mix_golden_sets(settings, workers, "drift-page")
    page.refresh()
    wait(page, '#runs [data-run="drift-page"]')
    row = page.find_element(By.XPATH, '//*[@data-run="drift-page"]/ancestor::tr')
    cell = row.find_element(By.CSS_SELECTOR, "td.warnings")
    assert cell.get_attribute("data-warnings") == "1"
    assert f"mixed golden sets: {changed} of 16 results" in cell.text
    page.find_element(By.LINK_TEXT, "drift-page").send_keys(Keys.ENTER)
    shown_warning = wait(page, "#changed-qrels")
    assert f"Mixed golden sets: {changed} of 16 results" in shown_warning.text
    screenshot(page, "evals-mixed-golden-sets.png")
