"""The metric unit's entry of the trainer's unit registry (docs/trainer.md §Layout;
docs/metric-privacy.md §5).

Torch-free, as every unit's ``unit.py``: ``gdpfed train`` refuses the options this unit
never reads before it loads the trainer; the preparation and steps are imported when
first used.
"""

from __future__ import annotations

from typing import Any

from planner.units.metric_local import NAME
from trainer.run.unit import TrainingUnit
from trainer.units.metric.tally import MetricTally


def _prepare(*args: Any) -> Any:
    # start-up time: the run preparation imports torch
    from trainer.units.metric.run import prepare_metric_run

    return prepare_metric_run(*args)


def _strategies() -> Any:
    # start-up time: the strategies import torch
    from trainer.units.metric.strategies import STRATEGY_SPECS

    return STRATEGY_SPECS


def _steps() -> Any:
    # start-up time: the steps import torch
    from trainer.units.metric.steps import MetricSteps

    return MetricSteps()


UNIT = TrainingUnit(
    name=NAME,
    mechanism="metric_laplace",
    summary="local metric privacy: each client releases its model plus Laplace noise in R^n; no secure aggregation",
    prepare=_prepare,
    tally=MetricTally,
    make_steps=_steps,
    strategies=_strategies,
    # prepare_metric_run deals clients into groups at random (build_population's default)
    # and its engine (trainer/units/metric/rounds.py) drops no client after training and
    # aggregates no secret shares: it never reads these.
    unused_options=(
        "opt_out_assignment", "skewed_label", "late_dropout_fraction", "secagg_mode", "secagg_execution",
        "secagg_workers", "secagg_mechanism",
    ),
    unused_reason="each client releases its own model with Laplace noise; there is no secure aggregation, no "
    "dropout after masking and no opted-out group to skew (docs/metric-privacy.md §5); leave it out",
    # each round's report carries its participants: the service's leakage ledger counts
    # every client's releases from them (docs/ledger.md §8)
    reports=True,
    reports_participants=True,
    # a leakage-budget change mid-run moves the caps the run enforces (docs/metric-privacy.md §4)
    follows_replans=True,
)
