"""The inventory of docs/faust-internals.md matches the code: every private name of
faust, mode, aiokafka and pyarrow that scorer/ and schemas/ use is listed, with its
owner, and every listed one is used; the same for the runtime patches."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.private_names import (
    Inventory,
    OurModule,
    ThirdPartyNames,
    find_uses,
    iter_table_rows,
    our_modules,
    scan_third_party,
    unquote,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "faust-internals.md"
DOC_NAME = "docs/faust-internals.md"
PRIVATE_NAMES = "Private names, by module"
RUNTIME_PATCHES = "Runtime patches"

DECISIONS: dict[tuple[str, str, str], bool] = {
    # (module, object as written, name): True when the name is the third party's.
    ("scorer/stream/faust_edge/ledger.py", "ledger", "committed"): False,  # a PartitionLedger
    ("scorer/stream/faust_edge/stopping.py", "watchdog", "daemon"): False,  # threading.Timer
    ("scorer/stream/faust_edge/stopping.py", "producer", "send"): True,  # Faust's Producer
    # Faust's TransactionManager (``Pipeline.commit`` of testing.py is ours too).
    ("scorer/stream/faust_edge/transactions.py", "consumer.transactions", "commit"): True,
    ("scorer/stream/testing.py", "table", "data"): False,  # a MemoryTable
    ("scorer/stream/entry_blocks.py", "block", "size"): False,  # its _Block
}
"""Uses the walk cannot attribute alone: a name both our code and a third-party
package define, assigned or read on an object whose type the code does not say."""


@pytest.fixture(scope="module")
def third_party() -> ThirdPartyNames:
    return scan_third_party()


@pytest.fixture(scope="module")
def inventory(third_party: ThirdPartyNames) -> Inventory:
    return find_uses(our_modules(REPO, ["scorer", "schemas"]), third_party, DECISIONS)


def documented(heading: str) -> dict[tuple[str, str], tuple[int, list[str]]]:
    """(module, name) -> (line, the row's cells) of the table under ``heading``."""
    rows: dict[tuple[str, str], tuple[int, list[str]]] = {}
    for line, cells in iter_table_rows(DOC.read_text(encoding="utf-8"), heading):
        key = (unquote(cells[0]), unquote(cells[1]))
        assert key not in rows, f"{DOC_NAME}:{line}: {key[0]} {key[1]} listed twice"
        rows[key] = (line, cells)
    assert rows, f"{DOC_NAME}: no table under '## {heading}'"
    return rows


def test_every_private_name_used_is_listed_and_every_listed_one_is_used(
    inventory: Inventory,
) -> None:
    found = inventory.names()
    listed = documented(PRIVATE_NAMES)
    first_use = {}
    for use in sorted(inventory.uses, key=lambda u: u.line):
        first_use.setdefault((use.module, use.name), use)
    problems = [
        f"used but not in {DOC_NAME} (## {PRIVATE_NAMES}): {module}:{first_use[module, name].line}"
        f" {name} ({'/'.join(sorted(found[module, name]))}, {first_use[module, name].kind})"
        for module, name in sorted(found.keys() - listed.keys())
    ]
    problems += [
        f"listed in {DOC_NAME}:{listed[key][0]} but no longer used: {key[0]} {key[1]}"
        for key in sorted(listed.keys() - found.keys())
    ]
    for key in sorted(listed.keys() & found.keys()):
        line, cells = listed[key]
        owner = cells[2].strip()
        if owner not in found[key]:
            problems.append(
                f"{DOC_NAME}:{line}: {key[1]} in {key[0]} is defined by "
                f"{'/'.join(sorted(found[key]))}, not {owner}"
            )
        if len(cells) < 4 or not cells[3]:
            problems.append(f"{DOC_NAME}:{line}: {key[1]} in {key[0]} says not what for")
    assert not problems, "\n".join(problems)


def test_every_runtime_patch_is_listed_with_why_and_every_listed_one_is_made(
    inventory: Inventory, third_party: ThirdPartyNames
) -> None:
    found: dict[tuple[str, str], int] = {}
    for patch in sorted(inventory.patches, key=lambda p: p.line):
        found.setdefault((patch.module, patch.name), patch.line)
    listed = documented(RUNTIME_PATCHES)
    problems = [
        f"attribute replaced at runtime but not in {DOC_NAME} (## {RUNTIME_PATCHES}): "
        f"{module}:{found[module, name]} {name}"
        for module, name in sorted(found.keys() - listed.keys())
    ]
    problems += [
        f"listed in {DOC_NAME}:{listed[key][0]} but no longer assigned: {key[0]} {key[1]}"
        for key in sorted(listed.keys() - found.keys())
    ]
    for key in sorted(listed.keys() & found.keys()):
        line, cells = listed[key]
        if cells[2].strip() not in third_party.owners(key[1]):
            problems.append(f"{DOC_NAME}:{line}: {key[1]} is not defined by {cells[2]}")
        if len(cells) < 5 or not cells[3] or not cells[4]:
            problems.append(
                f"{DOC_NAME}:{line}: {key[1]} in {key[0]} needs why, and whether a subclass "
                "or a public hook could do it"
            )
    assert not problems, "\n".join(problems)


def test_every_ambiguous_use_is_decided_and_every_decision_still_applies(
    inventory: Inventory,
) -> None:
    undecided = [
        f"{a.module}:{a.line} {a.receiver}.{a.name}: both our code and a third-party package "
        f"define {a.name}; add {a.key!r} to DECISIONS (True: the third party's)"
        for a in inventory.ambiguous
    ]
    stale = [f"DECISIONS has {key!r}, which no longer matches the code" for key in DECISIONS]
    stale = [s for s, key in zip(stale, DECISIONS, strict=True) if key not in inventory.decided]
    assert not undecided + stale, "\n".join(undecided + stale)


# ---------------------------------------------------------------- the walk itself

SAMPLE = """
from faust.transport.drivers.aiokafka import Consumer
from pyarrow import _compute


class GuardedSample(Consumer):
    _sample_flag = False

    def _drain_messages(self, fetcher):
        self._n_acked = 0
        self._sample_count = 1
        getattr(self.app.producer, "_trn_locks")
        return fetcher._records


class Plain:
    def __init__(self):
        self._sample_seen = set()

    def run(self, other):
        return other._sample_count, self._sample_seen


def install(app, replacement):
    app._new_consumer = replacement
    app.on_stop = replacement
    install.__doc__ = "Not a patch."
"""

AMBIGUOUS = """
class Holder:
    def __init__(self, fetcher):
        self._records = []
        self.fetcher = fetcher

    def first(self):
        return self._records, self.fetcher._records
"""


def sample(source: str, name: str = "sample") -> OurModule:
    return OurModule(f"scorer/{name}.py", f"scorer.{name}", ast.parse(source))


def test_the_walk_counts_third_party_names_by_where_they_are_defined(
    third_party: ThirdPartyNames,
) -> None:
    inventory = find_uses([sample(SAMPLE)], third_party)
    assert {(name, kind) for _, name, _, kind, _ in inventory.uses} == {
        ("_compute", "import"),
        ("_drain_messages", "override"),  # a method of a Faust base, redefined
        ("_n_acked", "set"),  # on self, but defined by Faust's Consumer
        ("_trn_locks", "reflection"),
        ("_records", "read"),  # aiokafka's Fetcher, on another object
        ("_new_consumer", "set"),
    }
    assert inventory.names()["scorer/sample.py", "_records"] == {"aiokafka"}
    assert inventory.names()["scorer/sample.py", "_n_acked"] == {"faust"}
    # Ours (``_sample_*``) and public names are not uses; both assignments on ``app``
    # are patches, a docstring set on our function is not.
    assert {patch.name for patch in inventory.patches} == {"_new_consumer", "on_stop"}
    assert inventory.ambiguous == []


def test_a_name_both_sides_define_waits_for_a_decision(third_party: ThirdPartyNames) -> None:
    module = sample(AMBIGUOUS, "holder")
    undecided = find_uses([module], third_party)
    # On self in a class of ours the name is ours; on another object, nobody can say.
    assert undecided.uses == []
    assert [(a.receiver, a.name) for a in undecided.ambiguous] == [("self.fetcher", "_records")]
    decided = find_uses(
        [module], third_party, {("scorer/holder.py", "self.fetcher", "_records"): True}
    )
    assert [(u.name, u.owners) for u in decided.uses] == [("_records", frozenset({"aiokafka"}))]
    assert decided.ambiguous == []
    assert decided.decided == {("scorer/holder.py", "self.fetcher", "_records")}


def test_a_third_party_base_class_that_is_not_there_stops_the_walk(
    third_party: ThirdPartyNames,
) -> None:
    module = sample("import faust\n\n\nclass Late(faust.NoSuchConsumer):\n    pass\n", "late")
    with pytest.raises(LookupError, match=r"scorer/late.py:4: base class faust.NoSuchConsumer"):
        find_uses([module], third_party)
