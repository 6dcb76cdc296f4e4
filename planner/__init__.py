"""GDPFed+ planning: the plan schema (the contract with the service and the trainer),
the methods that choose pools, sampling rates, noise and sparsity, and re-planning.

Imports ``accounting``; never torch. The math is in docs/planning.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from accounting.lazy import LazyPackage

if TYPE_CHECKING:
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

# Start-up time: the names below are imported from their modules when first read (PEP 562,
# accounting/lazy.py), not when the package is: importing any planner module ran this file,
# which imported the whole planner and scipy with it, so `gdpfed plan --help` paid a plan's
# imports (issue 26 §2; docs/architecture.md, "Command line").
_EXPORTS: dict[str, str] = {
    "load_scenario": "planner.loading",
    "make_plan": "planner.plan",
    "replan": "planner.replan",
    **dict.fromkeys(
        ("SCHEMA_VERSION", "Changes", "ComparisonRow", "GroupPlan", "GroupSpec", "Plan", "PlanDocument", "PoolPlan",
         "Predicted", "Scenario"),
        "planner.schema",
    ),
    **dict.fromkeys(("SweepResult", "sweep"), "planner.sweep"),
    **dict.fromkeys(("load_plan", "load_plan_document"), "planner.units"),
}

sys.modules[__name__].__class__ = LazyPackage

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
