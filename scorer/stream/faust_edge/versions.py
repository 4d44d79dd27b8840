"""The exact Faust and aiokafka versions the edge was written and tested against.

The edge reaches into private names of both (docs/faust-internals.md); another
version may have moved any of them, silently. So the worker refuses to start
on any other version, with one line naming what it found and what it needs.

It also refuses to start without the compression libraries aiokafka decodes
snappy, lz4 and zstd batches with (all three come from ``cramjam``): users'
producers compress with whatever codec their client defaults to, and a worker
that cannot decode a batch stops on it (DESIGN.md, "Any producer").
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version

from aiokafka import codec

PINNED = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}
"""Also pinned in pyproject.toml; change both together, after the tests pass."""


CODECS = ("snappy", "lz4", "zstd")
"""The codecs aiokafka decodes only with an optional library (gzip is in the standard
library)."""


class VersionMismatch(RuntimeError):
    """The installed packages are not the ones the worker was written and tested with."""


class MissingCodec(VersionMismatch):
    """A compression library aiokafka needs to decode a codec's batches is missing."""


def installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def available_codecs() -> dict[str, bool]:
    """Whether aiokafka can decode each of :data:`CODECS` in this install."""
    checks = {"snappy": codec.has_snappy, "lz4": codec.has_lz4, "zstd": codec.has_zstd}
    return {name: checks[name]() for name in CODECS}


def check_codecs(available: Mapping[str, bool] | None = None) -> None:
    """Raise :class:`MissingCodec` (one line) unless every one of :data:`CODECS` decodes."""
    available = available if available is not None else available_codecs()
    missing = [name for name in CODECS if not available.get(name, False)]
    if missing:
        raise MissingCodec(
            f"aiokafka cannot decode {'/'.join(missing)} batches: install cramjam "
            "(a dependency of retrieval-scorer: `pip install -e .` reinstalls it)"
        )


def check_versions(found: dict[str, str | None] | None = None) -> None:
    """Raise :class:`VersionMismatch` (one line) unless the pinned versions are installed,
    or :class:`MissingCodec` unless every codec Kafka clients use decodes."""
    found = found if found is not None else {name: installed(name) for name in PINNED}
    wrong = {name: got for name, got in found.items() if got != PINNED[name]}
    if wrong:
        said = ", ".join(
            f"{name} {got or 'not installed'} (needs {PINNED[name]})" for name, got in wrong.items()
        )
        raise VersionMismatch(
            f"the worker's Faust edge is written for pinned versions; found {said}: "
            "reinstall with `pip install -e .`"
        )
    check_codecs()
