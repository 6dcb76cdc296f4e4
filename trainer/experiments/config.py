"""Experiment configurations: the YAML schema and its expansion into cells.

(docs/results.md §Runner.) A training experiment is ``methods x datasets x settings x
seeds``; every combination is a *cell*, one training run. A setting is a named variation
of the base scenario or training options (a keep ratio, a Dirichlet alpha, a budget
scale, a distribution of clients over the groups, a clip-norm scale). A sweep experiment
is the planner's sampling-rate sweep (no training).

``--smoke`` shrinks every cell (rounds, clients, local steps, test set) so that a whole
configuration runs in seconds; the shape of its outputs is the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from accounting.errors import InvalidInputError, located_validation_error, one_error_for_union, validation_error_line
from accounting.validation import InputModel
from planner.loading import naming_file, parse_json, parse_yaml, read_text
from planner.methods import METHODS
from planner.schema import Fraction
from planner.units.silo_sample import SILO_METHODS
from trainer.choices import model_key, unknown_model
from trainer.experiments.units import (
    all_plan_methods,
    shrink_for_smoke,
    unit_name,
    unit_of_plan_method,
    validate_scenario,
)
from trainer.run.config import TrainConfig
from trainer.run.options import unused_option_reason


class _Strict(InputModel):
    model_config = ConfigDict(extra="forbid")


class DatasetEntry(_Strict):
    """One dataset of the grid, with the model that fits it and any training overrides."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")]
    spec: str = Field(description="trainer dataset spec: digits, synthetic:1,1, shakespeare:PATH, ...")
    path_env: str | None = Field(
        None, description="environment variable that, when set, replaces the path after ':' in spec"
    )
    options: dict[str, Any] = Field(default_factory=dict, description="loader options (sequence_length, ...)")
    model: str
    model_options: dict[str, Any] = Field(default_factory=dict)
    train: dict[str, Any] = Field(default_factory=dict, description="TrainConfig overrides for this dataset")

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        # checked when the configuration is read, as methods are: at a cell, a typo in the
        # last dataset's model stopped the experiment after every earlier cell had trained
        if model_key(model) is None:
            raise ValueError(unknown_model(model))
        return model

    def resolved_spec(self) -> str:
        """``spec`` with the path taken from ``path_env`` when that variable is set."""
        if self.path_env and os.environ.get(self.path_env):
            kind, _, _ = self.spec.partition(":")
            return f"{kind}:{os.environ[self.path_env]}"
        return self.spec


class Setting(_Strict):
    """A named variation applied on top of the base scenario and training options."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.=+\-]+$")]
    scenario: dict[str, Any] = Field(default_factory=dict, description="scenario fields replaced as given")
    train: dict[str, Any] = Field(default_factory=dict, description="TrainConfig fields replaced as given")
    epsilon_scale: float | None = Field(None, gt=0, description="multiply every group's epsilon")
    group_shares: list[float] | None = Field(
        None, description="fraction of all clients in each group (group order); the total stays the same"
    )
    clip_scale: float | None = Field(None, gt=0, description="multiply the clip norm")
    keep_ratios: Annotated[
        list[Fraction] | Literal["auto"], one_error_for_union("a list of numbers in [1e-06, 1], one per group, or 'auto'")
    ] | None = Field(
        None, description="per-group keep ratio (group order), or auto"
    )
    silo_epsilons: list[float] | None = Field(
        None, description="silo scenarios: silo k's epsilon is silo_epsilons[k mod len] (a heterogeneous mix)"
    )
    group_fields: dict[str, Any] = Field(
        default_factory=dict, description="fields set on every group (e.g. a metric group's noise_multiplier)"
    )


class MethodEntry(_Strict):
    """One method of the grid: a plan method run by a strategy with options.

    In the YAML a method is either this mapping or a name: a planning method's name runs
    its plan with the ``plan`` strategy; a strategy's name runs that strategy on its
    default plan method with the options under ``strategies:``.
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.=+\-]+$", description="the cell's method label")]
    plan: str = Field(description="planning method (planner.methods.METHODS)")
    strategy: str = Field("plan", description="training strategy (trainer.units.strategies)")
    options: dict[str, Any] = Field(default_factory=dict, description="the strategy's options")


MethodOrName = Annotated[
    str | MethodEntry, one_error_for_union("a method's name or a mapping with name, plan and optionally strategy, options")
]

# Strategy options added after experiment cells were first recorded, with their defaults
# (adaptive_clip: docs/trainer.md §Adaptive clipping).
LATER_OPTION_DEFAULTS: dict[str, Any] = {"adaptive_clip": False}


def resolve_method(entry: str | MethodEntry, strategy_options: dict[str, dict[str, Any]]) -> MethodEntry:
    """A method entry with its plan method, strategy and options, checked against the
    method and strategy registries (names, options, the plans a strategy runs on)."""
    # start-up time: the strategy registry imports torch; loaded only when a method names a strategy
    from trainer.units.strategies import STRATEGIES, strategy_spec

    if isinstance(entry, str) and entry in SILO_METHODS:
        # a silo_sample method is its own strategy (the plan counted its DP-SGD passes);
        # its options are checked when the run is prepared (trainer.units.silo.run)
        return MethodEntry(name=entry, plan=entry, options=strategy_options.get(entry, {}))
    if isinstance(entry, MethodEntry) and entry.plan in SILO_METHODS:
        if entry.strategy not in ("plan", entry.plan):
            raise ValueError(f"{entry.name}: silo plan {entry.plan} runs its own strategy, not {entry.strategy}")
        return entry.model_copy(update={"strategy": "plan"})
    if isinstance(entry, str):
        if entry in METHODS:
            entry = MethodEntry(name=entry, plan=entry)
        elif entry in STRATEGIES:
            spec = STRATEGIES[entry]
            entry = MethodEntry(
                name=entry, plan=spec.default_plan_method, strategy=entry, options=strategy_options.get(entry, {})
            )
        else:
            raise ValueError(
                f"unknown method {entry!r}; a planning method ({', '.join(METHODS)}), a strategy "
                f"({', '.join(STRATEGIES)}) or a silo method ({', '.join(SILO_METHODS)})"
            )
    if entry.plan not in all_plan_methods():
        raise ValueError(f"{entry.name}: unknown plan method {entry.plan!r}; known: {', '.join(all_plan_methods())}")
    spec = strategy_spec(entry.strategy)
    plan_unit = unit_of_plan_method(entry.plan)
    if spec.privacy_unit != plan_unit:
        raise ValueError(f"{entry.name}: strategy {spec.name} runs {spec.privacy_unit} plans, {entry.plan} plans {plan_unit} scenarios")
    if spec.plan_methods is not None and entry.plan not in spec.plan_methods:
        raise ValueError(f"{entry.name}: strategy {spec.name} runs on plans of {', '.join(spec.plan_methods)}, not {entry.plan}")
    # the cell records every option, defaults included, so its specification is explicit; options
    # added after cells were recorded are left out at their default, so those cells keep their
    # fingerprints (trainer/experiments/runner.py does not run a recorded cell again)
    options = spec.parse_options(entry.options).model_dump(mode="json")
    options = {k: v for k, v in options.items() if k not in LATER_OPTION_DEFAULTS or v != LATER_OPTION_DEFAULTS[k]}
    return entry.model_copy(update={"options": options})


class TrainExperiment(_Strict):
    """``kind: train``: methods x datasets x settings x seeds, one training run each."""

    kind: Literal["train"] = "train"
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: str = ""
    scenario: dict[str, Any] = Field(description="the base scenario (model_dim is set from the model)")
    train: dict[str, Any] = Field(default_factory=dict, description="TrainConfig fields shared by every cell")
    methods: list[MethodOrName] = Field(
        min_length=1, description="planning methods, strategies, or {name, plan, strategy, options} entries"
    )
    datasets: list[DatasetEntry] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    settings: list[Setting] = Field(default_factory=lambda: [Setting(name="default")])
    strategies: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="strategy name -> options, for methods given as a strategy's name"
    )
    pfa: dict[str, Any] | None = Field(None, description="the options of the pfa strategy (older spelling of strategies.pfa)")

    @model_validator(mode="after")
    def _known_methods(self) -> TrainExperiment:
        if self.pfa is not None:
            if "pfa" in self.strategies:
                raise ValueError("give the pfa options under strategies.pfa or pfa, not both")
            self.strategies = {**self.strategies, "pfa": self.pfa}
        entries = []
        for index, method in enumerate(self.methods):
            try:
                entries.append(resolve_method(method, self.strategies))
            except ValueError as exc:  # InvalidInputError too
                where: tuple[str | int, ...] = ("methods", index)
                message = str(exc)
                if isinstance(exc, InvalidInputError) and exc.field.startswith("strategy-option "):
                    # a strategy's option: at the option where the configuration gave it
                    option = exc.field.removeprefix("strategy-option ").split(".")
                    where = ("strategies", method, *option) if isinstance(method, str) else (*where, "options", *option)
                    message = exc.reason
                elif isinstance(exc, InvalidInputError) and exc.field == "strategy" and not isinstance(method, str):
                    where, message = (*where, "strategy"), exc.reason
                raise located_validation_error("methods", [(where, message, method)]) from None
        names = [entry.name for entry in entries]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise located_validation_error(
                    "methods", [(("methods", index), f"{name!r} is listed twice (a cell's method label)", name)]
                )
        self.methods = list(entries)
        return self

    def method_entries(self) -> list[MethodEntry]:
        """The methods, resolved (validation replaced every name by its entry)."""
        return [m for m in self.methods if isinstance(m, MethodEntry)]

    def method_names(self) -> list[str]:
        """The cells' method labels, in the configuration's order."""
        return [m.name for m in self.method_entries()]


class SweepExperiment(_Strict):
    """``kind: sweep``: the planner's sampling-rate sweep (``planner.sweep``)."""

    kind: Literal["sweep"]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: str = ""
    scenario: dict[str, Any]
    group: str = Field(description="the group whose epsilon is swept")
    epsilons: list[float] = Field(min_length=1)
    smoke_epsilons: list[float] | None = Field(None, description="the points used with --smoke (default: the first two)")
    method: str = "gdpfed_plus"

    @field_validator("scenario")
    @classmethod
    def _planner_scenario(cls, scenario: dict[str, Any]) -> dict[str, Any]:
        """Checked when the configuration is read (errors at ``scenario.<path>``), not when the sweep runs."""
        # start-up time: the planner's methods (scipy) load only for a sweep
        from planner import Scenario

        Scenario.model_validate(scenario)
        return scenario


Experiment = TrainExperiment | SweepExperiment


class CellSpec(_Strict):
    """Everything one cell needs, JSON-able (it crosses process boundaries)."""

    cell_id: str
    experiment: str
    config_path: str
    method: str
    plan_method: str
    dataset: DatasetEntry
    setting: str
    seed: int
    scenario: dict[str, Any]
    train: dict[str, Any]
    strategy: str = "plan"
    strategy_options: dict[str, Any] = Field(default_factory=dict)
    smoke: bool

    def fingerprint(self) -> str:
        """A hash of what determines the cell's result (not where its files go, nor the
        secure-aggregation worker count, which changes no result)."""
        data = self.model_dump(mode="json", exclude={"config_path"})
        data["train"].pop("secagg_workers", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate a configuration: JSON for a ``.json`` file, else YAML. An invalid
    one is ``InvalidInputError("config")`` naming the file, then the field's path in it
    (``config: exp.yaml: methods.1: unknown method 'x'``), as a file that does not parse is."""
    file = Path(path)
    text = read_text(file, "config")
    data = parse_json(text, file, "config") if file.suffix.lower() == ".json" else parse_yaml(text, file, "config")
    if not isinstance(data, dict):
        raise InvalidInputError("config", f"{file} must hold a mapping")
    with naming_file("config", file):
        if data.get("kind", "train") == "sweep":
            return SweepExperiment.model_validate(data)
        return TrainExperiment.model_validate(data)


def _check_training_options(experiment: TrainExperiment, cells: list[CellSpec]) -> None:
    """Every cell's ``TrainConfig`` is valid and sets no option its privacy unit's mechanism
    never reads (``TrainingUnit.unused_options``: ``secagg_mode`` on a metric or silo
    cell, as ``gdpfed train`` refuses ``--secagg`` there), before any cell trains: an
    ``InvalidInputError`` names the train block the value came from (a setting's wins over a
    dataset's over the shared one, as they merge): ``settings.<name>.train.<field>``,
    ``datasets.<name>.train.<field>``, or ``train.<field>`` with the setting and dataset."""
    from trainer.units.registry import training_unit  # start-up time: the units import torch

    settings = {s.name: s for s in experiment.settings}

    def refuse(cell: CellSpec, field: str, message: str) -> InvalidInputError:
        key = field.split(".")[0]
        setting = settings.get(cell.setting)
        if field and setting is not None and key in setting.train:
            return InvalidInputError(f"settings.{setting.name}.train.{field}", message)
        if field and key in cell.dataset.train:
            return InvalidInputError(f"datasets.{cell.dataset.name}.train.{field}", message)
        return InvalidInputError(
            f"train.{field}" if field else "train", f"{message} (setting {cell.setting}, dataset {cell.dataset.name})"
        )

    for cell in cells:
        try:
            cell_config(cell)
        except ValidationError as exc:
            raise refuse(cell, *validation_error_line(exc.errors(include_url=False))) from None
        # an option the cell's mechanism never reads, refused as gdpfed train refuses its flag
        unit = unit_name(cell.scenario)
        mechanism = training_unit(unit)
        given = {**experiment.train, **cell.dataset.train, **getattr(settings.get(cell.setting), "train", {})}
        for name in mechanism.unused_options:
            if name in given:
                raise refuse(cell, name, unused_option_reason(name, mechanism, unit))


def cell_id(setting: str, dataset: str, method: str, seed: int) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+\-]", "_", f"{setting}__{dataset}__{method}__s{seed}")


def apply_setting(scenario: dict[str, Any], setting: Setting) -> dict[str, Any]:
    """The base scenario with ``setting``'s changes (pure; returns a new dict)."""
    out = json.loads(json.dumps(scenario))
    out.update(json.loads(json.dumps(setting.scenario)))
    groups = out.get("groups", [])
    for group in groups:
        group.update(json.loads(json.dumps(setting.group_fields)))
    if setting.silo_epsilons is not None:
        for index, silo in enumerate(out.get("silos", [])):
            silo["epsilon"] = setting.silo_epsilons[index % len(setting.silo_epsilons)]
    if setting.epsilon_scale is not None:
        for group in [*groups, *out.get("silos", [])]:
            if group.get("epsilon") is not None:
                group["epsilon"] = group["epsilon"] * setting.epsilon_scale
    if setting.group_shares is not None:
        if len(setting.group_shares) != len(groups):
            raise InvalidInputError(f"settings.{setting.name}.group_shares", f"needs {len(groups)} entries, one per group")
        total = sum(int(g["num_clients"]) for g in groups)
        share_sum = sum(setting.group_shares)
        counts = [max(1, round(total * s / share_sum)) for s in setting.group_shares]
        counts[-1] = max(1, total - sum(counts[:-1]))
        for group, count in zip(groups, counts):
            group["num_clients"] = count
    if setting.clip_scale is not None:
        out["clip_norm"] = out.get("clip_norm", 1.0) * setting.clip_scale
    if setting.keep_ratios is not None:
        if setting.keep_ratios == "auto":
            out["keep_ratio"] = "auto"
            for group in groups:
                group.pop("keep_ratio", None)
        else:
            if len(setting.keep_ratios) != len(groups):
                raise InvalidInputError(f"settings.{setting.name}.keep_ratios", f"needs {len(groups)} entries, one per group")
            for group, ratio in zip(groups, setting.keep_ratios):
                group["keep_ratio"] = ratio
    return out


def expand_cells(experiment: TrainExperiment, config_path: str | Path, *, smoke: bool = False) -> list[CellSpec]:
    """Every cell of the grid, in a stable order (setting, dataset, method, seed).

    Each cell's scenario is validated here by its privacy unit's scenario model (with a
    placeholder ``model_dim``; the real one comes from the model when the cell runs) and
    every method checked to plan that unit (``trainer.experiments.units``), so a bad
    configuration fails before any training, with ``InvalidInputError("config")`` naming
    ``config_path`` and the setting.
    """
    with naming_file("config", config_path):
        return _expand_cells(experiment, config_path, smoke=smoke)


def _expand_cells(experiment: TrainExperiment, config_path: str | Path, *, smoke: bool) -> list[CellSpec]:
    cells = []
    for setting in experiment.settings:
        base_scenario = apply_setting(experiment.scenario, setting)
        for dataset in experiment.datasets:
            train = {**experiment.train, **dataset.train, **setting.train}
            scenario, cell_train, cell_dataset = base_scenario, train, dataset
            if smoke:
                scenario, cell_train, cell_dataset = shrink_for_smoke(base_scenario, train, dataset)
            try:
                validate_scenario(scenario, [m.plan for m in experiment.method_entries()])
            except ValidationError as exc:  # the scenario's own model: at the field's path in it
                field, message = validation_error_line(exc.errors(include_url=False))
                raise InvalidInputError(f"settings.{setting.name}.scenario.{field}" if field else
                                        f"settings.{setting.name}.scenario", message) from None
            except ValueError as exc:  # InvalidInputError too
                raise InvalidInputError(f"settings.{setting.name}.scenario", str(exc)) from None
            for method in experiment.method_entries():
                for seed in experiment.seeds:
                    cells.append(
                        CellSpec(
                            cell_id=cell_id(setting.name, dataset.name, method.name, seed),
                            experiment=experiment.name,
                            config_path=str(config_path),
                            method=method.name,
                            plan_method=method.plan,
                            dataset=cell_dataset,
                            setting=setting.name,
                            seed=seed,
                            scenario=scenario,
                            train=cell_train,
                            strategy=method.strategy,
                            strategy_options=method.options,
                            smoke=smoke,
                        )
                    )
    _check_training_options(experiment, cells)
    ids = [c.cell_id for c in cells]
    if len(set(ids)) != len(ids):
        raise InvalidInputError("cells", "two cells have the same id (repeated setting or dataset name)")
    return cells


def cell_config(spec: CellSpec, secagg_workers: int | None = None) -> TrainConfig:
    """The cell's ``TrainConfig``: its dataset, model, rounds, seed and strategy, then the
    configuration's training options (pydantic's ``ValidationError`` if they are not valid).
    ``secagg_workers`` applies unless those options set it."""
    rounds = int(spec.scenario["rounds"])
    train = {"eval_every": rounds, **spec.train}
    if secagg_workers is not None:
        train.setdefault("secagg_workers", secagg_workers)
    return TrainConfig(
        dataset=spec.dataset.resolved_spec(),
        model=spec.dataset.model,
        model_options=spec.dataset.model_options,
        rounds=rounds,
        seed=spec.seed,
        checkpoint_every=rounds,
        strategy=spec.strategy,
        strategy_options=spec.strategy_options,
        **train,
    )
