"""Pools as items of one allocation: each pool's noise std as a function of its expected clients.

docs/planning.md §2 and §4.3. A pool P with expected clients K_P = sum_{g in P} q_g N_g
needs noise std ``s_P = max_{g in P} s_g(q_g)``. For a single group that is s_g(K_P / N_g).
For a shared pool the best split of K_P among members equalises their noise: at std s each
member can run at most at ``q_g(s) = s_g^{-1}(s)`` (clipped to its bounds), so
``s_P(K_P) = min { s : F_P(s) >= K_P }`` with ``F_P(s) = sum N_g clip(q_g(s), lo_g, hi_g)``.
F_P is tabulated on a log grid of s and inverted by interpolation in log-log.
An opted-out group is always a pool of its own with no noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from accounting.errors import InfeasibleError
from planner.curves import NoiseCurves, subset_curves
from planner.waterfill import repair_total

NO_NOISE, SINGLE, SHARED = 0, 1, 2
_TABLE_POINTS = 96


@dataclass(frozen=True)
class PoolSet:
    """A partition of the sampled groups into pools, with per-pool bounds on K_P."""

    members: tuple[np.ndarray, ...]
    kind: np.ndarray  # NO_NOISE, SINGLE or SHARED per pool
    single_group: np.ndarray  # the group of a SINGLE pool, else -1
    single_curves: NoiseCurves | None  # rows follow the SINGLE pools in order
    table_row: np.ndarray  # row in the SHARED tables, else -1
    table_log_k: np.ndarray  # (n_shared, points) log F_P(s), non-decreasing
    table_log_s: np.ndarray  # (n_shared, points) log s, increasing
    lower: np.ndarray  # K_P bounds
    upper: np.ndarray
    curves: NoiseCurves | None
    num_clients: np.ndarray  # per group
    rate_lower: np.ndarray  # per group
    rate_upper: np.ndarray

    @property
    def n_pools(self) -> int:
        return len(self.members)

    def std(self, expected: np.ndarray) -> np.ndarray:
        """s_P(K_P) for K of shape (n_pools, k) (interpolated; docs/planning.md §4.3)."""
        k = np.asarray(expected, dtype=float)
        out = np.zeros_like(k)
        single = self.kind == SINGLE
        if np.any(single) and self.single_curves is not None:
            rows = np.flatnonzero(single)
            groups = self.single_group[rows]
            rates = k[rows] / self.num_clients[groups][:, None]
            # SINGLE pools were numbered in pool order, so rows map to curve rows 0, 1, ...
            out[rows] = self.single_curves.std(rates)
        shared = self.kind == SHARED
        if np.any(shared):
            rows = np.flatnonzero(shared)
            t = self.table_row[rows]
            with np.errstate(divide="ignore"):
                log_k = np.log(np.maximum(k[rows], 1e-300))
            out[rows] = np.exp(_row_interp(log_k, self.table_log_k[t], self.table_log_s[t]))
        return out

    def member_rates(self, expected: np.ndarray) -> np.ndarray:
        """Per-group rates that deliver K_P in each pool (equalised noise within shared pools)."""
        k = np.asarray(expected, dtype=float)
        rates = np.zeros(len(self.num_clients))
        for p, members in enumerate(self.members):
            n = self.num_clients[members]
            lo, hi = self.rate_lower[members], self.rate_upper[members]
            if self.kind[p] == SHARED and self.curves is not None:
                q = _equal_noise_rates(subset_curves(self.curves, members), n, lo, hi, float(k[p]))
            else:
                q = np.clip(np.full(len(members), k[p] / n.sum()), lo, hi)
            rates[members] = repair_total(q, n, lo, hi, float(k[p]))
        return rates


def _equal_noise_rates(curves: NoiseCurves, n: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: float) -> np.ndarray:
    """Member rates at the smallest common std s with sum N clip(q(s), lo, hi) >= K (bisection in log s)."""
    s_lo = float(np.max(curves.std(lo))) * (1 - 1e-12)
    s_hi = float(np.max(curves.std(hi)))
    if s_lo <= 0:
        s_lo = s_hi * 1e-9

    def rates_at(s: float) -> np.ndarray:
        return np.clip(curves.rate_for_std(np.full(len(n), s)), lo, hi)

    if float(n @ rates_at(s_lo)) >= k:
        return rates_at(s_lo)
    a, b = np.log(s_lo), np.log(s_hi)
    for _ in range(60):
        mid = 0.5 * (a + b)
        if float(n @ rates_at(np.exp(mid))) >= k:
            b = mid
        else:
            a = mid
    return rates_at(np.exp(b))


def _row_interp(x: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Row-wise linear interpolation; xp rows non-decreasing; clamps outside (x: (n, k))."""
    count = (xp[:, None, :] < x[:, :, None]).sum(axis=2)  # first index with xp >= x
    right = np.clip(count, 1, xp.shape[1] - 1)
    left = right - 1
    rows = np.arange(xp.shape[0])[:, None]
    x0, x1 = xp[rows, left], xp[rows, right]
    f0, f1 = fp[rows, left], fp[rows, right]
    width = x1 - x0
    t = np.where(width > 0, (x - x0) / np.where(width > 0, width, 1.0), 1.0)
    value = f0 + np.clip(t, 0.0, 1.0) * (f1 - f0)
    value = np.where(x <= xp[:, :1], fp[:, :1], value)
    return np.where(x >= xp[:, -1:], fp[:, -1:], value)


def build_pool_set(
    pools: Sequence[Sequence[int]],
    private: np.ndarray,
    num_clients: np.ndarray,
    rate_lower: np.ndarray,
    rate_upper: np.ndarray,
    curves: NoiseCurves | None,
    min_clients_per_pool: int,
    labels: Sequence[str],
) -> PoolSet:
    """Pools with K_P bounds: [sum N lo, sum N hi], private pools also K_P >= min_clients_per_pool.

    Raises :class:`InfeasibleError` naming the group or pool that cannot reach the minimum.
    """
    members = tuple(np.asarray(p, dtype=int) for p in pools)
    n_pools = len(members)
    kind = np.full(n_pools, NO_NOISE)
    single_group = np.full(n_pools, -1)
    table_row = np.full(n_pools, -1)
    lower = np.zeros(n_pools)
    upper = np.zeros(n_pools)
    singles: list[int] = []
    tables_k: list[np.ndarray] = []
    tables_s: list[np.ndarray] = []
    for p, group_ids in enumerate(members):
        n = num_clients[group_ids]
        lo, hi = rate_lower[group_ids], rate_upper[group_ids]
        lower[p] = float(np.dot(n, lo))
        upper[p] = float(np.dot(n, hi))
        is_private = bool(np.all(private[group_ids]))
        if not is_private:
            if len(group_ids) != 1:
                raise ValueError("an opted-out group is always a pool of its own")
            continue
        if upper[p] < min_clients_per_pool:
            who = labels[group_ids[0]] if len(group_ids) == 1 else "the pool of " + ", ".join(
                labels[g] for g in group_ids
            )
            raise InfeasibleError(
                f"{who} can expect at most {upper[p]:.4g} clients a round, fewer than "
                f"min_clients_per_pool={min_clients_per_pool}; lower min_clients_per_pool or pool "
                "groups together (pooled_plus)"
            )
        lower[p] = max(lower[p], float(min_clients_per_pool))
        if len(group_ids) == 1:
            kind[p] = SINGLE
            single_group[p] = group_ids[0]
            singles.append(int(group_ids[0]))
        else:
            if curves is None:
                raise ValueError("shared pools need noise curves")
            kind[p] = SHARED
            table_row[p] = len(tables_k)
            log_k, log_s = _shared_table(subset_curves(curves, group_ids), n, lo, hi)
            tables_k.append(log_k)
            tables_s.append(log_s)
    single_curves = subset_curves(curves, np.array(singles)) if singles and curves is not None else None
    points = _TABLE_POINTS
    return PoolSet(
        members=members,
        kind=kind,
        single_group=single_group,
        single_curves=single_curves,
        table_row=table_row,
        table_log_k=np.array(tables_k) if tables_k else np.zeros((0, points)),
        table_log_s=np.array(tables_s) if tables_s else np.zeros((0, points)),
        lower=lower,
        upper=upper,
        curves=curves,
        num_clients=num_clients,
        rate_lower=rate_lower,
        rate_upper=rate_upper,
    )


def _shared_table(
    curves: NoiseCurves, n: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """log F_P(s) and log s on a log grid of s from the members' floor to their ceiling."""
    s_floor = float(np.max(curves.std(lo)))
    s_ceiling = float(np.max(curves.std(hi)))
    if s_floor <= 0:
        s_floor = s_ceiling * 1e-6
    s_ceiling = max(s_ceiling, s_floor * (1 + 1e-9))
    s = np.geomspace(s_floor, s_ceiling, _TABLE_POINTS)
    rates = np.clip(curves.rate_for_std(np.broadcast_to(s, (len(n), len(s))).copy()), lo[:, None], hi[:, None])
    supply = np.maximum.accumulate(n @ rates)
    return np.log(np.maximum(supply, 1e-300)), np.log(s)
