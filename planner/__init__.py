"""GDPFed+ planning: the plan schema (the contract with the service and the trainer),
the methods that choose pools, sampling rates, noise and sparsity, and re-planning.

Imports ``accounting``; never torch. The math is in docs/planning.md.
"""

from planner.loading import load_scenario
from planner.plan import make_plan
from planner.replan import replan
from planner.schema import (
    SCHEMA_VERSION,
    Changes,
    ComparisonRow,
    GroupPlan,
    GroupSpec,
    Plan,
    PlanDocument,
    PoolPlan,
    Predicted,
    Scenario,
)
from planner.sweep import SweepResult, sweep
from planner.units import load_plan, load_plan_document

__all__ = [
    "SCHEMA_VERSION",
    "Changes",
    "ComparisonRow",
    "GroupPlan",
    "GroupSpec",
    "Plan",
    "PlanDocument",
    "PoolPlan",
    "Predicted",
    "Scenario",
    "SweepResult",
    "load_plan",
    "load_plan_document",
    "load_scenario",
    "make_plan",
    "replan",
    "sweep",
]
