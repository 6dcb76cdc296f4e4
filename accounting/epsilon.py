"""Privacy spent: epsilon of one phase or of a history of phases (docs/accounting.md §3-§6)."""

from __future__ import annotations

from collections.abc import Sequence

from accounting import closed_form, prv, rdp
from accounting.errors import InvalidInputError
from accounting.mechanism import Phase, validate_phases
from accounting.results import ACCOUNTANTS, Accountant, EpsilonReport
from accounting.validation import (
    validate_accountant,
    validate_count,
    validate_delta,
    validate_positive,
    validate_sampling_rate,
)


def epsilon(
    sampling_rate: float,
    noise_multiplier: float,
    rounds: int,
    delta: float,
    accountant: Accountant = "rdp",
    *,
    time_limit_s: float | None = None,
) -> EpsilonReport:
    """Epsilon at ``delta`` of ``rounds`` rounds of the sampled Gaussian (docs/accounting.md §1-§6).

    ``time_limit_s`` bounds a prv computation (default ``prv.EPSILON_TIME_LIMIT_S``).
    """
    phase = Phase.model_construct(
        sampling_rate=validate_sampling_rate(sampling_rate),
        noise_multiplier=validate_positive("noise_multiplier", noise_multiplier),
        steps=validate_count("rounds", rounds),
    )
    return _report([phase], validate_delta(delta), validate_accountant(accountant, ACCOUNTANTS), time_limit_s)


def epsilon_of_phases(
    phases: Sequence[Phase],
    delta: float,
    accountant: Accountant = "rdp",
    *,
    time_limit_s: float | None = None,
) -> EpsilonReport:
    """Epsilon of phases composed in order: RDP curves add (docs/accounting.md §4); PRV composes them
    heterogeneously (docs/accounting.md §5). closed_form only describes a single phase (docs/accounting.md §6)."""
    checked = validate_phases(phases, "phases")
    if not checked:
        raise InvalidInputError("phases", "must contain at least one phase")
    name = validate_accountant(accountant, ACCOUNTANTS)
    if name == "closed_form" and len(checked) > 1:
        raise InvalidInputError("accountant", "closed_form describes one phase; use rdp or prv for a history")
    return _report(checked, validate_delta(delta), name, time_limit_s)


def rdp_report(phases: Sequence[Phase], delta: float, accountant: str = "rdp") -> EpsilonReport:
    """The rdp answer for validated phases (full order grid, docs/accounting.md §3)."""
    grid = rdp.order_grid()
    curve = rdp.rdp_of_phases([_as_tuple(p) for p in phases], grid)
    value, order = rdp.epsilon_from_rdp(grid.orders, curve, delta)
    return EpsilonReport(
        epsilon=value, delta=delta, accountant=accountant, accountant_used="rdp", optimal_order=order
    )


def _report(phases: list[Phase], delta: float, accountant: str, time_limit_s: float | None) -> EpsilonReport:
    base = rdp_report(phases, delta, accountant)
    if accountant == "rdp":
        return base
    if accountant == "closed_form":
        return _closed_form_report(phases[0], base)
    limit = prv.EPSILON_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    tuples = [_as_tuple(p) for p in phases]
    try:
        lower, estimate, upper = prv.run_isolated(
            prv.bounds_in_process, (tuples, delta, prv.eps_error_for(base.epsilon)), limit
        )
    except prv.PrvFailure as failure:
        return base.model_copy(update={"fallback": True, "reason": f"{failure.reason}; fell back to rdp"})
    return EpsilonReport(
        epsilon=upper,
        delta=delta,
        accountant="prv",
        accountant_used="prv",
        estimate=estimate,
        lower=lower,
        upper=upper,
    )


def _closed_form_report(phase: Phase, base: EpsilonReport) -> EpsilonReport:
    formula = closed_form.closed_form_epsilon(phase.sampling_rate, phase.noise_multiplier, phase.steps, base.delta)
    verdict = (
        "below the rdp bound, so not claimable here (docs/accounting.md §6.2)"
        if formula < base.epsilon
        else "above the rdp bound (the formula over-noises here)"
    )
    return base.model_copy(
        update={
            "estimate": formula,
            "reason": f"closed form (the paper's bound) gives epsilon={formula:.6g}, {verdict}; "
            f"epsilon is the rdp value",
        }
    )


def _as_tuple(phase: Phase) -> tuple[float, float, int]:
    return (phase.sampling_rate, phase.noise_multiplier, phase.steps)
