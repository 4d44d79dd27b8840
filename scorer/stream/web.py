"""HTTP views of the worker, all read-only: health, readiness, the run API and the
evals page built on it (``/``, also at ``/evals``).

Run endpoints are answered by the worker that owns the run's partition of
the ``rollups`` table: any other worker forwards the request there (Faust's
router), so every worker answers alike. The compare endpoint gathers both
runs through those routed endpoints and computes on the way back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp
import faust
from aiokafka.errors import KafkaError
from faust.exceptions import SameNode
from faust.web import Request, Response, View
from yarl import URL

from schemas.events import MAX_ID_LENGTH
from scorer.analysis.compare import compare_runs
from scorer.core.rollup import MetricAggregate
from scorer.kafka.topics import missing_topics
from scorer.page import page_html
from scorer.settings import Settings
from scorer.stream import run_state
from scorer.stream.entry_blocks import newest_entries
from scorer.stream.openapi import OPENAPI
from scorer.stream.run_list import (
    Paging,
    merge_runs,
    other_hosts,
    page_of,
    run_entry,
    with_watched_pairs,
)
from scorer.stream.stored import decode_run_state

API = "/api/v1/evals/runs"
RECHECK_MISSING_SECONDS = 5.0
"""How often the input topics are looked up while one is missing (or unknown)..."""
RECHECK_PRESENT_SECONDS = 60.0
"""... and once both exist (they may be deleted)."""
LOCAL_SCOPE = "local"
"""``?scope=local`` asks a worker for the runs it holds only (how workers ask each other
for the run list without asking back)."""
PEER_TIMEOUT_SECONDS = 5.0

log = logging.getLogger(__name__)


class InputTopics:
    """Whether the worker's input topics (results, qrels) exist, as last looked up.

    Faust only logs ``Ignoring missing topic`` and consumes nothing from a
    topic that does not exist, and it does not pick the topic up when it is
    created later (measured: nothing consumed a minute after). So the worker is
    not ready while one is missing, nor after one that was missing appears,
    until it is restarted. ``missing`` is None until the first lookup.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.missing: list[str] | None = None
        self.created_late: set[str] = set()

    async def check(self, options: dict[str, object]) -> None:
        """Look the topics up; log one warning when the set of missing ones changes to
        a non-empty one. A failed lookup keeps the last answer (the consumer reports
        an unreachable broker by itself)."""
        try:
            missing = await missing_topics(options, self.names)
        except (KafkaError, OSError) as error:
            log.debug("looking up the input topics failed: %s", error)
            return
        if missing and missing != self.missing:
            log.warning(
                "input topics missing: %s; this worker consumes nothing until you run "
                "`scorer topics create` and restart it",
                ", ".join(missing),
            )
        self.created_late |= set(self.missing or ()) - set(missing)
        self.missing = missing

    def problem(self) -> str | None:
        """Why the inputs make the worker not ready, or None."""
        if self.missing is None:
            return "looking up the input topics"
        if self.missing:
            return f"input topics missing: {', '.join(self.missing)} (run `scorer topics create`)"
        if self.created_late:
            late = ", ".join(sorted(self.created_late))
            return f"input topics created after start-up: {late} (restart the worker)"
        return None


def is_ready(
    app: faust.App,
    inputs: InputTopics | None = None,
    recovering: Callable[[], str | None] | None = None,
) -> tuple[bool, str]:
    """Ready once the input topics exist, the tables are recovered and partitions are
    assigned and consumed (or the group's assignment gave this worker none), and not
    while the app stops to be rebuilt in-process (``recovering()`` says why)."""
    problem = recovering() if recovering is not None else None
    if problem:
        return False, problem
    problem = inputs.problem() if inputs is not None else None
    if problem:
        return False, problem
    if not app.tables.recovery.completed.is_set():
        return False, "recovering tables"
    if app.rebalancing:
        return False, "rebalancing"
    if not app.consumer.assignment():
        if not app.consumer_generation_id:
            return False, "no partitions assigned yet"
        # A member the group's last assignment gave nothing (more workers than the
        # assignor uses: Faust's sticky assignor can leave a restarted member idle
        # beside 2 + 2 of 4 partitions). It serves the run API and takes partitions
        # over when a peer goes: ready, and it says so.
        return True, "idle: the group's last assignment gave this worker no partitions"
    return True, "consuming"


def run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` cannot be a run id (the wire's bounds), or None."""
    if not run_id or len(run_id) > MAX_ID_LENGTH:
        return f"run id must be 1 to {MAX_ID_LENGTH} characters"
    if any(not ch.isprintable() for ch in run_id):
        return "run id must not contain control characters"
    return None


def error(web: View, status: int, message: str) -> Response:
    return web.json({"error": message, "status": status}, status=status)


def facet_aggregates(document: dict[str, Any]) -> dict[str, dict[str, MetricAggregate]]:
    return {
        facet: {value: MetricAggregate.from_state(state) for value, state in values.items()}
        for facet, values in document.get("facets", {}).items()
    }


def compare_documents(a: dict[str, Any], b: dict[str, Any], alpha: float) -> dict[str, Any]:
    """The comparison of two runs from their ``/scores`` documents (a worker of an
    earlier version answers without ``first`` and ``facets``: the means stand in)."""
    return compare_runs(
        MetricAggregate.from_state(a["overall"]),
        MetricAggregate.from_state(b["overall"]),
        a["queries"],
        b["queries"],
        a.get("first"),
        b.get("first"),
        facet_aggregates(a),
        facet_aggregates(b),
        alpha,
    )


def register_views(
    app: faust.App,
    settings: Settings,
    rollup_table: Any,
    run_queries_table: Any,
    recovering: Callable[[], str | None] | None = None,
    watched: Mapping[tuple[str, str], dict[str, Any]] | None = None,
) -> Callable[[], tuple[bool, str]]:
    """Add the health views and the run API to the app's web server, and the task that
    watches whether the input topics exist (for ``/readyz``); returns what ``/readyz``
    answers, as ``(ready, why)``. ``watched``: the verdicts of the watched pairs this
    worker exports (``StreamParts.watched``), for the run list's warnings."""
    watched = {} if watched is None else watched
    inputs = InputTopics((settings.results_topic, settings.qrels_topic))

    @app.task
    async def watch_input_topics() -> None:
        options = settings.aiokafka_options()
        while not app.should_stop:
            await inputs.check(options)
            present = inputs.missing == []
            await app.sleep(RECHECK_PRESENT_SECONDS if present else RECHECK_MISSING_SECONDS)

    async def run_answer(
        web: View,
        request: Request,
        run_id: str,
        document: Callable[[str, Any], Any],
    ) -> Response:
        """``document(run_id, state)`` of the run's state (decoded), answered by the worker
        that owns ``run_id`` (forwarded there from any other); 404 for an unknown run."""
        problem = run_id_problem(run_id)
        if problem:
            return error(web, 400, problem)
        try:
            return await app.router.route_req(rollup_table.name, run_id.encode(), web, request)
        except SameNode:
            pass
        state = rollup_table.get(run_id.encode())
        if state is None:
            return error(web, 404, f"unknown run {run_id!r}")
        return web.json(document(run_id, decode_run_state(state)))

    def run_scores(run_id: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """Per-query mean scores of a run held by this worker, and each query's first
        answer ``[enteredAt, values...]`` (a standby's store holds blocks of entries:
        ``entry_blocks``)."""
        prefix = run_state.query_key(run_id, "")
        means, first = {}, {}
        for key, entry in newest_entries(run_queries_table.items(), prefix).items():
            query = key[len(prefix) :]
            means[query] = run_state.query_means(entry)
            first[query] = run_state.query_first(entry)
        return means, first

    def local_runs() -> list[dict[str, Any]]:
        """The runs whose state this worker holds (its partitions and standbys)."""
        return [
            run_entry(key.decode(), decode_run_state(state))
            for key, state in rollup_table.items()
            if state is not None
        ]

    def local_list() -> dict[str, Any]:
        """What this worker holds of the run list: its runs and its watched pairs."""
        return {"runs": local_runs(), "watched": list(watched.values())}

    async def peer_list(host: str) -> dict[str, Any]:
        url = URL(host).with_path(API).with_query(scope=LOCAL_SCOPE)
        timeout = aiohttp.ClientTimeout(total=PEER_TIMEOUT_SECONDS)
        async with app.http_client.get(url, timeout=timeout) as response:
            if response.status != 200:
                raise OSError(f"{host} answered {response.status}")
            return await response.json(content_type=None)

    async def cluster_runs() -> list[dict[str, Any]]:
        """Every run the cluster holds: this worker's and each other owner's of the
        ``rollups`` table (Faust's assignment), merged. ``OSError`` when an owner
        does not answer (a partial list would silently miss runs)."""
        hosts = other_hosts(
            app.router.table_metadata(rollup_table.name), str(app.conf.canonical_url)
        )
        try:
            answers = await asyncio.gather(*(peer_list(host) for host in hosts))
        except (TimeoutError, aiohttp.ClientError) as failure:
            raise OSError(str(failure) or type(failure).__name__) from failure
        lists = [local_list(), *answers]
        runs = merge_runs(answer["runs"] for answer in lists)
        return with_watched_pairs(runs, (answer.get("watched") or [] for answer in lists))

    async def fetch_json(path: str) -> tuple[int, Any]:
        url = app.conf.canonical_url.with_path(path)
        async with app.http_client.get(url) as response:
            return response.status, await response.json(content_type=None)

    @app.page("/healthz")
    async def healthz(web: View, request: Request) -> Response:
        return web.json({"status": "alive"})

    @app.page("/readyz")
    async def readyz(web: View, request: Request) -> Response:
        ready, reason = is_ready(app, inputs, recovering)
        return web.json({"ready": ready, "status": reason}, status=200 if ready else 503)

    @app.page("/")
    async def evals_page(web: View, request: Request) -> Response:
        return web.html(page_html())

    @app.page("/evals")
    async def evals_page_alias(web: View, request: Request) -> Response:
        return web.html(page_html())

    @app.page("/api/v1/openapi.json")
    async def openapi(web: View, request: Request) -> Response:
        return web.json(OPENAPI)

    @app.page(API)
    class RunList(View):
        async def get(self, request: Request) -> Response:
            try:
                paging = Paging.from_query(request.query)
            except ValueError as problem:
                return error(self, 400, str(problem))
            if request.query.get("scope") == LOCAL_SCOPE:
                return self.json(local_list())
            try:
                listed = await cluster_runs()
            except OSError as failure:
                return error(self, 503, f"a worker owning runs did not answer ({failure}); retry")
            return self.json(page_of(listed, paging))

    def metrics_document(run_id: str, state: Any) -> dict[str, Any]:
        return run_state.run_document(run_id, state, settings.rollup_max_queries)

    def scores_document(run_id: str, state: Any) -> dict[str, Any]:
        means, first = run_scores(run_id)
        return {
            "runId": run_id,
            "overall": state["rollup"]["overall"],
            "facets": state["rollup"].get("facets", {}),
            "queries": means,
            "first": first,
        }

    @app.page(API + "/{run_id}/metrics")
    class RunMetrics(View):
        async def get(self, request: Request, run_id: str) -> Response:
            return await run_answer(self, request, run_id, metrics_document)

    @app.page(API + "/{run_id}/risk-coverage")
    class RunRiskCoverage(View):
        async def get(self, request: Request, run_id: str) -> Response:
            return await run_answer(self, request, run_id, run_state.risk_document)

    @app.page(API + "/{run_id}/scores")
    class RunScores(View):
        async def get(self, request: Request, run_id: str) -> Response:
            return await run_answer(self, request, run_id, scores_document)

    @app.page(API + "/{run_a}/compare/{run_b}")
    class CompareRuns(View):
        async def get(self, request: Request, run_a: str, run_b: str) -> Response:
            fetched = {}
            for run_id in (run_a, run_b):
                problem = run_id_problem(run_id)
                if problem:
                    return error(self, 400, problem)
                status, body = await fetch_json(f"{API}/{run_id}/scores")
                if status != 200:
                    return self.json(body, status=status)
                fetched[run_id] = body
            a, b = fetched[run_a], fetched[run_b]
            alpha = settings.compare_alpha
            if "alpha" in request.query:
                try:
                    alpha = float(request.query["alpha"])
                except ValueError:
                    alpha = -1.0
                if not 0 < alpha < 1:
                    return error(self, 400, "alpha must be a number between 0 and 1")
            body = compare_documents(a, b, alpha)
            return self.json({"runA": run_a, "runB": run_b, **body})

    return lambda: is_ready(app, inputs, recovering)
