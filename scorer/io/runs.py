"""Readers of rankings: TREC run files and JSONL retrieval results.

Both give a stream of :class:`Retrieval` (one ranked list each), so a run file
of any size is scored while it is read and never held in memory whole.

A TREC run (``qid Q0 docid rank score tag``) is ordered as trec_eval orders
it: by score descending, ties by docid descending; the rank column is
ignored; the tag is the run id, and a file with several tags holds several
runs. JSONL results are validated line by line with the wire model
:class:`schemas.RetrievalResult`, so they carry the same bounds as on Kafka.

A TREC run of at least :data:`COLUMNAR_MIN_BYTES` (16 MiB) is read in chunks of whole
lines (64 MiB; 8, 16 and 32 MiB first), the next parsed in a background thread
while one is scored. Each chunk is parsed by pyarrow and ordered with a vectorised
sort (:func:`scorer.io.columnar.run_blocks`) unless it holds anything that
parser cannot read exactly as ``str.split`` does; such a chunk is read line by
line, which also names a malformed line. A smaller file is read line by line
at once: importing pyarrow would cost more than it saves. pyarrow, numpy and
pydantic are imported only by the paths that use them, for start-up time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import groupby, islice
from operator import gt, itemgetter

from scorer.core.record import Record
from scorer.io.detect import (
    COMMENT,
    RUN_COLUMNS,
    FileKind,
    blank_comments,
    decode_lines,
    detect_kind,
    has_comments,
    open_binary,
    open_text,
)
from scorer.io.errors import InputError

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import BinaryIO, TextIO, overload

    from scorer.io.columnar import RunBlock
    from scorer.io.errors import StrPath

Progress = Callable[[int], None]
"""Told how many bytes of the file have been read so far, once per chunk."""

COLUMNAR_MIN_BYTES = 16 << 20
"""TREC files smaller than this (16 MiB) are read line by line, without pyarrow:
measured end to end, the columnar path costs ~0.4 s more to start (importing
pyarrow, its threads) and wins back ~0.035 s per MB, even at about 14 MB."""

_CHUNK_CHARS = 1 << 22
"""Lines are read in chunks of about this many characters: progress is reported
per chunk, and the hot loop stays a plain ``for`` over a list."""


class Retrieval(Record):
    """One ranked list of a run: ``ranked`` ids, best first, for ``query_id``
    (read-only by convention).

    ``ranked`` is a list, or a :class:`JoinedRanking` from the columnar reader.
    ``result_id``, ``k`` and ``facets`` come from JSONL results only; ``k`` and
    ``facets`` override the evaluation's default cutoff and the golden set's facets.
    ``confidence`` ranks the list for risk–coverage: in a TREC run the score of
    the line ranked first (the highest), in JSONL results the event's
    ``confidence``, else its ``scores[0]``, else None.
    """

    __slots__ = (  # noqa: RUF023  (in field order: the repr shows them so)
        "run_id",
        "query_id",
        "ranked",
        "result_id",
        "k",
        "facets",
        "confidence",
    )

    def __init__(
        self,
        run_id: str,
        query_id: str,
        ranked: Sequence[str],
        result_id: str | None = None,
        k: int | None = None,
        facets: dict[str, str] | None = None,
        confidence: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.query_id = query_id
        self.ranked = ranked
        self.result_id = result_id
        self.k = k
        self.facets = facets
        self.confidence = confidence


class InterleavedRun(Exception):
    """A TREC run whose lines for one (tag, qid) are not contiguous.

    :func:`iter_retrievals` streams a run chunk by chunk and cannot merge a
    query's lines once its ranking has been yielded; callers start again with
    ``merge_blocks=True``, which holds the run in memory and merges them. (Lines
    apart within one chunk read by pyarrow are merged without this.)
    """


def file_size(path: StrPath) -> int:
    """Size of ``path`` in bytes (0 when it cannot be read: the reader says why)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def iter_retrievals(
    path: StrPath, progress: Progress | None = None, *, merge_blocks: bool = False
) -> Iterator[Retrieval]:
    """The rankings of a TREC run or JSONL results file (detected from its content).

    Raises :class:`InputError` (``file:line: what is wrong``) for an unreadable,
    empty or malformed file, or one that holds qrels rather than rankings, and
    :class:`InterleavedRun` for a TREC run whose queries are not contiguous
    (see there) unless ``merge_blocks``. Rankings come in the order their
    (tag, qid) first appears in the file, either way.
    """
    kind = detect_kind(path)
    if kind is FileKind.TREC_RUN:
        blocks = _trec_run_blocks(path, progress)
        if merge_blocks:
            return _merged_trec_run(blocks)
        return _streamed_trec_run(blocks)
    if kind is FileKind.RESULTS_JSONL:
        return iter_results_jsonl(path, progress)
    raise InputError(path, f"is a {kind}, expected rankings (a TREC run or JSONL results)")


def trec_order(docs: list[str], scores: list[float]) -> list[str]:
    """``docs`` in trec_eval's order: score descending, ties by docid descending."""
    if all(map(gt, scores, islice(scores, 1, None))):
        # Files are usually written best first with distinct scores: no sort needed.
        return docs
    return [doc for _, doc in sorted(zip(scores, docs, strict=True), reverse=True)]


def _float_list(scores: Sequence[float]) -> list[float]:
    # A numpy array from the columnar path, told apart without importing numpy.
    return scores.tolist() if hasattr(scores, "tolist") else list(scores)


def _doc_list(docs: list[str] | str) -> list[str]:
    return docs.split("\n") if isinstance(docs, str) else docs


class JoinedRanking(Sequence[str]):
    """The doc ids of a ranking already in trec_eval's order, joined by ``\n`` (as
    :func:`scorer.io.columnar.run_blocks` gives them), split only as far as they
    are read.

    :func:`scorer.core.metrics.score` reads the top ``max(k, 10)`` ids, and the rest
    only for MRR when none of those is relevant: in bench/offline.py's runs a
    quarter of the queries. Splitting every ranking whole made its ids into
    Python strings that were never looked at (a fifth of the main thread's time
    at 20,000 x 100, profiled). Reads like the list it stands for, and compares
    equal to it.
    """

    __slots__ = ("_ids", "_joined")

    def __init__(self, joined: str) -> None:
        self._joined = joined
        self._ids: list[str] | None = None

    @property
    def joined_text(self) -> str:
        """The ids joined by newlines: what the compiled kernel scores
        (``scorer.core.metrics.score``)."""
        return self._joined

    def _all(self) -> list[str]:
        if self._ids is None:
            self._ids = self._joined.split("\n")
        return self._ids

    def __len__(self) -> int:
        if self._ids is not None:
            return len(self._ids)
        return self._joined.count("\n") + 1

    if TYPE_CHECKING:

        @overload
        def __getitem__(self, index: int) -> str: ...

        @overload
        def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if (
            self._ids is None
            and type(index) is slice
            and not index.start
            and index.step is None
            and index.stop is not None
            and index.stop >= 0
        ):
            # The head only: ``maxsplit`` leaves the rest as one string.
            return self._joined.split("\n", index.stop)[: index.stop]
        return self._all()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def among(self, ids: Iterable[str]) -> set[str]:
        """Those of ``ids`` that the ranking holds, found in the joined text without
        splitting it (candidate nDCG looks for a query's few relevant ids in every
        ranking's tail; doc ids hold no newline)."""
        if self._ids is not None:
            return set(ids).intersection(self._ids)
        joined = f"\n{self._joined}\n"
        return {doc for doc in ids if f"\n{doc}\n" in joined and "\n" not in doc}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JoinedRanking):
            return self._joined == other._joined
        if isinstance(other, list):
            return self._all() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"JoinedRanking({self._all()!r})"


def _joined(first: RunBlock, then: RunBlock) -> RunBlock:
    """Two blocks of the same (tag, qid) as one, to be put in trec_eval's order again."""
    docs = _doc_list(first[2]) + _doc_list(then[2])
    return (first[0], first[1], docs, _float_list(first[3]) + _float_list(then[3]), False)


def _retrieval(block: RunBlock) -> Retrieval:
    """The ranking of a block in trec_eval's order; its confidence is the score of
    the line ranked first, the highest."""
    run_id, query_id, docs, scores, ordered = block
    if ordered:
        ranked = JoinedRanking(docs) if isinstance(docs, str) else docs
        return Retrieval(run_id, query_id, ranked, confidence=float(scores[0]))
    values = _float_list(scores)
    return Retrieval(run_id, query_id, trec_order(_doc_list(docs), values), confidence=max(values))


def _streamed_trec_run(blocks: Iterator[RunBlock]) -> Iterator[Retrieval]:
    finished: set[tuple[str, str]] = set()
    for block in blocks:
        run_id, query_id = block[0], block[1]
        key = (run_id, query_id)
        if key in finished:
            raise InterleavedRun(f"run {run_id}, query {query_id}: lines are not contiguous")
        finished.add(key)
        yield _retrieval(block)


def _merged_trec_run(blocks: Iterator[RunBlock]) -> Iterator[Retrieval]:
    merged: dict[tuple[str, str], RunBlock] = {}
    for block in blocks:
        key = (block[0], block[1])
        held = merged.get(key)
        merged[key] = block if held is None else _joined(held, block)
    for block in merged.values():
        yield _retrieval(block)


def _chunks(
    path: StrPath, text: TextIO, progress: Progress | None
) -> Iterator[tuple[int, list[str]]]:
    """``(number of the first line, lines)`` chunk by chunk."""
    first = 1
    while True:
        try:
            lines = text.readlines(_CHUNK_CHARS)
        except UnicodeDecodeError:
            raise InputError(path, f"is not UTF-8 text (after line {first - 1})") from None
        if not lines:
            return
        yield first, lines
        first += len(lines)
        if progress is not None:
            progress(text.buffer.tell())


def _trec_run_blocks(path: StrPath, progress: Progress | None) -> Iterator[RunBlock]:
    """The blocks of a TREC run, chunk by chunk: by :func:`columnar.run_blocks`
    where it can, else line by line (which also reports a malformed line)."""
    if file_size(path) < COLUMNAR_MIN_BYTES:
        with open_binary(path) as file:
            raw = file.read()
        if progress is not None:
            progress(len(raw))
        # The whole file is one chunk: a query's lines are merged wherever they are.
        merged: dict[tuple[str, str], RunBlock] = {}
        lines = decode_lines(path, raw, 1)
        for block in _blocks_of_checked_lines(path, 1, lines, has_comments(raw)):
            key = (block[0], block[1])
            held = merged.get(key)
            merged[key] = block if held is None else _joined(held, block)
        yield from merged.values()
        return
    pending: RunBlock | None = None  # the last block of a chunk may go on in the next
    first = 1  # number of the chunk's first line
    done = 0  # bytes of the chunks dealt with
    with open_binary(path) as file:
        for raw, fast in _parsed_ahead(file):
            if fast is None:
                data = bytes(raw)
                lines = decode_lines(path, data, first)
                blocks = _blocks_of_checked_lines(path, first, lines, has_comments(data))
                first += len(lines)
            else:
                blocks, count = fast
                first += count
            for block in blocks:
                if pending is not None:
                    if block[0] == pending[0] and block[1] == pending[1]:
                        pending = _joined(pending, block)
                        continue
                    yield pending
                pending = block
            done += len(raw)
            if progress is not None:
                progress(done)
    if pending is not None:
        yield pending


def _parsed_ahead(file: BinaryIO) -> Iterator[tuple[memoryview, tuple[list[RunBlock], int] | None]]:
    """Each chunk of ``file`` (:func:`columnar.line_chunks`) and what
    :func:`columnar.run_blocks` makes of it, in file order; the next chunk is
    read and parsed in a background thread while the caller deals with this one.

    pyarrow parses without the GIL, so with a core to spare the parse of chunk
    i + 1 overlaps the scoring of chunk i. The thread only reads and parses: a
    chunk the fast path cannot read comes back as None and the caller reads it
    line by line, in order, so the first bad line of the file is the one named.
    An exception in the thread (an unreadable file) is raised here, at its chunk.
    """
    from concurrent.futures import ThreadPoolExecutor

    from scorer.io import columnar

    chunks = columnar.line_chunks(file)

    def parse_next() -> tuple[memoryview, tuple[list[RunBlock], int] | None] | None:
        raw = next(chunks, None)
        return None if raw is None else (raw, columnar.run_blocks(raw))

    # Leaving early (a bad line, an interleaved run) waits for the chunk in hand.
    with ThreadPoolExecutor(1, thread_name_prefix="scorer-run-reader") as pool:
        ahead = pool.submit(parse_next)
        while (parsed := ahead.result()) is not None:
            ahead = pool.submit(parse_next)
            yield parsed


def _blocks_of_checked_lines(
    path: StrPath, first: int, lines: list[str], comments: bool = False
) -> list[RunBlock]:
    """The blocks of ``lines`` (numbered from ``first``; ``comments``: some are comment
    lines, which are skipped), or :class:`InputError` for the first malformed one."""
    if comments:
        lines = blank_comments(lines)
    try:
        return _blocks_of_lines(lines)
    except ValueError:
        _raise_first_bad_line(path, first, lines)
        # No bad line: blank lines, or columns after the tag, broke the fast path.
        return _blocks_of_lines([line for line in lines if line and not line.isspace()], wide=True)


def _blocks_of_lines(lines: list[str], wide: bool = False) -> list[RunBlock]:
    """The blocks of well-formed, non-blank run lines; ValueError on any other line
    (a score that is not finite too). ``wide``: lines may have columns after the
    tag, which are ignored.

    The hot loop of the line reader, kept in C as far as it goes: the lines are
    split by ``map`` and grouped on (qid, tag) by ``groupby``; each block's columns
    are picked, counted and converted by ``map`` too (a Python loop over the lines,
    unpacking each, took a quarter longer).
    """
    rows = map(_six_columns, lines) if wide else map(str.split, lines)
    blocks: list[RunBlock] = []
    try:
        for (query, tag), block in groupby(rows, _QUERY_AND_TAG):
            split = list(block)
            if set(map(len, split)) != _SIX:
                raise ValueError("a line does not have 6 columns")
            values = list(map(float, map(_SCORE, split)))
            if not all(map(math.isfinite, values)):
                raise ValueError("a score is not finite")
            blocks.append((tag, query, list(map(_DOC, split)), values, False))
    except IndexError:
        raise ValueError("a line has fewer than 6 columns") from None
    return blocks


_QUERY_AND_TAG = itemgetter(0, RUN_COLUMNS - 1)
_DOC = itemgetter(2)
_SCORE = itemgetter(4)
_SIX = {RUN_COLUMNS}


def _six_columns(line: str) -> list[str]:
    return line.split(None, RUN_COLUMNS)[:RUN_COLUMNS]


def _raise_first_bad_line(path: StrPath, first: int, lines: list[str]) -> None:
    """Raise :class:`InputError` for the first malformed line (blank lines are fine)."""
    for number, line in enumerate(lines, first):
        columns = line.split()
        if not columns or line[0] == COMMENT:
            continue
        if len(columns) < RUN_COLUMNS:
            raise InputError(
                path,
                f"expected 6 columns (qid Q0 docid rank score tag), got {len(columns)}",
                number,
            )
        try:
            value = float(columns[4])
        except ValueError:
            raise InputError(path, f"score {columns[4]!r} is not a number", number) from None
        if not math.isfinite(value):
            # NaN has no place in trec_eval's order, and an infinite score is a bug upstream.
            raise InputError(path, "score is not a finite number", number)


def iter_results_jsonl(path: StrPath, progress: Progress | None = None) -> Iterator[Retrieval]:
    """Rankings from JSONL results: one :class:`schemas.RetrievalResult` per line.

    Blank lines are skipped; an empty ``ranked`` list is a valid total miss; a
    ``resultId`` seen on an earlier line is an error (the stream would drop it
    as a duplicate, so counting it here would disagree).
    """
    from pydantic import ValidationError

    from schemas import RetrievalResult, describe_validation_error

    first_line: dict[str, int] = {}
    with open_text(path) as text:
        for first, lines in _chunks(path, text, progress):
            for offset, line in enumerate(lines):
                if not line.strip():
                    continue
                number = first + offset
                try:
                    result = RetrievalResult.model_validate_json(line)
                except ValidationError as error:
                    raise InputError(path, describe_validation_error(error), number) from None
                earlier = first_line.setdefault(result.result_id, number)
                if earlier != number:
                    raise InputError(
                        path,
                        f"resultId {result.result_id} appears again (first on line {earlier})",
                        number,
                    )
                yield Retrieval(
                    run_id=result.run_id,
                    query_id=result.query_id,
                    ranked=result.ranked,
                    result_id=result.result_id,
                    k=result.k,
                    facets=result.facets,
                    confidence=result.top_confidence(),
                )
