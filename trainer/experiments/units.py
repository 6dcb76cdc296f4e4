"""Experiment cells per privacy unit: which methods a cell may name, its smoke size and how the report shows it.

(docs/results.md §Runner.) The base scenario's ``privacy_unit`` (absent: ``client``)
picks one entry of ``EXPERIMENT_UNITS``; the scenario itself is validated by that unit's
own scenario model (``planner.units``). An entry says which planning methods its cells
may name, how ``--smoke`` shrinks its scenario and training options, and how the report
shows its cells. The function that plans and trains one of its cells is its line in
``trainer.experiments.cell.CELL_RUNS``. To run experiments of a new unit: add its line
below and its cell function's line there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accounting.errors import InvalidInputError
from planner.methods import METHODS
from planner.units import privacy_unit
from planner.units.metric_local import METHOD as METRIC_METHOD
from planner.units.metric_local import NAME as METRIC_NAME
from planner.units.silo_sample import NAME as SILO_NAME
from planner.units.silo_sample import SILO_METHODS

if TYPE_CHECKING:
    from trainer.experiments.config import DatasetEntry

SMOKE_ROUNDS = 2
SMOKE_CLIENTS_PER_GROUP = 8
SMOKE_TEST_SAMPLES = 200
SMOKE_SEQUENCE_LENGTH = 12

Shrunk = tuple[dict[str, Any], dict[str, Any], "DatasetEntry"]


@dataclass(frozen=True)
class ExperimentUnit:
    """One entry of ``EXPERIMENT_UNITS``.

    ``plan_methods``: the planning methods a cell of this unit may name.
    ``shrink(scenario, train, dataset)``: the smoke-size copies (never mutates).
    The rest says how ``trainer.experiments.report`` shows the unit's cells.
    """

    name: str
    plan_methods: tuple[str, ...]
    shrink: Callable[[dict[str, Any], dict[str, Any], DatasetEntry], Shrunk]
    # the report (trainer.experiments.report): what its cells' figures are, beside others'
    report_note: str = ""
    # the noise table's header when every cell is of this unit (None: the pools' sigmas)
    noise_header: str | None = None
    # one noise multiplier and sampling rate per silo: the table shows their range
    noise_range: bool = False
    # its cells' figures are leakages: the report adds the leakage table
    leakage_table: bool = False


def unit_name(scenario: dict[str, Any]) -> str:
    return str(scenario.get("privacy_unit", "client"))


def _smoke_options(dataset: DatasetEntry) -> DatasetEntry:
    """A small test set and short sequences (the loader's own options)."""
    options = dict(dataset.options)
    options["max_test_samples"] = min(int(options.get("max_test_samples", SMOKE_TEST_SAMPLES)), SMOKE_TEST_SAMPLES)
    if "sequence_length" in options:
        options["sequence_length"] = min(int(options["sequence_length"]), SMOKE_SEQUENCE_LENGTH)
    return dataset.model_copy(update={"options": options})


def _shrink_client(scenario: dict[str, Any], train: dict[str, Any], dataset: DatasetEntry) -> Shrunk:
    """``SMOKE_ROUNDS`` rounds, at most ``SMOKE_CLIENTS_PER_GROUP`` clients per group, half
    of them expected per round, one local step, a small test set."""
    for group in scenario["groups"]:
        group["num_clients"] = min(int(group["num_clients"]), SMOKE_CLIENTS_PER_GROUP)
    total = sum(g["num_clients"] for g in scenario["groups"])
    scenario.pop("sampling_rate", None)
    scenario["expected_clients"] = total / 2
    scenario["min_clients_per_pool"] = 1
    train["local_steps"] = 1
    return scenario, train, _smoke_options(dataset)


def _shrink_silo(scenario: dict[str, Any], train: dict[str, Any], dataset: DatasetEntry) -> Shrunk:
    """The first ``SMOKE_CLIENTS_PER_GROUP`` silos (their sizes and DP-SGD unchanged)."""
    scenario["silos"] = scenario["silos"][:SMOKE_CLIENTS_PER_GROUP]
    return scenario, train, dataset


def _shrink_metric(scenario: dict[str, Any], train: dict[str, Any], dataset: DatasetEntry) -> Shrunk:
    """At most ``SMOKE_CLIENTS_PER_GROUP`` clients per group, half of them a round, one local step."""
    for group in scenario["groups"]:
        group["num_clients"] = min(int(group["num_clients"]), SMOKE_CLIENTS_PER_GROUP)
    total = sum(int(g["num_clients"]) for g in scenario["groups"])
    scenario["clients_per_round"] = max(1, min(int(scenario["clients_per_round"]), total // 2))
    train["local_steps"] = 1
    if "max_test_samples" in dataset.options:  # loaders without a server test set refuse the option
        dataset = _smoke_options(dataset)
    return scenario, train, dataset


def shrink_for_smoke(scenario: dict[str, Any], train: dict[str, Any], dataset: DatasetEntry) -> Shrunk:
    """Smoke size: ``SMOKE_ROUNDS`` rounds, evaluation every round, and the unit's own
    shrinking (fewer clients or silos); pure (returns copies)."""
    scenario = json.loads(json.dumps(scenario))
    train = dict(train)
    scenario["rounds"] = min(int(scenario["rounds"]), SMOKE_ROUNDS)
    train["eval_every"] = 1
    return experiment_unit(scenario).shrink(scenario, train, dataset)


EXPERIMENT_UNITS: dict[str, ExperimentUnit] = {
    unit.name: unit
    for unit in (
        ExperimentUnit("client", tuple(METHODS), _shrink_client),
        ExperimentUnit(
            SILO_NAME, SILO_METHODS, _shrink_silo, noise_range=True,
            report_note=" Silo cells' epsilons are silo-specific sample-level (each silo's own examples, per silo), "
            "not client-level; accuracy is each silo's evaluated model on its own test split, sample-weighted.",
        ),
        ExperimentUnit(
            METRIC_NAME, (METRIC_METHOD,), _shrink_metric, leakage_table=True,
            # nu of a metric plan is the Laplace noise relative to the radius, no Gaussian sigma
            noise_header="metric noise multiplier nu",
            report_note=" Metric cells carry no epsilon: their figures are metric (d-)privacy leakages per client "
            "(n / nu per release, added over the client's releases; no delta, and the guarantee scales with the "
            "distance between models), never comparable with an epsilon; accuracy or RMSE is each client's best "
            "hypothesis on its own test rows.",
        ),
    )
}


def experiment_unit(scenario: dict[str, Any]) -> ExperimentUnit:
    """The entry of the scenario's privacy unit (``InvalidInputError`` naming an unknown one)."""
    name = unit_name(scenario)
    privacy_unit(name)  # unknown units: the registry's own error
    unit = EXPERIMENT_UNITS.get(name)
    if unit is None:
        raise InvalidInputError("scenario.privacy_unit", f"the experiment runner does not run {name} scenarios")
    return unit


def validate_scenario(scenario: dict[str, Any], plan_methods: list[str]) -> None:
    """The scenario validated by its unit's scenario model (``model_dim``, set from the
    model when a cell runs, as a placeholder) and every method a planning method of that
    unit; raises ``ValueError`` naming what is wrong."""
    unit = experiment_unit(scenario)
    model = privacy_unit(unit.name).scenario_model
    check = {**scenario, "model_dim": scenario.get("model_dim", 1)} if "model_dim" in model.model_fields else scenario
    model.model_validate(check)
    for method in plan_methods:
        if method not in unit.plan_methods:
            other = unit_of_plan_method(method) if method in all_plan_methods() else None
            where = f"{method} plans {other} scenarios" if other else f"unknown planning method {method!r}"
            raise ValueError(
                f"{unit.name} scenarios train with {', '.join(unit.plan_methods)}; {where}"
                + (f" (set privacy_unit: {other})" if other else "")
            )


def unit_of_plan_method(method: str) -> str:
    """The unit whose cells plan with ``method`` (``KeyError`` for an unknown one)."""
    return next(unit.name for unit in EXPERIMENT_UNITS.values() if method in unit.plan_methods)


def all_plan_methods() -> tuple[str, ...]:
    """Every planning method some unit's cells may name."""
    return tuple(m for unit in EXPERIMENT_UNITS.values() for m in unit.plan_methods)
