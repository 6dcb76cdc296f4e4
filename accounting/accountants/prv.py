"""The ``prv`` accountant: privacy random variables, fenced, with rdp behind it (docs/accounting.md §5, §7.2).

The tightest accountant: PRV upper bounds of the Poisson-subsampled Gaussian, composed
heterogeneously. Every PRV computation runs in a child process with a deadline and a
memory cap (:func:`accounting.prv.run_isolated`); when it fails, the rdp answer to the
same question is returned with ``fallback: true`` and the reason (§5.3), so a prv
question never crashes or hangs its caller and never gets an optimistic answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from accounting import prv as fenced
from accounting.accountants.base import (
    RATE_MIN,
    ROUNDS_MAX,
    SIGMA_MAX,
    SIGMA_MIN,
    XTOL,
    Accountant,
    Answered,
    noise_result,
    phase_tuples,
    rate_result,
    rounds_result,
)
from accounting.accountants.rdp import RdpAccountant, sigma_guess
from accounting.choices import AccountantName
from accounting.errors import InfeasibleError
from accounting.events import ApproximateDpEvent, PoissonSampledGaussian
from accounting.results import Calibration, EpsilonReport

PhaseTuples = list[tuple[float, float, int]]

_RDP = RdpAccountant()


class PrvAccountant(Accountant):
    name: ClassVar[AccountantName] = "prv"
    verified_by: ClassVar[AccountantName] = "prv"
    per_round: ClassVar[AccountantName] = _RDP.name
    tabulated_by: ClassVar[AccountantName] = _RDP.name
    fallback: ClassVar[AccountantName | None] = _RDP.name
    runs_in_child: ClassVar[bool] = True
    supports: ClassVar[tuple[type[ApproximateDpEvent], ...]] = (PoissonSampledGaussian,)

    def epsilon(
        self, events: list[ApproximateDpEvent], delta: float, *, time_limit_s: float | None = None
    ) -> EpsilonReport:
        """The PRV upper bound (with lower and estimate), or rdp's answer marked ``fallback`` (§5)."""
        base = _RDP.epsilon(events, delta)
        limit = fenced.EPSILON_TIME_LIMIT_S if time_limit_s is None else time_limit_s
        try:
            lower, estimate, upper = fenced.run_isolated(
                fenced.bounds_in_process, (phase_tuples(events), delta, fenced.eps_error_for(base.epsilon)), limit
            )
        except fenced.PrvFailure as failure:
            return base.model_copy(
                update={"accountant": self.name, "fallback": True, "reason": f"{failure.reason}; fell back to rdp"}
            )
        return EpsilonReport(
            epsilon=upper,
            delta=delta,
            accountant=self.name,
            accountant_used=self.name,
            estimate=estimate,
            lower=lower,
            upper=upper,
        )

    def upper_bounds(
        self, histories: Sequence[Sequence[PoissonSampledGaussian]], delta: float, time_limit_s: float
    ) -> tuple[list[float | None], str | None]:
        """The PRV upper bound of each history, all in one fenced child with one deadline (§5.3).

        For reports only (a plan's ``report_prv``): a history PRV cannot bound gets None;
        when the whole job fails (the deadline passed), every history gets None and the
        reason is returned as well.
        """
        distinct: dict[tuple[tuple[float, float, int], ...], int] = {}
        for history in histories:
            distinct.setdefault(tuple(phase_tuples(history)), len(distinct))
        jobs = []
        for key in distinct:
            events = [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=z, steps=t) for q, z, t in key]
            jobs.append((list(key), fenced.eps_error_for(_RDP.epsilon(list(events), delta).epsilon)))
        try:
            uppers = fenced.run_isolated(_uppers_job, (jobs, delta), time_limit_s)
        except fenced.PrvFailure as failure:
            return [None] * len(histories), failure.reason
        return [uppers[distinct[tuple(phase_tuples(history))]] for history in histories], None

    def noise_multiplier(
        self,
        sampling_rate: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        raw: bool = False,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """docs/accounting.md §7.2: from the rdp sigma, a bracket and refinement on the PRV upper bound."""
        q, t = sampling_rate, rounds
        fallback, rdp_error = _rdp_answer(_RDP.noise_multiplier, q, t, target, delta, spent)
        # PRV is tighter, so without an rdp answer it may still find one: start from the guess
        start = fallback.noise_multiplier if fallback else float(sigma_guess(np.array([q]), t, np.array([target]), delta)[0])
        args = (q, t, target, delta, phase_tuples(spent), start)
        outcome = self._fenced(_noise_job, args, time_limit_s, fallback, rdp_error)
        if isinstance(outcome, Calibration):
            return outcome
        sigma, bounds, spent_upper, at_floor = outcome
        return noise_result(Answered(q, sigma, t, delta, target, bounds[2], self.name, spent_upper), at_floor=at_floor)

    def sampling_rate(
        self,
        noise_multiplier: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """docs/accounting.md §7.3 on the PRV upper bound, from the rdp answer."""
        sigma, t = noise_multiplier, rounds
        fallback, rdp_error = _rdp_answer(_RDP.sampling_rate, sigma, t, target, delta, spent)
        start = fallback.sampling_rate if fallback else RATE_MIN
        args = (sigma, t, target, delta, phase_tuples(spent), start)
        outcome = self._fenced(_rate_job, args, time_limit_s, fallback, rdp_error)
        if isinstance(outcome, Calibration):
            return outcome
        rate, bounds, spent_upper = outcome
        return rate_result(Answered(rate, sigma, t, delta, target, bounds[2], self.name, spent_upper))

    def rounds(
        self,
        sampling_rate: float,
        noise_multiplier: float,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """docs/accounting.md §7.4: one discretisation serves every T up to a doubling limit."""
        q, sigma = sampling_rate, noise_multiplier
        fallback, rdp_error = _rdp_answer(_RDP.rounds, q, sigma, target, delta, spent)
        start = fallback.rounds if fallback else 1
        args = (q, sigma, target, delta, phase_tuples(spent), start)
        outcome = self._fenced(_rounds_job, args, time_limit_s, fallback, rdp_error)
        if isinstance(outcome, Calibration):
            return outcome
        count, bounds, spent_upper = outcome
        achieved = bounds[2] if bounds is not None else (spent_upper if spent_upper is not None else 0.0)
        return rounds_result(count, q, sigma, delta, target, achieved, self.name, self.name, spent_upper)

    def _fenced(
        self,
        job: Callable[..., Any],
        args: tuple[Any, ...],
        time_limit_s: float | None,
        fallback: Calibration | None,
        rdp_error: InfeasibleError | None,
    ) -> Any:
        """Run a PRV calibration job in its fenced child process (docs/accounting.md §5.3).

        Returns the job's result, or, when PRV fails, times out or returns bad numbers, rdp's
        answer for the same question marked ``fallback`` with the reason. With no rdp answer
        either, the question is infeasible under both accountants.
        """
        limit = fenced.CALIBRATION_TIME_LIMIT_S if time_limit_s is None else time_limit_s
        try:
            return fenced.run_isolated(job, args, limit)
        except fenced.PrvFailure as failure:
            if fallback is None:
                raise InfeasibleError(f"{rdp_error.message if rdp_error else ''} (prv: {failure.reason})") from None
            return fallback.model_copy(
                update={"accountant": self.name, "fallback": True, "reason": f"{failure.reason}; fell back to rdp"}
            )


def _rdp_answer(
    question: Callable[..., Calibration], *args: Any
) -> tuple[Calibration | None, InfeasibleError | None]:
    """rdp's answer to the same question (the fallback), or the reason it has none."""
    try:
        return question(*args), None
    except InfeasibleError as exc:
        return None, exc


# --------------------------------------------------------------------------- jobs run in the PRV child


def _noise_job(
    q: float, t: int, target: float, delta: float, spent: PhaseTuples, start: float
) -> tuple[float, tuple[float, float, float], float | None, bool]:
    """Spent check, then the sigma search (docs/accounting.md §7.2)."""
    spent_upper = _spent_upper(spent, delta, target)
    sigma, bounds, at_floor = fenced.calibrate_sigma_in_process(
        q, t, target, delta, spent, start, SIGMA_MIN, SIGMA_MAX, XTOL
    )
    return sigma, bounds, spent_upper, at_floor


def _rate_job(
    sigma: float, t: int, target: float, delta: float, spent: PhaseTuples, start: float
) -> tuple[float, tuple[float, float, float], float | None]:
    spent_upper = _spent_upper(spent, delta, target)
    rate, bounds = fenced.sampling_rate_in_process(sigma, t, target, delta, spent, start, RATE_MIN, XTOL)
    return rate, bounds, spent_upper


def _rounds_job(
    q: float, sigma: float, target: float, delta: float, spent: PhaseTuples, start: int
) -> tuple[int, tuple[float, float, float] | None, float | None]:
    spent_upper = _spent_upper(spent, delta, target)
    count, bounds = fenced.rounds_in_process(q, sigma, target, delta, spent, max(start, 1), ROUNDS_MAX)
    return count, bounds, spent_upper


def _uppers_job(jobs: list[tuple[PhaseTuples, float]], delta: float) -> list[float | None]:
    uppers: list[float | None] = []
    for tuples, eps_error in jobs:
        try:
            uppers.append(float(fenced.bounds_in_process(tuples, delta, eps_error)[2]))
        except (fenced.PrvFailure, ArithmeticError, ValueError, MemoryError):
            uppers.append(None)
    return uppers


def _spent_upper(spent: PhaseTuples, delta: float, target: float) -> float | None:
    if not spent:
        return None
    upper = fenced.bounds_in_process(spent, delta, fenced.eps_error_for(target))[2]
    if upper > target:
        raise _SpentExceeds(upper)
    return upper


class _SpentExceeds(fenced.PrvFailure):
    def __init__(self, upper: float) -> None:
        super().__init__(f"prv: the spent events alone have epsilon {upper:.6g} above the target")
