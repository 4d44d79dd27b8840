"""Prometheus metrics of the worker, served at ``/metrics`` beside Faust's own.

Names (the recording rules and dashboards in ``deploy/`` rely on them):

- ``scorer_retrieval_<metric>`` histograms, one per measure of the registry
  (``scorer.core.measures.MEASURES``: ``recall_at_k``, ``precision_at_k``, ``ndcg_at_10``,
  ``mrr``, ``hit_at_k`` ...), labels ``facet`` and ``value``; every scored result
  is also observed under ``facet="all", value="all"``. ``_sum / _count`` is the mean.
- ``scorer_results_total{outcome}``: results that reached their final place,
  ``outcome`` in scored, unjudged, deadletter, duplicate (a result whose
  resultId is already parked: it waits there once, not twice).
- ``scorer_parked_results``: results waiting for their qrels now (gauge), and
  ``scorer_parked_total``: results that ever entered parking.
- ``scorer_inputs_total{topic}``: events consumed, ``topic`` in results, qrels.
- ``scorer_misplaced_total{topic}``: input records read from a partition other
  than their key's home (another partitioner than murmur2's): each is rerouted
  to its home partition and consumed again there (``scorer.stream.placement``).
- ``scorer_qrels_total{outcome}``: golden-set events, outcome in stored,
  deleted, deadletter. ``scorer_judged_queries``: queries in this worker's table.
- ``scorer_deadletters_total{topic, error}``: dead letters by input and error class;
  ``scorer_deadletters_truncated_total{topic}``: those sent truncated to fit.
- ``scorer_rollup_duplicates_total``: redelivered scored records that the run
  rollups recognised and dropped (at-least-once only);
  ``scorer_rollup_resent_total``: scored records dropped because their run had
  already counted their resultId (a producer's retry: same result, new offset);
  ``scorer_rollup_seen_ids``: resultIds the rollups remember for that check;
  ``scorer_rollup_unsent_writes``: run states and per-query entries waiting for
  the next offset commit to be written to their changelogs.
- ``scorer_confidence_<quantity>_total`` and ``scorer_confidence_<quantity>_above_total``,
  ``<quantity>`` in ``results``, ``miss``, ``ndcg_loss``, labels ``facet``, ``value``
  and ``bucket``: per confidence bucket (fixed edges, ``SCORER_RISK_CONFIDENCE_EDGES``;
  ``bucket`` is the bucket's upper edge, ``+Inf`` for the last), the results with a
  confidence in the bucket and their summed losses, and the same above the bucket.
  Counters, so they sum across workers; the recording rules build the rolling
  AURC of each facet value from them (a bucket is a tie group, as in
  ``scorer.analysis.risk_sketch``). Every bucket of a label pair exists from its first
  scored result, with or without a confidence.
- ``scorer_scoring_latency_seconds``: from consuming a result to handing its
  scored record to the producer. ``scorer_result_age_seconds``: from the
  record's Kafka timestamp to scoring (end-to-end delay, lag included).
- ``scorer_gc_seconds_total{generation}`` and ``scorer_gc_collections_total{generation}``:
  the process's time in the garbage collector and its collections, generation
  0, 1 or 2 (``scorer.stream.collector``); their rate against
  ``process_cpu_seconds_total`` is the share of the CPU the collector takes.

Label values are bounded: only facets in the allowlist become labels, and
each facet keeps at most ``max_values`` distinct values; the rest are
observed as ``other``. Run ids never become labels.

Invariant, per worker: results consumed = scored + unjudged + deadletter +
duplicate + misplaced (results) + parked now.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from scorer.analysis.risk_coverage import losses_of
from scorer.core.measures import MEASURES, each, unrolled
from scorer.core.metrics import MetricValues, compiled
from scorer.settings import CONFIDENCE_EDGES
from scorer.stream.collector import time_collections

ALL = "all"
OTHER = "other"
METRIC_SERIES = tuple(m.field for m in MEASURES)
"""The snake_case names of the measures' histograms (``scorer_retrieval_<name>``)."""
METRIC_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
AGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


# ``*_created`` timestamps double the series count and no dashboard reads them.
disable_created_metrics()


_observe_histograms = unrolled(
    """
def observe(targets, values):
    "Count one result's values into the histogram lists of each label pair."
    {values}, = values
    {buckets}
    for {series}, _ in targets:
        {counts}
""".format(
        values=each("v$"),
        buckets=each("b$ = bisect_left(BOUNDS, v$)", "\n    "),
        series=each("s$"),
        counts=each("s$[b$] += 1\n        s$[-1] += v$", "\n        "),
    ),
    "observe",
    {"bisect_left": bisect_left, "BOUNDS": METRIC_BUCKETS},
)


_observe_compiled = compiled("observe")
"""The same counting in C (bit for bit), or None where the kernel is Python."""


class FacetLabels:
    """Maps facet values to bounded label values: allowlisted facets only, at most
    ``max_values`` distinct values each (first come, first kept), the rest ``other``."""

    def __init__(self, allowlist: Iterable[str], max_values: int) -> None:
        self._allowed = frozenset(allowlist)
        self._max_values = max_values
        self._seen: dict[str, set[str]] = {facet: set() for facet in self._allowed}

    def label_pairs(self, facets: Mapping[str, str]) -> list[tuple[str, str]]:
        """``(facet, value)`` label pairs of a result, ``("all", "all")`` first."""
        pairs = [(ALL, ALL)]
        for facet, value in facets.items():
            if facet not in self._allowed:
                continue
            seen = self._seen[facet]
            if value not in seen:
                if len(seen) >= self._max_values:
                    value = OTHER
                else:
                    seen.add(value)
            pairs.append((facet, value))
        return pairs


class MetricHistograms:
    """The per-result metric histograms (``scorer_retrieval_<metric>``, labels
    ``facet`` and ``value``), counted in plain lists and exposed as Prometheus
    histograms when scraped; :meth:`Telemetry.observe_metrics` updates the lists
    :meth:`series` hands out.

    A result is observed under four label pairs or so, five metrics each;
    prometheus_client's ``Histogram`` takes a lock for each bucket and sum
    update, which made these twenty observations ~120 µs of the worker's CPU
    per result (py-spy, bench/stream.py). The worker observes and is scraped
    on its event loop's thread only, so no lock is needed here.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._les = [floatToGoString(bound) for bound in METRIC_BUCKETS] + ["+Inf"]
        # (facet, value) -> per metric: bucket counts (the last for +Inf), then the sum.
        self._series: dict[tuple[str, str], list[list[float]]] = {}
        registry.register(self)

    def series(self, pair: tuple[str, str]) -> list[list[float]]:
        """The counts of label ``pair``: per metric, its bucket counts (the last for
        +Inf), then their sum (created empty at first use)."""
        series = self._series.get(pair)
        if series is None:
            series = self._series[pair] = [[0.0] * (len(self._les) + 1) for _ in METRIC_SERIES]
        return series

    def describe(self) -> list[HistogramMetricFamily]:
        return [self._family(i) for i in range(len(METRIC_SERIES))]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        for i in range(len(METRIC_SERIES)):
            family = self._family(i)
            for pair, series in self._series.items():
                counts = series[i]
                cumulative = list(accumulate(counts[:-1]))
                family.add_metric(
                    list(pair), list(zip(self._les, cumulative, strict=True)), counts[-1]
                )
            yield family

    @staticmethod
    def _family(index: int) -> HistogramMetricFamily:
        measure = MEASURES[index]
        return HistogramMetricFamily(
            measure.prometheus, measure.prometheus_help, labels=("facet", "value")
        )


class PlainHistogram:
    """A Prometheus histogram without labels, counted in a plain list: what
    prometheus_client's ``Histogram`` exposes, without its lock per observation
    (observed and scraped on the event loop's thread only, as
    :class:`MetricHistograms`)."""

    def __init__(
        self, name: str, documentation: str, buckets: Iterable[float], registry: CollectorRegistry
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(buckets)
        self._les = [floatToGoString(bound) for bound in self._bounds] + ["+Inf"]
        self._counts = [0.0] * len(self._les)
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1
        self._sum += value

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self._name, self._documentation)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=())
        cumulative = list(accumulate(self._counts))
        family.add_metric([], list(zip(self._les, cumulative, strict=True)), self._sum)
        yield family


class ConfidenceCounters:
    """Per label pair and confidence bucket: results, misses and ndcgLoss summed, in
    the bucket and above it (``scorer_confidence_*``, module docstring). Counted in
    plain lists like :class:`MetricHistograms`; the ``above`` counters are summed
    from the buckets when scraped (they only grow, as the buckets do)."""

    QUANTITIES = ("results", "miss", "ndcg_loss")

    def __init__(self, registry: CollectorRegistry, edges: Iterable[float]) -> None:
        self._edges = tuple(edges)
        self._buckets = [floatToGoString(edge) for edge in self._edges] + ["+Inf"]
        # (facet, value) -> per quantity, the sum in each bucket.
        self._series: dict[tuple[str, str], list[list[float]]] = {}
        registry.register(self)

    def series(self, pair: tuple[str, str]) -> list[list[float]]:
        """The sums of label ``pair``: per quantity, one per bucket (created at 0)."""
        series = self._series.get(pair)
        if series is None:
            series = self._series[pair] = [[0.0] * len(self._buckets) for _ in self.QUANTITIES]
        return series

    def bucket(self, confidence: float) -> int:
        """The index of the bucket ``confidence`` is in."""
        return bisect_left(self._edges, confidence)

    def describe(self) -> list[CounterMetricFamily]:
        return [family for name in self.QUANTITIES for family in self._families(name)]

    def collect(self) -> Iterator[CounterMetricFamily]:
        for index, name in enumerate(self.QUANTITIES):
            inside, above = self._families(name)
            for pair, series in self._series.items():
                sums = series[index]
                higher = 0.0
                for bucket in range(len(sums) - 1, -1, -1):
                    labels = [*pair, self._buckets[bucket]]
                    inside.add_metric(labels, sums[bucket])
                    above.add_metric(labels, higher)
                    higher += sums[bucket]
            yield inside
            yield above

    @staticmethod
    def _families(name: str) -> tuple[CounterMetricFamily, CounterMetricFamily]:
        what = {"results": "Results", "miss": "Misses", "ndcg_loss": "Summed ndcgLoss"}[name]
        labels = ("facet", "value", "bucket")
        return (
            CounterMetricFamily(
                f"scorer_confidence_{name}",
                f"{what} of scored results whose confidence is in the bucket, by facet value.",
                labels=labels,
            ),
            CounterMetricFamily(
                f"scorer_confidence_{name}_above",
                f"{what} of scored results whose confidence is above the bucket, by facet value.",
                labels=labels,
            ),
        )


class SeriesCache:
    """The series a result's facets are observed under, per facets mapping: for each
    of its label pairs (:meth:`FacetLabels.label_pairs`), the measures' histograms'
    counts and the confidence counters' sums.

    Caching is exact: a facet value's label is decided the first time it is seen
    and never changes (admitted values stay admitted; once a facet is full, a new
    value is ``other`` for good). At most ``limit`` mappings are kept; past that
    the cache starts afresh (facet values without a bound, such as ids, cost a
    lookup then, not memory).
    """

    def __init__(
        self,
        labels: FacetLabels,
        histograms: MetricHistograms,
        counters: ConfidenceCounters,
        limit: int = 4096,
    ) -> None:
        self._labels = labels
        self._histograms = histograms
        self._counters = counters
        self._limit = limit
        self._cached: dict[tuple[tuple[str, str], ...], tuple[tuple[list[float], ...], ...]] = {}

    def get(self, facets: Mapping[str, str]) -> tuple[tuple[Any, ...], ...]:
        """Per label pair of ``facets``: ``(a count list per measure..., confidence sums)``."""
        key = tuple(facets.items())
        targets = self._cached.get(key)
        if targets is None:
            if len(self._cached) >= self._limit:
                self._cached.clear()
            targets = self._cached[key] = tuple(
                (*self._histograms.series(pair), self._counters.series(pair))
                for pair in self._labels.label_pairs(facets)
            )
        return targets


class CollectorSeries:
    """``scorer_gc_seconds_total`` and ``scorer_gc_collections_total`` by generation,
    read at each scrape from the process's timed collections (``collector.COLLECTIONS``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._times = time_collections()
        registry.register(self)

    def describe(self) -> list[CounterMetricFamily]:
        return list(self._families())

    def collect(self) -> Iterator[CounterMetricFamily]:
        times = self._times
        seconds, collections = self._families()
        for generation in range(3):
            seconds.add_metric([str(generation)], times.seconds[generation])
            collections.add_metric([str(generation)], times.collections[generation])
        yield seconds
        yield collections

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                "scorer_gc_seconds",
                "Time in the garbage collector, by generation.",
                labels=("generation",),
            ),
            CounterMetricFamily(
                "scorer_gc_collections",
                "Garbage collections, by generation.",
                labels=("generation",),
            ),
        )


class Telemetry:
    """The worker's Prometheus instruments, in a registry of its own."""

    def __init__(
        self,
        facet_allowlist: Iterable[str],
        facet_max_values: int,
        confidence_edges: Iterable[float] = CONFIDENCE_EDGES,
    ) -> None:
        self.registry = CollectorRegistry()
        self.facet_labels = FacetLabels(facet_allowlist, facet_max_values)
        self.metric_histograms = MetricHistograms(self.registry)
        self.collector = CollectorSeries(self.registry)
        self.confidence_counters = ConfidenceCounters(self.registry, confidence_edges)
        self._series_cache = SeriesCache(
            self.facet_labels, self.metric_histograms, self.confidence_counters
        )
        self.results = Counter(
            "scorer_results", "Results by final outcome.", ("outcome",), registry=self.registry
        )
        self.parked = Gauge(
            "scorer_parked_results", "Results waiting for their qrels.", registry=self.registry
        )
        self.parked_total = Counter(
            "scorer_parked", "Results that entered parking.", registry=self.registry
        )
        self.inputs = Counter(
            "scorer_inputs", "Events consumed, by input.", ("topic",), registry=self.registry
        )
        self.deadletters_truncated = Counter(
            "scorer_deadletters_truncated",
            "Dead letters sent truncated (the input did not fit the producer's request size: "
            "x-scorer-truncated), by input.",
            ("topic",),
            registry=self.registry,
        )
        self.misplaced = Counter(
            "scorer_misplaced",
            "Input records read from a partition other than their key's home "
            "(murmur2): rerouted there, and consumed again there.",
            ("topic",),
            registry=self.registry,
        )
        self.qrels = Counter(
            "scorer_qrels", "Golden-set events by outcome.", ("outcome",), registry=self.registry
        )
        self.judged_queries = Gauge(
            "scorer_judged_queries", "Queries in this worker's qrels table.", registry=self.registry
        )
        self.deadletters = Counter(
            "scorer_deadletters",
            "Dead letters by input and error class.",
            ("topic", "error"),
            registry=self.registry,
        )
        self.rollup_duplicates = Counter(
            "scorer_rollup_duplicates",
            "Redelivered scored records the run rollups dropped.",
            registry=self.registry,
        )
        self.rollup_resent = Counter(
            "scorer_rollup_resent",
            "Scored records the run rollups dropped because the run had already "
            "counted their resultId (a result its producer sent twice).",
            registry=self.registry,
        )
        self.rollup_seen_ids = Gauge(
            "scorer_rollup_seen_ids",
            "ResultIds this worker's run rollups remember (SCORER_ROLLUP_DEDUPE_SECONDS).",
            registry=self.registry,
        )
        self.rollup_unsent_writes = Gauge(
            "scorer_rollup_unsent_writes",
            "Run states and per-query entries stored and not yet written to their "
            "changelogs: written at the next offset commit (SCORER_ROLLUP_WRITE_BEHIND).",
            registry=self.registry,
        )
        self.latency = PlainHistogram(
            "scorer_scoring_latency_seconds",
            "Time from consuming a result to producing its scored record.",
            LATENCY_BUCKETS,
            self.registry,
        )
        self.age = PlainHistogram(
            "scorer_result_age_seconds",
            "Time from a result's Kafka timestamp to its scoring.",
            AGE_BUCKETS,
            self.registry,
        )
        for outcome in ("scored", "unjudged", "deadletter", "duplicate"):
            self.results.labels(outcome)
        # Per-event children resolved once: labels() is a lookup under a lock.
        self.scored = self.results.labels("scored")
        self.result_inputs = self.inputs.labels("results")
        for outcome in ("stored", "deleted", "deadletter"):
            self.qrels.labels(outcome)
        for topic in ("results", "qrels"):
            self.inputs.labels(topic)
            self.misplaced.labels(topic)
            self.deadletters_truncated.labels(topic)

    def observe_scored(
        self, values: MetricValues, facets: Mapping[str, str], confidence: float | None = None
    ) -> None:
        """Count one scored result and observe its metrics (and its losses by confidence)
        under each label pair."""
        self.scored.inc()
        self.observe_metrics(values, facets, confidence)

    def observe_metrics(
        self, values: MetricValues, facets: Mapping[str, str], confidence: float | None = None
    ) -> None:
        """What :meth:`observe_scored` observes, without counting the result (the batch
        path counts a batch's scored results at once).

        The series of each facets mapping seen are resolved once (:class:`SeriesCache`)
        and updated in straight-line code generated from the registry
        (:func:`_observe_histograms`): a loop over the measures per label pair made
        these observations several times dearer.
        """
        targets = self._series_cache.get(facets)
        if (
            _observe_compiled is None
            or _observe_compiled(targets, values, METRIC_BUCKETS) is NotImplemented
        ):
            _observe_histograms(targets, values)
        if confidence is None:
            return
        bucket = self.confidence_counters.bucket(confidence)
        miss, ndcg_loss = losses_of(values)
        for *_, (results, misses, losses) in targets:
            results[bucket] += 1
            misses[bucket] += miss
            losses[bucket] += ndcg_loss

    def count_unjudged(self, n: int = 1) -> None:
        self.results.labels("unjudged").inc(n)

    def count_deadletter(self, topic: str, error_class: str) -> None:
        if topic == "results":
            self.results.labels("deadletter").inc()
        else:
            self.qrels.labels("deadletter").inc()
        self.deadletters.labels(topic, error_class).inc()

    def sample(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """The current value of one sample (0.0 when it has none yet)."""
        value = self.registry.get_sample_value(name, dict(labels or {}))
        return 0.0 if value is None else value
