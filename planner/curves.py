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
from scipy.interpolate import PchipInterpolator


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


def build_curves(rate_grid: np.ndarray, noise_multipliers: np.ndarray, clip_norms: np.ndarray) -> NoiseCurves:
    """Curves from a table sigma[i, g] at rate_grid[i] (inf or nan where infeasible).

    Infeasible entries must form a suffix in each column (sigma grows with q). They are
    replaced by a log-log linear continuation of the feasible part so the interpolant is
    defined everywhere; ``rate_cap`` marks where the group's domain ends.
    docs/planning.md §4.2.
    """
    q = np.asarray(rate_grid, dtype=float)
    table = np.asarray(noise_multipliers, dtype=float)
    if table.shape[0] != q.shape[0] or np.any(np.diff(q) <= 0):
        raise ValueError("build_curves: rate_grid must be increasing and match the table")
    log_q = np.log(q)
    log_s = np.log(np.where(np.isfinite(table) & (table > 0), table, np.nan))
    log_s = log_s + np.log(np.asarray(clip_norms, dtype=float))[None, :]
    feasible = np.isfinite(log_s)
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
    spline = PchipInterpolator(log_q, log_s, axis=0, extrapolate=True)
    coefficients = np.asarray(spline.c)
    left_slope = spline.derivative()(log_q[0])
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
