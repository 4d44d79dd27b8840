"""The compiled fold of a run's rows (``fold_rows`` in scorer/core/_kernel.c) against
its reference, ``RunBatch._add_rows_python``: the same batches, with redeliveries,
resends, lost writes, entries of earlier layouts and changed qrels, leave the same
tables, to the type and the last bit of every number."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.core.metrics import KERNEL, METRIC_NAMES
from scorer.core.rollup import MAX_FACET_VALUES_PER_RUN, OTHER_FACET_VALUE
from scorer.stream import run_state
from scorer.stream.run_state import RunBatch, SeenEntry

pytestmark = pytest.mark.skipif(
    run_state._fold_rows is None, reason=f"the compiled kernel is not built ({KERNEL})"
)

_N = len(METRIC_NAMES)
FINGERPRINTS = ["a1b2c3d4e5f60718", "0f1e2d3c4b5a6978", "ffffffffffffffff"]

value = st.one_of(
    st.floats(0.0, 1.0, allow_nan=False),
    st.sampled_from([0.0, 1.0, 0.5, 1 / 3]),
    st.integers(0, 1),  # hit@k as the wire has it
)
values = st.one_of(
    st.lists(value, min_size=_N, max_size=_N),
    st.lists(value, min_size=_N - 2, max_size=_N - 1),  # a row from before the last measures
)
facets = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["type", "region"]), st.sampled_from(["a", "b", "c"])),
)
row = st.tuples(
    st.sampled_from(["results", "results-b"]),  # topic
    st.integers(0, 2),  # input partition
    st.integers(0, 30),  # offset
    st.integers(0, 1),  # seq
    st.sampled_from([f"r{i}" for i in range(12)]),  # resultId: resends happen
    st.sampled_from([f"q{i}" for i in range(5)]),
    values,
    facets,
    st.one_of(st.none(), st.floats(-5, 5, allow_nan=False)),  # confidence
    st.one_of(st.none(), st.sampled_from(FINGERPRINTS)),
)
batch = st.lists(
    st.tuples(st.sampled_from([b"run-a", b"run-b"]), st.lists(row, min_size=1, max_size=12)),
    min_size=1,
    max_size=4,
)
# What happens to a batch's writes: all kept, the run states lost, the entries lost, the
# seen block lost, all of them lost (a crash before anything landed).
fates = st.sampled_from(["kept", "kept", "runs lost", "entries lost", "seen lost", "all lost"])


def old_layout(entry: list[Any]) -> list[Any]:
    """A query entry as written before marks (and, for some, before first answers)."""
    floats = entry[:-1] if entry and type(entry[-1]) is dict else entry
    return list(floats[: 1 + _N]) if len(floats) > 1 + _N else list(floats)


def fold_all(
    batches: list[tuple[list[Any], str, bool, bool]], compiled: bool, monkeypatch: Any
) -> list[str]:
    """Fold ``batches`` (rows by run, the fate of their writes, whether the tables go
    through JSON first, whether to age the entries) into tables; everything each batch
    left, as text that tells an int from a float."""
    monkeypatch.setattr(run_state, "_fold_rows", KERNEL_FOLD if compiled else None)
    runs: dict[bytes, Any] = {}
    queries: dict[str, Any] = {}
    seen: dict[str, SeenEntry] = {}
    decoded: dict[bytes, Any] = {}
    seen_out = []
    for n, (runs_rows, fate, through_json, aged) in enumerate(batches):
        if through_json:
            # A restart: the tables as the changelog gives them back (NaN as null).
            runs = {k: orjson.loads(orjson.dumps(v)) for k, v in runs.items()}
            queries = {k: orjson.loads(orjson.dumps(v)) for k, v in queries.items()}
            decoded.clear()
        if aged:
            queries = {k: old_layout(v) for k, v in queries.items()}
        batch = RunBatch(
            runs.get,
            queries.get,
            max_queries=6,
            load_seen=seen.get,
            partition=0,
            now=100.0 + n,
            decoded=decoded,
        )
        counted = [batch.add_rows(key, list(rows)) for key, rows in runs_rows]
        changed = batch.finish(f"t{n}")
        seen_out.append(repr((counted, batch.duplicates, batch.resent, sorted(batch.seen.items()))))
        seen_out.append(repr(sorted(batch.queries.items())))
        seen_out.append(repr(sorted(changed.items())))
        if fate in ("kept", "entries lost", "seen lost"):
            runs.update(changed)
        else:
            decoded.clear()
        if fate in ("kept", "runs lost", "seen lost"):
            queries.update(batch.queries)
        if fate in ("kept", "runs lost", "entries lost"):
            seen.update(batch.seen)
    seen_out.append(repr(sorted(runs.items())))
    seen_out.append(repr(sorted(queries.items())))
    return seen_out


KERNEL_FOLD = run_state._fold_rows


@settings(max_examples=300, deadline=None)
@given(
    batches=st.lists(
        st.tuples(batch, fates, st.booleans(), st.sampled_from([False] * 9 + [True])),
        min_size=1,
        max_size=6,
    ),
    redeliver=st.booleans(),
)
def test_the_compiled_fold_leaves_what_python_leaves(
    batches: list[Any], redeliver: bool, monkeypatch_module: Any
) -> None:
    if redeliver:
        # Every batch folded twice, as after a crash before its offsets were committed.
        batches = [b for pair in zip(batches, batches, strict=True) for b in pair]
    expected = fold_all(batches, False, monkeypatch_module)
    assert fold_all(batches, True, monkeypatch_module) == expected


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_the_kernel_folds_the_common_rows_and_leaves_the_others_to_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Which rows the kernel took: the new ones all, a redelivered one none (a real
    check that the comparison above compared the kernel, not Python twice)."""
    taken: list[tuple[int, int]] = []

    def counting(*arguments: Any) -> Any:
        start, counted, trend = KERNEL_FOLD(*arguments)
        taken.append((arguments[1], start))
        return start, counted, trend

    monkeypatch.setattr(run_state, "_fold_rows", counting)
    rows = [
        ("results", 0, offset, 0, f"r{offset}", "q1", [0.5] * _N, {"type": "a"}, None, None)
        for offset in range(5)
    ]
    seen: dict[str, SeenEntry] = {}
    runs: dict[bytes, Any] = {}
    first = RunBatch(runs.get, {}.get, 10, seen.get, now=1.0)
    assert first.add_rows(b"run", rows) == 5
    assert taken == [(0, 5)]
    runs.update(first.finish("t"))
    seen.update(first.seen)
    taken.clear()
    again = RunBatch(runs.get, first.queries.get, 10, seen.get, now=2.0)
    assert again.add_rows(b"run", [*rows[3:], (*rows[4][:2], 5, *rows[4][3:])]) == 0
    # Rows 0 and 1 are redeliveries (Python), row 2 resends r4 from offset 5 (Python).
    assert taken == [(0, 0), (1, 1), (2, 2)]
    assert again.duplicates == 2 and again.resent == 1
    state = again.finish("t2")[b"run"]
    assert state["watermarks"] == {"results/0": [5, 0]}
    assert state["queries"] == 1
    assert math.isclose(first.queries["run\x1fq1"][1 + 2], 2.5)


def test_hundreds_of_facet_values_past_the_cap_fold_as_in_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the run's cap of values per facet, a value is counted as ``other``; the
    kernel's table of a call's aggregates grows to hold them all."""

    def row(n: int) -> tuple[Any, ...]:
        values = [((n * 37) % 101) / 101, 0.25, 1 / (1 + n % 9), 0.5, n % 2, 1.0, 0.75]
        facets = {"type": f"t{n % 260}", "region": f"g{(n * 7) % 230}", "popularity": "head"}
        confidence = None if n % 4 else n / 10
        return ("results", n % 3, n, 0, f"r{n}", f"q{n % 7}", values, facets, confidence,
                FINGERPRINTS[n % 3])  # fmt: skip

    rows = [row(n) for n in range(1200)]
    folded, facets = [], []
    for compiled in (False, True):
        monkeypatch.setattr(run_state, "_fold_rows", KERNEL_FOLD if compiled else None)
        batch = RunBatch({}.get, {}.get, 5, {}.get, now=3.0)
        assert batch.add_rows(b"run", rows) == len(rows)
        facets.append(batch._rollups[b"run"].facets)
        folded.append(repr((batch.finish("t"), sorted(batch.queries.items()))))
    assert folded[0] == folded[1]
    by_value = facets[1]["type"]
    assert len(by_value) == MAX_FACET_VALUES_PER_RUN + 1
    assert by_value[OTHER_FACET_VALUE].count == sum(1 for n in range(1200) if n % 260 >= 200)
