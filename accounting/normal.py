"""The standard normal tails, numpy and math only (docs/accounting.md §13.9).

``gdpfed account`` spent about 0.12 s of its start importing ``scipy.special`` (its
array-API layer pulls in ``numpy.f2py``) for one function, the normal survival function
the pld accountant evaluates (issue 26 §3). These are the same algorithms:

- :func:`survival` is Cephes' ``ndtr`` (Moshier, Cephes Math Library 2.2, the code scipy's
  ``scipy.special.ndtr`` runs) at ``-x``: the same rational approximations and branches,
  coefficient for coefficient, in numpy. The one operation that differs is ``exp``: numpy's
  vectorised ``exp`` and the C library's round differently in the last bit or two, so on
  about 1% of inputs the result is 1-2 units in the last place from scipy's (at most 6e-16
  relative on 1.3 million seeded inputs); Cephes' own error against the exact function is
  documented as 3.4e-14 relative, a hundred times more. With the C library's ``exp``
  (``math.exp`` element by element) the result is scipy's bit for bit
  (``tests/accounting/test_normal.py`` checks both).
- :func:`log_ndtr` is log Phi(x) for one float, from ``math.erfc`` where that is a
  normal number and from the asymptotic series of Mills' ratio below (x < -37), with the
  square in the exponent computed exactly (Dekker's product), so its error is a few units
  in the last place of Phi, like scipy's ``log_ndtr`` (which uses Faddeeva's ``erfcx``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# Cephes ndtr.c (scipy's xsf/cephes/ndtr.h): erfc(x) = exp(-x^2) P(x)/Q(x) on [1, 8),
# exp(-x^2) R(x)/S(x) on [8, inf), erf(x) = x T(x^2)/U(x^2) on [0, 1); Q, S, U are monic
# (the leading 1 is implied, as p1evl has it).
_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
      4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
      9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_Q = (1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
      9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
      1.65666309194161350182e3, 5.57535340817727675546e2)
_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
      6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_S = (2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
      1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)
_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
      7.00332514112805075473e3, 5.55923013010394962768e4)
_U = (3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
      2.26290000613890934246e4, 4.92673942608635921086e4)
_MAXLOG = 7.09782712893383996843e2  # Cephes' MAXLOG: exp(-x^2) underflows past it
_SQRT1_2 = 0.70710678118654752440  # M_SQRT1_2


def _polevl(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Cephes' polevl: Horner's rule from the leading coefficient, the same operations in order."""
    out = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        out = out * x + c
    return out


def _p1evl(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Cephes' p1evl: :func:`_polevl` with an implied leading coefficient 1."""
    out = x + coefficients[0]
    for c in coefficients[1:]:
        out = out * x + c
    return out


def ndtr(a: np.ndarray | float, exp: Callable[[np.ndarray], np.ndarray] = np.exp) -> np.ndarray:
    """Phi(a), the standard normal distribution function, as Cephes' ``ndtr`` computes it:
    ``0.5 + 0.5 erf(a/sqrt 2)`` where ``|a/sqrt 2| < 1``, else ``0.5 erfc(|a|/sqrt 2)``
    (subtracted from 1 for a > 0); NaN stays NaN. ``exp`` is numpy's unless given
    (``math.exp`` element by element reproduces scipy's bits; the tests use it)."""
    a = np.asarray(a, dtype=float)
    x = a * _SQRT1_2
    z = np.abs(x)
    inner = z < 1.0
    with np.errstate(all="ignore"):
        xi = np.where(inner, x, 0.0)  # erf's branch; the other lanes get harmless values
        zz = xi * xi
        erf = xi * _polevl(zz, _T) / _p1evl(zz, _U)
        y_inner = 0.5 + 0.5 * erf
        zo = np.where(inner, 1.0, z)  # erfc's branch, z >= 1
        e = exp(-zo * zo)
        near = zo < 8.0
        p = np.where(near, _polevl(zo, _P), _polevl(zo, _R))
        q = np.where(near, _p1evl(zo, _Q), _p1evl(zo, _S))
        erfc = np.where(-zo * zo < -_MAXLOG, 0.0, (e * p) / q)
        y_outer = 0.5 * erfc
        y_outer = np.where(x > 0, 1.0 - y_outer, y_outer)
    return np.where(inner, y_inner, y_outer)


def survival(x: np.ndarray | float) -> np.ndarray:
    """P(N(0, 1) > x) = Phi(-x) (:func:`ndtr`, as scipy's ``ndtr(-x)``)."""
    return ndtr(-np.asarray(x, dtype=float))


# Below this x, Phi(x) < 1e-299 nears the subnormal range, where erfc loses relative accuracy:
# log Phi comes from the asymptotic series instead (its 12 terms are exact to far below 1e-17
# there: the k-th term is (2k-1)!! / x^(2k), and 23!! / 37^24 < 1e-24).
_SERIES_BELOW = -37.0
_SERIES_TERMS = 12
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _exact_square(x: float) -> tuple[float, float]:
    """``(hi, lo)`` with ``hi + lo == x * x`` exactly (Dekker's product; Veltkamp's split)."""
    split = 134217729.0 * x  # 2^27 + 1
    high = split - (split - x)
    low = x - high
    hi = x * x
    lo = ((high * high - hi) + 2 * high * low) + low * low
    return hi, lo


def log_ndtr(x: float) -> float:
    """log Phi(x) for one float: ``log1p(-erfc(x/sqrt 2)/2)`` above -1 (no cancellation near
    1), ``log(erfc(-x/sqrt 2)/2)`` down to -37, and below it Mills' ratio's asymptotic series,
    ``-x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - ...)``, with ``x^2`` exact
    (docs/accounting.md §13.9). -inf at -inf, 0 at +inf, NaN for NaN."""
    if math.isnan(x):
        return math.nan
    if x > -1.0:
        return math.log1p(-0.5 * math.erfc(x * _SQRT1_2))
    if x > _SERIES_BELOW:
        return math.log(0.5 * math.erfc(-x * _SQRT1_2))
    if math.isinf(x):
        return -math.inf
    hi, lo = _exact_square(x)
    inv = 1.0 / hi
    term, series = 1.0, 1.0
    for k in range(1, _SERIES_TERMS + 1):
        term *= -(2 * k - 1) * inv
        series += term
    return (-0.5 * hi - 0.5 * lo) - math.log(-x) - _HALF_LOG_2PI + math.log(series)
