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
  (``tests/accounting/test_normal.py`` checks both). numpy pays per call, not per value:
  small calls run the six polynomials on every value at once, large ones each branch on
  its own values (:data:`STACKED_MAX`), the same operations value for value.
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


def _table() -> tuple[np.ndarray, np.ndarray]:
    """Cephes' six polynomials as rows of one table ``[k, row]``: rows 0, 1 erf's numerator and
    denominator (T, U, in x^2), rows 2, 3 erfc's on [1, 8) (P, Q), rows 4, 5 erfc's from 8 on
    (R, S); monic denominators with their 1 written out, shorter polynomials padded with
    leading zeros. Horner's steps over the padding give exactly 0 until the first coefficient,
    then that coefficient, so each row takes exactly Cephes' polevl/p1evl operations (a monic
    polynomial's first step, 1 * x + c, is p1evl's x + c). Returns the first row and the rest."""
    rows = (_T, (1.0, *_U), _P, (1.0, *_Q), _R, (1.0, *_S))
    width = max(len(c) for c in rows)
    table = np.zeros((width, len(rows), 1))
    for row, coefficients in enumerate(rows):
        table[width - len(coefficients):, row, 0] = coefficients
    return table[0].copy(), table[1:].copy()


_FIRST, _STEPS = _table()


# Below this many values the six polynomials run on every value in one pass (about 40 numpy
# calls whatever the size: for pld's few hundred values at a time the number of calls sets
# the time); above it each branch runs on its own values only (a third of the arithmetic,
# more calls). Both are Cephes' operations value for value: the same bits either way.
STACKED_MAX = 2048  # values (array elements) per call, not bytes


def ndtr(a: np.ndarray | float, exp: Callable[[np.ndarray], np.ndarray] = np.exp) -> np.ndarray:
    """Phi(a), the standard normal distribution function, as Cephes' ``ndtr`` computes it:
    ``0.5 + 0.5 erf(a/sqrt 2)`` where ``|a/sqrt 2| < 1`` (erf = x T(x^2)/U(x^2)), else
    ``0.5 erfc(|a|/sqrt 2)``, subtracted from 1 for a > 0 (erfc = exp(-z^2) P(z)/Q(z) on
    [1, 8), exp(-z^2) R(z)/S(z) from 8 on, 0 where -z^2 < -MAXLOG); NaN stays NaN.
    ``exp`` is numpy's unless given (``math.exp`` element by element reproduces scipy's
    bits; the tests use it)."""
    return _scaled(np.asarray(a, dtype=float), _SQRT1_2, exp)


def _scaled(a: np.ndarray, scale: float, exp: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """:func:`ndtr` at ``a * scale * sqrt 2`` for ``scale`` = +-1/sqrt 2: ``x = a * scale``, one
    multiplication (rounding is symmetric in sign, so ``a * -c`` is ``(-a) * c`` bit for bit,
    and :func:`survival` needs no negated copy)."""
    x = a.reshape(-1) * scale
    with np.errstate(all="ignore"):
        out = _stacked(x, exp) if x.size <= STACKED_MAX else _split(x, exp)
    return out.reshape(a.shape)


def _stacked(x: np.ndarray, exp: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """:func:`ndtr` at ``x sqrt 2`` with the six polynomials as one (6, n) Horner pass in
    place, each value then taking its branch's. The arguments are clamped where a branch's
    value is not used (x^2 to 1 for erf's rows, |x| to 27 for erfc's, past which exp(-x^2)
    underflows), so no row overflows."""
    z = np.abs(x)
    square = z * z
    argument = np.empty((6, x.size))
    argument[:2] = np.minimum(square, 1.0)
    argument[2:] = np.minimum(z, 27.0)
    value = np.repeat(_FIRST, x.size, axis=1)
    for c in _STEPS:
        value *= argument
        value += c
    erf = (x * value[0]) / value[1]
    near = z < 8.0
    erfc = (exp(-square) * np.where(near, value[2], value[4])) / np.where(near, value[3], value[5])
    half = 0.5 * np.where(-square < -_MAXLOG, 0.0, erfc)
    return np.where(z < 1.0, 0.5 + 0.5 * erf, np.where(x > 0, 1.0 - half, half))


def _horner(x: np.ndarray, row: int) -> np.ndarray:
    """Row ``row`` of :data:`_STEPS`' polynomials at ``x`` (Cephes' polevl/p1evl, as :func:`_stacked`):
    the leading coefficient times ``x`` (the first step, ``c0 * x``, without a filled array),
    then ``* x + c`` per coefficient, in place."""
    steps = _STEPS[:, row, 0]
    out = np.multiply(x, _FIRST[row, 0])
    out += steps[0]
    for c in steps[1:]:
        out *= x
        out += c
    return out


def _split(x: np.ndarray, exp: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """:func:`ndtr` at ``x sqrt 2`` for large calls: erfc's branch on ``[1, 8)`` on every value
    (pld's grids put almost all their values there: 97% of the 19 million of a 100-group plan),
    then the other branches on their own values only, overwriting theirs. Every value gets
    its own branch's operations, the same bits as one pass per branch (docs/accounting.md
    §13.9); what the whole-array pass saves is the gathers and scatters of the common branch."""
    z = np.abs(x)
    square = z * z
    minus = np.negative(square)
    half = exp(minus)
    half *= _horner(z, 2)
    half /= _horner(z, 3)
    half *= 0.5
    out = np.where(x > 0, 1.0 - half, half)
    under = minus < -_MAXLOG
    inner = np.flatnonzero(z < 1.0)
    if inner.size:
        si = square[inner]
        out[inner] = 0.5 + 0.5 * ((x[inner] * _horner(si, 0)) / _horner(si, 1))
    far = np.flatnonzero(~(z < 8.0) & ~under)  # NaN here: NaN out, as Cephes
    if far.size:
        zb = z[far]
        tail = 0.5 * ((exp(-square[far]) * _horner(zb, 4)) / _horner(zb, 5))
        out[far] = np.where(x[far] > 0, 1.0 - tail, tail)
    at = np.flatnonzero(under)
    if at.size:
        out[at] = np.where(x[at] > 0, 1.0, 0.0)  # erfc underflows to 0: ndtr is 0 or 1
    return out


def survival(x: np.ndarray | float) -> np.ndarray:
    """P(N(0, 1) > x) = Phi(-x) (:func:`ndtr`, as scipy's ``ndtr(-x)``)."""
    return _scaled(np.asarray(x, dtype=float), -_SQRT1_2, np.exp)


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
    (docs/accounting.md §13.9). -inf at -inf, 0 at +inf, NaN for NaN.

    Not :func:`accounting.special.log_ndtr`, on purpose: that one is scipy's bits (rdp's plans are
    pinned to them) and, without scipy loaded, a numpy port that costs about 56 us a scalar call;
    this one is pld's closed form's (§13.8), which asks about a hundred scalars per epsilon, at about
    0.6 us from ``math.erfc``. The two differ in the last bits on about 40% of arguments (at most
    8e-16 of ``max(1, |log Phi|)``), so neither can stand in for the other: rdp through this one
    would no longer be scipy's, pld through the port would be 100 times slower."""
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
