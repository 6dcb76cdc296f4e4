"""The metric unit's training strategies, one line each in ``STRATEGY_SPECS``
(docs/metric-privacy.md §5-§6)."""

from trainer.strategies.base import StrategySpec
from trainer.units.metric.strategies import metric_ifca

STRATEGY_SPECS: dict[str, StrategySpec] = {spec.name: spec for spec in (metric_ifca.SPEC,)}

__all__ = ["STRATEGY_SPECS"]
