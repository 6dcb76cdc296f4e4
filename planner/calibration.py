"""The planner's one door to ``accounting``: tables for optimising, exact calibration, verification.

docs/planning.md §4.2 and §8. Tables (sigma on a grid of rates) only guide the optimiser;
every sigma in a plan comes from :func:`calibrate_groups` (exact, under the plan's
accountant, with the group's spent phases) and every epsilon from :func:`verify_group`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

import accounting
from accounting.accountants import TIGHT_ACCOUNTANT, AccountantName, get_accountant
from accounting.accountants.prv import PrvAccountant
from accounting.calibration import SIGMA_MAX as SIGMA_CAP
from accounting.errors import InfeasibleError
from accounting.events import Phase, PrivacyEvent
from accounting.results import EpsilonReport

# Above this many distinct budgets, tables are built on a log grid of epsilon.
EPSILON_GRID_ABOVE = 16
EPSILON_NODES_PER_OCTAVE = 8


@dataclass(frozen=True)
class GroupCalibration:
    """The exact sigma one group needs at its rate, and how it was obtained."""

    noise_multiplier: float
    sound: bool = True  # False: raw closed form that rdp refutes
    replaced: bool = False  # closed-form sigma replaced by the rdp one (the formula under-noised)
    fallback: bool = False  # prv failed; the rdp answer was used
    reason: str | None = None
    warning: str | None = None  # for the plan's warnings: another accountant calibrated this group
    # epsilon of (spent + (q, noise_multiplier, T)) as the plan's verifier computes it, kept
    # from the calibration's last evaluation where that is the verifier's own answer bit for
    # bit (``reusable_epsilon``); None where verification must compute it
    epsilon: float | None = None


# Accountants whose answer for one history is the same bit for bit alone, in any batch and
# in a calibration's evaluation (pld: docs/accounting.md §13.5-§13.6). For them a history is
# composed once however many groups have it, and a calibration's last evaluation is the
# verification of a group that runs at that sigma. prv calibrates on another discretisation
# than it verifies with (§5); rdp's batch calibration keeps no epsilon and its vectorised
# epsilons are not promised to be batch-independent in the last bit.
SAME_ALONE_AS_BATCHED: frozenset[AccountantName] = frozenset({TIGHT_ACCOUNTANT})


def table_accountant(accountant: AccountantName) -> AccountantName:
    """Which accountant tabulates sigma(q) for optimisation (docs/planning.md §4.2).

    The accountant's ``tabulated_by``: prv plans are optimised on rdp tables (prv calls are
    far too slow to tabulate and the two curves have nearly the same shape) and
    re-calibrated exactly with prv at the end.
    """
    return get_accountant(accountant).tabulated_by


def noise_slopes(epsilons: np.ndarray, rounds: int, delta: float, accountant: AccountantName) -> np.ndarray | None:
    """sigma / q per budget when the tabulating accountant's sigma is exactly linear in q
    (the closed form, without history); None otherwise."""
    tabulating = get_accountant(table_accountant(accountant))
    return tabulating.noise_slopes(np.asarray(epsilons, dtype=float), rounds, delta)


def noise_table(
    rates: np.ndarray,
    epsilons: np.ndarray,
    rounds: int,
    delta: float,
    accountant: AccountantName,
    spent: Sequence[Sequence[PrivacyEvent]] | None = None,
    *,
    spent_epsilons: Sequence[float | None] | None = None,
) -> np.ndarray:
    """sigma[i, g] needed at ``rates[i]`` by a group with budget ``epsilons[g]``; inf if infeasible.

    A tabulating accountant whose sigma is linear in q (closed form), without history: one
    formula per group. Otherwise the fast accountant (``per_round``, rdp): vectorised when
    no group has a history, per point with ``spent=`` when some do. ``spent_epsilons[g]``:
    ``spent[g]``'s epsilon at ``delta`` under the accountant's ``verified_by``, where the caller
    composed it already (a re-plan, docs/planning.md §9); None entries are composed here.
    """
    q = np.asarray(rates, dtype=float)
    eps = np.asarray(epsilons, dtype=float)
    has_spent = spent is not None and any(len(p) > 0 for p in spent)
    chosen = get_accountant(accountant)
    if has_spent and spent is not None and chosen.verified_by != chosen.per_round:
        # A history the tight accountant (pld, prv) calibrated is over-stated by the fast one
        # (rdp), often past the whole budget: the table would say "infeasible at every rate"
        # for a group with room left. Guide instead with each group's budget left under the
        # plan's own accountant, tabulated as a fresh group; the exact sigma is then
        # calibrated on the whole history (calibrate_groups), so this changes no guarantee.
        left = eps.copy()
        for g, phases in enumerate(spent):
            if phases:
                known = None if spent_epsilons is None else spent_epsilons[g]
                used = known if known is not None else accounting.epsilon_of_events(
                    list(phases), delta, chosen.verified_by).epsilon
                left[g] = eps[g] - used if eps[g] > used else np.nan
        table = np.full((len(q), len(eps)), np.inf)
        fine = np.isfinite(left)
        if fine.any():
            table[:, fine] = noise_table(q, left[fine], rounds, delta, accountant)
        return table
    if not has_spent:
        slopes = noise_slopes(eps, rounds, delta, accountant)
        if slopes is not None:
            return q[:, None] * slopes[None, :]
    fast = get_accountant(accountant).per_round
    if not has_spent:
        # Groups that share a budget share a column; many distinct budgets are tabulated on
        # a log grid of epsilon and interpolated (sigma is smooth in log eps), so the number
        # of calibrations does not grow with the number of groups.
        unique, inverse = np.unique(eps, return_inverse=True)
        if len(unique) > EPSILON_GRID_ABOVE:
            octaves = np.log2(unique[-1] / unique[0])
            nodes = np.geomspace(unique[0], unique[-1], max(2, int(np.ceil(octaves * EPSILON_NODES_PER_OCTAVE)) + 1))
            return _interpolate_in_epsilon(nodes, _batch_table(q, nodes, rounds, delta, fast), eps)
        return _batch_table(q, unique, rounds, delta, fast)[:, inverse]
    table = np.full((len(q), len(eps)), np.inf)
    for g, e in enumerate(eps):
        phases = list(spent[g]) if has_spent and spent is not None else []
        for i, rate in enumerate(q):
            try:
                table[i, g] = accounting.noise_multiplier(
                    float(rate), rounds, float(e), delta, fast, spent=phases
                ).noise_multiplier
            except InfeasibleError:
                break  # sigma grows with q: every larger rate is infeasible too
    return table


def _batch_table(q: np.ndarray, eps: np.ndarray, rounds: int, delta: float, accountant: AccountantName) -> np.ndarray:
    """sigma[i, j] at (q_i, eps_j) from one vectorised calibration; inf where infeasible.

    The same question gets the same (read-only) table back without calibrating again: the
    methods of a ``compare``, a sweep and a service asked for the same scenario twice all
    tabulate the same budgets on the same rate grid. The key is the exact bytes of both
    grids, so an answer is only ever reused for the identical question.
    """
    q = np.ascontiguousarray(q, dtype=float)
    eps = np.ascontiguousarray(eps, dtype=float)
    return _cached_table(q.tobytes(), eps.tobytes(), rounds, delta, accountant)


@functools.lru_cache(maxsize=64)
def _cached_table(q_bytes: bytes, eps_bytes: bytes, rounds: int, delta: float, accountant: AccountantName) -> np.ndarray:
    table = _calibrated_table(np.frombuffer(q_bytes), np.frombuffer(eps_bytes), rounds, delta, accountant)
    table.setflags(write=False)  # shared between callers
    return table


def _calibrated_table(
    q: np.ndarray, eps: np.ndarray, rounds: int, delta: float, accountant: AccountantName
) -> np.ndarray:
    qq, ee = np.meshgrid(q, eps, indexing="ij")
    table = accounting.noise_multipliers_batch(qq.ravel(), rounds, ee.ravel(), delta, accountant)
    if table is None:
        raise ValueError(f"accountant {accountant} has no batch calibration to tabulate with")
    table = np.asarray(table, dtype=float).reshape(qq.shape)
    return np.where(np.isfinite(table) & (table > 0), table, np.inf)


def _interpolate_in_epsilon(nodes: np.ndarray, table: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Monotone cubic interpolation of log sigma in log eps, per rate; inf next to infeasible nodes."""
    log_table = np.log(table)
    infeasible = ~np.isfinite(log_table)
    ceiling = np.log(SIGMA_CAP) + 1.0
    # start-up time: scipy.interpolate is imported where a table is interpolated, as in
    # planner/curves.py build_curves
    from scipy.interpolate import PchipInterpolator

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
    accountant: AccountantName,
    spent: Sequence[Sequence[PrivacyEvent]],
    raw_closed_form: bool,
    labels: Sequence[str],
) -> list[GroupCalibration]:
    """Exact sigma for each (rate, epsilon, spent history) under the plan's accountant.

    docs/planning.md §8. Without history, an accountant with a batch calibration (rdp)
    answers every group in one vectorised call (sound under it); everything else is
    ``accounting.noise_multiplier`` per group. A group with history under an accountant
    that cannot compose one (closed_form) is calibrated by its ``verified_by`` (rdp), with
    a warning. An infeasible group raises :class:`InfeasibleError` naming it.
    """
    q = np.asarray(rates, dtype=float)
    eps = np.asarray(epsilons, dtype=float)
    if len(q) == 0:
        return []
    chosen = get_accountant(accountant)
    if not any(len(p) > 0 for p in spent):
        try:
            batch = accounting.noise_multipliers_batch(q, rounds, eps, delta, chosen.name)
        except InfeasibleError:
            batch = None
        if batch is not None and np.all(np.isfinite(batch) & (batch > 0)):
            return [GroupCalibration(float(s)) for s in batch]

    def infeasible(g: int, exc: InfeasibleError) -> InfeasibleError:
        return InfeasibleError(
            f"{labels[g]} needs a noise multiplier above the calibration cap at sampling rate "
            f"{q[g]:.4g} over {rounds} rounds ({exc.message})"
        )

    if chosen.calibrates_in_lockstep and chosen.composes:
        # every group in one call: the searches run in lockstep, each answer the one
        # noise_multiplier gives alone, bit for bit (docs/accounting.md §13.7)
        answers = accounting.noise_multipliers(
            [(float(q[g]), rounds, float(eps[g]), delta) for g in range(len(q))], chosen.name,
            spent=[list(s) for s in spent],
        )
        for g, answer in enumerate(answers):
            if isinstance(answer, InfeasibleError):
                raise infeasible(g, answer) from None
        return [_group_calibration(answer, chosen.verified_by, None) for answer in answers if not isinstance(answer, InfeasibleError)]

    def one(g: int) -> GroupCalibration:
        used, warning = chosen, None
        if spent[g] and not chosen.composes:
            used = get_accountant(chosen.verified_by)
            warning = f"{chosen.name} cannot compose a spent history; calibrated with {used.name}"
        try:
            cal = accounting.noise_multiplier(
                float(q[g]), rounds, float(eps[g]), delta, used.name, spent=list(spent[g]),
                raw=raw_closed_form and used.raw_formula,
            )
        except InfeasibleError as exc:
            raise infeasible(g, exc) from None
        return _group_calibration(cal, chosen.verified_by, warning)

    return fenced_map(one, list(range(len(q))), chosen.runs_in_child)


def _group_calibration(cal: accounting.Calibration, verifier: AccountantName, warning: str | None) -> GroupCalibration:
    """A group's calibration from the accountant's answer (``warning``: why another accountant answered)."""
    return GroupCalibration(
        float(cal.noise_multiplier),
        sound=bool(cal.sound),
        replaced=bool(cal.replaced),
        fallback=bool(cal.fallback),
        reason=warning or cal.reason,
        warning=warning,
        epsilon=reusable_epsilon(cal, verifier),
    )


def history_key(events: Sequence[PrivacyEvent]) -> str:
    """A key equal for two histories exactly when their events are (kind and every field, bit
    for bit): what lets one composition answer every group with that history."""
    return repr([event.model_dump() for event in events])


def reusable_epsilon(cal: accounting.Calibration, verifier: AccountantName) -> float | None:
    """The calibration's achieved epsilon where it is the verifier's answer for the same history
    bit for bit (docs/planning.md §8): computed by the verifier itself, not by a fallback, and
    the verifier is one whose single answers equal its batched ones (pld); else None."""
    if verifier not in SAME_ALONE_AS_BATCHED or cal.accountant_used != verifier or cal.fallback:
        return None
    return float(cal.epsilon)


T = TypeVar("T")
R = TypeVar("R")


def fenced_map(fn: Callable[[T], R], items: list[T], parallel: bool) -> list[R]:
    """``[fn(x) for x in items]``, overlapped on the machine's cores when ``parallel``.

    For an accountant whose work ``runs_in_child`` (prv) only: each call runs its
    computation in a fenced child process (``accounting.prv.run_isolated``) and this thread
    merely waits on it, so threads overlap the children's CPU time without contending for
    the GIL. Three groups' calibrations took 5 s one after the other (issue 15: a prv
    compare within 5 s).
    """
    workers = min(len(items), os.cpu_count() or 1)
    if not parallel or workers < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gdpfed-prv") as pool:
        return list(pool.map(fn, items))


def verify_group(events: Sequence[PrivacyEvent], delta: float, accountant: AccountantName) -> EpsilonReport:
    """epsilon of a group's whole history as the plan's accountant verifies it (never optimistic).

    Its ``verified_by``: closed_form plans are verified with rdp (the value accounting
    reports for closed_form too, docs/accounting.md §6.3, and one that composes a history);
    prv plans with the PRV upper bound.
    """
    return accounting.epsilon_of_events(list(events), delta, get_accountant(accountant).verified_by)


def verify_groups(
    histories: Sequence[Sequence[PrivacyEvent]], delta: float, accountants: Sequence[AccountantName]
) -> list[EpsilonReport]:
    """:func:`verify_group` for each (history, accountant); those that run in a child (prv)
    overlapped (:func:`fenced_map`)."""
    jobs = list(zip(histories, accountants))
    verifiers = {get_accountant(a).verified_by for a in accountants}
    if len(verifiers) == 1 and next(iter(verifiers)) in SAME_ALONE_AS_BATCHED:
        # each distinct history once (groups of one pool at one rate share it), in one batch
        keys = [history_key(h) for h in histories]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}
        answers = accounting.epsilons_of_histories([list(histories[i]) for i in first.values()], delta, next(iter(verifiers)))
        by_key = dict(zip(first, answers, strict=True))
        return [by_key[key] for key in keys]
    if len(verifiers) == 1 and not get_accountant(next(iter(verifiers))).runs_in_child:
        # one verifier for every group: one call, vectorised by rdp (bit for bit the same)
        return accounting.epsilons_of_histories([list(h) for h in histories], delta, next(iter(verifiers)))
    parallel = any(get_accountant(get_accountant(a).verified_by).runs_in_child for a in accountants)
    return fenced_map(lambda job: verify_group(job[0], delta, job[1]), jobs, parallel)


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
    uppers, failure = PrvAccountant().upper_bounds(histories, delta, PRV_REPORT_TIME_LIMIT_S)
    if failure is not None:
        return uppers, f"report_prv: {failure}; epsilon_spent_prv_upper left null"
    missing = sum(value is None for value in uppers)
    return uppers, (f"report_prv: prv could not bound {missing} group(s); left null" if missing else None)


def max_sampling_rate(
    noise_multiplier: float,
    rounds: int,
    epsilon: float,
    delta: float,
    accountant: AccountantName,
    spent: Sequence[PrivacyEvent],
) -> float:
    """The largest q meeting epsilon at this sigma (``accounting.sampling_rate``)."""
    return float(accounting.sampling_rate(noise_multiplier, rounds, epsilon, delta, accountant, spent=list(spent)).sampling_rate)
