"""``make_plan``: a scenario in, a verified plan out; ``compare``: every method side by side.

docs/planning.md §2 (methods), §8 (what a plan guarantees) and §10 (the comparison table).
"""

from __future__ import annotations

from typing import get_args

from accounting.errors import GdpfedError, InvalidInputError
from planner.finalize import History, finalize
from planner.methods import design
from planner.problem import Problem, build_problem
from planner.schema import ComparisonRow, Plan, PlanMethod, RequestedMethod, Scenario

PLAN_METHODS: tuple[str, ...] = get_args(PlanMethod)
# The order of the comparison table: baselines first, then ours (the schema's order).
COMPARE_ORDER: tuple[str, ...] = PLAN_METHODS


# compare's main plan when gdpfed_plus itself is infeasible (private methods only).
FALLBACK_ORDER: tuple[str, ...] = ("pooled_plus", "idp_sample", "gdpfed", "dp_fedavg", "idp_scale")


def make_plan(scenario: Scenario, method: RequestedMethod = "gdpfed_plus") -> Plan:
    """Plan ``scenario`` with ``method`` (docs/planning.md §2, §8).

    ``compare`` returns the gdpfed_plus plan with ``comparison`` filled: one row per
    method, infeasible methods as rows with ``feasible: false`` and the error (if
    gdpfed_plus itself is infeasible, the first feasible fallback, with a warning).
    Raises InvalidInputError for an unknown method and InfeasibleError (naming the cause
    and the group) when the scenario cannot be planned.
    """
    if not isinstance(scenario, Scenario):
        scenario = Scenario.model_validate(scenario)
    if method == "compare":
        return compare(scenario)
    if method not in PLAN_METHODS:
        raise InvalidInputError("method", f"must be one of {', '.join((*PLAN_METHODS, 'compare'))}, got {method!r}")
    problem = build_problem(scenario)
    return plan_problem(problem, method)


def plan_problem(problem: Problem, method: str, history: History | None = None) -> Plan:
    """Design and finalise one method on a prepared problem."""
    return finalize(problem, design(problem, method), history)


def compare(scenario: Scenario) -> Plan:
    """The gdpfed_plus plan with one comparison row per method (docs/planning.md §10)."""
    problem = build_problem(scenario)
    return compare_problem(problem)


def compare_problem(problem: Problem, history: History | None = None) -> Plan:
    """Every method on one problem; the main plan is gdpfed_plus, or, if it is infeasible,
    the first feasible of pooled_plus, idp_sample, gdpfed, dp_fedavg, idp_scale (with a warning)."""
    rows: list[ComparisonRow] = []
    plans: dict[str, Plan] = {}
    errors: dict[str, GdpfedError] = {}
    for method in COMPARE_ORDER:
        try:
            plans[method] = plan_problem(problem, method, history)
        except GdpfedError as exc:
            errors[method] = exc
            rows.append(ComparisonRow(method=method, feasible=False, error=exc.message))
            continue
        rows.append(comparison_row(plans[method]))
    for method in ("gdpfed_plus", *FALLBACK_ORDER):
        if method in plans:
            main = plans[method]
            break
    else:
        raise errors["gdpfed_plus"]
    warnings = list(main.warnings)
    if main.method != "gdpfed_plus":
        warnings.insert(
            0,
            f"gdpfed_plus is infeasible ({errors['gdpfed_plus'].message}); the plan shown is {main.method}",
        )
    return main.model_copy(update={"comparison": rows, "warnings": warnings})


def comparison_row(plan: Plan) -> ComparisonRow:
    """One row of the paper's noise table from a plan."""
    return ComparisonRow(
        method=plan.method,
        feasible=True,
        noise_multipliers={p.id: p.noise_multiplier for p in plan.pools},
        sampling_rates={g.id: g.sampling_rate for g in plan.groups},
        expected_clients={g.id: g.expected_clients for g in plan.groups},
        keep_ratios={p.id: p.keep_ratio for p in plan.pools},
        noise_energy=plan.predicted.noise_energy,
        sparsification_error=plan.predicted.sparsification_error,
        objective=plan.predicted.objective,
    )
