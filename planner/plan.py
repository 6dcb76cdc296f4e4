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
# The order of the comparison table: baselines first, then ours.
COMPARE_ORDER: tuple[str, ...] = (
    "nonprivate",
    "dp_fedavg",
    "gdpfed",
    "gdpfed_minus",
    "gdpfed_plus",
    "idp_sample",
    "idp_scale",
    "pooled_plus",
)


def make_plan(scenario: Scenario, method: RequestedMethod = "gdpfed_plus") -> Plan:
    """Plan ``scenario`` with ``method`` (docs/planning.md §2, §8).

    ``compare`` returns the gdpfed_plus plan with ``comparison`` filled: one row per
    method, infeasible methods as rows with ``feasible: false`` and the error.
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
    rows: list[ComparisonRow] = []
    main: Plan | None = None
    main_error: GdpfedError | None = None
    for method in COMPARE_ORDER:
        try:
            plan = plan_problem(problem, method, history)
        except GdpfedError as exc:
            rows.append(ComparisonRow(method=method, feasible=False, error=exc.message))  # type: ignore[arg-type]
            if method == "gdpfed_plus":
                main_error = exc
            continue
        if method == "gdpfed_plus":
            main = plan
        rows.append(comparison_row(plan))
    if main is None:
        assert main_error is not None
        raise main_error
    return main.model_copy(update={"comparison": rows})


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
