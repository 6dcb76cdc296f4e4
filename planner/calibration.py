"""The planner's one door to ``accounting``: tables for optimising, exact calibration, verification.

docs/planning.md §4.2 and §8. Tables (sigma on a grid of rates) only guide the optimiser;
every sigma in a plan comes from :func:`calibrate_groups` (exact, under the plan's
accountant, with the group's spent phases) and every epsilon from :func:`verify_group`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from scipy.interpolate import PchipInterpolator

import accounting
from accounting import prv
from accounting.calibration import SIGMA_MAX as SIGMA_CAP
from accounting.closed_form import closed_form_sigma
from accounting.errors import InfeasibleError
from accounting.mechanism import Phase
from accounting.results import EpsilonReport

# Above this many distinct budgets, tables are built on a log grid of epsilon.
EPSILON_GRID_ABOVE = 16
EPSILON_NODES_PER_OCTAVE = 8
CLOSED_FORM_HISTORY_NOTE = "closed_form cannot compose a spent history; calibrated with rdp"


@dataclass(frozen=True)
class GroupCalibration:
    """The exact sigma one group needs at its rate, and how it was obtained."""

    noise_multiplier: float
    sound: bool = True  # False: raw closed form that rdp refutes
    replaced: bool = False  # closed-form sigma replaced by the rdp one (the formula under-noised)
    fallback: bool = False  # prv failed; the rdp answer was used
    reason: str | None = None


def table_accountant(accountant: str) -> str:
    """Which accountant tabulates sigma(q) for optimisation (docs/planning.md §4.2).

    prv plans are optimised on rdp tables (prv calls are far too slow to tabulate and the
    two curves have nearly the same shape) and re-calibrated exactly with prv at the end.
    """
    return "closed_form" if accountant == "closed_form" else "rdp"


def noise_table(
    rates: np.ndarray,
    epsilons: np.ndarray,
    rounds: int,
    delta: float,
    accountant: str,
    spent: Sequence[Sequence[Phase]] | None = None,
) -> np.ndarray:
    """sigma[i, g] needed at ``rates[i]`` by a group with budget ``epsilons[g]``; inf if infeasible.

    closed_form without history: sigma is exactly linear in q, one formula per group.
    Otherwise: rdp, vectorised (``accounting.noise_multipliers_rdp``) when no group has a
    history, per point with ``spent=`` when some do.
    """
    q = np.asarray(rates, dtype=float)
    eps = np.asarray(epsilons, dtype=float)
    has_spent = spent is not None and any(len(p) > 0 for p in spent)
    kind = table_accountant(accountant)
    if kind == "closed_form" and not has_spent:
        slope = np.array([closed_form_sigma(1.0, rounds, float(e), delta) for e in eps])
        return q[:, None] * slope[None, :]
    if not has_spent:
        # Groups that share a budget share a column; many distinct budgets are tabulated on
        # a log grid of epsilon and interpolated (sigma is smooth in log eps), so the number
        # of calibrations does not grow with the number of groups.
        unique, inverse = np.unique(eps, return_inverse=True)
        if len(unique) > EPSILON_GRID_ABOVE:
            octaves = np.log2(unique[-1] / unique[0])
            nodes = np.geomspace(unique[0], unique[-1], max(2, int(np.ceil(octaves * EPSILON_NODES_PER_OCTAVE)) + 1))
            return _interpolate_in_epsilon(nodes, _rdp_table(q, nodes, rounds, delta), eps)
        return _rdp_table(q, unique, rounds, delta)[:, inverse]
    table = np.full((len(q), len(eps)), np.inf)
    for g, e in enumerate(eps):
        phases = list(spent[g]) if has_spent and spent is not None else []
        for i, rate in enumerate(q):
            try:
                table[i, g] = accounting.noise_multiplier(
                    float(rate), rounds, float(e), delta, "rdp", spent=phases
                ).noise_multiplier
            except InfeasibleError:
                break  # sigma grows with q: every larger rate is infeasible too
    return table


def _rdp_table(q: np.ndarray, eps: np.ndarray, rounds: int, delta: float) -> np.ndarray:
    """sigma[i, j] at (q_i, eps_j) from one vectorised rdp call; inf where infeasible."""
    qq, ee = np.meshgrid(q, eps, indexing="ij")
    table = np.asarray(accounting.noise_multipliers_rdp(qq.ravel(), rounds, ee.ravel(), delta), dtype=float)
    table = table.reshape(qq.shape)
    return np.where(np.isfinite(table) & (table > 0), table, np.inf)


def _interpolate_in_epsilon(nodes: np.ndarray, table: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Monotone cubic interpolation of log sigma in log eps, per rate; inf next to infeasible nodes."""
    log_table = np.log(table)
    infeasible = ~np.isfinite(log_table)
    ceiling = np.log(SIGMA_CAP) + 1.0
    spline = PchipInterpolator(np.log(nodes), np.where(infeasible, ceiling, log_table), axis=1)
    values = np.exp(spline(np.log(eps)))
    # a group whose bracketing nodes include an infeasible one is infeasible there too
    right = np.clip(np.searchsorted(nodes, eps, side="left"), 0, len(nodes) - 1)
    left = np.clip(right - 1, 0, len(nodes) - 1)
    bad = infeasible[:, left] | infeasible[:, right]
    return np.where(bad | (values > SIGMA_CAP), np.inf, values)


def calibrate_groups(
    rates: np.ndarray,
    epsilons: np.ndarray,
    rounds: int,
    delta: float,
    accountant: str,
    spent: Sequence[Sequence[Phase]],
    raw_closed_form: bool,
    labels: Sequence[str],
) -> list[GroupCalibration]:
    """Exact sigma for each (rate, epsilon, spent history) under the plan's accountant.

    docs/planning.md §8. rdp without history is one vectorised call (sound under rdp);
    everything else is ``accounting.noise_multiplier`` per group. An infeasible group raises
    :class:`InfeasibleError` naming it.
    """
    q = np.asarray(rates, dtype=float)
    eps = np.asarray(epsilons, dtype=float)
    if len(q) == 0:
        return []
    if accountant == "rdp" and not any(len(p) > 0 for p in spent):
        try:
            sigmas = np.asarray(accounting.noise_multipliers_rdp(q, rounds, eps, delta), dtype=float)
        except InfeasibleError:
            sigmas = None
        if sigmas is not None and np.all(np.isfinite(sigmas) & (sigmas > 0)):
            return [GroupCalibration(float(s)) for s in sigmas]
    def one(g: int) -> GroupCalibration:
        name = accountant
        note = None
        if accountant == "closed_form" and spent[g]:
            # the closed form describes one phase only; a history needs a composing accountant
            name, note = "rdp", CLOSED_FORM_HISTORY_NOTE
        try:
            cal = accounting.noise_multiplier(
                float(q[g]), rounds, float(eps[g]), delta, name, spent=list(spent[g]),
                raw=raw_closed_form and name == "closed_form",
            )
        except InfeasibleError as exc:
            raise InfeasibleError(
                f"{labels[g]} needs a noise multiplier above the calibration cap at sampling rate "
                f"{q[g]:.4g} over {rounds} rounds ({exc.message})"
            ) from None
        if name == "closed_form" and not raw_closed_form:
            # accounting replaced a formula sigma that rdp refutes (cal.sound says the formula
            # failed); the sigma returned is the rdp one, so the group itself is sound.
            return GroupCalibration(float(cal.noise_multiplier), sound=True, replaced=not cal.sound,
                                    reason=cal.reason)
        return GroupCalibration(
            float(cal.noise_multiplier),
            sound=bool(cal.sound),
            fallback=bool(cal.fallback),
            reason=note or cal.reason,
        )

    return fenced_map(one, list(range(len(q))), accountant == "prv")


T = TypeVar("T")
R = TypeVar("R")


def fenced_map(fn: Callable[[T], R], items: list[T], parallel: bool) -> list[R]:
    """``[fn(x) for x in items]``, overlapped on the machine's cores when ``parallel``.

    For prv work only: each call runs its PRV computation in a fenced child process
    (``accounting.prv.run_isolated``) and this thread merely waits on it, so threads
    overlap the children's CPU time without contending for the GIL. Three groups'
    calibrations took 5 s one after the other (issue 15: a prv compare within 5 s).
    """
    workers = min(len(items), os.cpu_count() or 1)
    if not parallel or workers < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gdpfed-prv") as pool:
        return list(pool.map(fn, items))


def verify_group(phases: Sequence[Phase], delta: float, accountant: str) -> EpsilonReport:
    """epsilon of a group's whole history under the plan's accountant (never optimistic).

    closed_form plans are verified with rdp (the value accounting reports for closed_form
    too, docs/accounting.md §6.3, and the only one that composes a history); prv plans
    with the PRV upper bound.
    """
    name = "rdp" if accountant == "closed_form" else accountant
    return accounting.epsilon_of_phases(list(phases), delta, name)


def verify_groups(histories: Sequence[Sequence[Phase]], delta: float, accountants: Sequence[str]) -> list[EpsilonReport]:
    """:func:`verify_group` for each (history, accountant); prv ones overlapped (:func:`fenced_map`)."""
    jobs = list(zip(histories, accountants))
    return fenced_map(lambda job: verify_group(job[0], delta, job[1]), jobs, any(a == "prv" for a in accountants))


# All of a plan's report_prv bounds share one deadline: the report is optional extra
# information (the plan is verified with its own accountant), so it must never make a
# planning request slow (issue 9: 12 groups x 97527 rounds took 17 s one call at a time).
PRV_REPORT_TIME_LIMIT_S = 5.0


def prv_uppers(histories: Sequence[Sequence[Phase]], delta: float) -> tuple[list[float | None], str | None]:
    """The PRV upper bound on epsilon of each history, for ``report_prv`` (docs/accounting.md §5).

    One isolated child computes every distinct history in turn within
    ``PRV_REPORT_TIME_LIMIT_S`` in all; a history PRV cannot bound (or every history, when
    the deadline passes) gets ``None`` and the reason is returned for the plan's warnings.
    """
    distinct: dict[tuple[tuple[float, float, int], ...], int] = {}
    for history in histories:
        key = tuple((p.sampling_rate, p.noise_multiplier, p.steps) for p in history)
        distinct.setdefault(key, len(distinct))
    jobs = []
    for key in distinct:
        reference = accounting.epsilon_of_phases([Phase(sampling_rate=q, noise_multiplier=z, steps=t)
                                                  for q, z, t in key], delta, "rdp").epsilon
        jobs.append((list(key), prv.eps_error_for(reference)))
    try:
        uppers = prv.run_isolated(_prv_uppers_job, (jobs, delta), PRV_REPORT_TIME_LIMIT_S)
    except prv.PrvFailure as failure:
        return [None] * len(histories), f"report_prv: {failure.reason}; epsilon_spent_prv_upper left null"
    result = []
    for history in histories:
        key = tuple((p.sampling_rate, p.noise_multiplier, p.steps) for p in history)
        result.append(uppers[distinct[key]])
    missing = sum(value is None for value in result)
    reason = f"report_prv: prv could not bound {missing} group(s); left null" if missing else None
    return result, reason


def _prv_uppers_job(jobs: list[tuple[list[tuple[float, float, int]], float]], delta: float) -> list[float | None]:
    uppers: list[float | None] = []
    for tuples, eps_error in jobs:
        try:
            uppers.append(float(prv.bounds_in_process(tuples, delta, eps_error)[2]))
        except (prv.PrvFailure, ArithmeticError, ValueError, MemoryError):
            uppers.append(None)
    return uppers


def max_sampling_rate(
    noise_multiplier: float, rounds: int, epsilon: float, delta: float, accountant: str, spent: Sequence[Phase]
) -> float:
    """The largest q meeting epsilon at this sigma (``accounting.sampling_rate``)."""
    result = accounting.sampling_rate(noise_multiplier, rounds, epsilon, delta, accountant, spent=list(spent))
    return float(getattr(result, "sampling_rate", result))
