"""The client unit's entry of the trainer's unit registry (docs/trainer.md §Layout).

Torch-free, as every unit's ``unit.py``: ``gdpfed train`` reads a unit's declaration
before it loads the trainer; the preparation and the steps are imported when first used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.run.unit import TrainingUnit
from trainer.units.client.tally import ClientTally

MECHANISM = "gaussian_secagg"


def _prepare(*args: Any) -> Any:
    # start-up time: the run preparation imports torch
    from trainer.units.client.run import prepare_client_run

    return prepare_client_run(*args)


def _verify(plan: Any) -> Mapping[str, float]:
    """A followed re-plan's check, the planner unit's own verifier (``planner.units.client``'s
    ``verify_client_plan``, the one ``gdpfed plan verify`` runs: an understated figure refused),
    and the full-run Skellam ledgers it composed for the successor's engine (docs/ledger.md §5)."""
    # start-up time: gdpfed train reads the unit's declaration before it loads the planner's verifier
    from planner.units.client import verify_client_plan

    skellam_spent: dict[str, float] = {}
    verify_client_plan(plan, skellam_spent=skellam_spent)
    return skellam_spent


def _strategies() -> Any:
    # start-up time: the strategies import torch
    from trainer.units.client.strategies import STRATEGY_SPECS

    return STRATEGY_SPECS


def _steps() -> Any:
    # start-up time: the steps import torch
    from trainer.units.client.steps import ClientSteps

    return ClientSteps()


UNIT = TrainingUnit(
    name="client",
    mechanism=MECHANISM,
    summary="client-level DP: clip each client's update, add Gaussian noise shares, secure aggregation per pool",
    prepare=_prepare,
    tally=ClientTally,
    make_steps=_steps,
    strategies=_strategies,
    reports=True,
    follows_replans=True,
    verify=_verify,
)
