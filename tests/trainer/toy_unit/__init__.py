"""A toy fourth privacy unit, ``toy_mean``, that lives entirely in this folder (issue 28).

Each of its clients holds one number; a round releases the mean of a fresh random sample
of them plus Gaussian noise, and the model (one parameter) moves to it. Its ledger counts
a fixed epsilon per round. It is nothing a user would train: it shows what adding a unit
takes. Outside this folder it touches only ``REGISTRATION_POINTS``: the planner's unit
registry and the trainer's, one line each; ``registered()`` adds those two lines for the
duration of a test. The run loop, its checkpoints, resume, summary and plots are the ones
every unit gets (``trainer.runner``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

import planner.units
import trainer.units.registry
from planner.schema import PlanDocument
from planner.units.base import PrivacyUnit
from trainer.run.config import TrainConfig
from trainer.run.directory import RunDirectory
from trainer.run.outcome import RoundOutcome
from trainer.run.prepared import PreparedRun, RunOptions
from trainer.run.steps import RoundSteps
from trainer.run.unit import TrainingUnit
from trainer.strategies.base import PURPOSE_SAMPLING, Population, RoundContext

NAME = "toy_mean"
MECHANISM = "toy_gaussian_mean"
NOTION = "toy: a fixed epsilon per round per group (no real accountant)"

# (module, registry attribute): every place outside this folder the unit is registered
REGISTRATION_POINTS = ((planner.units, "UNITS"), (trainer.units.registry, "UNITS"))


class ToyScenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    privacy_unit: Literal["toy_mean"] = "toy_mean"
    clients: int
    per_round: int
    noise_std: float
    epsilon_per_round: float
    rounds: int


class ToyPlan(PlanDocument):
    privacy_unit: Literal["toy_mean"] = "toy_mean"
    scenario: ToyScenario


def _plan(scenario: ToyScenario, method: str) -> ToyPlan:
    return ToyPlan(method=method, rounds=scenario.rounds, scenario=scenario)


def _spent(plan: ToyPlan, rounds_run: int) -> dict[str, float | None]:
    return {"all": plan.scenario.epsilon_per_round * rounds_run}


PLANNER_UNIT = PrivacyUnit(
    name=NAME, notion=NOTION, scenario_model=ToyScenario, plan_model=ToyPlan, methods=("toy",),
    default_method="toy", make_plan=_plan, describe=lambda plan: f"toy plan over {plan.scenario.clients} clients",
    verify=lambda plan: None, spent=_spent, mechanism=MECHANISM,
    # what the service would show (it never serves this unit): never re-planned, so any changes model
    label="toy", figure="epsilon", entities="groups", budget_field="epsilon_per_round", changes_model=ToyScenario,
)


class ToyTally:
    """A fixed epsilon per round for the one group ``all``."""

    privacy_unit = NAME
    notion = NOTION

    def __init__(self, plan: ToyPlan, epsilon_fn: Any = None) -> None:
        self.plan = plan
        self.rounds_run = 0

    def record_round(self) -> None:
        self.rounds_run += 1

    def spent(self) -> dict[str, float | None]:
        return _spent(self.plan, self.rounds_run)

    def final_spent(self) -> dict[str, float | None]:
        return self.spent()

    def final_figures(self) -> dict[str, Any]:
        return {}  # a fixed epsilon per round: no accountant, so no rdp or tight figure

    def targets(self) -> dict[str, float | None]:
        return _spent(self.plan, self.plan.rounds)

    def state_dict(self) -> dict[str, Any]:
        return {"rounds_run": self.rounds_run}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_run = int(state["rounds_run"])


class ToyStrategy:
    """Moves the model to each round's released mean (no state of its own)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class ToyEngine:
    """A round: sample ``per_round`` clients, release their mean plus Gaussian noise."""

    dim = 1

    def __init__(self, plan: ToyPlan, values: torch.Tensor) -> None:
        self.plan = plan
        self.values = values

    def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]:
        rng = ctx.rng(PURPOSE_SAMPLING)
        scenario = self.plan.scenario
        chosen = rng.choice(scenario.clients, scenario.per_round, replace=False)
        mean = float(self.values[chosen].mean()) + float(rng.normal(0.0, scenario.noise_std))
        outcome = RoundOutcome(
            global_round=ctx.global_round, sampled={"all": int(chosen.size)}, survived={"all": int(chosen.size)},
            aborted_pools=[], abort_reasons={}, dropped_before_masking=0, dropped_after_masking=0, timing={},
        )
        return torch.full_like(global_params, mean), outcome


def prepare_toy_run(unit: TrainingUnit, plan: Any, plan_document: dict[str, Any], config: TrainConfig, out: Path,
                    options: RunOptions) -> PreparedRun:
    values = torch.from_numpy(np.random.default_rng(config.seed).normal(3.0, 1.0, plan.scenario.clients))
    truth = float(values.mean())

    def evaluator(params: torch.Tensor) -> dict[str, float]:
        return {"loss": (float(params[0]) - truth) ** 2}

    return PreparedRun(
        plan=plan, plan_document=plan_document, config=config, run_dir=RunDirectory(out), resume=options.resume,
        dataset=None, model=torch.nn.Linear(1, 1, bias=False), device=torch.device("cpu"),
        population=Population({"all": np.arange(plan.scenario.clients)}),
        initial_params=torch.zeros(1, dtype=torch.float64), strategy=ToyStrategy(), engine=ToyEngine(plan, values),
        warnings=[], build_strategy=lambda successor: ToyStrategy(), unit=unit, evaluator=evaluator,
    )


UNIT = TrainingUnit(
    name=NAME, mechanism=MECHANISM, summary="a toy: the noisy mean of sampled clients' numbers",
    prepare=prepare_toy_run, tally=ToyTally, make_steps=RoundSteps,
    unused_options=("secagg_mode", "secagg_execution", "secagg_workers"), unused_reason="the toy has no secure aggregation",
)


@contextmanager
def registered() -> Iterator[None]:
    """The toy unit's registry lines, added for the duration of a test (a real unit's
    would be one line in each of ``REGISTRATION_POINTS``)."""
    entries = (PLANNER_UNIT, UNIT)
    for (module, attribute), unit in zip(REGISTRATION_POINTS, entries):
        getattr(module, attribute)[NAME] = unit
    try:
        yield
    finally:
        for module, attribute in REGISTRATION_POINTS:
            del getattr(module, attribute)[NAME]
