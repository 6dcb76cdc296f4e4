"""A privacy unit registered only in tests: it shows that a unit other than ``client``
plugs into the registry without touching client-level code, and that every client-level
path refuses its plans by name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from pydantic import BaseModel, ConfigDict

from planner.schema import PlanDocument
from planner.units import UNITS
from planner.units.base import PrivacyUnit

NAME = "test_silo"
MECHANISM = "test_dpsgd"


class FakeScenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    privacy_unit: Literal["test_silo"] = "test_silo"
    silos: dict[str, float]  # silo id -> epsilon
    rounds: int


class FakePlan(PlanDocument):
    privacy_unit: Literal["test_silo"] = "test_silo"
    silos: dict[str, float]


def _plan(scenario: FakeScenario, method: str) -> FakePlan:
    return FakePlan(method=method, rounds=scenario.rounds, silos=dict(scenario.silos))


def _spent(plan: FakePlan, rounds_run: int) -> dict[str, float | None]:
    # not a real accountant: a fixed share of each silo's budget per round
    return {silo: epsilon * rounds_run / plan.rounds for silo, epsilon in plan.silos.items()}


UNIT = PrivacyUnit(
    name=NAME,
    notion="test: sample-level DP per silo",
    scenario_model=FakeScenario,
    plan_model=FakePlan,
    methods=("local", "mean"),
    default_method="mean",
    make_plan=_plan,
    describe=lambda plan: f"{plan.method} plan for silos {', '.join(plan.silos)}",
    verify=lambda plan: None,
    spent=_spent,
    mechanism=MECHANISM,
    label="test silo-level",
    figure="epsilon",
    entities="silos",
    budget_field="epsilon",
    changes_model=FakeScenario,  # never re-planned (replan None): any model
)


@contextmanager
def registered(unit: PrivacyUnit = UNIT) -> Iterator[PrivacyUnit]:
    """The registry with ``unit`` added (a registry line, for the duration of a test)."""
    UNITS[unit.name] = unit
    try:
        yield unit
    finally:
        del UNITS[unit.name]


def fake_plan_document(rounds: int = 4) -> dict[str, object]:
    return FakePlan(method="mean", rounds=rounds, silos={"s1": 1.0, "s2": 2.0}).model_dump(mode="json")
