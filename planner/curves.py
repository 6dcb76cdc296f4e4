"""Tabulated noise curves s_g(q) = C_g sigma_g(q): monotone PCHIP in log-log (docs/planning.md §4.2).

For the numeric accountants the noise multiplier a group needs at rate q has no formula.
The planner tabulates it once on a log grid of q (vectorised calibration), interpolates
``log s`` against ``log q`` with a monotone cubic (PCHIP keeps the table's monotonicity, so
the interpolant never suggests that a higher rate needs less noise), and uses the
interpolant only to *choose* rates. Every sigma in a plan is re-calibrated exactly at the
chosen rate afterwards; the tables never reach the plan.

Rates above a group's largest feasible grid point (a sigma above the calibration cap) are
outside that group's domain: ``rate_cap`` records it and the optimiser's upper bounds use it.
Below the grid, and above the last feasible point, the curve continues linearly in log-log
with its end slope, so evaluation never fails; callers keep to the domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NoiseCurves:
    """Per-group monotone interpolants of log noise std against log sampling rate."""

    log_q: np.ndarray  # (n_grid,) increasing, last point log(1) = 0
    coefficients: np.ndarray  # (4, n_grid - 1, n_groups) PCHIP polynomial pieces
    left_slope: np.ndarray  # (n_groups,) d log s / d log q at the first grid point
    rate_cap: np.ndarray  # (n_groups,) largest grid q whose calibration was feasible

    @property
    def n_groups(self) -> int:
        return int(self.coefficients.shape[2])

    def log_std(self, log_rate: np.ndarray) -> np.ndarray:
        """log s_g at log q; ``log_rate`` has shape (n_groups,) or (n_groups, k)."""
        x = np.asarray(log_rate, dtype=float)
        squeeze = x.ndim == 1
        if squeeze:
            x = x[:, None]
        n = self.n_groups
        breaks = self.log_q
        index = np.clip(np.searchsorted(breaks, x, side="right") - 1, 0, len(breaks) - 2)
        t = x - breaks[index]
        rows = np.arange(n)[:, None]
        c = self.coefficients
        value = ((c[0][index, rows] * t + c[1][index, rows]) * t + c[2][index, rows]) * t + c[3][index, rows]
        below = x < breaks[0]
        if np.any(below):
            start = np.broadcast_to(c[3][0][:, None], x.shape)
            value = np.where(below, start + self.left_slope[:, None] * (x - breaks[0]), value)
        return value[:, 0] if squeeze else value

    def std(self, rate: np.ndarray) -> np.ndarray:
        """s_g(q) = C_g sigma_g(q) (interpolated); rate 0 gives 0."""
        q = np.asarray(rate, dtype=float)
        with np.errstate(divide="ignore"):
            out = np.exp(self.log_std(np.log(np.maximum(q, 1e-300))))
        return np.where(q > 0, out, 0.0)

    def rate_for_std(self, std: np.ndarray, iterations: int = 60) -> np.ndarray:
        """The largest q in (0, rate_cap] with s_g(q) <= std (inverse of the monotone curve).

        ``std`` has shape (n_groups,) or (n_groups, k). Bisection in log q (the interpolant
        is monotone, so the inverse is well defined); std <= 0 gives 0.
        """
        s = np.asarray(std, dtype=float)
        squeeze = s.ndim == 1
        if squeeze:
            s = s[:, None]
        target = np.log(np.maximum(s, 1e-300))
        cap = np.log(self.rate_cap)[:, None] * np.ones_like(target)
        lo = np.full_like(target, np.log(1e-300))
        hi = cap.copy()
        at_cap = self.log_std(cap) <= target
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            ok = self.log_std(mid) <= target
            lo = np.where(ok, mid, lo)
            hi = np.where(ok, hi, mid)
        result = np.where(at_cap, cap, lo)
        rate = np.where(s > 0, np.exp(result), 0.0)
        return rate[:, 0] if squeeze else rate


def pchip(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The monotone cubic (PCHIP, Fritsch-Carlson with Moler's one-sided ends) through
    ``(x[i], y[i, g])`` for every column g: its polynomial pieces ``c[k, i, g]`` (the value on
    [x[i], x[i+1]] is sum_k c[k, i, g] (t - x[i])^(3-k)) and each column's slope at x[0]
    (docs/planning.md §4.2). x is increasing, y finite, at least two rows.

    The operations of scipy's ``PchipInterpolator(x, y, axis=0)`` (``_find_derivatives``,
    ``_edge_case`` and ``CubicHermiteSpline``'s coefficients, scipy 1.17), in the same order,
    so ``c`` is its ``.c`` and the slope its ``.derivative()(x[0])`` bit for bit
    (``tests/planner/test_curves.py`` compares them): importing scipy.interpolate cost every
    ``gdpfed plan`` about 0.03 s of its start for these few lines of numpy (issue 26 §3).
    """
    # scipy's PchipInterpolator refused these, and build_curves relied on it: a table whose
    # infeasible (non-finite) entries are not a suffix must stop here, not become NaN pieces
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("pchip: x and y must contain only finite values")
    if y.shape[0] < 2 or np.any(np.diff(x) <= 0):
        raise ValueError("pchip: x must be strictly increasing, with at least two points")
    xv = x[:, None]
    hk = xv[1:] - xv[:-1]
    mk = (y[1:] - y[:-1]) / hk
    dk = np.zeros_like(y)
    if y.shape[0] == 2:  # two points: the line through them
        dk[0] = mk
        dk[1] = mk
    else:
        smk = np.sign(mk)
        condition = (smk[1:] != smk[:-1]) | (mk[1:] == 0) | (mk[:-1] == 0)
        w1 = 2 * hk[1:] + hk[:-1]
        w2 = hk[1:] + 2 * hk[:-1]
        with np.errstate(divide="ignore", invalid="ignore"):  # where condition holds; not used
            whmean = (w1 / mk[:-1] + w2 / mk[1:]) / (w1 + w2)
        dk[1:-1][~condition] = 1.0 / whmean[~condition]
        dk[0] = _pchip_end(hk[0], hk[1], mk[0], mk[1])
        dk[-1] = _pchip_end(hk[-1], hk[-2], mk[-1], mk[-2])
    dx = np.diff(x)[:, None]
    slope = np.diff(y, axis=0) / dx
    t = (dk[:-1] + dk[1:] - 2 * slope) / dx
    coefficients = np.stack((t / dx, (slope - dk[:-1]) / dx - t, dk[:-1], y[:-1]))
    # scipy evaluates the derivative's piece at x[0] by Horner's rule from 0.0: 0.0 + dk[0]
    # (a -0.0 slope comes out +0.0), the higher terms times 0 adding nothing
    return coefficients, 0.0 + dk[0]


def _pchip_end(h0: np.ndarray, h1: np.ndarray, m0: np.ndarray, m1: np.ndarray) -> np.ndarray:
    """The slope at an end: the one-sided three-point estimate, made shape-preserving (0 where
    its sign differs from the end piece's, 3 m0 where it overshoots at a change of direction)."""
    d = ((2 * h0 + h1) * m0 - h0 * m1) / (h0 + h1)
    mask = np.sign(d) != np.sign(m0)
    mask2 = (np.sign(m0) != np.sign(m1)) & (np.abs(d) > 3.0 * np.abs(m0))
    mmm = (~mask) & mask2
    d[mask] = 0.0
    d[mmm] = 3.0 * m0[mmm]
    return d


def build_curves(rate_grid: np.ndarray, noise_multipliers: np.ndarray, clip_norms: np.ndarray) -> NoiseCurves:
    """Curves from a table sigma[i, g] at rate_grid[i] (inf or nan where infeasible).

    Infeasible entries form a suffix in each column (sigma grows with q); a feasible entry
    above an infeasible one (a calibration that fell back between grid points) is taken as
    infeasible too, which only lowers the group's ``rate_cap``. They are replaced by a
    log-log linear continuation of the feasible part so the interpolant is defined
    everywhere; ``rate_cap`` marks where the group's domain ends. docs/planning.md §4.2.
    """
    q = np.asarray(rate_grid, dtype=float)
    table = np.asarray(noise_multipliers, dtype=float)
    if table.shape[0] != q.shape[0] or np.any(np.diff(q) <= 0):
        raise ValueError("build_curves: rate_grid must be increasing and match the table")
    log_q = np.log(q)
    log_s = np.log(np.where(np.isfinite(table) & (table > 0), table, np.nan))
    log_s = log_s + np.log(np.asarray(clip_norms, dtype=float))[None, :]
    # everything from a column's first infeasible entry on: the continuation starts at the
    # last entry of the feasible prefix, never from a NaN inside the column
    feasible = np.logical_and.accumulate(np.isfinite(log_s), axis=0)
    n_feasible = feasible.sum(axis=0)
    if np.any(n_feasible < 2):
        raise ValueError("build_curves: each group needs at least two feasible grid points")
    last = n_feasible - 1
    cols = np.arange(table.shape[1])
    end_slope = (log_s[last, cols] - log_s[last - 1, cols]) / (log_q[last] - log_q[last - 1])
    end_slope = np.maximum(end_slope, 1.0)  # sigma grows at least linearly in q beyond the cap
    continuation = log_s[last, cols][None, :] + end_slope[None, :] * (log_q[:, None] - log_q[last][None, :])
    log_s = np.where(feasible, log_s, continuation)
    # Enforce monotonicity against calibration round-off (1e-4 relative tolerance).
    log_s = np.maximum.accumulate(log_s, axis=0)
    coefficients, left_slope = pchip(log_q, log_s)
    return NoiseCurves(
        log_q=log_q,
        coefficients=coefficients,
        left_slope=np.maximum(np.asarray(left_slope, dtype=float), 0.0),
        rate_cap=q[last],
    )


def rate_grid(lowest_rate: float, points_per_decade: int = 12) -> np.ndarray:
    """Log-spaced rates from ``lowest_rate`` to 1 (both included)."""
    lowest = float(min(max(lowest_rate, 1e-9), 0.5))
    decades = -np.log10(lowest)
    count = max(8, int(np.ceil(decades * points_per_decade)) + 1)
    return np.geomspace(lowest, 1.0, count)


def subset_curves(curves: NoiseCurves, indices: np.ndarray) -> NoiseCurves:
    """The curves of the groups at ``indices`` (same grid)."""
    idx = np.asarray(indices, dtype=int)
    return NoiseCurves(
        log_q=curves.log_q,
        coefficients=curves.coefficients[:, :, idx],
        left_slope=curves.left_slope[idx],
        rate_cap=curves.rate_cap[idx],
    )
