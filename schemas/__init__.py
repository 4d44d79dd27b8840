"""The wire contract: pydantic models of every event, and their JSON Schema files."""

from schemas.events import (
    WIRE_MODELS,
    GoldenQuery,
    JudgmentMetrics,
    RetrievalMetrics,
    RetrievalResult,
    ScoredResult,
    WireModel,
    describe_validation_error,
)

__all__ = [
    "WIRE_MODELS",
    "GoldenQuery",
    "JudgmentMetrics",
    "RetrievalMetrics",
    "RetrievalResult",
    "ScoredResult",
    "WireModel",
    "describe_validation_error",
]
