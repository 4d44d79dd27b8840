"""The fast path of the TREC readers: whole chunks parsed by pyarrow's CSV reader.

The line-by-line readers (:mod:`scorer.io.runs`, :mod:`scorer.io.qrels`) split
every line in Python; here a chunk of whole lines is parsed at once, in C++
without the GIL, and a run's rankings are ordered with a vectorised sort. A
chunk is parsed on one core (the CSV reader's own threads cost CPU and win no
time while the next chunk is parsed beside the scoring of this one, measured),
in a thread of :func:`scorer.io.runs._parsed_ahead`.

The fast path never decides what a malformed file means: whatever it cannot
read exactly as ``str.split`` would (a wrong column count, a score or grade
that does not convert, a tab, two spaces in a row, a blank line of spaces,
Unicode whitespace, bytes that are not UTF-8, a score that is not finite...) makes it return
``None``, and the caller reads that input line by line, which either accepts it
too or says ``file:line: what is wrong``.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterator, Sequence
from contextlib import suppress
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from pyarrow import _compute

CHUNK_BYTES = 1 << 26
"""Files are read in chunks of whole lines of about this many bytes (64 MiB)."""

FIRST_CHUNK_BYTES = 1 << 23
"""A mapped file's first chunk is at most this many bytes (8 MiB), each next one
twice the one before, up to :data:`CHUNK_BYTES`: the reader parses a chunk ahead
of the one being scored, and scoring starts once the first is parsed (a small
first chunk: 20,000x100 end to end 0.98 -> 0.86 s, measured; no change at
100,000x100, where parsing, not scoring, sets the pace)."""

RunBlock = tuple[str, str, list[str] | str, Sequence[float], bool]
"""(tag, qid, docids, scores, ordered): lines of one run and query.

``docids`` is a list, or one string of them joined by ``\\n``. ``ordered``
means ``docids`` are already in trec_eval's order and ``scores`` in the same
order; otherwise both are in file order.
"""

QrelsRun = tuple[str, list[str], list[int]]
"""(qid, docids, grades) of consecutive qrels lines of one query."""

_IS_ASCII_SPACE = np.zeros(256, dtype=bool)
_IS_ASCII_SPACE[[0x09, 0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x1F]] = True
"""The ASCII bytes that ``str.split()`` splits on, besides space and the line ends."""
_SHORTEST_RUNS = 8
"""Lines of a chunk in runs of one (tag, qid) averaging at least this many are
grouped in Python by run; otherwise by a vectorised hash of every line."""
_NEWLINE = 0x0A
_CARRIAGE_RETURN = 0x0D

NON_ASCII_SPACES = (
    "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
"""Every non-ASCII character ``str.split()`` splits on (a test checks the list)."""

_NON_ASCII_SPACE = re.compile(f"[{NON_ASCII_SPACES}]")
_BOM = b"\xef\xbb\xbf"
_GRADE = r"^-?[0-9]+$"
"""Grades the fast path converts: what both ``int()`` and pyarrow read alike
(pyarrow also takes ``0x1f``, ``int()`` also ``+1`` and ``1_0``)."""


def _call(function: str, *args: object, options: object = None) -> Any:
    """Arrow's compute ``function`` of ``args``, called without importing
    ``pyarrow.compute`` (its Python wrappers of every function are built at
    import: ~25 ms of start-up, measured), nor the array methods that import it
    (``take``, ``cast``)."""
    return _compute.call_function(function, list(args), options)


def line_chunks(file: BinaryIO) -> Iterator[memoryview]:
    """``file``, from its start, in chunks of whole lines, most of about
    :data:`CHUNK_BYTES` (a mapped file's first few smaller: :data:`FIRST_CHUNK_BYTES`).

    A chunk ends just after a ``\\n`` (or at the end of the file), so no line,
    ``\\r\\n`` or UTF-8 character is ever cut. A file that can be mapped (a
    regular file) is: its chunks are views of the page cache, nothing is
    copied into fresh memory (measured: ~0.06 s less CPU per 77 MB read and
    parsed, ~15% of the parse); the pages of a chunk two behind the one
    asked for are let go, so that no more than a few chunks count in the
    resident size. Anything else (a pipe) is read.
    """
    try:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # not a regular file, or an empty one
        yield from _read_line_chunks(file)
        return
    try:
        yield from _mapped_line_chunks(mapped)
    finally:
        with suppress(BufferError):  # a chunk is still held: unmapped once it is let go
            mapped.close()


def _mapped_line_chunks(mapped: mmap.mmap) -> Iterator[memoryview]:
    size = len(mapped)
    view = memoryview(mapped)
    bounds: list[int] = [0]  # where each chunk given so far starts, and the end of the last
    while bounds[-1] < size:
        start = bounds[-1]
        most = min(CHUNK_BYTES, FIRST_CHUNK_BYTES << (len(bounds) - 1))
        if size - start <= most:
            end = size
        else:
            end = mapped.rfind(b"\n", start, start + most) + 1
            if not end:  # a line longer than a chunk
                end = mapped.find(b"\n", start + most) + 1 or size
        if len(bounds) >= 3 and _DONT_NEED is not None:
            # The chunk two behind this one is done with (the caller parses
            # one ahead of the one it reads); were it not, its pages would
            # only be read again from the page cache.
            low = bounds[-3] - bounds[-3] % mmap.PAGESIZE
            high = bounds[-2] - bounds[-2] % mmap.PAGESIZE
            if high > low:
                mapped.madvise(_DONT_NEED, low, high - low)
        bounds.append(end)
        yield view[start:end]


_DONT_NEED: int | None = getattr(mmap, "MADV_DONTNEED", None)


def _read_line_chunks(file: BinaryIO) -> Iterator[memoryview]:
    """:func:`line_chunks` of a file that is read rather than mapped; the line that
    straddles two reads comes as a small chunk of its own, so that nothing big
    is copied."""
    rest: list[bytes] = []  # the start of a line that straddles reads
    while True:
        data = file.read(CHUNK_BYTES)
        if not data:
            break
        start = 0
        if rest:
            start = data.find(b"\n") + 1
            if not start:
                rest.append(data)  # a line longer than a chunk
                continue
            yield memoryview(b"".join([*rest, data[:start]]))
            rest = []
        cut = data.rfind(b"\n") + 1
        if cut > start:
            yield memoryview(data)[start:cut]
        else:
            cut = start
        if cut < len(data):
            rest.append(data[cut:])
    if rest:
        yield memoryview(b"".join(rest))


def read_chunk(raw: memoryview, types: dict[str, pa.DataType]) -> tuple[pa.Table, int] | None:
    """The columns of ``raw`` (whole lines) and its number of lines, or None.

    ``types`` names every column, in order. None unless every line is blank
    (empty) or exactly ``len(types)`` non-empty fields separated by single
    spaces, with no other character ``str.split()`` would split on, and every
    field converts to its type, and no line is a comment (its first field, a
    string, starts with ``#``).
    """
    if not len(raw):
        return None
    try:
        table = pacsv.read_csv(
            pa.py_buffer(raw),
            # One thread: see the module docstring.
            read_options=pacsv.ReadOptions(column_names=list(types), use_threads=False),
            parse_options=pacsv.ParseOptions(
                delimiter=" ",
                quote_char=False,
                double_quote=False,
                escape_char=False,
                newlines_in_values=False,
                ignore_empty_lines=True,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                null_values=[],
                true_values=[],
                false_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowException, ValueError):
        return None
    data = np.frombuffer(raw, np.uint8)
    ends_with_newline = bool(data[-1] == _NEWLINE)
    # Every byte str.split() could split on but a space is a control byte: in a
    # clean chunk they are exactly the rows' line ends.
    controls = _count_below(data, 0x20)
    if controls == table.num_rows - (0 if ends_with_newline else 1):
        lines = table.num_rows
    else:  # blank lines, \r\n line ends, or some other control byte
        newlines = int(np.count_nonzero(data == _NEWLINE))
        carriage_returns = np.flatnonzero(data == _CARRIAGE_RETURN)
        if controls != newlines + len(carriage_returns) and _IS_ASCII_SPACE[data].any():
            return None
        if len(carriage_returns):
            after = carriage_returns + 1
            if after[-1] == len(data) or (data[after] != _NEWLINE).any():
                return None  # a lone \r ends a line for Python, not for the CSV reader
        lines = newlines + (0 if ends_with_newline else 1)
    if data.max() >= 0x80:
        if raw[: len(_BOM)] == _BOM:
            return None  # pyarrow drops it; Python keeps it in the first field
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return None
        if _NON_ASCII_SPACE.search(text):
            return None
    # A comment line (trec_eval's: '#' in its first column) is the line reader's to
    # skip; in a clean chunk a line starts with its first field.
    first = next(iter(types))
    if (
        table.num_rows
        and _call(
            "any",
            _call("starts_with", table[first], options=_compute.MatchSubstringOptions("#")),
        ).as_py()
    ):
        return None
    # Two spaces in a row, or a space at either end of a line, make an empty field.
    strings = [name for name, kind in types.items() if kind == pa.string()]
    if table.num_rows and any(
        _call("min", _call("binary_length", table[n])).as_py() == 0 for n in strings
    ):
        return None
    return table, lines


_BLOCK_BYTES = 1 << 20


def _count_below(data: np.ndarray, bound: int) -> int:
    """How many bytes of ``data`` are below ``bound``, compared a block at a time.

    Not ``np.count_nonzero(data < bound)``: a temporary as large as the chunk is
    fresh memory, and faulting its pages in costs several times the comparison
    (measured: 0.11-0.15 s against 0.012 s for a 64 MiB chunk).
    """
    flags = np.empty(min(len(data), _BLOCK_BYTES), dtype=bool)
    count = 0
    for start in range(0, len(data), _BLOCK_BYTES):
        block = data[start : start + _BLOCK_BYTES]
        within = flags[: len(block)]
        np.less(block, bound, out=within)
        count += int(np.count_nonzero(within))
    return count


def _values(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a numeric or boolean array without nulls, read from its buffer.

    Not ``to_numpy()``: on this pyarrow that imports pandas (~0.5 s of start-up,
    measured) to look for pandas types.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    buffer = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        bits = np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")
        return bits[array.offset : array.offset + len(array)].astype(bool)
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(buffer, dtype, len(array), array.offset * dtype.itemsize)


_ARROW_TYPES = {
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.float64): pa.float64(),
}


def _arrow(values: np.ndarray) -> pa.Array:
    """A numpy array (int32, int64 or float64) as an arrow array over the same
    memory, without the pandas import ``pa.array`` makes (see :func:`_values`)."""
    values = np.ascontiguousarray(values)
    kind = _ARROW_TYPES[values.dtype]
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def run_blocks(raw: memoryview) -> tuple[list[RunBlock], int] | None:
    """The rankings of a chunk of TREC run lines, each in trec_eval's order, and
    the number of lines; None when :func:`read_chunk` cannot read it or a score
    is not finite (NaN or infinite: the line reader names the line).

    One block per (tag, qid) of the chunk, in order of first appearance, lines
    of a query merged wherever they are in the chunk.
    """
    string = pa.string()
    read = read_chunk(
        raw,
        {
            "qid": string,
            "q0": string,
            "docid": string,
            "rank": string,
            "score": pa.float64(),
            "tag": string,
        },
    )
    if read is None:
        return None
    table, lines = read
    rows = table.num_rows
    if not rows:
        return [], lines
    scores = _values(table["score"])
    if not np.isfinite(scores).all():
        return None
    scores = scores + 0.0  # -0.0 becomes 0.0: equal, as Python's comparisons see them
    qid = table["qid"].combine_chunks()
    tag = table["tag"].combine_chunks()
    docid = table["docid"].combine_chunks()

    # Runs of consecutive lines with the same (tag, qid).
    change = np.ones(rows, dtype=bool)
    if rows > 1:
        differs = _call(
            "or", _call("not_equal", qid[1:], qid[:-1]), _call("not_equal", tag[1:], tag[:-1])
        )
        change[1:] = _values(differs)
    starts = np.flatnonzero(change)
    if len(starts) * _SHORTEST_RUNS <= rows:
        # Few runs: their keys in Python tell whether each (tag, qid) has one run.
        run_keys = list(
            zip(
                _call("take", tag, _arrow(starts)).to_pylist(),
                _call("take", qid, _arrow(starts)).to_pylist(),
                strict=True,
            )
        )
        group_of: dict[tuple[str, str], int] = {}
        run_group = np.fromiter(
            (group_of.setdefault(key, len(group_of)) for key in run_keys), np.int64, len(run_keys)
        )
        if len(group_of) == len(run_keys) and bool(np.all(change[1:] | (scores[:-1] > scores[1:]))):
            # The usual file: each query's lines together, scores strictly descending.
            keys, group = run_keys, None
        else:
            keys = list(group_of)
            group = np.repeat(run_group, np.diff(np.append(starts, rows)))
    else:
        keys, group = _groups(tag, qid)
    if group is not None:
        order = _call(
            "sort_indices",
            pa.Table.from_arrays(
                [_arrow(group), _arrow(scores), docid], names=["group", "score", "docid"]
            ),
            options=_compute.SortOptions(
                [("group", "ascending"), ("score", "descending"), ("docid", "descending")]
            ),
        )
        docid = _call("take", docid, order)
        order_np = _values(order)
        scores = scores[order_np]
        starts = np.flatnonzero(np.diff(group[order_np], prepend=-1))
    bounds = np.append(starts, rows)
    # One string per query, to be split when its ranking is scored: far fewer
    # objects cross over than with docid.to_pylist(), and the strings are no
    # work for the garbage collector. A docid holds no '\n'.
    lists = pa.ListArray.from_arrays(_arrow(bounds.astype(np.int32)), docid)
    # The separator as an array: a Python string would become a pa.scalar, which
    # imports pandas (see _values).
    newlines = pa.Array.from_buffers(
        pa.string(),
        len(lists),
        [
            None,
            pa.py_buffer(np.arange(len(lists) + 1, dtype=np.int32)),
            pa.py_buffer(b"\n" * len(lists)),
        ],
    )
    joined = _call("binary_join", lists, newlines).to_pylist()
    edges = bounds.tolist()
    blocks: list[RunBlock] = [
        (run_id, query_id, docs, scores[begin:end], True)
        for (run_id, query_id), docs, begin, end in zip(
            keys, joined, edges, edges[1:], strict=False
        )
    ]
    return blocks, lines


def _groups(tag: pa.Array, qid: pa.Array) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The (tag, qid) keys in order of first appearance, and each row's index
    among them, all vectorised (for lines of a query that are not together)."""
    tags = _call("dictionary_encode", tag)
    qids = _call("dictionary_encode", qid)
    key = _values(tags.indices).astype(np.int64) * len(qids.dictionary)
    key += _values(qids.indices)
    _, first_row, row_key = np.unique(key, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first_row, kind="stable")
    rank = np.empty_like(by_appearance)
    rank[by_appearance] = np.arange(len(by_appearance))
    firsts = first_row[by_appearance]
    keys = list(
        zip(
            _call("take", tag, _arrow(firsts)).to_pylist(),
            _call("take", qid, _arrow(firsts)).to_pylist(),
            strict=True,
        )
    )
    return keys, rank[row_key.reshape(-1)]


def qrels_runs(raw: memoryview) -> tuple[list[QrelsRun], int] | None:
    """Runs of consecutive same-query lines of a chunk of TREC qrels, and the
    number of lines; None when :func:`read_chunk` cannot read it or a grade is
    not a plain integer."""
    string = pa.string()
    read = read_chunk(raw, {"qid": string, "iter": string, "docid": string, "grade": string})
    if read is None:
        return None
    table, lines = read
    rows = table.num_rows
    if not rows:
        return [], lines
    grade_text = table["grade"].combine_chunks()
    matches = _call(
        "match_substring_regex", grade_text, options=_compute.MatchSubstringOptions(_GRADE)
    )
    if not _call("all", matches).as_py():
        return None
    try:
        grades = _call(
            "cast", grade_text, options=_compute.CastOptions.safe(pa.int64())
        ).to_pylist()
    except pa.ArrowException:
        return None  # beyond 64 bits: Python's int() takes it
    qid = table["qid"].combine_chunks()
    change = np.ones(rows, dtype=bool)
    if rows > 1:
        change[1:] = _values(_call("not_equal", qid[1:], qid[:-1]))
    starts = np.flatnonzero(change)
    query_ids = _call("take", qid, _arrow(starts)).to_pylist()
    docs = table["docid"].to_pylist()
    edges = [*starts.tolist(), rows]
    return [
        (query_id, docs[begin:end], grades[begin:end])
        for query_id, begin, end in zip(query_ids, edges, edges[1:], strict=False)
    ], lines
