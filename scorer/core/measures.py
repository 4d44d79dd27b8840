"""The registry of per-result measures: one :class:`Measure` spec per number that
:func:`scorer.core.metrics.score` computes for a ranked list.

Everything that lists the measures is derived from :data:`MEASURES`, in its order:
``MetricValues`` and its wire objects, the rollup folds and their state, the
per-query entries of the paired comparisons, the compare and significance code,
the Prometheus histograms, the OpenAPI properties and the evals page's columns.
Adding a measure is one spec here plus the lines of the fused kernel that compute
it, returned in its slot: ``scorer.core.metrics.score_python`` and the compiled
``scorer/core/_kernel.c`` (which ``score`` uses only while its ``FIELDS`` are these).

Every measure folds the same way: a count, a sum and a sum of squares per
aggregate (exact across partitions and restarts), shown as a mean with a 95%
interval inside its bounds (``scorer.core.rollup.bounded_interval``, which needs the
bounds to be [0, 1]).
"""

from __future__ import annotations

from scorer.core.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

RETRIEVAL = "retrievalMetrics"
"""Wire object of the seed's five metrics (exactly these keys, in the scored event)."""
JUDGMENT = "judgmentMetrics"
"""Wire object of what the judgments say about a ranking beyond the five: how much of
it is judged, and the best nDCG@10 its candidates allow."""


class Measure(Record):
    """One per-result measure (read-only by convention; hashable)."""

    __slots__ = (  # noqa: RUF023  (in field order: the repr shows them so)
        "slot",  # its index in ``MetricValues`` (the kernel returns the values in slot order)
        "wire",  # leaf name on the wire and in every JSON document (camelCase)
        "field",  # ``MetricValues`` attribute (snake_case); also the Prometheus series suffix
        "label",  # column heading on the page and in the Prometheus help
        "heading",  # column heading in ``scorer eval``'s text tables (compact)
        "group",  # the scored event's object holding it: RETRIEVAL or JUDGMENT
        "description",  # one line: the Prometheus help and the OpenAPI description
        "integer",  # the value is 0 or 1 (an int on the wire)
        "bounds",
        "headline",  # its place among the run list's headline columns (from 1); 0: not there
        "watched",  # tested by the regression watch (``scorer.stream.watch``)
    )

    def __init__(
        self,
        slot: int,
        wire: str,
        field: str,
        label: str,
        heading: str,
        group: str,
        description: str,
        integer: bool = False,
        bounds: tuple[float, float] = (0.0, 1.0),
        headline: int = 0,
        watched: bool = True,
    ) -> None:
        self.slot = slot
        self.wire = wire
        self.field = field
        self.label = label
        self.heading = heading
        self.group = group
        self.description = description
        self.integer = integer
        self.bounds = bounds
        self.headline = headline
        self.watched = watched

    __hash__ = Record.value_hash

    @property
    def prometheus(self) -> str:
        """Name of its per-facet histogram."""
        return f"scorer_retrieval_{self.field}"

    @property
    def prometheus_help(self) -> str:
        return f"Per-result {self.label} of scored retrievals, by facet value: {self.description}"


MEASURES: tuple[Measure, ...] = (
    Measure(0, "recallAtK", "recall_at_k", "Recall@k", "recall@k", RETRIEVAL,
            "Share of the query's relevant ids in the top k.", headline=2),
    Measure(1, "precisionAtK", "precision_at_k", "Precision@k", "P@k", RETRIEVAL,
            "Relevant ids in the top k, divided by k."),
    Measure(2, "ndcgAt10", "ndcg_at_10", "nDCG@10", "nDCG@10", RETRIEVAL,
            "nDCG@10 with exponential gain.", headline=1),
    Measure(3, "mrr", "mrr", "MRR", "MRR", RETRIEVAL,
            "Reciprocal rank of the first relevant id (no cutoff)."),
    Measure(4, "hitAtK", "hit_at_k", "Hit@k", "hit@k", RETRIEVAL,
            "1 if a relevant id is in the top k, else 0.", integer=True, headline=3),
    Measure(5, "judgedAtK", "judged_at_k", "Judged@k", "judged@k", JUDGMENT,
            "Share of the filled top-k slots holding a judged id (any grade).", watched=False,
            headline=4),
    Measure(6, "candidateNdcgAt10", "candidate_ndcg_at_10", "Candidate nDCG@10", "cand. nDCG@10",
            JUDGMENT, "nDCG@10 of the returned ids reordered by grade: a reranker's best.",
            watched=False),
)  # fmt: skip

if [m.slot for m in MEASURES] != list(range(len(MEASURES))):
    raise ImportError("MEASURES must be listed in slot order, from 0")
if any(m.bounds != (0.0, 1.0) for m in MEASURES):
    raise ImportError("every measure folds as a mean inside [0, 1] (scorer.core.rollup)")

METRIC_NAMES: tuple[str, ...] = tuple(m.wire for m in MEASURES)
"""Wire names of every measure, in slot order."""
GROUPS: dict[str, tuple[Measure, ...]] = {
    group: tuple(m for m in MEASURES if m.group == group)
    for group in dict.fromkeys(m.group for m in MEASURES)
}
"""The scored event's metric objects and the measures each holds, in slot order."""
WATCHED: tuple[Measure, ...] = tuple(m for m in MEASURES if m.watched)
HEADLINE: tuple[Measure, ...] = tuple(
    sorted((m for m in MEASURES if m.headline), key=lambda m: m.headline)
)
BY_WIRE: dict[str, Measure] = {m.wire: m for m in MEASURES}
NDCG_SLOT = BY_WIRE["ndcgAt10"].slot
"""Slot of nDCG@10 (the run trend and the risk–coverage loss read it)."""


def each(template: str, sep: str = ", ") -> str:
    """``template`` once per slot, ``$`` replaced by the slot, joined by ``sep``: the
    pieces of the straight-line code :func:`unrolled` compiles."""
    return sep.join(template.replace("$", str(slot)) for slot in range(len(MEASURES)))


def unrolled(source: str, name: str, namespace: dict[str, Any] | None = None) -> Any:
    """The function ``name`` defined by ``source`` (built with :func:`each`).

    The hot folds (a run's aggregates, a query's entry, the histograms) are written
    out measure by measure rather than looped over: a loop, or ``map``, over the
    values costs about twice the straight-line code, several times per scored
    result. Generating that code from the registry keeps both the speed and one
    place that lists the measures."""
    scope: dict[str, Any] = dict(namespace or {})
    exec(compile(source, f"<scorer.core.measures.unrolled {name}>", "exec"), scope)
    return scope[name]
