"""Watched run pairs: a candidate's anytime-valid comparison with its baseline, on
``/metrics``, for alerting (a canary rollout is the use).

``SCORER_WATCH_PAIRS`` names ``[baseline, candidate]`` pairs. Every
``SCORER_WATCH_SECONDS`` the worker that owns the baseline's rollup partition
reads the pair's comparison (the compare endpoint, routed like any read) and
exports, per metric and design (``paired``: the queries both runs answered;
``unpaired``: every result of either) and per facet value within the label cap,
the bounds of the anytime-valid interval of ``candidate - baseline`` and a
verdict: 1 candidate better, -1 worse, 0 undecided. Only this bounded list of
runs ever becomes a label. One worker exports each pair; the others remove
theirs, so sums over workers count a pair once.

Error rate: the ten overall verdicts of a pair (five metrics, two designs) are
taken at alpha / 10 each, so the chance that any of them is *ever* wrong,
however long the pair is watched, is at most ``SCORER_COMPARE_ALPHA``; the facet
verdicts split the same alpha / 10 over their own family (``scorer.analysis.compare``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from prometheus_client import Gauge

from scorer.core.measures import WATCHED
from scorer.stream.parts import StreamParts

logger = logging.getLogger(__name__)

API = "/api/v1/evals/runs"
LABELS = ("baseline", "candidate", "metric", "design", "facet", "value")
WATCHED_NAMES = tuple(m.wire for m in WATCHED)
"""The measures the watch gives verdicts on (``Measure.watched``)."""
CELLS_PER_PAIR = 2 * len(WATCHED_NAMES)
"""The overall verdicts of a pair that share its alpha."""


def verdict(interval: list[float] | None) -> int:
    """1 when the interval of ``candidate - baseline`` is above 0, -1 below, else 0."""
    if interval is None:
        return 0
    return 1 if interval[0] > 0 else -1 if interval[1] < 0 else 0


def pair_series(
    comparison: dict[str, Any], allowlist: tuple[str, ...], max_values: int
) -> Iterator[tuple[tuple[str, ...], list[float] | None]]:
    """``(metric, design, facet, value)`` and the anytime interval of each series of a
    comparison (compare endpoint body): overall (``facet="all"``) paired and
    unpaired, then unpaired per facet value of the allowlisted facets, at most
    ``max_values`` values each (in name order)."""
    for metric in WATCHED_NAMES:
        yield (metric, "unpaired", "all", "all"), comparison["metrics"][metric]["anytime95"]
        yield (metric, "paired", "all", "all"), comparison["paired"]["metrics"][metric]["anytime95"]
    for facet, values in sorted(comparison["facets"]["values"].items()):
        if facet not in allowlist:
            continue
        for value in sorted(values)[:max_values]:
            for metric in WATCHED_NAMES:
                yield (
                    (metric, "unpaired", facet, value),
                    values[value]["metrics"][metric]["anytime95"],
                )


class WatchGauges:
    """The watched pairs' series, and which label sets this worker exports now."""

    def __init__(self, registry: Any) -> None:
        self.lower = Gauge(
            "scorer_watch_lower",
            "Lower bound of the anytime-valid interval of candidate - baseline.",
            LABELS,
            registry=registry,
        )
        self.upper = Gauge(
            "scorer_watch_upper",
            "Upper bound of the anytime-valid interval of candidate - baseline.",
            LABELS,
            registry=registry,
        )
        self.verdict = Gauge(
            "scorer_watch_verdict",
            "Watched pair: 1 candidate better, -1 worse, 0 undecided (anytime-valid).",
            LABELS,
            registry=registry,
        )
        self._exported: dict[tuple[str, str], set[tuple[str, ...]]] = {}

    def show(self, pair: tuple[str, str], series: Iterator[Any]) -> None:
        """Export a pair's series (and drop its series no longer there)."""
        now: set[tuple[str, ...]] = set()
        for labels, interval in series:
            full = (*pair, *labels)
            now.add(full)
            low, high = interval if interval is not None else (float("nan"), float("nan"))
            self.lower.labels(*full).set(low)
            self.upper.labels(*full).set(high)
            self.verdict.labels(*full).set(verdict(interval))
        for gone in self._exported.get(pair, set()) - now:
            self._remove(gone)
        self._exported[pair] = now

    def hide(self, pair: tuple[str, str]) -> None:
        """Stop exporting a pair (another worker owns its baseline now)."""
        for gone in self._exported.pop(pair, set()):
            self._remove(gone)

    def _remove(self, labels: tuple[str, ...]) -> None:
        for gauge in (self.lower, self.upper, self.verdict):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)


def pair_verdicts(baseline: str, candidate: str, comparison: dict[str, Any]) -> dict[str, Any]:
    """A pair's overall verdicts, as the run list shows them: the watched measures on
    which the candidate is decided worse (-1 in the paired or the unpaired design) and
    those it is decided better on (+1 in one, -1 in neither)."""
    worse, better = [], []
    for metric in WATCHED_NAMES:
        verdicts = {
            verdict(comparison["metrics"][metric]["anytime95"]),
            verdict(comparison["paired"]["metrics"][metric]["anytime95"]),
        }
        if -1 in verdicts:
            worse.append(metric)
        elif 1 in verdicts:
            better.append(metric)
    return {"baseline": baseline, "candidate": candidate, "worse": worse, "better": better}


def register(parts: StreamParts) -> None:
    """The watch timer (nothing when no pair is watched)."""
    settings, app = parts.settings, parts.app
    pairs = [tuple(pair) for pair in settings.watch_pairs]
    if not pairs:
        return
    gauges = WatchGauges(parts.telemetry.registry)
    homes = parts.misplaced.homes  # rollup records are keyed by run id, placed by murmur2
    alpha = settings.compare_alpha / CELLS_PER_PAIR

    def forget(pair: tuple[str, str]) -> None:
        """Stop exporting a pair and stop listing its verdicts."""
        gauges.hide(pair)
        parts.watched.pop(pair, None)

    @app.timer(interval=settings.watch_seconds)
    async def export_watched_pairs() -> None:
        owned = parts.edge.owned_partitions(settings.rollup_topic)
        for baseline, candidate in pairs:
            pair = (baseline, candidate)
            if homes.of(baseline.encode()) not in owned:
                forget(pair)
                continue
            path = f"{API}/{quote(baseline, safe='')}/compare/{quote(candidate, safe='')}"
            url = app.conf.canonical_url.with_path(path).with_query(alpha=str(alpha))
            try:
                async with app.http_client.get(url) as response:
                    if response.status == 404:
                        forget(pair)  # a run of the pair has no results yet
                        continue
                    if response.status != 200:
                        logger.warning(
                            "Watched pair %s: compare answered %s", pair, response.status
                        )
                        continue
                    comparison = await response.json(content_type=None)
            except OSError as failure:
                logger.warning("Watched pair %s: compare failed (%s)", pair, failure)
                continue
            gauges.show(
                pair,
                pair_series(comparison, settings.facet_allowlist, settings.facet_max_values),
            )
            parts.watched[pair] = pair_verdicts(baseline, candidate, comparison)
