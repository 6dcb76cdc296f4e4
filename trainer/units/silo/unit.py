"""The silo unit's entry of the trainer's unit registry (docs/trainer.md §Layout; docs/mrmtl.md §6).

Torch-free, as every unit's ``unit.py``: ``gdpfed train`` refuses the options this unit
never reads before it loads the trainer; the preparation, tally and steps are imported
when first used.
"""

from __future__ import annotations

from typing import Any

from planner.units import silo_sample
from trainer.run.unit import TrainingUnit

MECHANISM = "dpsgd_silo"


def _prepare(*args: Any) -> Any:
    # start-up time: the run preparation imports torch
    from trainer.units.silo.run import prepare_silo_run

    return prepare_silo_run(*args)


def _tally(*args: Any, **kwargs: Any) -> Any:
    # start-up time: the silo tally lives beside its engine, which imports torch
    from trainer.units.silo.run import SiloTally

    return SiloTally(*args, **kwargs)


def _steps() -> Any:
    # start-up time: the steps import torch
    from trainer.run.steps import RoundSteps

    return RoundSteps()


UNIT = TrainingUnit(
    name=silo_sample.NAME,
    mechanism=MECHANISM,
    summary="silo sample-level DP: every silo runs DP-SGD (per-example clip, Poisson examples, Gaussian noise) every round",
    prepare=_prepare,
    tally=_tally,
    make_steps=_steps,
    # prepare_silo_run reads dataset, model, model_options, rounds, lr, seed, strategy,
    # strategy_options; the round loop eval_every and checkpoint_every. Nothing else.
    unused_options=(
        "partition", "alpha", "dataset_options", "opt_out_assignment", "skewed_label", "local_steps", "momentum",
        "batch_size", "engine", "server_lr", "server_momentum", "late_dropout_fraction", "secagg_mode",
        "secagg_execution", "secagg_workers", "secagg_mechanism",
    ),
    unused_reason="they take batch sizes, steps per round, noise and clipping from the plan, train every silo in "
    "every round with plain DP-SGD and use no secure aggregation (docs/mrmtl.md §1, §6); leave it out",
    reports=True,
    # a budget change mid-run re-calibrates each silo's sigma_k for the rest (docs/mrmtl.md §6)
    follows_replans=True,
)
