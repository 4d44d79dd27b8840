"""Prometheus instruments of the worker: bounded labels and exact sums."""

from __future__ import annotations

import pytest

from scorer.metrics import MetricValues
from scorer.stream.telemetry import FacetLabels, Telemetry


def test_only_allowlisted_facets_become_labels_and_values_are_capped():
    labels = FacetLabels(["type"], max_values=2)
    assert labels.label_pairs({"type": "a", "secret": "x"}) == [("all", "all"), ("type", "a")]
    assert labels.label_pairs({"type": "b"})[1] == ("type", "b")
    assert labels.label_pairs({"type": "c"})[1] == ("type", "other")
    assert labels.label_pairs({"type": "a"})[1] == ("type", "a")


def test_histogram_sums_and_counts_equal_the_observed_metrics():
    telemetry = Telemetry(["type"], 10)
    observed = [MetricValues(1.0, 0.3, 0.738, 1.0, 1), MetricValues(0.0, 0.0, 0.0, 0.0, 0)]
    telemetry.observe_scored(observed[0], {"type": "factoid"})
    telemetry.observe_scored(observed[1], {"type": "list"})
    ndcg_sum = telemetry.sample("scorer_retrieval_ndcg_at_10_sum", {"facet": "all", "value": "all"})
    assert ndcg_sum == pytest.approx(0.738)
    factoid = {"facet": "type", "value": "factoid"}
    assert telemetry.sample("scorer_retrieval_recall_at_k_count", factoid) == 1
    zero_bucket = {"facet": "all", "value": "all", "le": "0.0"}
    assert telemetry.sample("scorer_retrieval_mrr_bucket", zero_bucket) == 1
    assert telemetry.sample("scorer_results_total", {"outcome": "scored"}) == 2


def test_metric_histograms_expose_what_prometheus_client_histograms_would():
    """Same exposition text as prometheus_client's own Histogram for the same
    observations (random values, the bucket edges and out-of-range values)."""
    import random

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from scorer.stream.telemetry import METRIC_BUCKETS, METRIC_SERIES, MetricHistograms

    ours_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    ours = MetricHistograms(ours_registry)
    reference = [
        Histogram(
            f"scorer_retrieval_{name}",
            f"Per-result {name.replace('_', ' ')} of scored retrievals, by facet value.",
            ("facet", "value"),
            buckets=METRIC_BUCKETS,
            registry=reference_registry,
        )
        for name in METRIC_SERIES
    ]
    rng = random.Random(7)
    pool = [*METRIC_BUCKETS, 1.5, -0.0, 0.05, 0.999999]
    pairs = [("all", "all"), ("type", "faq"), ("type", "other")]
    for _ in range(500):
        values = [rng.choice(pool) if rng.random() < 0.3 else rng.random() for _ in METRIC_SERIES]
        chosen = rng.sample(pairs, rng.randint(1, 3))
        ours.observe(chosen, values)
        for pair in chosen:
            for histogram, value in zip(reference, values, strict=True):
                histogram.labels(*pair).observe(value)
    assert generate_latest(ours_registry) == generate_latest(reference_registry)


def test_confidence_counters_hold_results_and_losses_in_and_above_each_bucket():
    telemetry = Telemetry(["type"], 10, confidence_edges=(0.25, 0.5, 1.0))
    # (confidence, hit, nDCG): 0.5 is in the bucket whose upper edge it is; 7.0 in +Inf.
    for confidence, hit, ndcg in [(0.9, 1, 0.75), (0.5, 0, 0.0), (0.1, 1, 0.5), (7.0, 0, 0.0)]:
        values = MetricValues(1.0, 0.1, ndcg, 1.0, hit)
        telemetry.observe_scored(values, {"type": "faq"}, confidence)
    telemetry.observe_scored(MetricValues(0.0, 0.0, 0.0, 0.0, 0), {"type": "new"})

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
    each result under its label pairs does: capped facets, ``other`` and all."""
    import random

    from prometheus_client import CollectorRegistry, generate_latest

    from scorer.stream.telemetry import ConfidenceCounters, MetricHistograms, SeriesCache

    telemetry = Telemetry(["type", "region"], 3, confidence_edges=(0.25, 0.5, 1.0))
    telemetry._series_cache = SeriesCache(
        telemetry.facet_labels,
        telemetry.metric_histograms,
        telemetry.confidence_counters,
        limit=4,
    )
    reference_registry = CollectorRegistry()
    reference_labels = FacetLabels(["type", "region"], 3)
    histograms = MetricHistograms(reference_registry)
    counters = ConfidenceCounters(reference_registry, (0.25, 0.5, 1.0))
    rng = random.Random(3)
    for _ in range(400):
        facets = {"type": rng.choice("abcdef"), "secret": rng.choice("xy")}
        if rng.random() < 0.5:
            facets["region"] = rng.choice(["eu", "us", "apac", "latam", "mena"])
        if rng.random() < 0.3:
            facets = dict(reversed(list(facets.items())))
        values = MetricValues(
            rng.random(), rng.choice([0.0, 0.1, 1.0]), rng.random(), rng.random(), rng.randint(0, 1)
        )
        confidence = None if rng.random() < 0.2 else rng.uniform(-1.0, 2.0)
        telemetry.observe_metrics(values, facets, confidence)
        pairs = reference_labels.label_pairs(facets)
        histograms.observe(pairs, values)
        counters.observe(pairs, confidence, values)
    ours = generate_latest(telemetry.registry).decode().splitlines()
    reference = generate_latest(reference_registry).decode().splitlines()
    ours_samples = [
        line for line in ours if line.startswith(("scorer_retrieval_", "scorer_confidence_"))
    ]
    reference_samples = [
        line for line in reference if line.startswith(("scorer_retrieval_", "scorer_confidence_"))
    ]
    assert ours_samples == reference_samples
    assert any('value="other"' in line for line in ours_samples)


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
