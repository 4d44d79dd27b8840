"""Retrieval metrics: pure, deterministic functions of ``(ranked, qrels, k)``.

``ranked`` is the list of ids the retriever returned, best first. ``qrels``
maps an id to an integer relevance grade. The conventions are pinned (see
docs/metrics.md); every function here follows all of them:

1. Relevant means grade >= 1. A grade <= 0, or an id absent from qrels, earns
   nothing.
2. nDCG@10 uses the exponential gain ``2**g - 1`` and the discount
   ``1 / log2(rank + 1)`` (rank from 1); the terms are summed in rank order.
   IDCG is the DCG of every judged id with grade >= 1, retrieved or not, sorted
   by grade descending and cut at 10. nDCG is 0 when IDCG is 0. nDCG is always
   cut at 10, whatever ``k`` is.
3. precision@k divides by ``k``, also when fewer than ``k`` ids were returned.
4. recall@k is 0 when the query has no relevant id.
5. hit@k is 0 or 1.
6. MRR is ``1 / rank`` of the first relevant id over the whole list, with no
   cutoff; 0 when no relevant id was returned.
7. A repeated id keeps its rank slot but earns nothing after its first
   occurrence.
8. judged@k is the share of the ``min(k, returned)`` top slots whose id has a
   grade, any grade (a repeat is judged in every slot); 0 for an empty ranking.
9. candidate nDCG@10 is the DCG@10 of the distinct returned ids (the whole
   list) sorted by grade descending, over the same IDCG as nDCG@10.

These reproduce trec_eval ``ndcg_cut.10`` on qrels remapped to gains
{1: 1, 2: 3, 3: 7}, ``recip_rank``, ``success.k``, ``P.k`` and ``recall.k``,
and ranx ``ndcg_burges@10``, ``mrr``, ``hit_rate@k``, ``precision@k``,
``recall@k``. Each DCG term is computed as ``gain / log2(rank + 1)`` (a
division, as trec_eval does) so that the numbers agree to the last bit.
"""

from __future__ import annotations

import math
import os
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, count

from scorer.core.measures import GROUPS, MEASURES, METRIC_NAMES
from scorer.core.record import Record

TYPE_CHECKING = False  # typing stays unimported on `scorer eval`'s path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["METRIC_NAMES", "Judgments", "MetricValues", "score"]

NDCG_CUTOFF = 10
"""nDCG is always cut at 10 (convention 2)."""

# log2(rank + 1) for the ranks nDCG@10 can see; index 0 is rank 1.
_LOG2_RANK = tuple(math.log2(rank + 1) for rank in range(1, NDCG_CUTOFF + 1))

# 2**g - 1 of the grades qrels use in practice, looked up rather than computed
# in the scoring loop; larger grades go through gain().
_GAINS = tuple(float(2**grade - 1) for grade in range(32))


MAX_GRADE = 1000
"""The largest grade scored: the ten gains ``2**g - 1`` a DCG at 10 sums stay below
the largest float (about 2**1024) for any g up to this, so nDCG is never inf or NaN."""


def gain(grade: int) -> float:
    """Exponential gain ``2**grade - 1`` of a relevant grade; 0 for grade <= 0.
    ``ValueError`` above :data:`MAX_GRADE`."""
    if grade > MAX_GRADE:
        raise ValueError(f"grade {grade} is above {MAX_GRADE}, the largest scored")
    return float(2**grade - 1) if grade > 0 else 0.0


_MetricTuple = namedtuple("_MetricTuple", [m.field for m in MEASURES])
# (fields from the registry; collections' namedtuple, not typing's: see scorer.core.record)

# (wire object, its (wire name, slot) pairs), for as_wire.
_WIRE_GROUPS = tuple(
    (group, tuple((m.wire, m.slot) for m in members)) for group, members in GROUPS.items()
)


class MetricValues(_MetricTuple):
    """The measures of one ranked list, one field per spec of ``scorer.core.measures.MEASURES``
    (its ``field`` name), in slot order."""

    __slots__ = ()

    def as_wire(self) -> dict[str, dict[str, float | int]]:
        """The scored event's metric objects (``retrievalMetrics`` ...), camelCase keys."""
        return {group: {wire: self[slot] for wire, slot in pairs} for group, pairs in _WIRE_GROUPS}

    def as_flat(self) -> dict[str, float | int]:
        """Wire name -> value of every measure (the shape of a rollup's ``metrics``)."""
        return dict(zip(METRIC_NAMES, self, strict=True))


class Judgments(Record):
    """Qrels prepared for scoring: what every ranking of the query would recompute.

    Build one per query with :meth:`from_qrels` and score any number of rankings
    against it with :func:`score`; the streaming worker keeps these in its table.
    Read-only by convention.
    """

    __slots__ = (  # noqa: RUF023  (in field order: the repr shows them so)
        "grades",  # relevant ids only (grade >= 1) and their grades
        "n_relevant",
        "ideal_dcg",  # DCG@10 of the ideal ranking: all relevant grades, descending
        # The judged ids that are not relevant (grade <= 0) and their grades: judged@k
        # counts them. Empty for a worker's qrels table entry from before judged@k.
        "others",
    )

    def __init__(
        self,
        grades: Mapping[str, int],
        n_relevant: int,
        ideal_dcg: float,
        others: Mapping[str, int] | None = None,
    ) -> None:
        self.grades = grades
        self.n_relevant = n_relevant
        self.ideal_dcg = ideal_dcg
        self.others = {} if others is None else others

    @classmethod
    def from_qrels(cls, qrels: Mapping[str, int]) -> Judgments:
        relevant = {doc: grade for doc, grade in qrels.items() if grade >= 1}
        return cls(
            grades=relevant,
            n_relevant=len(relevant),
            ideal_dcg=_ideal_dcg(relevant.values()),
            others={doc: grade for doc, grade in qrels.items() if grade < 1},
        )


def ideal_dcg(qrels: Mapping[str, int]) -> float:
    """IDCG@10: the DCG of the relevant grades sorted descending, cut at 10."""
    return _ideal_dcg([grade for grade in qrels.values() if grade >= 1])


def _ideal_dcg(relevant_grades: Iterable[int]) -> float:
    """DCG of ``relevant_grades`` sorted descending, cut at 10 ranks."""
    total = 0.0
    # zip stops at the shorter: the cut at 10 ranks.
    for grade, log2_rank in zip(sorted(relevant_grades, reverse=True), _LOG2_RANK, strict=False):
        total += (_GAINS[grade] if grade < len(_GAINS) else gain(grade)) / log2_rank
    return total


def score(ranked: Sequence[str], judgments: Judgments, k: int) -> MetricValues:
    """Every measure of ``ranked`` in one pass over its top ``max(k, 10)`` ids.

    ``k`` is the cutoff of recall, precision, hit and judged (>= 1); nDCG is cut at 10
    and MRR is not cut. See the module docstring for the conventions.

    The compiled kernel (:data:`KERNEL`) scores a list against the judgments the
    worker and the readers make; anything else goes to :func:`score_python`, the
    reference it agrees with to the last bit.
    """
    if _compiled is not None:
        if type(ranked) is list:
            values = _compiled(
                ranked, judgments.grades, judgments.others, judgments.n_relevant,
                judgments.ideal_dcg, k,
            )  # fmt: skip
        else:
            # A ranking kept as its ids joined by newlines (the offline readers'
            # ``JoinedRanking``) is scored from that text, its tail never split.
            text = getattr(ranked, "joined_text", None)
            values = NotImplemented if text is None else _compiled_joined(
                text, judgments.grades, judgments.others, judgments.n_relevant,
                judgments.ideal_dcg, k,
            )  # fmt: skip
        if values is not NotImplemented:
            return values
    return score_python(ranked, judgments, k)


def score_python(ranked: Sequence[str], judgments: Judgments, k: int) -> MetricValues:
    """:func:`score` in Python: the reference of the compiled kernel
    (``scorer/core/_kernel.c``), and the kernel wherever that is not built."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    grades = judgments.grades
    others = judgments.others
    gains = _GAINS
    credited: set[str] = set()
    found: list[int] = []  # grades of the distinct relevant ids returned
    hits = 0
    judged_slots = 0
    dcg = 0.0
    first_relevant_rank = 0
    # Every metric but MRR and the candidate nDCG lives in the top max(k, 10); only
    # judged ids cost more than a dict lookup.
    top = k if k > NDCG_CUTOFF else NDCG_CUTOFF
    # A repeated judged id is judged in every slot it takes.
    for index, doc in enumerate(ranked[:top]):
        grade = grades.get(doc)
        if grade is None:
            if index < k and doc in others:
                judged_slots += 1
            continue
        if index < k:
            judged_slots += 1
        if doc in credited:
            continue
        credited.add(doc)
        found.append(grade)
        if not first_relevant_rank:
            first_relevant_rank = index + 1
        if index < k:
            hits += 1
        if index < NDCG_CUTOFF:
            dcg += (gains[grade] if grade < len(gains) else gain(grade)) / _LOG2_RANK[index]
    n_relevant = judgments.n_relevant
    if len(found) < n_relevant and len(ranked) > top:
        # MRR has no cutoff, and the candidates are every returned id: the relevant
        # ids below the top, looked for at C speed (the tail is most of a long list).
        if not first_relevant_rank:
            # The position of the first id a lookup finds, not that of the first id equal
            # to it: an id type whose equality is not transitive (a str subclass) could
            # equal an earlier one that no lookup finds.
            at = next(compress(count(), map(grades.__contains__, ranked[top:])), None)
            if at is not None:
                first_relevant_rank = top + at + 1
        if first_relevant_rank:
            # Relevant ids of the top are all credited: the rest are found below it. A
            # ranking that can find ids without being split (``JoinedRanking.among``)
            # is asked to.
            missing = grades.keys() - credited
            among = getattr(ranked, "among", None)
            found += map(
                grades.__getitem__,
                missing.intersection(ranked) if among is None else among(missing),
            )
    ideal = judgments.ideal_dcg
    if ideal > 0 and found:
        if len(found) == n_relevant:
            candidate = 1.0  # every relevant id returned: their best order is the ideal
        else:
            best = 0.0
            for grade, log2_rank in zip(sorted(found, reverse=True), _LOG2_RANK, strict=False):
                best += (gains[grade] if grade < len(gains) else gain(grade)) / log2_rank
            candidate = best / ideal
    else:
        candidate = 0.0
    filled = k if len(ranked) > k else len(ranked)
    return MetricValues(  # positional: the slots of scorer.core.measures.MEASURES
        hits / n_relevant if n_relevant else 0.0,
        hits / k,
        dcg / ideal if ideal > 0 else 0.0,
        1.0 / first_relevant_rank if first_relevant_rank else 0.0,
        1 if hits else 0,
        judged_slots / filled if filled else 0.0,
        candidate,
        # A measure added to the registry returns its value here, in its slot.
    )


def _load_compiled() -> tuple[Any, str]:
    """The compiled kernel's module (``scorer/core/_kernel.c``) and :data:`KERNEL`'s value.
    The compiled kernel is optional (a plain install without a C compiler has none)
    and is used only while it returns the registry's measures in their slots;
    ``SCORER_KERNEL=python`` turns it off (to compare the two)."""
    if os.environ.get("SCORER_KERNEL", "").strip().lower() == "python":
        return None, "python (SCORER_KERNEL=python)"
    try:
        from scorer.core import _kernel
    except ImportError:
        return None, "python (the compiled kernel is not built)"
    if tuple(m.field for m in MEASURES) != _kernel.FIELDS:
        return None, "python (the compiled kernel predates the registry's measures)"
    _kernel.configure(_LOG2_RANK, _GAINS, MAX_GRADE, MetricValues)
    return _kernel, "compiled"


_kernel_module, KERNEL = _load_compiled()
"""Which kernel :func:`score` runs: ``compiled``, or ``python (why)``."""


def compiled(name: str) -> Callable[..., Any] | None:
    """The compiled kernel's function ``name``, or None where Python runs (:data:`KERNEL`,
    or a kernel built from an older source, without it). Each returns NotImplemented,
    having changed nothing, for what it does not take (``fold_rows`` stops at the row)."""
    return None if _kernel_module is None else getattr(_kernel_module, name, None)


_compiled = compiled("score")
_compiled_joined = compiled("score_joined")


def retrieval_metrics(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> MetricValues:
    """Every measure of ``ranked`` against ``qrels`` (one pass over ``ranked``)."""
    return score(ranked, Judgments.from_qrels(qrels), k)


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the query's relevant ids found in the top ``k``; 0 without relevant ids."""
    return retrieval_metrics(ranked, qrels, k).recall_at_k


def precision_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Relevant ids in the top ``k``, divided by ``k`` (even if fewer were returned)."""
    return retrieval_metrics(ranked, qrels, k).precision_at_k


def hit_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> int:
    """1 if any relevant id is in the top ``k``, else 0."""
    return retrieval_metrics(ranked, qrels, k).hit_at_k


def mrr(ranked: Sequence[str], qrels: Mapping[str, int]) -> float:
    """Reciprocal rank of the first relevant id over the whole list (no cutoff); 0 if none."""
    return retrieval_metrics(ranked, qrels, 1).mrr


def ndcg_at_10(ranked: Sequence[str], qrels: Mapping[str, int]) -> float:
    """nDCG@10 with exponential gain (the headline graded metric)."""
    return retrieval_metrics(ranked, qrels, NDCG_CUTOFF).ndcg_at_10
