"""Value classes for the modules ``scorer eval`` imports at start-up.

A small evaluation is mostly interpreter start-up and imports (issue #32 asks for
at most twice ``python -c pass``). The :mod:`dataclasses` module pulls in
:mod:`inspect` and builds each class by compiling generated code: about a third of
``scorer eval``'s import time went there. So the classes on that path
(:mod:`scorer.core`, :mod:`scorer.io`, :mod:`scorer.offline`,
:mod:`scorer.analysis.risk_coverage`) write their ``__slots__`` and ``__init__``
out and take equality and a repr from :class:`Record`, as a dataclass would give
them. Elsewhere, dataclasses are fine.
"""

from __future__ import annotations


class Record:
    """Equality and a repr over the public ``__slots__`` of the subclass (a slot
    named with a leading underscore is a cache: neither compared nor shown).
    Unhashable, as a mutable dataclass is; a subclass that is used as a key sets
    ``__hash__ = Record.value_hash``."""

    __slots__ = ()

    def _record_values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__ if name[0] != "_")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
        return self._record_values() == other._record_values()

    __hash__ = None  # type: ignore[assignment]

    def value_hash(self) -> int:
        return hash(self._record_values())

    def __repr__(self) -> str:
        shown = (f"{name}={getattr(self, name)!r}" for name in self.__slots__ if name[0] != "_")
        return f"{type(self).__qualname__}({', '.join(shown)})"
