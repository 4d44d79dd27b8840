"""Several runs against a baseline: paired significance tests, Holm-corrected.

For each candidate run and each metric, over the queries both it and the
baseline have (paired on query id, each query's mean over its rankings), with
``d`` the per-query differences ``candidate - baseline``:

- **paired t-test**: ``t = mean(d) / (sd(d) / sqrt(n))``, two-sided p from
  Student's t with ``n - 1`` degrees of freedom (:mod:`scorer.core.stats`; equal to
  ``scipy.stats.ttest_rel``). With no spread in ``d``, p is 1 when every
  difference is 0 and 0 otherwise.
- **paired randomization test** (Fisher's; Smucker, Allan & Carterette 2007):
  under the null hypothesis the two runs' scores of a query are exchangeable,
  so each permutation flips the sign of each difference with probability 1/2.
  The flips come from Python's ``random.Random(seed)``: permutation ``i`` is
  the ``i``-th ``getrandbits(n)``, and bit ``j`` (least significant first) set
  flips query ``j`` (queries sorted by id). A permutation counts when
  ``|sum(signed d)| >= |sum(d)|`` (less ``1e-9 * sum|d|`` of rounding), and
  ``p = (count + 1) / (permutations + 1)`` (the observed assignment is one of
  the permutations, so p is never 0: Phipson & Smyth 2010).
- **Holm** (1979) corrects each test's p-values over the family of the
  comparisons with the baseline, one family per metric, cutoff and test.

A difference is significant at ``alpha`` when its Holm-corrected p is below it.
The JSON keys reuse the run API's compare endpoint where they mean the same
(``runA`` the baseline, ``runB`` the candidate, ``queries``, ``delta``,
``ci95``, ``wins``, ``losses``, ``ties``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence

from scorer.analysis.compare import paired
from scorer.analysis.defaults import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_SEED
from scorer.core.measures import METRIC_NAMES
from scorer.core.stats import holm, student_t_sf

TYPE_CHECKING = False  # typing is not imported at start-up (scorer.core.record)
if TYPE_CHECKING:
    from typing import Any

TESTS = ("tTest", "randomization")
_PERMUTATIONS_PER_BLOCK = 512
"""Sign rows multiplied at once by numpy: bounds memory at 512 x queries doubles."""
_PYTHON_WORK = 400_000
"""Up to this many table look-ups (permutations x bytes of queries x columns) the
test runs in plain Python: importing numpy alone takes ~0.1-0.2 s, more than that."""
_ROUNDING = 1e-9


def paired_t_test(differences: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test of ``differences`` (at least two)."""
    n = len(differences)
    if n < 2:
        raise ValueError("a paired t-test needs at least two pairs")
    mean = math.fsum(differences) / n
    # Two passes, as scipy: the sum-of-squares shortcut would cost digits.
    variance = math.fsum((d - mean) ** 2 for d in differences) / (n - 1)
    if variance == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    t = mean / math.sqrt(variance / n)
    return min(1.0, 2.0 * student_t_sf(abs(t), n - 1))


def randomization_tests(
    differences: Sequence[Sequence[float]], permutations: int, seed: int
) -> list[float]:
    """p-values of the paired randomization test of each column of ``differences``
    (rows: queries in a fixed order; columns: metrics, or several comparisons' metrics
    side by side, which then share the same sign flips). See the module docstring.

    Small problems run in plain Python (by sign pattern when there are fewer
    patterns than permutations, else by permutation), large ones with numpy; all
    see the same flips and count alike (up to the order of floating-point sums,
    which the rounding allowance covers).
    """
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    queries = len(differences)
    columns = [list(column) for column in zip(*differences, strict=True)]
    observed = [abs(math.fsum(column)) for column in columns]
    thresholds = [
        total - _ROUNDING * math.fsum(map(abs, column))
        for total, column in zip(observed, columns, strict=True)
    ]
    rng = random.Random(seed)
    masks = (rng.getrandbits(queries) for _ in range(permutations))
    size = (queries + 7) // 8
    if (1 << queries) <= permutations:
        counts = _counts_by_pattern(columns, thresholds, masks, queries)
    elif permutations * size * len(columns) <= _PYTHON_WORK:
        counts = _counts_in_python(columns, thresholds, masks, size)
    else:
        counts = _counts_with_numpy(differences, thresholds, masks, size, permutations)
    return [(count + 1) / (permutations + 1) for count in counts]


def _counts_by_pattern(
    columns: list[list[float]], thresholds: list[float], masks: Iterator[int], queries: int
) -> list[int]:
    """Permutations at least as extreme, per column, when there are no more sign
    patterns (``2 ** queries``) than permutations, as with a dozen queries and the
    default 10,000: each mask is tallied once, and each column's sum is worked out
    once per pattern, not once per permutation."""
    drawn = [0] * (1 << queries)
    for mask in masks:
        drawn[mask] += 1
    patterns = [mask for mask, times in enumerate(drawn) if times]
    counts = []
    for column, threshold in zip(columns, thresholds, strict=True):
        total = math.fsum(column)
        flipped = [0.0] * len(drawn)
        for mask in range(1, len(drawn)):
            lowest = (mask & -mask).bit_length() - 1
            flipped[mask] = flipped[mask & (mask - 1)] + column[lowest]
        counts.append(
            sum(drawn[mask] for mask in patterns if abs(total - 2.0 * flipped[mask]) >= threshold)
        )
    return counts


def _counts_in_python(
    columns: list[list[float]], thresholds: list[float], masks: Iterator[int], size: int
) -> list[int]:
    """Permutations at least as extreme, per column: the flipped part of each sum is
    looked up a byte of the mask at a time (``sum = total - 2 * flipped``)."""
    tables: list[list[list[float]]] = []
    for column in columns:
        by_byte = []
        for start in range(0, len(column), 8):
            values = column[start : start + 8]
            table = [0.0] * 256
            for byte in range(1, 256):
                lowest = (byte & -byte).bit_length() - 1
                table[byte] = table[byte & (byte - 1)] + (
                    values[lowest] if lowest < len(values) else 0.0
                )
            by_byte.append(table)
        tables.append(by_byte)
    totals = [math.fsum(column) for column in columns]
    counts = [0] * len(columns)
    plan = list(zip(range(len(columns)), tables, totals, thresholds, strict=True))
    for mask in masks:
        data = mask.to_bytes(size, "little")
        for index, by_byte, total, threshold in plan:
            flipped = sum([table[byte] for table, byte in zip(by_byte, data, strict=True)])
            if abs(total - 2.0 * flipped) >= threshold:
                counts[index] += 1
    return counts


def _counts_with_numpy(
    differences: Sequence[Sequence[float]],
    thresholds: list[float],
    masks: Iterator[int],
    size: int,
    permutations: int,
) -> list[int]:
    """Permutations at least as extreme, per column: blocks of sign rows times the
    differences, one matrix product per block."""
    import numpy as np

    matrix = np.asarray(differences, dtype=np.float64)
    queries = matrix.shape[0]
    limit = np.asarray(thresholds)
    counts = np.zeros(matrix.shape[1], dtype=np.int64)
    done = 0
    while done < permutations:
        rows = min(_PERMUTATIONS_PER_BLOCK, permutations - done)
        packed = b"".join(next(masks).to_bytes(size, "little") for _ in range(rows))
        bits = np.unpackbits(
            np.frombuffer(packed, np.uint8).reshape(rows, size), axis=1, bitorder="little"
        )[:, :queries]
        signs = 1.0 - 2.0 * bits
        counts += (np.abs(signs @ matrix) >= limit).sum(axis=0)
        done += rows
    return counts.tolist()


def compare_with_baseline(
    query_means: Mapping[str, Mapping[str, Sequence[float]]],
    run_ids: Sequence[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """Each run of ``run_ids[1:]`` against ``run_ids[0]`` (the baseline).

    ``query_means[run][query]`` holds the query's metrics in ``METRIC_NAMES``
    order. Returns ``{"baseline", "alpha", "permutations", "seed", "correction",
    "runs": [{"runA", "runB", "queries", "metrics": {name: {"a", "b", "delta",
    "ci95", "wins", "losses", "ties", "tTest": {"p", "pHolm", "significant"},
    "randomization": {...}}}}]}``. A p-value is None where fewer than two
    queries are shared.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    baseline, candidates = run_ids[0], run_ids[1:]
    base = query_means[baseline]
    comparisons: list[dict[str, Any]] = []
    # Comparisons over the same queries share one draw of sign flips: one product.
    by_queries: dict[tuple[str, ...], list[int]] = {}
    rows_of: list[list[list[float]]] = []
    for index, run_id in enumerate(candidates):
        candidate = query_means[run_id]
        shared = tuple(sorted(base.keys() & candidate.keys()))
        result = paired({q: base[q] for q in shared}, {q: candidate[q] for q in shared})
        differences = [[b - a for a, b in zip(base[q], candidate[q], strict=True)] for q in shared]
        rows_of.append(differences)
        for column, name in enumerate(METRIC_NAMES):
            entry = result["metrics"][name]
            count = len(shared)
            a = math.fsum(base[q][column] for q in shared) / count if count else None
            b = math.fsum(candidate[q][column] for q in shared) / count if count else None
            p = paired_t_test([row[column] for row in differences]) if count >= 2 else None
            result["metrics"][name] = {"a": a, "b": b, **entry, "tTest": {"p": p}}
        comparisons.append({"runA": baseline, "runB": run_id, **result})
        if len(shared) >= 2:
            by_queries.setdefault(shared, []).append(index)
    for members in by_queries.values():
        side_by_side = [
            [value for member in members for value in rows_of[member][row]]
            for row in range(len(rows_of[members[0]]))
        ]
        p_values = randomization_tests(side_by_side, permutations, seed)
        for position, member in enumerate(members):
            metrics = comparisons[member]["metrics"]
            for column, name in enumerate(METRIC_NAMES):
                p = p_values[position * len(METRIC_NAMES) + column]
                metrics[name]["randomization"] = {"p": p}
    for comparison in comparisons:
        for name in METRIC_NAMES:
            comparison["metrics"][name].setdefault("randomization", {"p": None})
    for name in METRIC_NAMES:
        for test in TESTS:
            tested = [
                c["metrics"][name][test]
                for c in comparisons
                if c["metrics"][name][test]["p"] is not None
            ]
            for entry, corrected in zip(tested, holm([e["p"] for e in tested]), strict=True):
                entry["pHolm"] = corrected
                entry["significant"] = corrected < alpha
            for comparison in comparisons:
                entry = comparison["metrics"][name][test]
                if entry["p"] is None:
                    entry.update(pHolm=None, significant=False)
    return {
        "baseline": baseline,
        "alpha": alpha,
        "permutations": permutations,
        "seed": seed,
        "correction": "holm",
        "runs": comparisons,
    }
