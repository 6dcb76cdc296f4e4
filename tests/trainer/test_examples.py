"""The example that learns at scale (``examples/synthetic-3000.json``, docs/results.md §11):
3 groups x 1,000 clients, K = 300, LEAF synthetic with an MLP of 32 hidden units. Its
plans verify and predict a noise-to-signal ratio well below 1 for gdpfed_plus and
pooled_plus, and its model_dim is the model the README's command builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner import load_scenario, make_plan
from planner.verify import verify_executable
from trainer.data import load_dataset
from trainer.engines.params import num_params
from trainer.models import build_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "synthetic-3000.json"


def test_example_model_dim_is_the_readme_model():
    readme = (EXAMPLE.parents[1] / "README.md").read_text().replace("\\\n", " ")
    [command] = [line for line in readme.splitlines() if "gdpfed train --scenario examples/synthetic-3000.json" in line]
    for part in ("--dataset leaf_synthetic", "--partition natural", "--model mlp", "hidden=[32]", "exact_sum"):
        assert part in command
    scenario = load_scenario(EXAMPLE)
    assert [g.num_clients for g in scenario.groups] == [1000, 1000, 1000] and scenario.expected_clients == 300
    data = load_dataset("leaf_synthetic", num_clients=3, partition="natural", seed=0)
    assert num_params(build_model("mlp", data, seed=0, hidden=[32])) == scenario.model_dim


@pytest.mark.parametrize("method", ["gdpfed_plus", "pooled_plus"])
def test_example_plans_verify_and_leave_room_to_learn(method):
    plan = make_plan(load_scenario(EXAMPLE), method, clients_needed=False)
    verify_executable(plan)  # what the trainer runs first
    assert plan.predicted.noise_to_signal is not None and plan.predicted.noise_to_signal < 0.5
    assert not any("noise-to-signal" in w for w in plan.warnings)
