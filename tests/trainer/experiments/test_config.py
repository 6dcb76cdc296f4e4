"""Experiment configs select methods and strategies through the registries: a planning
method's name, a strategy's name (its default plan, options under ``strategies:`` or the
older ``pfa:`` block), or ``{name, plan, strategy, options}``; names, options and plan
methods are checked when the configuration is read."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tests.trainer.experiments.test_runner import TINY
from trainer.experiments.config import TrainExperiment, expand_cells


def experiment(**changes: Any) -> TrainExperiment:
    data = {**yaml.safe_load(TINY), **changes}
    return TrainExperiment.model_validate(data)


def cells_by_method(exp: TrainExperiment) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {c.method: (c.plan_method, c.strategy, c.strategy_options) for c in expand_cells(exp, "tiny.yaml")}


def test_names_resolve_to_plan_and_strategy_with_explicit_options():
    cells = cells_by_method(experiment())
    assert cells["gdpfed_plus"] == ("gdpfed_plus", "plan", {})
    assert cells["pfa"] == ("gdpfed", "pfa", {"rank": 4, "history": 8})  # every option recorded
    assert cells_by_method(experiment(pfa={"rank": 2}))["pfa"] == ("gdpfed", "pfa", {"rank": 2, "history": 8})
    assert cells_by_method(experiment(strategies={"pfa": {"history": 3}}))["pfa"] == (
        "gdpfed", "pfa", {"rank": 4, "history": 3}
    )


def test_an_entry_runs_any_strategy_on_any_plan_it_accepts():
    entry = {"name": "pfa_plus", "plan": "gdpfed_plus", "strategy": "pfa", "options": {"rank": 1}}
    cells = cells_by_method(experiment(methods=["gdpfed", entry]))
    assert cells["pfa_plus"] == ("gdpfed_plus", "pfa", {"rank": 1, "history": 8})
    assert {c.cell_id for c in expand_cells(experiment(methods=[entry]), "t")} == {
        "default__digits__pfa_plus__s0", "default__digits__pfa_plus__s1"
    }


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"methods": ["fedsgd"]}, "unknown method 'fedsgd'"),
        ({"methods": [{"name": "x", "plan": "gdpfed", "strategy": "fedsgd"}]}, "unknown strategy 'fedsgd'"),
        ({"methods": [{"name": "x", "plan": "gdpfed++", "strategy": "plan"}]}, "unknown plan method 'gdpfed++'"),
        ({"methods": [{"name": "x", "plan": "dp_fedavg", "strategy": "pfa"}]}, "runs on plans of gdpfed"),
        ({"pfa": {"rank": 0}}, "strategies.pfa.rank"),
        ({"strategies": {"pfa": {"depth": 2}}}, "strategies.pfa.depth"),
        ({"pfa": {"rank": 2}, "strategies": {"pfa": {"rank": 3}}}, "not both"),
        ({"methods": ["gdpfed", {"name": "gdpfed", "plan": "gdpfed_plus"}]}, "listed twice"),
    ],
)
def test_bad_methods_and_options_are_refused_when_read(changes: dict[str, Any], words: str):
    with pytest.raises(ValidationError) as exc:
        experiment(**changes)
    assert words in str(exc.value)


FEDHDP = {"name": "h", "plan": "gdpfed_plus", "strategy": "fedhdp"}
LAMBDAS = "a number >= 0, or a mapping of group id to a number >= 0 (strategy fedhdp)"


def test_an_unknown_model_is_refused_when_read_naming_its_dataset_entry():
    """Not at its first cell, after the cells of every dataset before it had trained."""
    from app.cli import format_validation_error

    datasets = yaml.safe_load(TINY)["datasets"]
    bad = [*datasets, {**datasets[0], "name": "other", "model": "mlpz"}]
    with pytest.raises(ValidationError) as exc:
        experiment(datasets=bad)
    assert format_validation_error(exc.value).startswith(
        f"datasets.{len(datasets)}.model: unknown model 'mlpz'; use one of mlp, cnn"
    ), format_validation_error(exc.value)
    assert experiment(datasets=[{**datasets[0], "model": "MLP"}])  # build_model's reading: case ignored


@pytest.mark.parametrize(
    "changes, line",
    [
        ({"methods": ["gdpfed", 3]},
         "methods.1: must be a method's name or a mapping with name, plan and optionally strategy, options"),
        ({"methods": [{"name": "x"}]}, "methods.0.plan: Field required"),
        ({"methods": [{"name": "x", "plan": "gdpfed", "opts": {}}]}, "methods.0.opts: unknown field 'opts'; did you mean 'options'?"),
        ({"methods": ["gdpfed", "fedsgd"]}, "methods.1: unknown method 'fedsgd'"),
        ({"methods": [{"name": "x", "plan": "gdpfed", "strategy": "fedsgd"}]}, "methods.0.strategy: unknown strategy 'fedsgd'"),
        ({"methods": ["gdpfed", "gdpfed"]}, "methods.1: 'gdpfed' is listed twice"),
        ({"methods": [{**FEDHDP, "options": {"lambdas": "high"}}]}, f"methods.0.options.lambdas: must be {LAMBDAS}"),
        ({"methods": [{**FEDHDP, "options": {"lambdas": -1}}]}, f"methods.0.options.lambdas: must be {LAMBDAS}"),
        ({"methods": [{**FEDHDP, "options": {"lambdas": {"a": -1}}}]},
         "methods.0.options.lambdas.a: Input should be greater than or equal to 0 (strategy fedhdp)"),
        ({"methods": ["fedhdp"], "strategies": {"fedhdp": {"lambdas": [0.1]}}}, f"strategies.fedhdp.lambdas: must be {LAMBDAS}"),
        ({"settings": [{"name": "s", "keep_ratios": 0.5}]},
         "settings.0.keep_ratios: must be a list of numbers in [1e-06, 1], one per group, or 'auto'"),
        ({"settings": [{"name": "s", "keep_ratios": "all"}]},
         "settings.0.keep_ratios: must be a list of numbers in [1e-06, 1], one per group, or 'auto'"),
        ({"settings": [{"name": "s", "keep_ratios": [0.5, 2]}]}, "settings.0.keep_ratios.1: Input should be less than or equal to 1"),
    ],
)
def test_one_mistake_in_a_union_typed_field_is_one_error_naming_its_path(changes: dict[str, Any], line: str):
    """Not one error per union member under pydantic's member tags (methods.0.str,
    keep_ratios.list[float], lambdas.dict[str,float]): the path the config wrote and what it takes."""
    from app.cli import format_validation_error

    with pytest.raises(ValidationError) as exc:
        experiment(**changes)
    assert len(exc.value.errors()) == 1, exc.value.errors()
    assert format_validation_error(exc.value).startswith(line), format_validation_error(exc.value)


SILOS = {
    "privacy_unit": "silo_sample",
    "silos": [{"id": f"s{k}", "num_samples": 100, "epsilon": 1.0} for k in range(4)],
    "delta": 1e-5, "rounds": 3, "batch_size": 10, "clip_norm": 1.0,
}


def test_silo_methods_are_their_own_strategies_and_settings_mix_budgets():
    exp = experiment(  # silo runs take batch sizes and steps from the plan: TINY's would be refused
        scenario=SILOS, train={"lr": 0.1}, methods=["mrmtl", "local", {"name": "mrmtl-l3", "plan": "mrmtl", "options": {"prox": 3.0}}],
        strategies={"mrmtl": {"prox": 0.3}}, settings=[{"name": "mix", "silo_epsilons": [0.5, 4.0]}],
    )
    cells = expand_cells(exp, "silo.yaml")
    by_method = {c.method: c for c in cells if c.seed == 0}
    assert (by_method["mrmtl"].plan_method, by_method["mrmtl"].strategy_options) == ("mrmtl", {"prox": 0.3})
    assert (by_method["mrmtl-l3"].plan_method, by_method["mrmtl-l3"].strategy_options) == ("mrmtl", {"prox": 3.0})
    assert [s["epsilon"] for s in by_method["local"].scenario["silos"]] == [0.5, 4.0, 0.5, 4.0]
    smoke = expand_cells(exp, "silo.yaml", smoke=True)
    assert all(c.scenario["rounds"] <= 2 for c in smoke)


def test_silo_and_client_methods_do_not_mix():
    from accounting.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="silo_sample scenarios train with mrmtl.*gdpfed plans client"):
        expand_cells(experiment(scenario=SILOS, methods=["mrmtl", "gdpfed"]), "x.yaml")
    with pytest.raises(InvalidInputError, match="mrmtl plans silo_sample scenarios .set privacy_unit: silo_sample"):
        expand_cells(experiment(methods=["gdpfed", "mrmtl"]), "x.yaml")


METRIC = {"privacy_unit": "metric_local", "groups": [{"id": "all", "num_clients": 20, "noise_multiplier": 5.0}],
          "rounds": 3, "clients_per_round": 4, "hypotheses": 2, "radius_rule": "public", "radius": 0.1}


def test_metric_scenarios_run_metric_ifca_through_the_unit_seam():
    from accounting.errors import InvalidInputError

    exp = experiment(scenario=METRIC, methods=["metric_ifca"],
                     settings=[{"name": "k1-nu1", "scenario": {"hypotheses": 1}, "group_fields": {"noise_multiplier": 1.0}}])
    cells = expand_cells(exp, "m.yaml")
    assert {(c.plan_method, c.strategy) for c in cells} == {("metric_laplace", "metric_ifca")}
    assert cells[0].scenario["hypotheses"] == 1 and cells[0].scenario["groups"][0]["noise_multiplier"] == 1.0
    smoke = expand_cells(exp, "m.yaml", smoke=True)[0].scenario
    assert smoke["rounds"] == 2 and smoke["groups"][0]["num_clients"] == 8 and smoke["clients_per_round"] == 4
    # the metric strategy on a client scenario, client methods on a metric scenario, and a
    # client strategy on the metric plan are all refused when the configuration is read
    with pytest.raises(InvalidInputError, match="client scenarios train with .*metric_laplace plans metric_local"):
        expand_cells(experiment(methods=["metric_ifca"]), "x.yaml")
    with pytest.raises(InvalidInputError, match="metric_local scenarios train with metric_laplace; gdpfed plans client"):
        expand_cells(experiment(scenario=METRIC, methods=["gdpfed"]), "x.yaml")
    with pytest.raises(ValidationError, match="strategy plan runs client plans, metric_laplace plans metric_local"):
        experiment(scenario=METRIC, methods=[{"name": "x", "plan": "metric_laplace", "strategy": "plan"}])
    with pytest.raises(InvalidInputError, match="radius_rule public needs a radius"):
        expand_cells(experiment(scenario={**METRIC, "radius": None}, methods=["metric_ifca"]), "x.yaml")
