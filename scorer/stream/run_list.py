"""The run list of ``GET /api/v1/evals/runs``: each worker's runs, merged and paged.

A worker holds the run states of its own partitions of the ``rollups`` table
(and, as a standby, copies of others'), so the list is gathered from every
owner and merged here. Pure functions: the web view only fetches and calls them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from yarl import URL

from scorer.core import measures
from scorer.core.rollup import MetricAggregate
from scorer.stream.run_state import trend_of

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


@dataclass(frozen=True)
class Paging:
    """``limit`` runs from position ``offset`` of the newest-first list."""

    limit: int = DEFAULT_LIMIT
    offset: int = 0

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Paging:
        """The paging of a request's query string; ``ValueError`` says what is wrong."""
        limit = _whole_number(query, "limit", DEFAULT_LIMIT)
        offset = _whole_number(query, "offset", 0)
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be 1 to {MAX_LIMIT}, got {limit}")
        return cls(limit=limit, offset=offset)


def _whole_number(query: Mapping[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit():
        raise ValueError(f"{name} must be a whole number >= 0, got {raw!r}")
    return int(raw)


def other_hosts(hosts: Iterable[str], here: str) -> list[str]:
    """The hosts of Faust's table assignment that are not this worker (``here``, its
    canonical URL), compared by host and port as Faust's router compares them."""

    def ident(url: str) -> tuple[str | None, int | None]:
        parsed = URL(url)
        return parsed.host, parsed.port

    return [host for host in hosts if ident(host) != ident(here)]


HEADLINE = tuple(m.wire for m in measures.HEADLINE)
"""The metrics the run list shows per run (the landing view answers at a glance)."""


JUDGED_WARN_BELOW = 0.5
"""The run list warns when under half the filled top-k slots of a run hold a judged id."""
JUDGED_WARN_MIN_COUNT = 20
"""... once the run has this many results (fewer say little)."""


def run_entry(run_id: str, state: Mapping[str, Any]) -> dict[str, Any]:
    """One run of the list from its state in the ``rollups`` table (decoded,
    ``stored.decode_run_state``): its count, last update, the headline metrics'
    means with their 95% intervals (as the run's ``/metrics`` document gives them),
    and what a reader should be warned of."""
    overall = MetricAggregate.from_state(state["rollup"]["overall"])
    means, intervals = overall.means(), overall.ci95()
    changed = state["changedQrels"]
    return {
        "runId": run_id,
        "count": overall.count,
        "updatedAt": state["updatedAt"],
        "metrics": {name: means[name] for name in HEADLINE},
        "ci95": {name: intervals[name] for name in HEADLINE},
        "trend": trend_of(state),
        "changedQrels": changed,
        "warnings": warnings_of(overall.count, means, changed),
    }


def warnings_of(count: int, means: Mapping[str, float], changed_qrels: int = 0) -> list[str]:
    """What the landing view warns of for a run with ``count`` results and these means:
    results scored against qrels that have since changed (the run mixes two golden
    sets, so its means are no trend), and a golden set that covers under half of what
    the run returns (its metrics then read every unjudged id as irrelevant, and
    undercount)."""
    warnings = []
    if changed_qrels:
        warnings.append(
            f"mixed golden sets: {changed_qrels} of {count} results were scored against "
            "qrels that have since changed"
        )
    judged = means.get("judgedAtK")
    if count >= JUDGED_WARN_MIN_COUNT and judged is not None and judged < JUDGED_WARN_BELOW:
        warnings.append(
            f"low judged coverage: judged@k {judged:.2f}, the golden set misses most of what "
            "this run returns, so its metrics undercount (stale qrels, or a new index)"
        )
    return warnings


def _freshness(entry: Mapping[str, Any]) -> tuple[str, int]:
    return entry["updatedAt"] or "", entry["count"]


def merge_runs(lists: Iterable[Iterable[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The runs of every worker's list, once each, newest ``updatedAt`` first (ties by
    run id; never-updated runs last). A run listed by two workers (an owner and a
    standby that lags it) is kept as its freshest copy: later ``updatedAt``, then
    higher count. Timestamps are the worker's ISO 8601 UTC strings, which sort as text."""
    freshest: dict[str, Mapping[str, Any]] = {}
    for entries in lists:
        for entry in entries:
            known = freshest.get(entry["runId"])
            if known is None or _freshness(entry) > _freshness(known):
                freshest[entry["runId"]] = entry
    by_id = sorted(freshest.values(), key=lambda entry: entry["runId"])
    return [
        dict(entry) for entry in sorted(by_id, key=lambda e: e["updatedAt"] or "", reverse=True)
    ]


def with_watched_pairs(
    runs: list[dict[str, Any]], verdicts: Iterable[Iterable[Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    """``runs`` with each candidate of a watched pair carrying its pair's verdicts
    (``watched``: baseline, the measures it is decided worse and better on, from
    every worker's ``watch.pair_verdicts``) and, when it is decided worse on any, a
    warning. A pair listed by two workers (an ownership change between their
    timers) is taken once, the one with more decided measures."""
    pairs: dict[tuple[str, str], Mapping[str, Any]] = {}
    for listed in verdicts:
        for pair in listed:
            key = (pair["baseline"], pair["candidate"])
            known = pairs.get(key)
            if known is None or _decided(pair) > _decided(known):
                pairs[key] = pair
    by_candidate: dict[str, list[Mapping[str, Any]]] = {}
    for (_, candidate), pair in sorted(pairs.items()):
        by_candidate.setdefault(candidate, []).append(pair)
    for entry in runs:
        for pair in by_candidate.get(entry["runId"], []):
            entry.setdefault("watched", []).append(
                {"baseline": pair["baseline"], "worse": pair["worse"], "better": pair["better"]}
            )
            if pair["worse"]:
                entry["warnings"] = [
                    *entry.get("warnings", []),
                    f"worse than {pair['baseline']} (watched pair, anytime-valid) on "
                    + ", ".join(pair["worse"]),
                ]
    return runs


def _decided(pair: Mapping[str, Any]) -> int:
    return len(pair["worse"]) + len(pair["better"])


def page_of(runs: list[dict[str, Any]], paging: Paging) -> dict[str, Any]:
    """The answer: one page of the merged list, its total and where the next page starts
    (``nextOffset``, null on the last page)."""
    end = paging.offset + paging.limit
    return {
        "runs": runs[paging.offset : end],
        "total": len(runs),
        "limit": paging.limit,
        "offset": paging.offset,
        "nextOffset": end if end < len(runs) else None,
    }
