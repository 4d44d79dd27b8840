"""The compiled scoring kernel (scorer/core/_kernel.c) against the Python one.

The Python kernel is the reference: the conventions and the agreement with
trec_eval, pytrec_eval and ranx are tested on it and on ``score`` elsewhere
(test_metric_conventions, test_metrics_differential). Here: the compiled one is
built and in use, returns the same values to the last bit and of the same types,
and hands back to Python whatever it does not take.
"""

from __future__ import annotations

import math
import subprocess
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.core import metrics
from scorer.core.metrics import MAX_GRADE, Judgments, MetricValues, score, score_python
from scorer.io.runs import JoinedRanking
from scorer.stream import events

IDS = [f"d{i}" for i in range(40)]


def same(left: MetricValues, right: MetricValues) -> bool:
    """Equal to the last bit, and of the same types (hit@k is an int)."""
    return (
        type(left) is type(right) is MetricValues
        and len(left) == len(right)
        and all(
            type(a) is type(b) and (a == b or (math.isnan(a) and math.isnan(b)))
            for a, b in zip(left, right, strict=True)
        )
    )


def test_the_compiled_kernel_is_built_and_scores():
    # `make install` builds it, and so does a plain install where a C compiler is
    # (tests/integration/test_wheel.py). Without it the worker is slower.
    assert metrics.KERNEL == "compiled"
    assert metrics._compiled is not None


grades = st.one_of(
    st.integers(-2, 4),
    st.integers(5, 60),  # past the table of gains (32) and past 2**53
    st.sampled_from([MAX_GRADE - 1, MAX_GRADE]),
)


@st.composite
def cases(draw):
    ids = IDS[: draw(st.sampled_from([12, 40]))]
    qrels = draw(st.dictionaries(st.sampled_from(ids), grades, max_size=25))
    k = draw(st.one_of(st.integers(1, 12), st.integers(13, 80)))
    if draw(st.booleans()):
        # Repeats and unjudged ids; long lists reach past the top max(k, 10).
        ranked = draw(st.lists(st.sampled_from([*ids, "u1", "u2", "u3"]), max_size=70))
    else:
        # Below an unjudged top: what MRR and the candidates find in the tail.
        tail = draw(st.permutations(list(qrels)))
        ranked = [f"u{i}" for i in range(draw(st.integers(0, 14)))] + tail
    return qrels, ranked, k


@settings(max_examples=1500, deadline=None)
@given(cases())
def test_the_compiled_kernel_agrees_with_python_to_the_last_bit(case):
    qrels, ranked, k = case
    judgments = Judgments.from_qrels(qrels)
    assert same(score(ranked, judgments, k), score_python(ranked, judgments, k))


@settings(max_examples=1500, deadline=None)
@given(cases())
def test_a_joined_ranking_scores_as_its_list(case):
    # The offline readers' rankings: ids joined by newlines, scored from the text.
    qrels, ranked, k = case
    if not ranked:
        return  # a JoinedRanking holds at least one line
    judgments = Judgments.from_qrels(qrels)
    expected = score_python(ranked, judgments, k)
    assert same(score(JoinedRanking("\n".join(ranked)), judgments, k), expected)
    split = JoinedRanking("\n".join(ranked))
    assert list(split) == ranked  # now split: scored from its text all the same
    assert same(score(split, judgments, k), expected)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_it_agrees_on_judgments_read_back_from_the_worker_table(case):
    # The worker's judgments come from its qrels table's JSON (events.judgments_of).
    qrels, ranked, k = case
    qrels = {doc: min(max(grade, 0), 3) for doc, grade in qrels.items()}  # the wire's 0-3
    golden = events.decode_golden(orjson.dumps({"queryId": "q", "qrels": qrels, "facets": {}}))
    entry = orjson.loads(orjson.dumps(events.golden_entry(golden)))
    judgments = events.judgments_of(entry)
    assert same(score(ranked, judgments, k), score_python(ranked, judgments, k))


class LooseId(str):
    """An id that a plain dict lookup finds under other text: equal to any string that
    is equal ignoring case (its hash agrees), so its equality is not transitive."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and self.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.lower())


texts = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")),
    max_size=12,
)


@st.composite
def unicode_cases(draw):
    """Ids of every width (ASCII, Latin-1, BMP, astral), the empty id among them, some
    of them str subclasses; judged sets small (the kernel filters them) and large."""
    pool = draw(st.lists(texts, min_size=1, max_size=60, unique=True))
    qrels = draw(st.dictionaries(st.sampled_from(pool), grades, max_size=40))
    if draw(st.integers(0, 9)) == 0:  # past the filter's 128 judged ids
        qrels.update({f"judged-{n}": n % 4 for n in range(130)})
    ranked = draw(st.lists(st.sampled_from(pool), max_size=150))
    # The same text made anew (not the judged key object): equal strs, found all the same.
    ranked = ["".join(list(doc)) for doc in ranked]
    if draw(st.booleans()) and ranked:
        n = draw(st.integers(0, len(ranked) - 1))
        ranked[n] = LooseId(ranked[n].upper())
    if draw(st.booleans()) and qrels:
        doc = draw(st.sampled_from(sorted(qrels)))
        qrels[LooseId(doc.swapcase())] = qrels.pop(doc)
    return qrels, ranked, draw(st.integers(1, 30))


@settings(max_examples=1500, deadline=None)
@given(unicode_cases())
def test_ids_of_any_text_and_kind_score_as_in_python(case):
    # The kernel skips the lookups of ids no judged id can equal (a signature of their
    # characters): it must find every id Python's dict lookups find, and no other.
    qrels, ranked, k = case
    judgments = Judgments.from_qrels(qrels)
    assert same(score(ranked, judgments, k), score_python(ranked, judgments, k))


def test_mrr_is_the_rank_a_lookup_finds_even_for_an_id_equal_to_an_earlier_one():
    # Found by the test above: "A" is not judged, LooseId("A") finds "a". The Python
    # reference once took the first id *equal* to the one found (list.index), and an
    # id of non-transitive equality equals the earlier "A": rank 11 instead of 12.
    judgments = Judgments.from_qrels({"a": 1})
    ranked = ["A"] * 11 + [LooseId("A")]
    values = score_python(ranked, judgments, 1)
    assert values.mrr == 1 / 12
    assert same(score(ranked, judgments, 1), values)


def test_unjudged_ids_that_look_alike_are_told_from_judged_ones():
    # Same length, same last characters: only a lookup can tell them apart.
    qrels = {f"doc-{n:06d}-en": 1 + n % 3 for n in range(60)}
    ranked = [f"doc-{n:06d}-en" for n in range(59, 200)]
    judgments = Judgments.from_qrels(qrels)
    values = score(ranked, judgments, 10)
    assert same(values, score_python(ranked, judgments, 10))
    assert values.mrr == 1.0 and values.hit_at_k == 1 and values.judged_at_k == 0.1


def test_a_long_ranking_with_many_relevant_ids_in_its_tail():
    # More distinct relevant ids found below the top than the kernel's first buffer holds.
    qrels = {f"r{i}": 5 if i % 2 == 0 else 1 + i % 4 for i in range(300)}
    ranked = [f"x{i}" for i in range(20)] + [f"r{i}" for i in range(299, -1, -2)] * 2
    judgments = Judgments.from_qrels(qrels)
    values = score(ranked, judgments, 10)
    assert same(values, score_python(ranked, judgments, 10))
    assert same(score(JoinedRanking("\n".join(ranked)), judgments, 10), values)
    assert values.mrr == 1 / 21
    assert values.hit_at_k == 0
    assert 0 < values.candidate_ndcg_at_10 < 1


def test_what_it_does_not_take_is_scored_by_python():
    qrels = {"a": 2, "b": 1, "c": 0}
    judgments = Judgments.from_qrels(qrels)
    ranked = ["x", "b", "c", "a"]
    expected = score_python(ranked, judgments, 3)
    # Another sequence type.
    assert same(score(tuple(ranked), judgments, 3), expected)
    # Grades that are not plain ints, and a mapping that is not a dict.
    odd = Judgments({"a": True, "b": 1}, 2, judgments.ideal_dcg, {"c": 0})
    assert same(score(ranked, odd, 3), score_python(ranked, odd, 3))
    # An int ideal DCG (a table entry written by hand).
    whole = Judgments({"a": 1}, 1, 1, {})
    assert same(score(["a"], whole, 1), score_python(["a"], whole, 1))


def test_ids_are_whole_lines_of_a_joined_ranking():
    # "d1" is inside "d10" and "xd1": only a whole line is the id.
    judgments = Judgments.from_qrels({"d1": 2, "d10": 1})
    text = "\n".join([*(f"u{i}" for i in range(10)), "xd1", "d10", "d1x", "d1"])
    values = score(JoinedRanking(text), judgments, 5)
    assert same(values, score_python(text.split("\n"), judgments, 5))
    assert values.mrr == 1 / 12
    assert values.candidate_ndcg_at_10 == 1.0
    only = Judgments.from_qrels({"d1": 2})
    assert score(JoinedRanking("\n".join(["u"] * 10 + ["d1x", "xd1"])), only, 5).mrr == 0.0


@pytest.mark.parametrize(
    ("qrels", "tail"),
    [
        ({"11": 1}, ["111"]),  # inside a longer line, after a miss at the line's start
        ({"1": 1}, ["11", "x1"]),
        ({"": 1}, ["x", "y"]),
        ({"a\nb": 1}, ["a", "b"]),  # a newline in an id: never one line
        ({"a": 1, "11": 2}, ["111", "a", "11"]),
    ],
)
def test_only_whole_lines_of_a_joined_tail_are_ids(qrels, tail):
    ranked = ["x"] * 10 + tail
    judgments = Judgments.from_qrels(qrels)
    expected = score_python(ranked, judgments, 10)
    assert same(score(JoinedRanking("\n".join(ranked)), judgments, 10), expected)
    assert same(score_python(JoinedRanking("\n".join(ranked)), judgments, 10), expected)


def test_judgments_whose_count_is_not_their_grades_are_scored_by_python():
    odd = Judgments({"a": 1, "b": 1}, 1, 1.0, {})
    ranked = ["x"] * 10 + ["a", "b"]
    assert same(score(ranked, odd, 10), score_python(ranked, odd, 10))
    assert same(score(JoinedRanking("\n".join(ranked)), odd, 10), score_python(ranked, odd, 10))


def test_its_values_hash_as_pythons():
    judgments = Judgments.from_qrels({"a": 2, "b": 1})
    ours, theirs = score(["b", "a"], judgments, 2), score_python(["b", "a"], judgments, 2)
    assert hash(ours) == hash(theirs) and {ours: 1}[theirs] == 1


def test_its_errors_are_the_python_kernels():
    judgments = Judgments.from_qrels({"a": 1})
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        score(["a"], judgments, 0)
    # A grade above the largest scored, met where nDCG needs its gain.
    big = Judgments({"a": MAX_GRADE + 1}, 1, 1.0, {})
    with pytest.raises(ValueError, match=f"grade {MAX_GRADE + 1} is above {MAX_GRADE}"):
        score(["a"], big, 10)
    # ... and not where no gain is taken (below rank 10): the same values as Python.
    ranked = [f"x{i}" for i in range(12)] + ["a"]
    assert same(score(ranked, big, 20), score_python(ranked, big, 20))


def test_SCORER_KERNEL_python_turns_it_off():
    code = "from scorer.core import metrics; print(metrics.KERNEL)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"SCORER_KERNEL": "python", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "python (SCORER_KERNEL=python)"


def test_a_registry_it_does_not_know_keeps_python(monkeypatch):
    from scorer.core import _kernel

    monkeypatch.setattr(_kernel, "FIELDS", (*_kernel.FIELDS, "new_measure"))
    module, kernel = metrics._load_compiled()
    assert module is None
    assert kernel == "python (the compiled kernel predates the registry's measures)"


# ---- the worker's counting: telemetry's histograms ------------------------------

measure_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1),
    st.sampled_from([0.0, 0.1, 0.5, 1.0, -0.0]),
    st.integers(0, 1),
)


@st.composite
def metric_rows(draw):
    values = draw(st.lists(measure_values, min_size=len(FIELDS), max_size=len(FIELDS)))
    return MetricValues(*values) if draw(st.booleans()) else values  # or a list


FIELDS = MetricValues._fields


def exact(left: list, right: list) -> bool:
    """The same numbers of the same types (NaN equal to NaN)."""
    if len(left) != len(right):
        return False
    pairs = zip(left, right, strict=True)
    return all(type(a) is type(b) and (a == b or (a != a and b != b)) for a, b in pairs)


@settings(max_examples=400, deadline=None)
@given(st.lists(metric_rows(), max_size=30), st.integers(1, 4))
def test_histogram_counting_is_the_generated_pythons(rows, n_pairs):
    from scorer.stream import telemetry

    observe = metrics.compiled("observe")

    def fresh():
        # Per label pair: a count list per measure (buckets, +Inf, then the sum), and
        # the confidence sums the counting leaves alone.
        return tuple(
            (*([0.0] * (len(telemetry.METRIC_BUCKETS) + 2) for _ in FIELDS), [0.0])
            for _ in range(n_pairs)
        )

    compiled_targets, python_targets = fresh(), fresh()
    for values in rows:
        assert observe(compiled_targets, values, telemetry.METRIC_BUCKETS) is None
        telemetry._observe_histograms(python_targets, values)
    for ours, theirs in zip(compiled_targets, python_targets, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert exact(a, b)


def test_counting_it_does_not_take_is_left_to_python_untouched():
    from scorer.stream import telemetry

    observe = metrics.compiled("observe")
    bounds = telemetry.METRIC_BUCKETS
    values = MetricValues(0.5, 0.5, 0.5, 0.5, 1, 0.5, 0.5)
    short = [[0.0] * 3 for _ in FIELDS]  # a bucket past the end of its list
    targets = (((*([0.0] * 13 for _ in FIELDS), [0.0])), (*short, [0.0]))
    before = [list(series) for target in targets for series in target]
    assert observe(targets, values, bounds) is NotImplemented
    assert [list(series) for target in targets for series in target] == before
    assert observe((), ("x",) * len(FIELDS), bounds) is NotImplemented


def test_counting_releases_the_numbers_it_replaces():
    import sys

    from scorer.stream import telemetry

    counted = float("7.25")  # an object of its own, referenced here and by the list
    series = [[0.0] * 13 for _ in FIELDS]
    series[0][-1] = counted
    before = sys.getrefcount(counted)
    values = MetricValues(0.5, 0.5, 0.5, 0.5, 1, 0.5, 0.5)
    observe = metrics.compiled("observe")
    assert observe(((*series, [0.0]),), values, telemetry.METRIC_BUCKETS) is None
    assert series[0][-1] == 7.75
    assert sys.getrefcount(counted) == before - 1


facet_maps = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["type", "region", "tier"]), st.sampled_from(["a", "b", "c", "d"]),
        max_size=3,
    ),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(metric_rows(), facet_maps), max_size=30), st.integers(1, 3))
def test_a_run_rollup_folds_as_the_generated_python(rows, limit):
    from scorer.core import rollup

    # The Python fold itself: the module's compiled add taken away for one rollup.
    compiled_rollup, python_rollup = rollup.RunRollup(), rollup.RunRollup()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rollup, "MAX_FACET_VALUES_PER_RUN", limit)
        for values, facets in rows:
            ours = compiled_rollup.add(values, facets)
            patch.setattr(rollup, "_rollup_add", None)
            theirs = python_rollup.add(values, facets)
            patch.setattr(rollup, "_rollup_add", metrics.compiled("rollup_add"))
            assert ours == theirs and list(ours) == list(theirs)  # the same facets, in order
    pairs = [(compiled_rollup.overall, python_rollup.overall)] + [
        (compiled_rollup.facets[f][v], python_rollup.facets[f][v])
        for f in python_rollup.facets
        for v in python_rollup.facets[f]
    ]
    assert list(compiled_rollup.facets) == list(python_rollup.facets)
    for ours, theirs in pairs:
        assert type(ours.count) is type(theirs.count) and ours.count == theirs.count
        assert exact(ours.sums, theirs.sums) and exact(ours.sumsqs, theirs.sumsqs)


def test_a_rollup_fold_it_does_not_take_is_left_to_python_untouched():
    from scorer.core import rollup

    rollup_add = metrics.compiled("rollup_add")
    limit, other = rollup.MAX_FACET_VALUES_PER_RUN, rollup.OTHER_FACET_VALUE
    values = MetricValues(0.5, 0.5, 0.5, 0.5, 1, 0.5, 0.5)

    class Subclass(rollup.MetricAggregate):
        __slots__ = ()

    one_list = rollup.MetricAggregate()
    one_list.sumsqs = one_list.sums  # a square would be taken from the sum before it
    shared = rollup.MetricAggregate()
    twin = rollup.MetricAggregate(sums=shared.sums)  # one list in two aggregates
    declined = [
        # (overall, by facet, values, facets)
        (one_list, {}, values, None),
        (Subclass(), {}, values, None),  # not the class itself
        (rollup.MetricAggregate(), {}, [*values[:-1], True], None),  # a bool is not a measure
        (rollup.MetricAggregate(), {}, values[:-1], None),  # fewer values
        (rollup.MetricAggregate(sums=[0] * len(FIELDS)), {}, values, None),  # int sums
        (rollup.MetricAggregate(), {"type": []}, values, {"type": "a"}),  # not a dict
        (rollup.MetricAggregate(), {}, values, {"type": "a"}.items()),  # not a dict
        (shared, {"type": {"a": twin}}, values, {"type": "a"}),
    ]
    for overall, by_facet, row, facets in declined:
        before = overall.to_state()
        result = rollup_add(overall, by_facet, row, facets, limit, other, rollup.MetricAggregate)
        assert result is NotImplemented
        assert overall.to_state() == before and overall.count == 0
    # One aggregate that is not all floats: nothing is counted anywhere.
    by_facet = {"type": {"a": rollup.MetricAggregate(sumsqs=[0.0] * 6 + [1])}}
    overall = rollup.MetricAggregate()
    facets = {"type": "a"}
    assert rollup_add(overall, by_facet, values, facets, limit, other, rollup.MetricAggregate) is (
        NotImplemented
    )
    assert overall.count == 0 and by_facet["type"]["a"].count == 0
    # ...and RunRollup.add then folds it in Python, as before.
    run = rollup.RunRollup(overall, by_facet)
    assert run.add(values, facets) == {"type": "a"}
    assert overall.count == 1 and by_facet["type"]["a"].sumsqs[-1] == 1.25


def test_a_rollup_fold_releases_the_numbers_it_replaces():
    import sys

    from scorer.core import rollup

    counted = float("7.25")  # an object of its own, referenced here and by the list
    overall = rollup.MetricAggregate()
    overall.sums[0] = counted
    before = sys.getrefcount(counted)
    values = MetricValues(0.5, 0.5, 0.5, 0.5, 1, 0.5, 0.5)
    rollup_add = metrics.compiled("rollup_add")
    limit, other = rollup.MAX_FACET_VALUES_PER_RUN, rollup.OTHER_FACET_VALUE
    assert rollup_add(overall, {}, values, None, limit, other, rollup.MetricAggregate) == {}
    assert overall.sums[0] == 7.75 and overall.count == 1
    assert sys.getrefcount(counted) == before - 1


def test_a_rollup_fold_counts_a_facets_later_values_as_other():
    from scorer.core import rollup

    run = rollup.RunRollup()
    values = MetricValues(1.0, 0.5, 0.25, 1.0, 1, 1.0, 0.5)
    counted = [run.add(values, {"type": t}) for t in [f"t{i}" for i in range(202)]]
    assert counted[199] == {"type": "t199"} and counted[200] == counted[201] == {"type": "other"}
    assert len(run.facets["type"]) == 201 and run.facets["type"]["other"].count == 2
    assert run.facets["type"]["other"].sums == [2.0, 1.0, 0.5, 2.0, 2.0, 2.0, 1.0]
