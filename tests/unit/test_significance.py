"""Paired tests of several runs against a baseline: the t-test against scipy, the
randomization test against an independent implementation with the same draws,
Holm's correction and the JSON keys."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from scorer.analysis.significance import compare_with_baseline, paired_t_test, randomization_tests
from scorer.core.metrics import METRIC_NAMES
from scorer.core.stats import holm


def reference_randomization(differences: list[float], permutations: int, seed: int) -> float:
    """Sign-flip test written plainly: one loop per permutation, a Python sum of
    each signed difference, the flips of query j the bits j of random.Random(seed)'s
    getrandbits(n), as the module docstring states."""
    rng = random.Random(seed)
    observed = abs(sum(differences))
    slack = 1e-9 * sum(abs(d) for d in differences)
    extreme = 0
    for _ in range(permutations):
        mask = rng.getrandbits(len(differences))
        total = sum(-d if mask >> j & 1 else d for j, d in enumerate(differences))
        extreme += abs(total) >= observed - slack
    return (extreme + 1) / (permutations + 1)


@settings(max_examples=200)
@given(
    pairs=st.lists(
        st.tuples(st.floats(0, 1, allow_subnormal=False), st.floats(0, 1, allow_subnormal=False)),
        min_size=2,
        max_size=300,
    ).filter(lambda pairs: len({b - a for a, b in pairs}) > 1)
)
def test_t_test_p_equals_scipy_ttest_rel(pairs: list[tuple[float, float]]) -> None:
    base, candidate = zip(*pairs, strict=True)
    expected = stats.ttest_rel(candidate, base).pvalue
    # Differences of ~1e-324 have no variance scipy can compute (nan): not a metric's.
    assume(math.isfinite(expected))
    # scipy's own error reaches ~2e-12 for p near 1 (two pairs, t ~ 5e-6: see the
    # exact test below, where this module is right to the last digit and scipy is not).
    assert paired_t_test([b - a for a, b in pairs]) == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize(
    "differences",
    [[1.0, 1e-05 - 1.0], [0.3, -0.1], [2.0, 1.0], [1e-8, 2e-8], [-0.5, 0.25]],
)
def test_t_test_p_of_two_pairs_equals_the_cauchy_closed_form(differences: list[float]) -> None:
    """Two pairs give one degree of freedom: Student's t is then Cauchy, and the
    two-sided p-value is 1 - 2 atan(|t|) / pi exactly (the first case is the one
    hypothesis found where scipy 1.x is 1.6e-12 off)."""
    mean = math.fsum(differences) / 2
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in differences))
    t = abs(mean) / (sd / math.sqrt(2))
    expected = 1.0 - 2.0 * math.atan(t) / math.pi
    assert paired_t_test(differences) == pytest.approx(expected, rel=1e-14, abs=1e-16)


def test_t_test_p_equals_scipy_on_a_large_sample() -> None:
    rng = random.Random(7)
    base = [rng.random() for _ in range(20_000)]
    candidate = [value + rng.gauss(0.01, 0.1) for value in base]
    expected = stats.ttest_rel(candidate, base).pvalue
    got = paired_t_test([b - a for a, b in zip(base, candidate, strict=True)])
    assert got == pytest.approx(expected, abs=1e-12)
    assert 0.0 < got < 0.05  # a real, small difference is found


def test_t_test_without_spread() -> None:
    assert paired_t_test([0.0, 0.0, 0.0]) == 1.0
    assert paired_t_test([0.25, 0.25]) == 0.0


@pytest.mark.parametrize("seed", [1, 20_241_130])
def test_randomization_p_equals_an_independent_implementation(seed: int) -> None:
    rng = random.Random(seed)
    columns = [
        [rng.choice([0.0, 0.0, 0.1, -0.1, 1.0, -1.0]) for _ in range(40)],  # many ties
        [rng.gauss(0.05, 0.2) for _ in range(40)],
        [0.0] * 40,  # identical runs
        [rng.gauss(0.3, 0.1) for _ in range(40)],  # a large difference
    ]
    rows = [list(row) for row in zip(*columns, strict=True)]
    got = randomization_tests(rows, 3_000, seed)
    expected = [reference_randomization(column, 3_000, seed) for column in columns]
    assert got == expected
    assert got[2] == 1.0
    assert got[3] == 1 / 3_001  # never 0: the observed assignment counts


@pytest.mark.parametrize("queries", [1, 7, 8, 9, 25, 64, 130])
def test_python_and_numpy_paths_agree_whatever_the_block_size(
    monkeypatch: pytest.MonkeyPatch, queries: int
) -> None:
    rng = random.Random(queries)
    rows = [[rng.gauss(0.02, 0.2), rng.choice([0.0, 0.5, -0.5])] for _ in range(queries)]
    monkeypatch.setattr("scorer.analysis.significance._PYTHON_WORK", 10**12)
    in_python = randomization_tests(rows, 1_000, 5)
    monkeypatch.setattr("scorer.analysis.significance._PYTHON_WORK", 0)
    with_numpy = randomization_tests(rows, 1_000, 5)
    monkeypatch.setattr("scorer.analysis.significance._PERMUTATIONS_PER_BLOCK", 7)
    assert randomization_tests(rows, 1_000, 5) == with_numpy == in_python
    columns = [[row[i] for row in rows] for i in range(2)]
    assert in_python == [reference_randomization(column, 1_000, 5) for column in columns]


def test_compare_with_baseline_pairs_queries_and_corrects_with_holm() -> None:
    rng = random.Random(3)
    base = {f"q{n}": [rng.random() for _ in METRIC_NAMES] for n in range(60)}
    better = {q: [min(1.0, v + 0.2) for v in values] for q, values in base.items()}
    same = {q: list(values) for q, values in base.items() if q != "q0"}  # one query fewer
    noisy = {q: [rng.random() for _ in METRIC_NAMES] for q in base}
    runs = {"base": base, "better": better, "same": same, "noisy": noisy}
    result = compare_with_baseline(runs, ["base", "better", "same", "noisy"], permutations=500)
    assert result["baseline"] == "base"
    assert (result["alpha"], result["permutations"], result["correction"]) == (0.05, 500, "holm")
    by_run = {c["runB"]: c for c in result["runs"]}
    assert [c["runB"] for c in result["runs"]] == ["better", "same", "noisy"]
    assert {c["runA"] for c in result["runs"]} == {"base"}
    assert by_run["same"]["queries"] == 59 and by_run["better"]["queries"] == 60
    for name in METRIC_NAMES:
        family = [by_run[run]["metrics"][name] for run in ("better", "same", "noisy")]
        for test in ("tTest", "randomization"):
            raw = [entry[test]["p"] for entry in family]
            assert [entry[test]["pHolm"] for entry in family] == holm(raw)
        column = METRIC_NAMES.index(name)
        pairs = [(base[q][column], noisy[q][column]) for q in sorted(base)]
        expected_t = stats.ttest_rel([b for _, b in pairs], [a for a, _ in pairs]).pvalue
        assert family[2]["tTest"]["p"] == pytest.approx(expected_t, abs=1e-12)
        differences = [b - a for a, b in pairs]
        assert family[2]["randomization"]["p"] == reference_randomization(
            differences, 500, result["seed"]
        )
        better_entry = family[0]
        assert better_entry["delta"] == pytest.approx(
            sum(min(1.0, v + 0.2) - v for v in (base[q][column] for q in base)) / 60
        )
        assert better_entry["wins"] + better_entry["losses"] + better_entry["ties"] == 60
        assert better_entry["tTest"]["significant"] and better_entry["randomization"]["significant"]
        assert family[1]["tTest"]["p"] == 1.0 and not family[1]["randomization"]["significant"]
        assert better_entry["a"] == pytest.approx(sum(v[column] for v in base.values()) / 60)


@pytest.mark.parametrize("queries", [1, 2, 8, 11, 13])
def test_sign_patterns_count_as_the_permutations_do(queries: int) -> None:
    """With no more sign patterns than permutations (a dozen queries, 10,000
    permutations), the masks are tallied by pattern: the p-values are the
    per-permutation path's and the reference's."""
    from scorer.analysis import significance

    rng = random.Random(queries)
    columns = [
        [rng.gauss(0.02, 0.2) for _ in range(queries)],
        [rng.choice([0.0, 0.5, -0.5]) for _ in range(queries)],
        [0.0] * queries,
    ]
    thresholds = [abs(math.fsum(column)) - 1e-9 * math.fsum(map(abs, column)) for column in columns]

    def masks() -> Iterator[int]:
        draw = random.Random(7)
        return (draw.getrandbits(queries) for _ in range(10_000))

    by_pattern = significance._counts_by_pattern(columns, thresholds, masks(), queries)
    by_permutation = significance._counts_in_python(
        columns, thresholds, masks(), (queries + 7) // 8
    )
    assert by_pattern == by_permutation
    assert by_pattern[2] == 10_000  # identical runs: every permutation as extreme
    rows = [list(row) for row in zip(*columns, strict=True)]
    assert randomization_tests(rows, 10_000, 7) == [
        reference_randomization(column, 10_000, 7) for column in columns
    ]
