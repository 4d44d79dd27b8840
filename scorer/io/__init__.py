"""Offline readers: TREC qrels, JSONL golden sets, TREC runs and JSONL results.

Each file's format is detected from its content (:mod:`scorer.io.detect`).
Every problem a user can cause raises :class:`InputError`, whose message is
one line: ``file:line: what is wrong``.
"""

from scorer.io.detect import FileKind, detect_kind
from scorer.io.errors import InputError
from scorer.io.qrels import Golden, JudgedQuery, read_golden, read_golden_jsonl, read_trec_qrels
from scorer.io.runs import (
    InterleavedRun,
    Progress,
    Retrieval,
    file_size,
    iter_results_jsonl,
    iter_retrievals,
    trec_order,
)

__all__ = [
    "FileKind",
    "Golden",
    "InputError",
    "InterleavedRun",
    "JudgedQuery",
    "Progress",
    "Retrieval",
    "detect_kind",
    "file_size",
    "iter_results_jsonl",
    "iter_retrievals",
    "read_golden",
    "read_golden_jsonl",
    "read_trec_qrels",
    "trec_order",
]
