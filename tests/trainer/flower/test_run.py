"""A whole plan run on Flower equals `gdpfed train`: same rounds, model, ledger; resume exact; settings checked."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from accounting.errors import InvalidInputError
from planner import make_plan
from planner.schema import Scenario
from tests.trainer.flower.conftest import write_plan_bundle
from tests.trainer.trainer_plans import comparable, interrupt_after, quiet_progress
from trainer.data import load_dataset
from trainer.flower.client_app import build_client_app
from trainer.flower.server_app import run_plan
from trainer.flower.settings import FlowerOptions, run_config_of
from trainer.flower.testing import LoopbackGrid
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.runner import TrainConfig, execute_run, prepare_run

ROUNDS = 2


@pytest.fixture(scope="module")
def plan():
    scenario = Scenario(
        groups=[{"id": "strict", "epsilon": 4.0, "num_clients": 6}, {"id": "loose", "epsilon": 12.0, "num_clients": 6}],
        delta=1e-4, rounds=ROUNDS, clip_norm=1.0, model_dim=1210, expected_clients=8, min_clients_per_pool=2,
    )
    return make_plan(scenario, "gdpfed")


@pytest.fixture(scope="module")
def digits(plan):
    return load_dataset("digits", num_clients=plan.scenario.total_clients, seed=0)


def config() -> TrainConfig:
    return TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [16]}, rounds=ROUNDS, local_steps=2,
                       lr=0.1, batch_size=16, engine="loop", server_momentum=0.5)


def test_flower_run_equals_gdpfed_train_resumes_exactly_and_spends_the_plans_epsilon(plan, digits, tmp_path):
    document = plan.model_dump(mode="json")
    simulated = execute_run(prepare_run(plan, document, config(), tmp_path / "sim", dataset=digits),
                            progress=quiet_progress(ROUNDS))

    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), config())
    # node i is the dataset's client i, dealt into its group and drawing its noise as `gdpfed train` does
    nodes = {1000 + i: {"partition-id": i, "gdpfed-simulation": True} for i in range(plan.scenario.total_clients)}
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), nodes, run_config)
    with pytest.raises(KeyboardInterrupt):
        run_plan(grid, document, run_config, dataset=digits, progress=interrupt_after(ROUNDS, 1))
    resumed = run_plan(grid, document, {**run_config, "resume": True}, dataset=digits, progress=quiet_progress(ROUNDS))

    assert resumed.complete and resumed.rounds_run == ROUNDS
    flower_rounds = read_rounds(tmp_path / "flower" / "rounds.jsonl")
    assert comparable(flower_rounds) == comparable(read_rounds(tmp_path / "sim" / "rounds.jsonl"))
    assert sum(sum(r.survived.values()) for r in flower_rounds) > 0
    assert torch.equal(load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "sim" / "checkpoint.pt")["global_params"])
    # the shared ledger: after the plan's rounds each group has spent the plan's epsilon
    assert resumed.epsilon_spent == simulated.epsilon_spent
    # (on the default mechanism, distributed Skellam, whose figures the plan states: each group's
    # epsilon_spent is its blocks' events over the plan's rounds, docs/ledger.md §3)
    assert all(pool.discrete is not None for pool in plan.pools if pool.noise_multiplier > 0)
    for group in plan.groups:
        assert resumed.epsilon_spent[group.id] == pytest.approx(group.epsilon_spent, rel=1e-12)
        assert resumed.epsilon_spent[group.id] <= group.epsilon


def test_bad_run_settings_are_refused_before_anything_is_written(plan, tmp_path, monkeypatch):
    monkeypatch.delenv("GDPFED_API_KEY", raising=False)
    document = plan.model_dump(mode="json")
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), {}, {})
    base: dict[str, Any] = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "run")}), config())
    cases: list[tuple[dict[str, Any], str]] = [
        ({"rounds": ROUNDS + 1}, "rounds"),
        ({"local-steps": 0}, "local-steps"),
        ({"late-dropout-fraction": 0.5}, "late-dropout-fraction"),
        ({"secagg-workers": 2}, "secagg-workers"),
        ({"strategy": "fedprox"}, "strategy"),
        ({"step-timeout": -1.0}, "step-timeout"),
        ({"model-options": "{not json"}, "model-options"),
        ({"report-to": "http://127.0.0.1:9"}, "report-to"),
    ]
    for change, field in cases:
        with pytest.raises(InvalidInputError) as error:
            run_plan(grid, document, {**base, **change}, api_key=None)
        assert error.value.field == field, (change, error.value)
        assert not (tmp_path / "run").exists()
    overspending = json.loads(json.dumps(document))
    halved = overspending["groups"][0]["epsilon_spent"] / 2  # in the scenario too, which fixes the budget
    overspending["groups"][0]["epsilon"] = overspending["scenario"]["groups"][0]["epsilon"] = halved
    with pytest.raises(InvalidInputError):
        run_plan(grid, overspending, base)
    assert not (tmp_path / "run").exists()
