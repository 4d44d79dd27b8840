"""The statistics of intervals and significance tests, in plain Python.

Written here rather than imported from scipy because importing ``scipy.stats``
takes most of a second, far more than ``scorer eval`` on a small file needs in
all (issue 14). Each function is checked against scipy in the unit tests.

- :func:`normal_quantile`: Acklam's rational approximation polished by one
  Halley step on ``math.erfc`` (full double precision).
- :func:`student_t_sf`: the upper tail of Student's t through the regularized
  incomplete beta function, ``P(T > t) = I_x(df/2, 1/2) / 2`` with
  ``x = df / (df + t^2)``, the beta function by its continued fraction (modified
  Lentz; Numerical Recipes 6.4).
- :func:`t_quantile`: Newton's method on :func:`student_t_sf`, started from the
  Cornish-Fisher expansion (Hill 1970, Algorithm 396) and kept inside a
  bracket, so it cannot diverge.
"""

from __future__ import annotations

import math
from functools import lru_cache

_EPSILON = 1e-16
_TINY = 1e-300

# Acklam's coefficients for the normal quantile.
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
      1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)  # fmt: skip
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
      6.680131188771972e01, -1.328068155288572e01)  # fmt: skip
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
      -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)  # fmt: skip
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
      3.754408661907416e00)  # fmt: skip


def normal_quantile(p: float) -> float:
    """The ``p`` quantile of the standard normal distribution, 0 < p < 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    low = 0.02425
    if p < low:
        q = math.sqrt(-2 * math.log(p))
        x = (((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]) / (
            (((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1
        )
    elif p <= 1 - low:
        q = p - 0.5
        r = q * q
        x = (
            (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5])
            * q
            / (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1)
        )
    else:
        return -normal_quantile(1 - p)
    # One Halley step: Acklam's 1e-9 relative error to the last bits.
    error = 0.5 * math.erfc(-x / math.sqrt(2)) - p
    u = error * math.sqrt(2 * math.pi) * math.exp(x * x / 2)
    return x - u / (1 + x * u / 2)


Z_975 = normal_quantile(0.975)
"""1.959963984540054: the half-width factor of a 95% normal interval."""


def regularized_beta(x: float, a: float, b: float, y: float | None = None) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``, 0 <= x <= 1, a, b > 0.

    ``y`` is ``1 - x`` when the caller knows it more precisely than the subtraction.
    """
    if y is None:
        y = 1.0 - x
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    # Each logarithm from the smaller of x and 1 - x: ln(1 - tiny) by log1p keeps its digits.
    log_x = math.log1p(-y) if x > 0.5 else math.log(x)
    log_y = math.log1p(-x) if y > 0.5 else math.log(y)
    log_front = a * log_x + b * log_y - _log_beta(a, b)
    # The continued fraction converges fast for x < (a + 1) / (a + b + 2); use the
    # symmetry I_x(a, b) = 1 - I_{1-x}(b, a) on the other side.
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(x, y, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(y, x, b, a) / b


_STIRLING_FROM = 20.0
"""From here on, log-gamma differences are taken by Stirling's series (error < 2e-15)."""


def _stirling_rest(z: float) -> float:
    """``lgamma(z) - ((z - 1/2) ln z - z + ln(2 pi) / 2)`` for z >= 20."""
    r = 1.0 / (z * z)
    return (1 / 12 - r * (1 / 360 - r * (1 / 1260 - r / 1680))) / z


def _log_beta(a: float, b: float) -> float:
    """``ln B(a, b)``, without the cancellation of three large log-gammas when one
    argument is large (Student's t with many degrees of freedom)."""
    small, large = min(a, b), max(a, b)
    if large < _STIRLING_FROM:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    # lgamma(large) - lgamma(large + small), by Stirling's series on both.
    difference = (
        -(large - 0.5) * math.log1p(small / large)
        - small * math.log(large + small)
        + small
        + _stirling_rest(large)
        - _stirling_rest(large + small)
    )
    return math.lgamma(small) + difference


def _beta_fraction(x: float, y: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz);
    ``y`` is ``1 - x``."""
    del y  # the fraction needs x alone; kept in the signature to mirror regularized_beta
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            step = c * d
            fraction *= step
        if abs(step - 1.0) < _EPSILON:
            return fraction
    raise ArithmeticError(f"incomplete beta fraction did not converge for x={x}, a={a}, b={b}")


def student_t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` > 0 degrees of freedom (may be fractional)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    t2 = t * t
    tail = 0.5 * regularized_beta(df / (df + t2), df / 2, 0.5, t2 / (df + t2))
    return tail if t > 0 else 1.0 - tail


def _student_t_pdf(t: float, df: float) -> float:
    log_density = (
        -_log_beta(df / 2, 0.5) - 0.5 * math.log(df) - (df + 1) / 2 * math.log1p(t * t / df)
    )
    return math.exp(log_density)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` > 0 degrees of freedom, 0 < p < 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -_upper_t_quantile(p, df)
    return _upper_t_quantile(1.0 - p, df)


def _upper_t_quantile(upper: float, df: float) -> float:
    """The t > 0 with ``P(T > t) = upper``, 0 < upper < 1/2 (the tail kept as given,
    not as ``1 - p``, which would lose its digits far out)."""
    z = -normal_quantile(upper)
    # Cornish-Fisher expansion of t in z (Hill 1970): close for df >= 3, a start otherwise.
    z2 = z * z
    t = z + (z2 + 1) * z / (4 * df) + ((5 * z2 + 16) * z2 + 3) * z / (96 * df * df)
    if df < 3:
        t = max(t, z)
    low, high = 0.0, math.inf  # P(T > low) > upper >= P(T > high)
    for _ in range(200):
        tail = student_t_sf(t, df)
        if tail > upper:
            low = t
        else:
            high = t
        step = (tail - upper) / _student_t_pdf(t, df)
        following = t + step
        if not low < following < high:
            # Newton would leave the bracket: bisect (or double while unbounded above).
            following = (low + high) / 2 if math.isfinite(high) else 2 * t + 1
        if abs(following - t) <= 4 * _EPSILON * abs(following):
            return following
        t = following
    return t


@lru_cache(maxsize=4096)
def t_quantile_975(df: float) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (may be
    fractional, as Welch's df is): the half-width factor of a 95% interval."""
    return t_quantile(0.975, df)


def wilson_interval(mean: float, n: float, z: float = Z_975) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``mean`` observed over ``n`` (> 0,
    may be an effective, fractional size); always inside [0, 1]."""
    factor = z * z / n
    centre = (mean + factor / 2) / (1 + factor)
    half = z / (1 + factor) * math.sqrt(mean * (1 - mean) / n + factor / (4 * n))
    # Clamped only against rounding: mathematically both ends are already in [0, 1].
    return max(0.0, centre - half), min(1.0, centre + half)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values, in the order given.

    The i-th smallest p (from 0) is multiplied by ``m - i``, kept non-decreasing
    along the sorted order, and capped at 1 (Holm 1979).
    """
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=p_values.__getitem__)):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
