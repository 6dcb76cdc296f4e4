"""The ``dpsgd_silo`` training mechanism: how the trainer runs ``silo_sample`` plans (docs/mrmtl.md §4-§6).

``prepare_silo_run`` verifies the plan (``planner.units.silo_sample.verify``: every
silo's mechanism re-derived and within its budget), loads silo data with exactly the
plan's ``n_k`` examples per silo, builds the model, the DP-SGD engine (which reads
sigma_k, c and q_k from the plan) and the plan method's strategy. ``SiloTally`` counts
what the rounds spent per silo through ``planner.ledger``; ``SiloRoundEngine`` runs one
round of the strategy; ``evaluate_silos`` scores each silo's evaluated model on its own
test split, sample-weighted. Every figure is labelled with the unit's notion: silo
sample-level epsilon is never shown as client-level.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from accounting.errors import InvalidInputError
from planner.ledger import EpsilonFigures, EpsilonFn, epsilon_figures, same_history
from planner.schema import PlanDocument
from planner.units import silo_sample
from planner.units.silo_sample import SiloSamplePlan
from planner.verify import understated_warning
from trainer.data.silos import SiloData, load_silo_data
from trainer.device import choose_device, configure_float_math
from trainer.engines import flatten_params, num_params
from trainer.engines.params import unflatten_params
from trainer.models import build_model
from trainer.run.config import TrainConfig
from trainer.run.directory import RunDirectory
from trainer.run.outcome import RoundOutcome
from trainer.run.plots import chance_level_by_part
from trainer.run.prepared import PreparedRun, RunOptions
from trainer.run.unit import TrainingUnit
from trainer.strategies.base import Population, RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine, SiloMechanism
from trainer.units.silo.strategies import STRATEGIES, SiloStrategy


class SiloTally:
    """Sample-level epsilon spent per silo after each round of a silo plan."""

    notion = silo_sample.NOTION
    privacy_unit = silo_sample.NAME
    population_change = "it changes the silos or their example counts (the simulator cannot re-deal examples mid-run)"

    def __init__(self, plan: SiloSamplePlan, epsilon_fn: EpsilonFn | None = None) -> None:
        self.plan = plan
        self.epsilon_fn = epsilon_fn
        self.rounds_run = 0
        self._cache: dict[tuple[str, int, bool], float] = {}

    def record_round(self) -> None:
        self.rounds_run += 1

    def epsilon_spent(self, silo_id: str, *, final: bool = False) -> float:
        key = (silo_id, self.rounds_run, final)
        if key not in self._cache:
            self._cache[key] = silo_sample.silo_epsilon_spent(
                self.plan, self.plan.silo(silo_id), self.rounds_run, per_round=not final, epsilon_fn=self.epsilon_fn
            )
        return self._cache[key]

    def spent(self) -> dict[str, float | None]:
        return {s.id: self.epsilon_spent(s.id) for s in self.plan.silos}

    def final_spent(self) -> dict[str, float | None]:
        return {s.id: self.epsilon_spent(s.id, final=True) for s in self.plan.silos}

    def final_figures(self) -> dict[str, EpsilonFigures | None]:
        """Each silo's rdp and tight epsilon of its history so far (docs/ledger.md §3)."""
        histories = [silo_sample.silo_history(self.plan, s, self.rounds_run) for s in self.plan.silos]
        figures = epsilon_figures(histories, self.plan.scenario.delta)
        return {s.id: f for s, f in zip(self.plan.silos, figures, strict=True)}

    def targets(self) -> dict[str, float | None]:
        return {s.id: s.epsilon for s in self.plan.scenario.silos}  # the budgets the scenario fixes

    def state_dict(self) -> dict[str, Any]:
        return {"rounds_run": self.rounds_run,
                "events": {s.id: [e.model_dump() for e in silo_sample.silo_history(self.plan, s, self.rounds_run)]
                           for s in self.plan.silos}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_run = int(state["rounds_run"])
        self._cache.clear()
        mine = self.state_dict()["events"]
        if state.get("events", mine) != mine:
            raise InvalidInputError("resume", "the checkpoint's privacy history of the silos does not match the plan")

    # following a re-plan (trainer.run.replan.FollowingTally; docs/mrmtl.md §6)

    @staticmethod
    def population(plan: SiloSamplePlan) -> list[tuple[str, int]]:
        """The plan's silos and their example counts."""
        return [(s.id, s.num_samples) for s in plan.silos]

    def history_problem(self, successor: SiloSamplePlan) -> str | None:
        """Another method (its DP-SGD passes are the strategy's), or the first silo whose
        history before ``successor`` (``spent_phases``, ``spent_selections``) is not what this
        run spent: its DP-SGD steps and cluster selections so far."""
        if successor.method != self.plan.method:
            return f"it runs method {successor.method}, this run {self.plan.method} (the strategy's DP-SGD passes)"
        for silo in successor.silos:
            mine = silo_sample.silo_history(self.plan, self.plan.silo(silo.id), self.rounds_run)
            theirs = silo.spent_events()
            if not same_history(mine, theirs):
                return f"silo {silo.id}'s spent history {theirs} is not this run's {mine}"
        return None

    def continued(self, successor: SiloSamplePlan, epsilon_fn: EpsilonFn | None) -> SiloTally:
        """A fresh tally of ``successor``: its silos' spent events are this one's history."""
        return SiloTally(successor, epsilon_fn)


class SiloRoundEngine:
    """One round of a silo strategy: every silo's DP-SGD, then the server's step."""

    def __init__(self, strategy: SiloStrategy, dim: int) -> None:
        self.strategy = strategy
        self.dim = dim

    def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]:
        started = time.perf_counter()
        new_global = self.strategy.run_round(ctx, global_params)
        silos = self.strategy.engine.num_silos
        return new_global, RoundOutcome(
            global_round=ctx.global_round, sampled={"silos": silos}, survived={"silos": silos}, aborted_pools=[],
            abort_reasons={}, dropped_before_masking=0, dropped_after_masking=0,
            timing={"train": time.perf_counter() - started},
        )


def evaluate_silos(model: nn.Module, models: torch.Tensor, data: SiloData, silo_ids: list[str]) -> dict[str, float]:
    """Each silo's model (row k) on silo k's test split; ``loss`` and ``accuracy`` are
    sample-weighted over all silos' test examples (``accuracy`` only for classification),
    ``accuracy.<silo>`` / ``loss.<silo>`` per silo."""
    regression = data.train.task == "regression"
    total_loss, total_correct, total = 0.0, 0, 0
    metrics: dict[str, float] = {}
    with torch.no_grad():
        for k, silo_id in enumerate(silo_ids):
            x, y = data.test_of(k)
            params = unflatten_params(models[k], model)
            x = x.to(models.dtype).to(models.device) if x.is_floating_point() else x.to(models.device)
            y = y.to(models.device)
            output = functional_call(model, params, (x,))
            if regression:
                loss = float(((output.reshape(-1) - y.to(output.dtype)) ** 2).sum())
            else:
                loss = float(F.cross_entropy(output, y, reduction="sum"))
                correct = int((output.argmax(-1) == y).sum())
                total_correct += correct
                metrics[f"accuracy.{silo_id}"] = correct / len(y)
            metrics[f"loss.{silo_id}"] = loss / len(y)
            total_loss += loss
            total += len(y)
    metrics["loss"] = total_loss / total
    if not regression:
        metrics["accuracy"] = total_correct / total
    return metrics


def prepare_silo_run(unit: TrainingUnit, plan: PlanDocument, plan_document: dict[str, Any], config: TrainConfig, out: Path,
                     options: RunOptions) -> PreparedRun:
    """Validate a silo plan, data and model; build the DP-SGD engine and the method's strategy.

    The plan is verified whatever its origin; ``config.rounds`` may not exceed the plan's.
    ``config.dataset`` is a silo dataset (``trainer.data.silos``), built with the plan's
    ``n_k``; ``config.strategy_options`` go to the strategy (``prox_inside_clip`` to the
    engine). The strategy is the plan's method: its DP-SGD passes are what the plan counted.
    """
    if not isinstance(plan, SiloSamplePlan):
        raise InvalidInputError(
            "privacy_unit", f"the {unit.mechanism} mechanism runs silo_sample plans only; this plan's privacy_unit is {plan.privacy_unit!r}"
        )
    if options.engine_factory is not None or options.strategy_factory is not None:
        raise InvalidInputError("engine", "silo plans run on the simulator's DP-SGD engine and their method's strategy")
    if config.strategy not in ("plan", plan.method):
        raise InvalidInputError(
            "strategy", f"a silo plan runs its own method's strategy ({plan.method}); --strategy {config.strategy} would "
            "run DP-SGD passes the plan did not count"
        )
    # a plan whose stated figures are below the recomputation (one an earlier release wrote) runs,
    # as a client plan does, with one warning: the run's ledger counts its own figures (docs/ledger.md §5)
    understated = silo_sample.verify(plan, understated="report")
    if config.rounds > plan.rounds:
        raise InvalidInputError(
            "rounds", f"{config.rounds} exceeds the plan's {plan.rounds} rounds; running more would spend more privacy than planned"
        )
    strategy_options = dict(config.strategy_options)
    prox_inside_clip = strategy_options.pop("prox_inside_clip", False)
    if not isinstance(prox_inside_clip, bool):
        raise InvalidInputError("strategy-option", "prox_inside_clip must be true or false")
    chosen_device = choose_device(options.device)
    configure_float_math(options.allow_tf32)  # docs/trainer.md §Reproducible GPU math
    sizes = [s.num_samples for s in plan.silos]
    data = options.dataset if options.dataset is not None else load_silo_data(config.dataset, sizes, seed=config.seed)
    if data.train.client_sizes() != sizes:
        raise InvalidInputError("dataset", f"the silos' data sizes {data.train.client_sizes()} are not the plan's {sizes}")
    try:
        model = build_model(config.model, data.train, seed=config.seed, **config.model_options)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        raise InvalidInputError("model-option", f"{config.model} cannot be built with {config.model_options}: {exc}") from None
    model = model.to(chosen_device)
    engine = DpSgdEngine(model, data.train, list(range(len(sizes))), SiloMechanism.from_plan(plan), lr=config.lr,
                         prox_inside_clip=prox_inside_clip)
    initial = flatten_params(model).to(chosen_device)
    # the engine the strategy calls: this one, or what options.silo_engine makes of it (on
    # Flower, each silo's pass runs on its node with the node's copy of the plan)
    called = engine if options.silo_engine is None else options.silo_engine(engine)
    strategy = STRATEGIES[plan.method](called, initial, config.rounds, **strategy_options)
    silo_ids = [s.id for s in plan.silos]

    def evaluator(params: torch.Tensor) -> dict[str, float]:
        return evaluate_silos(model, strategy.evaluated_models(params), data, silo_ids)

    def build_strategy(for_plan: Any) -> Any:
        # a re-plan the run follows (docs/mrmtl.md §6) changes each silo's sigma_k (and what
        # is left of its cluster selections), never the method: the same strategy goes on,
        # its schedule in the run's rounds, with the engine on the re-plan's mechanism
        engine.mechanism = SiloMechanism.from_plan(for_plan)
        return strategy

    def engine_factory(for_plan: Any, for_strategy: Any, population: Population, dim: int, run_config: TrainConfig,
                       rounds: int, *, verified: Any = None) -> SiloRoundEngine:
        # verified: nothing the silo verifier composes is read by its engine
        return SiloRoundEngine(for_strategy, dim)

    return PreparedRun(
        plan=plan,
        plan_document=plan_document, config=config, run_dir=RunDirectory(out), resume=options.resume, dataset=data,
        model=model, device=chosen_device, population=Population({"silos": torch.arange(len(sizes)).numpy()}),
        initial_params=initial, strategy=strategy,
        engine=SiloRoundEngine(strategy, num_params(model)),
        warnings=[understated_warning(understated)] if understated else [], build_strategy=build_strategy,
        engine_factory=engine_factory, unit=unit, run_start=plan.start_round, evaluator=evaluator,
        chance=chance_level_by_part([data.test_of(k)[1] for k in range(len(sizes))], data.train.task, part="silo"),
        gradient_path=engine.gradient_path,
    )

