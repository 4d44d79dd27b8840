"""The exact Faust and aiokafka versions the edge was written and tested against.

The edge reaches into private names of both (docs/faust-internals.md); another
version may have moved any of them, silently. So the worker refuses to start
on any other version, with one line naming what it found and what it needs.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

PINNED = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}
"""Also pinned in pyproject.toml; change both together, after the tests pass."""


class VersionMismatch(RuntimeError):
    pass


def installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check_versions(found: dict[str, str | None] | None = None) -> None:
    """Raise :class:`VersionMismatch` (one line) unless the pinned versions are installed."""
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
