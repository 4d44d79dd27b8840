"""What kind of offline file a path holds, decided from its content.

The first line that is neither blank nor a comment decides: a line starting
with ``{`` means JSONL (a golden set if the object has ``qrels``, results if it
has ``ranked``); otherwise whitespace columns, 4 for TREC qrels (``qid iter
docid grade``) and 6 or more for a TREC run (``qid Q0 docid rank score tag``;
trec_eval ignores what follows the tag, and so do the readers). File names and
extensions are not consulted: users name these files every which way.

As trec_eval 10.0 reads them, TREC files may hold comment lines: a line whose
first character is ``#`` (not one indented) is skipped. A UTF-8 byte order mark
at the start of any file is dropped (Python would keep it in the first query id).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum

from scorer.io.errors import InputError

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import BinaryIO, TextIO

    from scorer.io.errors import StrPath


class FileKind(StrEnum):
    """The four offline file formats."""

    TREC_QRELS = "TREC qrels"
    GOLDEN_JSONL = "JSONL golden set"
    TREC_RUN = "TREC run"
    RESULTS_JSONL = "JSONL results"


QRELS_COLUMNS = 4
RUN_COLUMNS = 6
"""At least: columns after the sixth are ignored, as trec_eval ignores them."""
COMMENT = "#"
"""A TREC line starting with this (in its first column) is a comment."""
BOM = "\ufeff"


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs (on again after, if it was).

    Reading a file builds millions of objects (lists, dicts, tuples) that form
    no cycles; the collections they would set off walk every object of the
    process and cost more than the building itself.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def open_text(path: StrPath) -> TextIO:
    """``path`` opened for reading as UTF-8 text, or :class:`InputError` saying why not."""
    try:
        return open(path, encoding="utf-8-sig")  # a BOM at the start is dropped
    except OSError as error:
        raise InputError(path, f"cannot read the file: {error.strerror or error}") from None


def open_binary(path: StrPath) -> BinaryIO:
    """``path`` opened for reading bytes, unbuffered (reads go straight into the
    bytes they return), or :class:`InputError` saying why not."""
    try:
        return open(path, "rb", buffering=0)
    except OSError as error:
        raise InputError(path, f"cannot read the file: {error.strerror or error}") from None


def decode_lines(path: StrPath, raw: bytes, first: int) -> list[str]:
    """The lines of ``raw`` (UTF-8, whole lines, the first numbered ``first``) as
    :func:`open_text` would give them (universal newlines: ``\n``, ``\r\n`` or a
    lone ``\r`` ends a line), without their ends. (A ``str.split`` is a third
    of ``readlines``' time on a 100,000-line run.)

    Raises :class:`InputError` naming the line of the first byte that is not UTF-8.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        before = raw[: error.start].decode("utf-8")
        line = first + before.count("\n") + before.count("\r") - before.count("\r\n")
        raise InputError(path, "is not UTF-8 text", line) from None
    if first == 1 and text.startswith(BOM):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if not lines[-1]:
        lines.pop()  # after the last line's end, or an empty chunk
    return lines


def has_comments(raw: bytes | memoryview) -> bool:
    """Whether any line of ``raw`` (whole lines) is a comment (:data:`COMMENT` first)."""
    data = bytes(raw) if isinstance(raw, memoryview) else raw
    if b"#" not in data:  # one fast byte search; most files have no # at all
        return False
    return data.startswith((b"#", b"\xef\xbb\xbf#")) or b"\n#" in data or b"\r#" in data


def blank_comments(lines: list[str]) -> list[str]:
    """``lines`` with each comment line made blank: skipped like one, and the lines
    after it keep their numbers for the errors that name them."""
    return ["" if line.startswith(COMMENT) else line for line in lines]


def detect_kind(path: StrPath) -> FileKind:
    """The format of ``path``, from its first non-blank line.

    Raises :class:`InputError` when the file cannot be read, is empty (or blank),
    or its first line fits none of the formats.
    """
    with open_text(path) as lines:
        try:
            for number, line in enumerate(lines, 1):
                if line.strip() and not line.startswith(COMMENT):
                    return _kind_of_line(path, number, line)
        except UnicodeDecodeError:
            raise InputError(path, "is not UTF-8 text") from None
    raise InputError(path, "file is empty (only blank or comment lines)")


def _kind_of_line(path: StrPath, number: int, line: str) -> FileKind:
    if line.lstrip().startswith("{"):
        import orjson  # only for JSONL: TREC files start faster without it

        try:
            first = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise InputError(path, f"invalid JSON: {error}", number) from None
        if isinstance(first, dict):
            if "ranked" in first:
                return FileKind.RESULTS_JSONL
            if "qrels" in first:
                return FileKind.GOLDEN_JSONL
        raise InputError(
            path,
            "JSON object is neither a golden query (no 'qrels') nor a retrieval result "
            "(no 'ranked')",
            number,
        )
    columns = len(line.split())
    if columns == QRELS_COLUMNS:
        return FileKind.TREC_QRELS
    if columns >= RUN_COLUMNS:
        return FileKind.TREC_RUN
    raise InputError(
        path,
        f"expected 4 columns (TREC qrels: qid iter docid grade) or 6 (TREC run: "
        f"qid Q0 docid rank score tag) or a JSON object, got {columns} columns",
        number,
    )
