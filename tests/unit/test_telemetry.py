"""Prometheus instruments of the worker: bounded labels and exact sums."""

from __future__ import annotations

import pytest

from scorer.core.measures import MEASURES
from scorer.core.metrics import MetricValues
from scorer.stream.telemetry import FacetLabels, Telemetry


def test_only_allowlisted_facets_become_labels_and_values_are_capped():
    labels = FacetLabels(["type"], max_values=2)
    assert labels.label_pairs({"type": "a", "secret": "x"}) == [("all", "all"), ("type", "a")]
    assert labels.label_pairs({"type": "b"})[1] == ("type", "b")
    assert labels.label_pairs({"type": "c"})[1] == ("type", "other")
    assert labels.label_pairs({"type": "a"})[1] == ("type", "a")


def test_histogram_sums_and_counts_equal_the_observed_metrics():
    telemetry = Telemetry(["type"], 10)
    observed = [
        MetricValues(1.0, 0.3, 0.738, 1.0, 1, 1.0, 1.0),
        MetricValues(0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0),
    ]
    telemetry.observe_scored(observed[0], {"type": "factoid"})
    telemetry.observe_scored(observed[1], {"type": "list"})
    ndcg_sum = telemetry.sample("scorer_retrieval_ndcg_at_10_sum", {"facet": "all", "value": "all"})
    assert ndcg_sum == pytest.approx(0.738)
    factoid = {"facet": "type", "value": "factoid"}
    assert telemetry.sample("scorer_retrieval_recall_at_k_count", factoid) == 1
    zero_bucket = {"facet": "all", "value": "all", "le": "0.0"}
    assert telemetry.sample("scorer_retrieval_mrr_bucket", zero_bucket) == 1
    assert telemetry.sample("scorer_results_total", {"outcome": "scored"}) == 2


def retrieval_lines(registry) -> list[str]:
    """The exposition lines of the ``scorer_retrieval_*`` histograms in ``registry``."""
    from prometheus_client import generate_latest

    return [
        line
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith(
            ("scorer_retrieval_", "# HELP scorer_retrieval_", "# TYPE scorer_retrieval_")
        )
    ]


def reference_histograms(registry):
    """prometheus_client's own histograms of every measure, by facet and value."""
    from prometheus_client import Histogram

    from scorer.core.measures import MEASURES
    from scorer.stream.telemetry import METRIC_BUCKETS

    return [
        Histogram(
            f"scorer_retrieval_{m.field}",
            m.prometheus_help,
            ("facet", "value"),
            buckets=METRIC_BUCKETS,
            registry=registry,
        )
        for m in MEASURES
    ]


def test_metric_histograms_expose_what_prometheus_client_histograms_would():
    """Same exposition text as prometheus_client's own Histogram for the same
    observations under each label pair (random values, the bucket edges and
    out-of-range values)."""
    import random

    from prometheus_client import CollectorRegistry

    from scorer.stream.telemetry import METRIC_BUCKETS

    telemetry = Telemetry(["type"], 10)
    reference_registry = CollectorRegistry()
    reference = reference_histograms(reference_registry)
    rng = random.Random(7)
    pool = [*METRIC_BUCKETS, 1.5, -0.0, 0.05, 0.999999]
    for _ in range(500):
        values = MetricValues(
            *(rng.choice(pool) if rng.random() < 0.3 else rng.random() for _ in MEASURES)
        )
        facets = {"type": rng.choice(["faq", "howto"])} if rng.random() < 0.7 else {}
        telemetry.observe_metrics(values, facets)
        pairs = [("all", "all"), *(("type", value) for value in facets.values())]
        for pair in pairs:
            for histogram, value in zip(reference, values, strict=True):
                histogram.labels(*pair).observe(value)
    assert retrieval_lines(telemetry.registry) == retrieval_lines(reference_registry)


def test_confidence_counters_hold_results_and_losses_in_and_above_each_bucket():
    telemetry = Telemetry(["type"], 10, confidence_edges=(0.25, 0.5, 1.0))
    # (confidence, hit, nDCG): 0.5 is in the bucket whose upper edge it is; 7.0 in +Inf.
    for confidence, hit, ndcg in [(0.9, 1, 0.75), (0.5, 0, 0.0), (0.1, 1, 0.5), (7.0, 0, 0.0)]:
        values = MetricValues(1.0, 0.1, ndcg, 1.0, hit, 1.0, 1.0)
        telemetry.observe_scored(values, {"type": "faq"}, confidence)
    telemetry.observe_scored(MetricValues(0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0), {"type": "new"})

    def counts(name: str, facet: str, value: str) -> list[float]:
        labels = {"facet": facet, "value": value}
        return [
            telemetry.sample(f"scorer_confidence_{name}_total", {**labels, "bucket": bucket})
            for bucket in ("0.25", "0.5", "1.0", "+Inf")
        ]

    assert counts("results", "type", "faq") == [1, 1, 1, 1]
    assert counts("results_above", "type", "faq") == [3, 2, 1, 0]
    assert counts("miss", "all", "all") == [0, 1, 0, 1]
    assert counts("miss_above", "all", "all") == [2, 1, 1, 0]
    assert counts("ndcg_loss", "type", "faq") == [0.5, 1.0, 0.25, 1.0]
    assert counts("ndcg_loss_above", "type", "faq") == [2.25, 1.25, 1.0, 0.0]
    # A result without a confidence creates its pair's series at 0 and counts nowhere.
    registry_names = {
        (sample.name, sample.labels.get("value"))
        for family in telemetry.registry.collect()
        for sample in family.samples
    }
    assert ("scorer_confidence_results_total", "new") in registry_names
    assert counts("results", "type", "new") == [0, 0, 0, 0]
    assert counts("results", "all", "all") == [1, 1, 1, 1]


def test_cached_series_observe_what_the_label_pairs_say():
    """The batch path's straight-line observation (series resolved once per facets
    mapping, the cache starting afresh when full) exposes exactly what observing
    each result under its label pairs does: capped facets, ``other`` and all.
    References: prometheus_client's histograms, and the confidence sums added up
    here."""
    import random
    from bisect import bisect_left
    from collections import defaultdict

    from prometheus_client import CollectorRegistry

    from scorer.stream.telemetry import SeriesCache

    edges = (0.25, 0.5, 1.0)
    telemetry = Telemetry(["type", "region"], 3, confidence_edges=edges)
    telemetry._series_cache = SeriesCache(
        telemetry.facet_labels,
        telemetry.metric_histograms,
        telemetry.confidence_counters,
        limit=4,
    )
    reference_registry = CollectorRegistry()
    reference = reference_histograms(reference_registry)
    reference_labels = FacetLabels(["type", "region"], 3)
    # (facet, value, bucket) -> [results, misses, ndcgLoss]
    sums: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    pairs_seen: set[tuple[str, str]] = set()
    rng = random.Random(3)
    for _ in range(400):
        facets = {"type": rng.choice("abcdef"), "secret": rng.choice("xy")}
        if rng.random() < 0.5:
            facets["region"] = rng.choice(["eu", "us", "apac", "latam", "mena"])
        if rng.random() < 0.3:
            facets = dict(reversed(list(facets.items())))
        values = MetricValues(
            rng.random(), rng.choice([0.0, 0.1, 1.0]), rng.random(), rng.random(),
            rng.randint(0, 1), rng.random(), rng.random(),
        )  # fmt: skip
        confidence = None if rng.random() < 0.2 else rng.uniform(-1.0, 2.0)
        telemetry.observe_metrics(values, facets, confidence)
        for pair in reference_labels.label_pairs(facets):
            pairs_seen.add(pair)
            for histogram, value in zip(reference, values, strict=True):
                histogram.labels(*pair).observe(value)
            if confidence is not None:
                held = sums[(*pair, bisect_left(edges, confidence))]
                held[0] += 1
                held[1] += 1 - values.hit_at_k
                held[2] += 1.0 - values.ndcg_at_10
    assert retrieval_lines(telemetry.registry) == retrieval_lines(reference_registry)
    assert ("type", "other") in pairs_seen and ("region", "other") in pairs_seen
    labels_of = {0: "0.25", 1: "0.5", 2: "1.0", 3: "+Inf"}
    exposed_pairs = {
        (sample.labels["facet"], sample.labels["value"])
        for family in telemetry.registry.collect()
        if family.name == "scorer_confidence_results"
        for sample in family.samples
    }
    assert exposed_pairs == pairs_seen
    for facet, value in pairs_seen:
        for bucket, label in labels_of.items():
            where = {"facet": facet, "value": value, "bucket": label}
            expected = sums.get((facet, value, bucket), [0.0, 0.0, 0.0])
            for name, want in zip(("results", "miss", "ndcg_loss"), expected, strict=True):
                assert telemetry.sample(f"scorer_confidence_{name}_total", where) == want


def test_plain_histogram_exposes_what_a_prometheus_client_histogram_would():
    import random

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from scorer.stream.telemetry import LATENCY_BUCKETS, PlainHistogram

    ours_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    ours = PlainHistogram("x_seconds", "Some time.", LATENCY_BUCKETS, ours_registry)
    reference = Histogram(
        "x_seconds", "Some time.", buckets=LATENCY_BUCKETS, registry=reference_registry
    )
    rng = random.Random(5)
    for _ in range(300):
        value = (
            rng.choice([*LATENCY_BUCKETS, 0.0, 7.5]) if rng.random() < 0.3 else rng.expovariate(200)
        )
        ours.observe(value)
        reference.observe(value)
    assert generate_latest(ours_registry) == generate_latest(reference_registry)
