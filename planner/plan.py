"""``make_plan``: a scenario in, a verified plan out; ``compare``: every method side by side.

docs/planning.md §2 (methods), §8 (what a plan guarantees) and §10 (the comparison table).
"""

from __future__ import annotations

from dataclasses import replace

from accounting.accountants import get_accountant
from accounting.errors import GdpfedError, InfeasibleError, InvalidInputError
from planner import learnability
from planner import ledger as plan_ledger
from planner.finalize import History, PendingFigures, finalize, finalize_without_figures
from planner.methods import METHODS, Design, design, method_problem
from planner.problem import Problem, build_problem
from planner.schema import (
    ClientsForNoiseToSignal,
    ComparisonPool,
    ComparisonRow,
    Plan,
    Recommendation,
    RequestedMethod,
    Scenario,
    SecaggMechanism,
)

PLAN_METHODS: tuple[str, ...] = tuple(METHODS)
# The order of the comparison table: baselines first, then ours (the registry's order);
# study-only baselines (``PlanningMethod.in_comparison`` false) are left out.
COMPARE_ORDER: tuple[str, ...] = tuple(name for name in PLAN_METHODS if METHODS[name].in_comparison)


def make_plan(
    scenario: Scenario, method: RequestedMethod = "gdpfed_plus", *, clients_needed: bool = True, figures: bool = True
) -> Plan:
    """Plan ``scenario`` with ``method`` (docs/planning.md §2, §8).

    With ``clients_needed`` (the default) ``predicted.clients_needed`` says how large the
    federation must be for the noise-to-signal ratio to reach 1 and 0.1 (docs/planning.md
    §13), derived from this plan's design at scaled populations (a few secure-aggregation
    thresholds, no re-planning); sweeps, experiment cells and the service turn it off.
    Without ``figures`` a single method's plan leaves ``epsilon_rdp`` / ``epsilon_tight``
    null (an rdp plan's tight figure is a PLD composition per group): for callers that read
    only the design, as sweeps do (docs/planning.md §11); a plan that is shown, stored or
    trained keeps them.

    ``compare`` returns the recommended plan (the feasible private method with the
    smallest objective, ``recommendation`` says why) with ``comparison`` filled: one row
    per method, infeasible methods as rows with ``feasible: false`` and the error.
    Raises InvalidInputError for an unknown method and InfeasibleError (naming the cause
    and the group) when the scenario cannot be planned.
    """
    if not isinstance(scenario, Scenario):
        scenario = Scenario.model_validate(scenario)
    if method == "compare":
        plan = compare(scenario)
    else:
        check_method(method, allow_compare=True)
        plan = plan_problem(build_problem(scenario), method, figures=figures)
    return with_clients_needed(plan) if clients_needed else plan


def with_clients_needed(plan: Plan) -> Plan:
    """``plan`` with ``predicted.clients_needed`` derived from its design at scaled populations
    (docs/planning.md §13; ``learnability.derived_clients_needed``, no re-planning).

    Only for a fresh plan (no spent history) with a positive noise-to-signal ratio.
    """
    if not _wants_clients_needed(plan):
        return plan
    needed = learnability.derived_clients_needed(plan)
    return plan.model_copy(update={"predicted": plan.predicted.model_copy(update={"clients_needed": needed})})


def _wants_clients_needed(plan: Plan) -> bool:
    ratio = plan.predicted.noise_to_signal
    return not (ratio is None or ratio <= 0 or plan.start_round != 0 or any(g.spent_phase_count for g in plan.groups))


def replanned_clients_needed(plan: Plan) -> list[ClientsForNoiseToSignal]:
    """The reference for ``clients_needed``: the earlier search that re-plans the scaled
    scenario with the plan's method at every trial size (``learnability.clients_needed``,
    about nine plans; docs/planning.md §13). ``bench planner`` times it beside the
    derivation and the tests compare the two; plans no longer call it.
    """
    if not _wants_clients_needed(plan):
        return []
    # prv calibrations cost about a second each: the search re-plans with the accountant that
    # tabulates for it (rdp), whose multipliers are slightly larger, so the sizes it finds
    # are slightly larger too
    searched_with = get_accountant(plan.accountant).tabulated_by
    by_rdp = searched_with != plan.accountant

    def ratio_at(scaled: Scenario) -> float:
        if by_rdp:
            scaled = scaled.model_copy(update={"accountant": searched_with})
        # the ratio only: neither the figures nor the discrete blocks (planner.finalize.PendingFigures)
        value = plan_problem(build_problem(scaled), plan.method, figures=False).predicted.noise_to_signal
        return float("inf") if value is None else value

    scenario = plan.scenario
    ratio = plan.predicted.noise_to_signal
    assert ratio is not None
    needed = learnability.clients_needed(scenario, ratio_at(scenario) if by_rdp else ratio, ratio_at)
    if by_rdp:
        needed = [
            n.model_copy(update={"note": "; ".join(filter(None, [n.note, f"searched with {searched_with} multipliers (an upper estimate for {plan.accountant})"]))})
            for n in needed
        ]
    return needed


def check_method(method: str, *, allow_compare: bool = False) -> None:
    """Refuse a name that is not in the method registry (``InvalidInputError("method")``)."""
    if method in PLAN_METHODS or (allow_compare and method == "compare"):
        return
    known = (*PLAN_METHODS, "compare") if allow_compare else PLAN_METHODS
    raise InvalidInputError("method", f"must be one of {', '.join(known)}, got {method!r}")


def plan_problem(problem: Problem, method: str, history: History | None = None, *, figures: bool = True) -> Plan:
    """Design and finalise one method on a prepared problem (the method's own: ``method_problem``);
    without ``figures``, ``epsilon_rdp`` / ``epsilon_tight`` stay null (``make_plan``)."""
    problem = method_problem(problem, method)
    if not figures:
        return finalize_without_figures(problem, design(problem, method), history)[0]
    return finalize(problem, design(problem, method), history)


def compare(scenario: Scenario) -> Plan:
    """The recommended plan with one comparison row per method (docs/planning.md §10)."""
    problem = build_problem(scenario)
    return compare_problem(problem, None)


def compare_problem(problem: Problem, history: History | None = None) -> Plan:
    """Every method on one problem; the plan returned is the recommended one (docs/planning.md §10).

    The recommendation is the feasible, sound, private method with the smallest objective J
    (ties: the first in the schema's method order); ``nonprivate`` is a baseline row only.
    A prv scenario is ranked on rdp calibrations (an upper bound with nearly the same
    shape; the designs are the same, since prv plans are optimised on rdp tables anyway)
    and only the recommended design is calibrated and verified with prv, once per group:
    every method calibrated with prv took about 20 s for three groups. The ranked plans get
    their ``epsilon_rdp`` / ``epsilon_tight`` only if one of them is returned (a row states
    neither; an rdp plan's tight figure is a PLD composition per group).
    """
    ranking = _ranking_problem(problem)
    designs: dict[str, Design] = {}
    plans: dict[str, Plan] = {}
    figures: dict[str, PendingFigures] = {}
    errors: dict[str, GdpfedError] = {}
    for method in COMPARE_ORDER:
        try:
            designs[method] = design(ranking, method)
            plans[method], figures[method] = finalize_without_figures(ranking, designs[method], history)
        except GdpfedError as exc:
            errors[method] = exc
    candidates = sorted(
        (m for m in plans if m != "nonprivate" and all(g.sound for g in plans[m].groups)),
        key=lambda m: (plans[m].predicted.objective, COMPARE_ORDER.index(m)),
    )
    main: Plan | None = None
    for method in candidates:
        if ranking is problem:
            main = figures[method].apply(plans[method])
            break
        try:
            main = finalize(problem, designs[method], history)
            break
        except GdpfedError as exc:  # the exact accountant refused what rdp allowed: next candidate
            errors[method] = exc
    if main is None:
        raise errors.get("gdpfed_plus") or next(iter(errors.values()), None) or InfeasibleError(
            "no private method is feasible for this scenario"
        )
    # the other rows' figures are their designs' Gaussian verification; the recommended row's
    # the plan's own, of the mechanism it runs (docs/planning.md §10)
    rows = {m: comparison_row(p) for m, p in plans.items()}
    recommended = comparison_row(main, plan_ledger.stated_mechanism(main))
    rows[main.method] = recommended.model_copy(update={"recommended": True})
    rows.update({
        m: ComparisonRow(method=m, feasible=False, private=m != "nonprivate", error=exc.message)
        for m, exc in errors.items() if m not in plans
    })
    recommendation = Recommendation(
        method=main.method,
        objective=main.predicted.objective,
        reason=_reason(
            main, plans[main.method], [plans[m] for m in candidates if m != main.method], errors,
            recalibrated=ranking is not problem,
        ),
    )
    warnings = list(main.warnings)
    if ranking is not problem:
        warnings.append(
            f"compare ranks the methods on {ranking.scenario.accountant} calibrations (rows with accountant "
            f"{ranking.scenario.accountant}); the recommended "
            f"plan ({main.method}) is calibrated and verified with {problem.scenario.accountant}"
        )
    ordered = sorted(rows.values(), key=lambda r: _row_order(r, rows[main.method]))
    return main.model_copy(update={"comparison": ordered, "warnings": warnings, "recommendation": recommendation})


def _ranking_problem(problem: Problem) -> Problem:
    """The problem the methods are ranked on: under the accountant that tabulates for the
    plan's (``tabulated_by``), so prv plans are ranked on rdp (docs/planning.md §10), without
    the spent epsilons composed under the plan's accountant (``Problem.spent_epsilons``)."""
    ranking = get_accountant(problem.scenario.accountant).tabulated_by
    if ranking == problem.scenario.accountant:
        return problem
    # the spent histories' epsilons a re-plan composed are the plan accountant's verified_by
    # figures (Problem.spent_epsilons): not handed to a problem of another accountant, whose
    # noise table composes its own (docs/planning.md §9 point 4)
    return replace(problem, scenario=problem.scenario.model_copy(update={"accountant": ranking}), spent_epsilons=())


def _row_order(row: ComparisonRow, recommended: ComparisonRow) -> tuple[int, float, int]:
    """Recommended first, then feasible private methods by J, infeasible ones, nonprivate last."""
    if row is recommended:
        rank = 0
    elif not row.private:
        rank = 3
    else:
        rank = 1 if row.feasible else 2
    return rank, row.objective if row.objective is not None else float("inf"), COMPARE_ORDER.index(row.method)


def _reason(
    main: Plan, ranked: Plan, others: list[Plan], errors: dict[str, GdpfedError], *, recalibrated: bool
) -> str:
    """Why ``main`` is recommended, in numbers a user can check against the rows.

    ``ranked`` is the recommended method's plan as ranked (rdp for a prv scenario), so every
    ratio compares objectives computed with the same accountant; ``recalibrated``: ``main``
    is that design calibrated again with the plan's own accountant.
    """
    best = ranked.predicted.objective
    parts = [f"{main.method} has the lowest objective J = {best:.4g} of the {len(others) + 1} feasible "
             f"private methods ({ranked.accountant})"]

    def versus(plan: Plan) -> str:
        other = plan.predicted.objective
        if other <= best * (1 + 1e-9):
            return f"{plan.method} J = {other:.4g} (tied; the earlier method in the schema's order is recommended)"
        ratio = other / best if best > 0 else float("inf")
        return f"{plan.method} J = {other:.4g} ({ratio:.3g}x)"

    if others:
        parts.append("next: " + versus(others[0]))
        plus = next((p for p in others if p.method == "gdpfed_plus"), None)
        if plus is not None and plus is not others[0]:
            parts.append(versus(plus))
    infeasible = sorted(m for m in errors if m != "nonprivate")
    if infeasible:
        parts.append(f"infeasible: {', '.join(infeasible)}")
    parts.append("nonprivate (no differential privacy) is a baseline, never recommended")
    if recalibrated:
        parts.append(f"calibrated and verified with {main.accountant}, its J is {main.predicted.objective:.4g}")
    return "; ".join(parts)


def comparison_row(plan: Plan, mechanism: SecaggMechanism = "gaussian_continuous") -> ComparisonRow:
    """One self-contained row of the paper's noise table from a plan (docs/planning.md §10);
    ``mechanism``: the one its ``epsilon_spent`` figures are of (none for nonprivate: no figures)."""
    return ComparisonRow(
        mechanism=mechanism if plan.method != "nonprivate" else None,
        method=plan.method,
        feasible=True,
        private=plan.method != "nonprivate",
        accountant=plan.accountant,
        pools=[ComparisonPool(id=p.id, groups=list(p.groups), noise_multiplier=p.noise_multiplier,
                              keep_ratio=p.keep_ratio) for p in plan.pools],
        noise_multipliers={p.id: p.noise_multiplier for p in plan.pools},
        sampling_rates={g.id: g.sampling_rate for g in plan.groups},
        expected_clients={g.id: g.expected_clients for g in plan.groups},
        keep_ratios={p.id: p.keep_ratio for p in plan.pools},
        epsilon_spent={g.id: g.epsilon_spent for g in plan.groups},
        noise_energy=plan.predicted.noise_energy,
        sparsification_error=plan.predicted.sparsification_error,
        objective=plan.predicted.objective,
        warnings=list(plan.warnings),
        noise_to_signal=plan.predicted.noise_to_signal,
    )
