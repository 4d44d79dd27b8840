"""Readers of relevance judgments: TREC qrels and the JSONL golden set.

Both give ``{queryId: JudgedQuery}``. TREC qrels take any integer grade (the
metric conventions say what a grade earns); golden-set lines are validated
with the wire model :class:`schemas.GoldenQuery`, so they carry its bounds
(grades 0..3, id lengths, facet counts) exactly as the streaming path does.
"""

from __future__ import annotations

import os

from scorer.core.metrics import MAX_GRADE
from scorer.core.record import Record
from scorer.io.detect import COMMENT, FileKind, detect_kind, gc_paused, open_binary, open_text
from scorer.io.errors import InputError

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from scorer.io.errors import StrPath

COLUMNAR_MIN_BYTES = 16 << 20
"""Qrels files smaller than this (16 MiB) are read line by line, without pyarrow
(as TREC runs, :data:`scorer.io.runs.COLUMNAR_MIN_BYTES`)."""


class JudgedQuery(Record):
    """The judgments of one query: ``qrels`` (id -> integer grade) and its facets."""

    __slots__ = ("qrels", "facets")  # noqa: RUF023  (field order)

    def __init__(self, qrels: dict[str, int], facets: dict[str, str] | None = None) -> None:
        self.qrels = qrels
        self.facets = {} if facets is None else facets


Golden = dict[str, JudgedQuery]
"""Judged queries by query id."""


def read_golden(path: StrPath, *, columnar: bool = False) -> Golden:
    """The judged queries of a TREC qrels file or a JSONL golden set (detected).

    ``columnar`` reads TREC qrels with pyarrow whatever their size (worth it when
    a large run will import pyarrow anyway); otherwise only from
    :data:`COLUMNAR_MIN_BYTES`.

    Raises :class:`InputError` (``file:line: what is wrong``) for an unreadable,
    empty or malformed file, or one that holds rankings rather than qrels.
    """
    kind = detect_kind(path)
    if kind is FileKind.TREC_QRELS:
        return read_trec_qrels(path, columnar=columnar)
    if kind is FileKind.GOLDEN_JSONL:
        return read_golden_jsonl(path)
    raise InputError(path, f"is a {kind}, expected qrels (a TREC qrels file or a JSONL golden set)")


def read_trec_qrels(path: StrPath, *, columnar: bool = False) -> Golden:
    """Judgments from TREC qrels lines ``qid iter docid grade``; ``iter`` is ignored.

    Blank lines and comment lines (``#`` first, as trec_eval reads them) are skipped.
    A docid judged twice for the same query is an error: which grade would count
    is anyone's guess; so is a grade above :data:`scorer.core.metrics.MAX_GRADE`.

    Read by :mod:`scorer.io.columnar` when it can; any file it cannot read
    cleanly is read again line by line, which says what is wrong and where.
    """
    fast = columnar or _size(path) >= COLUMNAR_MIN_BYTES
    golden = _columnar_trec_qrels(path) if fast else None
    return golden if golden is not None else _line_trec_qrels(path)


def _size(path: StrPath) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # the reader says why


def _columnar_trec_qrels(path: StrPath) -> Golden | None:
    """The judgments of ``path`` read in chunks by pyarrow, or None for any file
    that is not clean (then :func:`_line_trec_qrels` accepts it or says why not)."""
    from scorer.io import columnar

    golden: Golden = {}
    with open_binary(path) as file, gc_paused():
        for raw in columnar.line_chunks(file):
            read = columnar.qrels_runs(raw)
            if read is None:
                return None
            for query, docs, grades in read[0]:
                if max(grades) > MAX_GRADE:
                    return None  # the line reader names it
                judged = golden.get(query)
                if judged is None:
                    judged = golden[query] = JudgedQuery(qrels={})
                qrels = judged.qrels
                before = len(qrels)
                qrels.update(zip(docs, grades, strict=True))
                if len(qrels) != before + len(docs):
                    return None  # a docid judged twice
    return golden or None


def _line_trec_qrels(path: StrPath) -> Golden:
    golden: Golden = {}
    qid = None
    qrels: dict[str, int] = {}
    with open_text(path) as lines:
        number = 0
        try:
            for number, line in enumerate(lines, 1):
                if line[0] == COMMENT:
                    continue
                columns = line.split()
                if len(columns) != 4:
                    if not columns:
                        continue
                    raise InputError(
                        path,
                        f"expected 4 columns (qid iter docid grade), got {len(columns)}",
                        number,
                    )
                query, _, doc, grade = columns
                if query != qid:
                    judged = golden.get(query)
                    if judged is None:
                        judged = golden[query] = JudgedQuery(qrels={})
                    qid, qrels = query, judged.qrels
                if doc in qrels:
                    raise InputError(path, f"{doc} is judged twice for query {query}", number)
                value = qrels[doc] = int(grade)
                if value > MAX_GRADE:
                    raise InputError(
                        path,
                        f"grade {value} is above {MAX_GRADE}, the largest this scorer takes "
                        "(nDCG's gain 2^grade - 1 would overflow)",
                        number,
                    )
        except UnicodeDecodeError:
            raise InputError(path, "is not UTF-8 text", number + 1) from None
        except ValueError:
            raise InputError(path, f"grade {columns[3]!r} is not an integer", number) from None
    if not golden:
        raise InputError(path, "file is empty (no judgments)")
    return golden


def read_golden_jsonl(path: StrPath) -> Golden:
    """Judgments from a JSONL golden set: one :class:`schemas.GoldenQuery` per line.

    Blank lines are skipped; a query id that appears on two lines is an error.
    """
    from pydantic import ValidationError

    from schemas import GoldenQuery, describe_validation_error

    golden: Golden = {}
    first_line: dict[str, int] = {}
    with open_text(path) as lines:
        number = 0
        try:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    query = GoldenQuery.model_validate_json(line)
                except ValidationError as error:
                    raise InputError(path, describe_validation_error(error), number) from None
                if query.query_id in golden:
                    raise InputError(
                        path,
                        f"query {query.query_id} appears again (first on line "
                        f"{first_line[query.query_id]})",
                        number,
                    )
                first_line[query.query_id] = number
                golden[query.query_id] = JudgedQuery(
                    qrels=dict(query.qrels), facets=dict(query.facets or {})
                )
        except UnicodeDecodeError:
            raise InputError(path, "is not UTF-8 text", number + 1) from None
    if not golden:
        raise InputError(path, "file is empty (no golden queries)")
    return golden
