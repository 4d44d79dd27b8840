"""Pydantic v2 models of every event on the wire (camelCase JSON, bounded).

Bounds are part of the contract: an event outside them is rejected by
validation and dead-lettered by the worker with the reason. This module
depends on pydantic only (no Faust, no Kafka) so any service can import it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel

MAX_ID_LENGTH = 256
MAX_RANKED = 1000
MAX_QRELS = 10_000
MAX_FACETS = 16
MAX_FACET_KEY_LENGTH = 64
MAX_FACET_VALUE_LENGTH = 128
MAX_K = 1000


def describe_validation_error(error: ValidationError, whole: str = "") -> str:
    """The first problem validation found, as one line ``field: message`` (plus how
    many more); ``whole`` names the object when the problem is not in one field."""
    problems = error.errors(include_url=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or whole
    text = f"{where}: {first['msg']}" if where else first["msg"]
    if len(problems) > 1:
        text += f" (and {len(problems) - 1} more)"
    return text


MIN_GRADE = 0
MAX_GRADE = 3

Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_LENGTH)]
FacetKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_FACET_KEY_LENGTH)]
FacetValue = Annotated[str, StringConstraints(min_length=1, max_length=MAX_FACET_VALUE_LENGTH)]
Grade = Annotated[int, Field(ge=MIN_GRADE, le=MAX_GRADE)]
Facets = Annotated[dict[FacetKey, FacetValue], Field(max_length=MAX_FACETS)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]


class WireModel(BaseModel):
    """Base of the wire models: camelCase aliases, strict types, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        frozen=True,
        extra="ignore",
        # Ids are mostly unique (result ids, ranked ids): caching their strings cost
        # more than it saved (RetrievalResult: 6.0 -> 4.9 µs a result without it).
        cache_strings=False,
    )

    def to_json_bytes(self) -> bytes:
        """The event as compact camelCase JSON, without unset optional fields."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class RetrievalResult(WireModel):
    """One retrieval: the ranked ids a retriever returned for a query (results topic,
    key = queryId). An empty ``ranked`` list is a valid total miss."""

    result_id: Id = Field(description="Unique id of this retrieval; consumers dedupe on it.")
    run_id: Id = Field(description="The run (retriever version, eval run) it belongs to.")
    query_id: Id
    ranked: Annotated[list[Id], Field(max_length=MAX_RANKED)] = Field(
        description="Retrieved ids, best first."
    )
    facets: Facets | None = None
    k: Annotated[int, Field(ge=1, le=MAX_K)] | None = Field(
        default=None, description="Cutoff of recall/precision/hit; the scorer's default if unset."
    )
    timestamp: datetime | None = Field(default=None, description="When the retrieval happened.")
    scores: Annotated[list[FiniteFloat], Field(max_length=MAX_RANKED)] | None = Field(
        default=None,
        description="The retriever's score of each ranked id, parallel to ranked (finite).",
    )
    confidence: FiniteFloat | None = Field(
        default=None,
        description="How sure the retriever is of this ranking (finite; higher is surer). "
        "Risk-coverage uses it, else scores[0].",
    )

    @field_validator("scores")
    @classmethod
    def _scores_parallel_to_ranked(
        cls, scores: list[float] | None, info: ValidationInfo
    ) -> list[float] | None:
        """``scores`` holds one score per ranked id (checked only when ``ranked`` is valid)."""
        ranked = info.data.get("ranked")
        if scores is not None and ranked is not None and len(scores) != len(ranked):
            raise ValueError(
                f"scores has {len(scores)} values but ranked has {len(ranked)} ids "
                "(give one score per ranked id, or no scores)"
            )
        return scores

    def top_confidence(self) -> float | None:
        """The confidence of this ranking for risk-coverage: ``confidence`` if set,
        else ``scores[0]`` (the top score), else None."""
        if self.confidence is not None:
            return self.confidence
        if self.scores:
            return self.scores[0]
        return None


class GoldenQuery(WireModel):
    """Graded relevance judgments of one query (qrels topic, key = queryId, compacted;
    a null value deletes the query)."""

    query_id: Id
    qrels: Annotated[dict[Id, Grade], Field(max_length=MAX_QRELS)] = Field(
        description="Judged id -> grade (0 irrelevant .. 3 perfectly relevant)."
    )
    facets: Facets | None = None


class RetrievalMetrics(WireModel):
    """The five metrics of one ranked list."""

    recall_at_k: Unit
    precision_at_k: Unit
    ndcg_at_10: Unit = Field(alias="ndcgAt10")
    mrr: Unit
    hit_at_k: Annotated[int, Field(ge=0, le=1)]


class JudgmentMetrics(WireModel):
    """How far the judgments cover one ranked list, and what its candidates allow."""

    judged_at_k: Unit = Field(
        description="Share of the top-k slots the ranking fills (min(k, returned)) holding "
        "a judged id of any grade, 0 included; 0 for an empty ranking."
    )
    candidate_ndcg_at_10: Unit = Field(
        alias="candidateNdcgAt10",
        description="nDCG@10 of the distinct returned ids reordered by grade, descending "
        "(same ideal DCG as ndcgAt10): the best a reranker could reach with these candidates.",
    )


class ScoredResult(WireModel):
    """A retrieval scored against its query's qrels (scored topic, key = queryId)."""

    result_id: Id
    run_id: Id
    query_id: Id
    facets: Facets = Field(
        default_factory=dict, description="Golden-set facets, overridden by the result's."
    )
    k: Annotated[int, Field(ge=1, le=MAX_K)]
    retrieval_metrics: RetrievalMetrics
    judgment_metrics: JudgmentMetrics | None = Field(
        default=None,
        description="judgedAtK and candidateNdcgAt10; absent in events scored before they existed.",
    )
    confidence: FiniteFloat | None = Field(
        default=None,
        description="The result's confidence used by risk-coverage (its confidence, else "
        "its top score); absent when it had none.",
    )
    qrels_fingerprint: str = Field(description="Hash of the qrels the result was scored against.")
    scorer_version: str
    scored_at: datetime
    timestamp: datetime | None = Field(default=None, description="The result's own timestamp.")


WIRE_MODELS: tuple[type[WireModel], ...] = (
    RetrievalResult,
    GoldenQuery,
    RetrievalMetrics,
    JudgmentMetrics,
    ScoredResult,
)
