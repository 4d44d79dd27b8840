"""Watched run pairs on /metrics (scorer.stream.watch): the series of a comparison, the
verdicts, and series of pairs another worker took over removed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from scorer.analysis.compare import compare_runs
from scorer.core.metrics import METRIC_NAMES
from scorer.core.rollup import MetricAggregate
from scorer.stream.watch import WatchGauges, pair_series, verdict


def aggregate(rows: list[list[float]]) -> MetricAggregate:
    """The aggregate of ``rows``; a row shorter than the measures is padded with 0."""
    result = MetricAggregate()
    for row in rows:
        result.add([*row, *[0.0] * (len(METRIC_NAMES) - len(row))])
    return result


N = len(METRIC_NAMES)


def comparison() -> dict:
    base = {"faq": aggregate([[1.0] * N] * 80), "news": aggregate([[0.5] * N] * 80)}
    worse = {"faq": aggregate([[0.0] * N] * 80), "news": aggregate([[0.5] * N] * 80)}
    per_query_a = {f"q{n}": [1.0] * N for n in range(80)}
    per_query_b = {f"q{n}": [0.0] * N for n in range(80)}
    return compare_runs(
        aggregate([[1.0] * N] * 160), aggregate([[0.0] * N] * 80 + [[0.5] * N] * 80),
        per_query_a, per_query_b,
        facets_a={"type": base, "private": base}, facets_b={"type": worse, "private": worse},
    )  # fmt: skip


def test_verdicts_say_which_side_of_zero_the_interval_is() -> None:
    assert (verdict([0.01, 0.2]), verdict([-0.3, -0.1]), verdict([-0.1, 0.1])) == (1, -1, 0)
    assert verdict(None) == 0


def test_a_pair_exports_each_metric_and_design_and_the_allowlisted_facet_values() -> None:
    series = dict(pair_series(comparison(), ("type",), max_values=1))
    overall = {(m, d) for m, d, f, _ in series if f == "all"}
    # The seed's five: judged@k and candidate nDCG are not regressions to alert on.
    watched = ("recallAtK", "precisionAtK", "ndcgAt10", "mrr", "hitAtK")
    assert overall == {(m, d) for m in watched for d in ("paired", "unpaired")}
    facets = {(f, v) for _, _, f, v in series if f != "all"}
    assert facets == {("type", "faq")}  # not "private" (not allowlisted), one value only
    assert verdict(series["ndcgAt10", "paired", "all", "all"]) == -1
    assert verdict(series["ndcgAt10", "unpaired", "type", "faq"]) == -1


def test_a_pair_handed_to_another_worker_leaves_no_series_behind() -> None:
    registry = CollectorRegistry()
    gauges = WatchGauges(registry)
    pair = ("base", "cand")
    gauges.show(pair, pair_series(comparison(), ("type",), 20))
    labels = {"baseline": "base", "candidate": "cand", "metric": "ndcgAt10",
              "design": "paired", "facet": "all", "value": "all"}  # fmt: skip
    assert registry.get_sample_value("scorer_watch_verdict", labels) == -1
    assert registry.get_sample_value("scorer_watch_upper", labels) < 0
    gauges.show(pair, pair_series(comparison(), (), 20))  # the facet series went
    gone = {**labels, "design": "unpaired", "facet": "type", "value": "faq"}
    assert registry.get_sample_value("scorer_watch_verdict", gone) is None
    gauges.hide(pair)
    assert registry.get_sample_value("scorer_watch_verdict", labels) is None


def test_a_watched_candidate_decided_worse_is_warned_of_in_the_run_list() -> None:
    from scorer.stream.run_list import with_watched_pairs
    from scorer.stream.watch import WATCHED_NAMES, pair_verdicts

    lost = pair_verdicts("base", "cand", comparison())
    assert lost == {"baseline": "base", "candidate": "cand", "worse": list(WATCHED_NAMES),
                    "better": []}  # fmt: skip
    # An A/A pair: every interval straddles 0, nothing decided.
    same = aggregate([[0.5] * N] * 80)
    queries = {f"q{n}": [0.5] * N for n in range(80)}
    undecided = pair_verdicts("base", "twin", compare_runs(same, same, queries, queries))
    assert undecided["worse"] == [] and undecided["better"] == []

    runs = [
        {"runId": "cand", "warnings": ["low judged coverage: ..."]},
        {"runId": "twin", "warnings": []},
        {"runId": "base", "warnings": []},
    ]
    stale = {**lost, "worse": ["ndcgAt10"]}  # the other worker's older read of the pair
    listed = with_watched_pairs(runs, [[stale, undecided], [lost]])
    cand, twin, base = listed
    assert cand["watched"] == [{"baseline": "base", "worse": list(WATCHED_NAMES), "better": []}]
    assert cand["warnings"] == [
        "low judged coverage: ...",
        "worse than base (watched pair, anytime-valid) on " + ", ".join(WATCHED_NAMES),
    ]
    assert twin["watched"] == [{"baseline": "base", "worse": [], "better": []}]
    assert twin["warnings"] == []  # undecided is no warning
    assert "watched" not in base and base["warnings"] == []
