"""The strategy registry: every unit's selectable strategies, each named once in its unit's
``STRATEGY_SPECS`` (``trainer/units/<unit>/strategies``).

(docs/architecture.md §Training strategies.) ``gdpfed train --strategy NAME
--strategy-option KEY=JSON`` and the experiment configs select a strategy here by name.
A strategy declares its options model (its constructor's extra keywords, validated with
pydantic: a bad option is named), the privacy unit of the plans it runs on and the plan
methods it accepts. To add one: write ``trainer/units/<unit>/strategies/NAME.py`` with the
class and ``SPEC = StrategySpec(...)``, and add its line to that unit's ``STRATEGY_SPECS``.
A silo plan's method is its strategy (``trainer.units.silo.strategies.STRATEGIES``), never
chosen here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accounting.errors import InvalidInputError
from planner.schema import PlanDocument
from trainer.strategies.base import Strategy, StrategySpec
from trainer.units.client.strategies import STRATEGY_SPECS as CLIENT_STRATEGIES
from trainer.units.metric.strategies import STRATEGY_SPECS as METRIC_STRATEGIES

STRATEGIES: dict[str, StrategySpec] = {**CLIENT_STRATEGIES, **METRIC_STRATEGIES}

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
    ``StrategySpec.check_plan`` and ``check_data``."""
    return [
        spec.name for spec in STRATEGIES.values()
        if (privacy_unit is None or spec.privacy_unit == privacy_unit) and (task is None or task in spec.tasks)
    ]


def build_strategy(name: str, options: Mapping[str, Any], for_plan: PlanDocument, **common: Any) -> Strategy:
    """Strategy ``name`` with ``options`` for ``for_plan`` (checked against what it runs on)."""
    spec = strategy_spec(name)
    return spec.build(for_plan, spec.parse_options(options), **common)


__all__ = ["DEFAULT_STRATEGY", "STRATEGIES", "StrategySpec", "build_strategy", "strategies_for", "strategy_spec"]
