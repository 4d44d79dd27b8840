"""The OpenAPI document of the worker's HTTP API (served at /api/v1/openapi.json;
``docs/openapi.json`` is written from it by ``python -m scorer.stream.openapi`` and kept
in sync by a test)."""

from __future__ import annotations

import json
import sys
from typing import Any

from schemas.events import MAX_ID_LENGTH
from scorer import __version__
from scorer.core.measures import MEASURES, METRIC_NAMES
from scorer.stream.run_list import DEFAULT_LIMIT, MAX_LIMIT

_METRICS = {
    "type": "object",
    "description": "Mean of each metric.",
    "properties": {
        m.wire: {
            "type": "number",
            "minimum": m.bounds[0],
            "maximum": m.bounds[1],
            "description": f"{m.label}: {m.description}",
        }
        for m in MEASURES
    },
    "required": list(METRIC_NAMES),
}
_EXAMPLE_MEANS = {
    "recallAtK": 1.0, "precisionAtK": 0.35, "ndcgAt10": 0.79, "mrr": 0.75, "hitAtK": 1.0,
}  # fmt: skip
_INTERVAL = {
    "type": "array",
    "items": {"type": "number"},
    "minItems": 2,
    "maxItems": 2,
    "description": "95% confidence interval [low, high] (Student's t).",
}
_INTERVALS = {
    "type": "object",
    "properties": {name: _INTERVAL for name in METRIC_NAMES},
}
_AGGREGATE = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "metrics": _METRICS,
        "ci95": _INTERVALS,
    },
    "required": ["count", "metrics", "ci95"],
}
_ERROR = {
    "description": "An error, as JSON.",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"error": {"type": "string"}, "status": {"type": "integer"}},
                "required": ["error", "status"],
            }
        }
    },
}
_RUN_ID = {
    "name": "runId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
}
_FIXED = (
    "Fixed-horizon 95% interval: valid for one look at a sample size chosen in advance, "
    "not for a comparison read again and again as the runs grow (use anytime95)."
)
_ANYTIME = (
    "Anytime-valid interval at 1 - alpha (95% by default): holds at every read, however "
    "often, while the runs grow (a confidence sequence, docs/api.md)."
)
_DELTA = {
    "type": "object",
    "properties": {
        "a": {"type": "number"},
        "b": {"type": "number"},
        "delta": {"type": "number", "description": "mean(b) - mean(a)"},
        "ci95": {"oneOf": [_INTERVAL, {"type": "null"}], "description": _FIXED},
        "anytime95": {
            "oneOf": [_INTERVAL, {"type": "null"}],
            "description": _ANYTIME + " Over every result of either run.",
        },
    },
}
_PAIRED = {
    "type": "object",
    "properties": {
        "delta": {"type": ["number", "null"], "description": "mean over shared queries of b - a"},
        "ci95": {"oneOf": [_INTERVAL, {"type": "null"}], "description": _FIXED},
        "anytime95": {
            "oneOf": [_INTERVAL, {"type": "null"}],
            "description": _ANYTIME
            + " One observation per shared query: the difference of the two runs' first "
            "answers, entering when the second arrives.",
        },
        "wins": {"type": "integer"},
        "losses": {"type": "integer"},
        "ties": {"type": "integer"},
    },
}
_TRAJECTORY = {
    "type": "array",
    "description": "[pairs, lower, upper] of the paired anytime95 as the pairs accrued.",
    "items": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
}


_INTERVAL_OR_NULL = {"oneOf": [{**_INTERVAL, "description": "[low, high]"}, {"type": "null"}]}
_LOSS_CURVE = {
    "type": "object",
    "description": "One loss's risk–coverage; null values when no result has a confidence.",
    "properties": {
        "aurc": {"type": ["number", "null"]},
        "optimalAurc": {"type": ["number", "null"]},
        "eAurc": {"type": ["number", "null"]},
        "curve": {
            "type": "array",
            "maxItems": 101,
            "description": "[coverage, selective risk] points.",
            "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
        },
    },
    "required": ["aurc", "optimalAurc", "eAurc", "curve"],
}
_BY_LOSS = {
    "type": "object",
    "properties": {"miss": _INTERVAL_OR_NULL, "ndcgLoss": _INTERVAL_OR_NULL},
}


def _json(schema: dict[str, Any], description: str, example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"description": description, "content": {"application/json": media}}


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "retrieval-scorer run API",
        "version": __version__,
        "description": (
            "Read-only rollups of the scored stream per run. Any worker answers: "
            "requests are forwarded to the worker that owns the run."
        ),
    },
    "paths": {
        "/api/v1/evals/runs": {
            "get": {
                "summary": "The runs the cluster knows, newest first, paged",
                "description": (
                    "Every run of every worker (the answering worker asks the others), "
                    "ordered by `updatedAt`, newest first (ties by run id). Page with "
                    "`offset` and `limit`; `nextOffset` is where the next page starts, "
                    "null on the last one. 503 when a worker holding runs does not answer."
                ),
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_LIMIT,
                            "default": DEFAULT_LIMIT,
                        },
                    },
                    {
                        "name": "offset",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 0, "default": 0},
                    },
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "runs": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "runId": {"type": "string"},
                                            "count": {"type": "integer"},
                                            "updatedAt": {
                                                "type": ["string", "null"],
                                                "format": "date-time",
                                            },
                                            "metrics": {
                                                "type": "object",
                                                "description": "Means of nDCG@10, recall@k, "
                                                "hit@k and judged@k (the headline metrics).",
                                            },
                                            "ci95": {
                                                "type": "object",
                                                "description": "Their 95% intervals, as "
                                                "the run's /metrics gives them.",
                                            },
                                            "trend": {
                                                "type": "array",
                                                "description": "[bucketStart (epoch s), "
                                                "mean nDCG@10, count] per time bucket "
                                                "(SCORER_RUN_HISTORY_SECONDS), oldest first, "
                                                "the newest SCORER_RUN_HISTORY_BUCKETS.",
                                                "items": {"type": "array"},
                                            },
                                            "changedQrels": {
                                                "type": "integer",
                                                "description": "Results of the run scored "
                                                "against qrels of their query that have since "
                                                "changed (see the run document).",
                                            },
                                            "warnings": {
                                                "type": "array",
                                                "description": "What a reader of the run's "
                                                "numbers should know, one sentence each (mixed "
                                                "golden sets: changedQrels above 0; low judged "
                                                "coverage: judged@k under 0.5; worse than the "
                                                "baseline of a watched pair).",
                                                "items": {"type": "string"},
                                            },
                                            "watched": {
                                                "type": "array",
                                                "description": "Only on the candidate of a "
                                                "watched pair (SCORER_WATCH_PAIRS): per pair, "
                                                "its baseline and the measures the candidate is "
                                                "decided worse and better on (anytime-valid, "
                                                "either design), as of the worker's last read "
                                                "(SCORER_WATCH_SECONDS).",
                                                "items": {
                                                    "type": "object",
                                                    "properties": {
                                                        "baseline": {"type": "string"},
                                                        "worse": {
                                                            "type": "array",
                                                            "items": {"type": "string"},
                                                        },
                                                        "better": {
                                                            "type": "array",
                                                            "items": {"type": "string"},
                                                        },
                                                    },
                                                },
                                            },
                                        },
                                        "required": ["runId", "count", "updatedAt"],
                                    },
                                },
                                "total": {"type": "integer"},
                                "limit": {"type": "integer"},
                                "offset": {"type": "integer"},
                                "nextOffset": {"type": ["integer", "null"]},
                            },
                            "required": ["runs", "total", "limit", "offset", "nextOffset"],
                        },
                        "One page of the run list.",
                        {
                            "runs": [
                                {
                                    "runId": "hybrid-v2",
                                    "count": 167,
                                    "updatedAt": "2026-11-30T12:00:01+00:00",
                                },
                                {
                                    "runId": "bm25-v1",
                                    "count": 167,
                                    "updatedAt": "2026-11-30T12:00:00+00:00",
                                },
                            ],
                            "total": 3,
                            "limit": 2,
                            "offset": 0,
                            "nextOffset": 2,
                        },
                    ),
                    "400": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/api/v1/evals/runs/{runId}/metrics": {
            "get": {
                "summary": "Rolled-up metrics of one run, overall and per facet value",
                "description": (
                    "The same shape as one run of `scorer eval --format json`, plus "
                    "`updatedAt` and the paired-comparison bound."
                ),
                "parameters": [_RUN_ID],
                "responses": {
                    "200": _json(
                        {
                            "allOf": [_AGGREGATE],
                            "properties": {
                                "runId": {"type": "string"},
                                "facets": {
                                    "type": "object",
                                    "additionalProperties": {
                                        "type": "object",
                                        "additionalProperties": _AGGREGATE,
                                    },
                                },
                                "updatedAt": {"type": "string", "format": "date-time"},
                                "pairedQueries": {
                                    "type": "object",
                                    "properties": {
                                        "tracked": {"type": "integer"},
                                        "limit": {"type": "integer"},
                                    },
                                },
                                "changedQrels": {
                                    "type": "integer",
                                    "description": "Results of this run scored against qrels "
                                    "that have since changed: each scored result carries its "
                                    "qrels' fingerprint (qrelsFingerprint), and when a later "
                                    "result of the same query was scored against another one, "
                                    "the earlier results count here. Above 0 the run mixes two "
                                    "golden sets, so its means are no trend. Counted for the "
                                    "tracked queries (pairedQueries), once the run sees a "
                                    "result of the query after its qrels changed.",
                                },
                            },
                        },
                        "The run's rollup.",
                        {
                            "runId": "hybrid-v2",
                            "count": 2,
                            "metrics": {
                                name: _EXAMPLE_MEANS.get(name, 0.5) for name in METRIC_NAMES
                            },
                            "ci95": {"ndcgAt10": [0.2, 1.0]},
                            "facets": {"type": {"factoid": {"count": 2}}},
                            "updatedAt": "2026-11-30T12:00:00+00:00",
                            "pairedQueries": {"tracked": 2, "limit": 10000},
                            "changedQrels": 0,
                        },
                    ),
                    "400": _ERROR,
                    "404": _ERROR,
                    "503": _ERROR,
                },
            }
        },
        "/api/v1/evals/runs/{runId}/risk-coverage": {
            "get": {
                "summary": "Risk–coverage of one run (AURC, optimal AURC, E-AURC, curve)",
                "description": (
                    "The `riskCoverage` block of `scorer eval --format json` for the run, "
                    "computed from a bounded sketch of its confidences (docs/metrics.md): "
                    "`sketch` gives intervals that hold the exact values. Losses: `miss` "
                    "= 1 - hitAtK, `ndcgLoss` = 1 - ndcgAt10."
                ),
                "parameters": [_RUN_ID],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "runId": {"type": "string"},
                                "withConfidence": {"type": "integer"},
                                "withoutConfidence": {"type": "integer"},
                                "miss": _LOSS_CURVE,
                                "ndcgLoss": _LOSS_CURVE,
                                "sketch": {
                                    "type": "object",
                                    "properties": {
                                        "relativeAccuracy": {"type": "number"},
                                        "buckets": {"type": "integer"},
                                        "maxBuckets": {"type": "integer"},
                                        "lossBins": {"type": "integer"},
                                        "zeroWidth": {
                                            "type": "number",
                                            "description": "Confidences closer to 0 share "
                                            "zero's bucket (0 until the bucket cap was hit).",
                                        },
                                        "aurcWithin": _BY_LOSS,
                                        "optimalAurcWithin": _BY_LOSS,
                                    },
                                },
                                "updatedAt": {"type": ["string", "null"], "format": "date-time"},
                            },
                            "required": [
                                "runId",
                                "withConfidence",
                                "withoutConfidence",
                                "miss",
                                "ndcgLoss",
                                "sketch",
                            ],
                        },
                        "The run's risk–coverage.",
                        {
                            "runId": "hybrid-v2",
                            "withConfidence": 4,
                            "withoutConfidence": 0,
                            "miss": {
                                "aurc": 0.2708,
                                "optimalAurc": 0.2083,
                                "eAurc": 0.0625,
                                "curve": [[0.25, 0.0], [0.5, 0.25], [0.75, 0.3333], [1.0, 0.5]],
                            },
                            "sketch": {"relativeAccuracy": 0.01, "buckets": 3, "maxBuckets": 512},
                            "updatedAt": "2026-11-30T12:00:00+00:00",
                        },
                    ),
                    "400": _ERROR,
                    "404": _ERROR,
                },
            }
        },
        "/api/v1/evals/runs/{runId}/scores": {
            "get": {
                "summary": "Per-query mean scores of one run (bounded) and its raw sums",
                "description": (
                    "At most `pairedQueries.limit` distinct queries per run are kept; "
                    "`overall` is `[count, sums, sums of squares]` in metric order "
                    + ", ".join(METRIC_NAMES)
                    + "."
                ),
                "parameters": [_RUN_ID],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "runId": {"type": "string"},
                                "overall": {"type": "array"},
                                "facets": {
                                    "type": "object",
                                    "description": "facet -> value -> [count, sums, sums of "
                                    "squares], as overall",
                                },
                                "queries": {
                                    "type": "object",
                                    "additionalProperties": {
                                        "type": "array",
                                        "items": {"type": "number"},
                                    },
                                },
                                "first": {
                                    "type": "object",
                                    "description": "Each query's first answer: [enteredAt "
                                    "(epoch seconds; 0 if before it was kept), values in "
                                    "metric order]: the paired anytime95's observations.",
                                    "additionalProperties": {
                                        "type": "array",
                                        "items": {"type": "number"},
                                    },
                                },
                            },
                        },
                        "Per-query scores.",
                    ),
                    "400": _ERROR,
                    "404": _ERROR,
                },
            }
        },
        "/api/v1/evals/runs/{runA}/compare/{runB}": {
            "get": {
                "summary": "Difference of each mean between two runs, unpaired and paired",
                "description": (
                    "`delta` is mean(b) - mean(a). `ci95`: fixed-horizon (unpaired: Welch's; "
                    "paired: Student's t over the per-query means of the queries both runs "
                    "answered). `anytime95`: anytime-valid, safe to read continuously. "
                    "`facets`: unpaired comparisons per facet value both runs have, alpha "
                    "split over every value x metric (Bonferroni)."
                ),
                "parameters": [
                    {**_RUN_ID, "name": "runA"},
                    {**_RUN_ID, "name": "runB"},
                    {
                        "name": "alpha",
                        "in": "query",
                        "required": False,
                        "description": "Error rate of anytime95 (default SCORER_COMPARE_ALPHA).",
                        "schema": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                    },
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "runA": {"type": "string"},
                                "runB": {"type": "string"},
                                "countA": {"type": "integer"},
                                "countB": {"type": "integer"},
                                "alpha": {"type": "number"},
                                "metrics": {
                                    "type": "object",
                                    "properties": {name: _DELTA for name in METRIC_NAMES},
                                },
                                "paired": {
                                    "type": "object",
                                    "properties": {
                                        "queries": {"type": "integer"},
                                        "metrics": {
                                            "type": "object",
                                            "properties": {name: _PAIRED for name in METRIC_NAMES},
                                        },
                                        "trajectory": {
                                            "type": "object",
                                            "properties": {
                                                name: _TRAJECTORY for name in METRIC_NAMES
                                            },
                                        },
                                    },
                                },
                                "facets": {
                                    "type": "object",
                                    "properties": {
                                        "family": {"type": "integer"},
                                        "alphaEach": {"type": "number"},
                                        "values": {
                                            "type": "object",
                                            "description": "facet -> value -> {countA, "
                                            "countB, metrics: {metric: the unpaired block}}",
                                        },
                                    },
                                },
                            },
                        },
                        "The comparison.",
                    ),
                    "400": _ERROR,
                    "404": _ERROR,
                },
            }
        },
    },
}


def openapi_text() -> str:
    """The document as committed in ``docs/openapi.json`` (pretty, trailing newline)."""
    return json.dumps(OPENAPI, indent=2) + "\n"


if __name__ == "__main__":
    # python -m scorer.stream.openapi > docs/openapi.json
    sys.stdout.write(openapi_text())
