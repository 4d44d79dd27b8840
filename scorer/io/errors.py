"""The one error the offline readers raise: a bad input file, said in one line."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from os import PathLike
    from typing import TypeAlias

    StrPath: TypeAlias = str | PathLike[str]
    """A file's path as the offline readers take it: pathlib is not imported at start-up."""


class InputError(Exception):
    """A file that cannot be used as it is: unreadable, empty, of the wrong kind, or
    with a malformed line.

    ``str(error)`` is the one line to show a user: ``file:line: what is wrong``
    (``file: what is wrong`` when no single line is at fault).
    """

    def __init__(self, path: StrPath, reason: str, line: int | None = None) -> None:
        self.path = str(path)
        self.reason = reason
        self.line = line
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {reason}")
