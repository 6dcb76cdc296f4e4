"""The strategy registry: every unit's selectable strategies, each named once in its unit's
``STRATEGY_SPECS`` (``trainer/units/<unit>/strategies``) and contributed by its unit's line
of ``trainer.units.registry`` (``TrainingUnit.strategies``).

(docs/architecture.md §Training strategies.) ``gdpfed train --strategy NAME
--strategy-option KEY=JSON`` and the experiment configs select a strategy here by name.
A strategy declares its options model (its constructor's extra keywords, validated with
pydantic: a bad option is named), the privacy unit of the plans it runs on and the plan
methods it accepts. To add one: write ``trainer/units/<unit>/strategies/NAME.py`` with the
class and ``SPEC = StrategySpec(...)``, and add its line to that unit's ``STRATEGY_SPECS``.
A silo plan's method is its strategy (``trainer.units.silo.strategies.STRATEGIES``), never
chosen here. The registry sits above the units, so a unit's preparation selects through
the ``RunOptions.select_strategy`` the loop hands it (``registered_strategy``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from accounting.errors import InvalidInputError
from planner.schema import PlanDocument
from trainer.strategies.base import Strategy, StrategySpec
from trainer.units.registry import UNITS

# in the unit registry's order, each unit's in its own STRATEGY_SPECS order
STRATEGIES: dict[str, StrategySpec] = {
    name: spec for unit in UNITS.values() if unit.strategies is not None for name, spec in unit.strategies().items()
}

DEFAULT_STRATEGY = "plan"


def strategy_spec(name: str) -> StrategySpec:
    """The registered strategy ``name``, or ``InvalidInputError("strategy")`` listing the known ones."""
    spec = STRATEGIES.get(name)
    if spec is None:
        raise InvalidInputError("strategy", f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")
    return spec


def strategies_for(*, privacy_unit: str | None = None, task: str | None = None) -> list[str]:
    """The registered strategies that run plans of ``privacy_unit`` and train data of
    ``task`` (either left out: any), in registry order: the suggestions of
    ``check_plan`` and ``check_data``."""
    return [
        spec.name for spec in STRATEGIES.values()
        if (privacy_unit is None or spec.privacy_unit == privacy_unit) and (task is None or task in spec.tasks)
    ]


def build_strategy(name: str, options: Mapping[str, Any], for_plan: PlanDocument, **common: Any) -> Strategy:
    """Strategy ``name`` with ``options`` for ``for_plan`` (checked against what it runs on)."""
    spec = strategy_spec(name)
    return build_checked(spec, for_plan, spec.parse_options(options), **common)


def build_checked(spec: StrategySpec, plan: PlanDocument, options: BaseModel, **common: Any) -> Strategy:
    """``spec``'s strategy for ``plan`` with validated ``options`` and the run's ``common``
    arguments; the plan and ``common["dataset"]`` are checked first (``check_plan``,
    ``check_data``), so a mismatch is refused before the run directory exists."""
    check_plan(spec, plan)
    check_data(spec, common.get("dataset"))
    return spec.build(plan, options, **common)


def check_plan(spec: StrategySpec, plan: PlanDocument) -> None:
    """Refuse (``InvalidInputError("strategy")``) a plan ``spec``'s strategy does not run on,
    naming the registered strategies that run the plan's unit."""
    if plan.privacy_unit != spec.privacy_unit:
        runners = strategies_for(privacy_unit=plan.privacy_unit)
        hint = (f" (run it with --strategy {' or --strategy '.join(runners)})" if runners
                else " (no strategy runs it; a silo plan runs its own method's)")
        raise InvalidInputError(
            "strategy",
            f"{spec.name} runs {spec.privacy_unit} plans; this plan's privacy_unit is {plan.privacy_unit!r}{hint}",
        )
    if spec.plan_methods is not None and plan.method not in spec.plan_methods:
        raise InvalidInputError(
            "strategy", f"{spec.name} runs on plans of method {', '.join(spec.plan_methods)}; this plan is {plan.method}"
        )


def check_data(spec: StrategySpec, dataset: Any) -> None:
    """Refuse (``InvalidInputError("dataset")``) data whose task ``spec``'s strategy does not
    train, naming the registered strategies that do (docs/trainer.md §Strategies)."""
    task = getattr(dataset, "task", None)
    if task is None or task in spec.tasks:
        return
    runners = [f"--strategy {name} ({STRATEGIES[name].privacy_unit} plans)" for name in strategies_for(task=task)]
    hint = f"; {task} data runs with {' or '.join(runners)}" if runners else f"; no strategy trains {task} data"
    raise InvalidInputError(
        "dataset",
        f"{getattr(dataset, 'name', 'the dataset')} is {task} data, but strategy {spec.name} trains "
        f"{' and '.join(spec.tasks)} data{hint}",
    )


def registered_strategy(config: Any, plan: PlanDocument) -> Callable[..., Strategy]:
    """A factory of the registry's strategy ``config.strategy`` with its options validated
    and checked against ``plan`` (``InvalidInputError`` naming the strategy or the option)."""
    spec = strategy_spec(config.strategy)
    options = spec.parse_options(config.strategy_options)
    check_plan(spec, plan)

    def factory(for_plan: PlanDocument, model: Any, dataset: Any, **common: Any) -> Strategy:
        return build_checked(spec, for_plan, options, model=model, dataset=dataset, **common)

    return factory


__all__ = [
    "DEFAULT_STRATEGY", "STRATEGIES", "StrategySpec", "build_checked", "build_strategy", "check_data", "check_plan",
    "registered_strategy", "strategies_for", "strategy_spec",
]
