"""The strategy seam carries per-client persistent state through rounds and checkpoints,
and PlanStrategy on digits with a real gdpfed_plus plan learns."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch

from planner import Scenario, make_plan
from tests.trainer.trainer_plans import NullStream, hand_plan, quiet_progress
from trainer.data import load_dataset
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.run.progress import Progress
from trainer.runner import TrainConfig, execute_run, prepare_run
from trainer.units.client.strategies import PlanStrategy


class PersonalMix(PlanStrategy):
    """A toy Ditto-like strategy: each client keeps a personal copy of the model that it
    moves toward the global one and sends the global-model update computed from it.
    The personal copies never leave the client; they live in the strategy's state."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.personal: dict[int, torch.Tensor] = {}
        self.visits: dict[int, int] = {}

    def client_update(self, ctx, global_params, clients, groups):
        updates = super().client_update(ctx, global_params, clients, groups)
        for row, client in enumerate(clients.tolist()):
            trained = global_params + updates[row]
            previous = self.personal.get(client, global_params)
            self.personal[client] = 0.5 * previous + 0.5 * trained
            self.visits[client] = self.visits.get(client, 0) + 1
            # The shared update is the personal model's offset from the global one.
            updates[row] = self.personal[client] - global_params
        return updates

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        clients = sorted(self.personal)
        state["personal_clients"] = torch.tensor(clients, dtype=torch.int64)
        state["personal"] = torch.stack([self.personal[c] for c in clients]) if clients else torch.zeros(0)
        state["visits"] = torch.tensor([self.visits[c] for c in clients], dtype=torch.int64)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict({"momentum": state["momentum"]})
        clients = state["personal_clients"].tolist()
        self.personal = {c: state["personal"][i].clone() for i, c in enumerate(clients)}
        self.visits = {c: int(state["visits"][i]) for i, c in enumerate(clients)}


class Interrupt(Progress):
    def __init__(self, after: int) -> None:
        super().__init__(4, 0, stream=NullStream(), use_bar=False)
        self.after = after

    def round_done(self, record):
        self.after -= 1
        if self.after == 0:
            raise KeyboardInterrupt


def test_strategy_with_per_client_state_survives_checkpoint_and_resume(tmp_path):
    plan = hand_plan([("a", 4.0, 16, 0.5), ("b", 8.0, 16, 0.5)], [("p", ["a", "b"], 0.5, 3, 1.0)], rounds=4, model_dim=500)
    digits = load_dataset("digits", num_clients=32, seed=0)
    config = TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [8]}, rounds=4, local_steps=1, eval_every=4)

    def start(out, resume=False):
        return prepare_run(plan, plan.model_dump(mode="json"), config, out, resume=resume, dataset=digits,
                           strategy_factory=PersonalMix)

    whole = start(tmp_path / "whole")
    execute_run(whole, progress=quiet_progress(4))
    assert len(whole.strategy.personal) > 8
    assert max(whole.strategy.visits.values()) >= 2  # state carried across rounds

    with pytest.raises(KeyboardInterrupt):
        execute_run(start(tmp_path / "split"), progress=Interrupt(2))
    resumed = start(tmp_path / "split", resume=True)
    execute_run(resumed, progress=quiet_progress(4))
    assert resumed.strategy.visits == whole.strategy.visits
    assert all(torch.equal(resumed.strategy.personal[c], whole.strategy.personal[c]) for c in whole.strategy.personal)
    a = load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert torch.equal(a["global_params"], b["global_params"])
    assert a["ledger"] == b["ledger"]


def learning_run(tmp_path, rounds: int, clients_per_group: int, hidden: int, local_steps: int):
    scenario = Scenario(
        groups=[
            {"id": "strict", "epsilon": 4.0, "num_clients": clients_per_group},
            {"id": "medium", "epsilon": 8.0, "num_clients": clients_per_group},
            {"id": "relaxed", "epsilon": 16.0, "num_clients": clients_per_group},
        ],
        delta=1e-5,
        rounds=rounds,
        clip_norm=1.0,
        model_dim=64 * hidden + hidden + hidden * 10 + 10,
        expected_clients=clients_per_group * 0.6,
        keep_ratio=1.0,
        min_clients_per_pool=5,
    )
    plan = make_plan(scenario, "gdpfed_plus")
    config = TrainConfig(
        dataset="digits", model="mlp", model_options={"hidden": [hidden]}, rounds=rounds,
        local_steps=local_steps, lr=0.1, batch_size=16, eval_every=rounds,
    )
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run")
    summary = execute_run(prepared, progress=quiet_progress(rounds))
    return plan, summary


def test_gdpfed_plus_on_digits_learns_within_its_budget(tmp_path):
    plan, summary = learning_run(tmp_path, rounds=6, clients_per_group=100, hidden=32, local_steps=10)
    assert summary.final_accuracy > 0.5  # chance is 0.1
    for group in plan.groups:
        # The ledger ends exactly where the plan said it would, never above the target.
        assert summary.epsilon_spent[group.id] == pytest.approx(group.epsilon_spent, rel=1e-6)
        assert summary.epsilon_spent[group.id] <= group.epsilon * (1 + 1e-6)
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    assert len(records) == 6 and np.all(np.diff([r.epsilon_spent["strict"] for r in records]) > 0)


@pytest.mark.slow
def test_gdpfed_plus_on_digits_learns_longer(tmp_path):
    rounds = 30 if os.environ.get("GDPFED_FULL") else 12
    plan, summary = learning_run(tmp_path, rounds=rounds, clients_per_group=100, hidden=32, local_steps=10)
    assert summary.final_accuracy > 0.75
    for group in plan.groups:
        assert summary.epsilon_spent[group.id] <= group.epsilon * (1 + 1e-6)


@pytest.mark.parametrize(
    "method",
    ["nonprivate", "dp_fedavg", "gdpfed", "gdpfed_minus", "gdpfed_plus", "idp_sample", "idp_scale", "pooled_plus"],
)
def test_plan_strategy_executes_every_planner_method(method, tmp_path, small_digits):
    from accounting import Phase, epsilon_of_events, epsilon_of_phases
    from accounting.events import PoissonSampledSkellam
    from planner.discrete import released_sensitivities, rounded_l1_bound, rounded_l2_bound

    scenario = Scenario(
        groups=[
            {"id": "s", "epsilon": 2.0, "num_clients": 20},
            {"id": "m", "epsilon": 4.0, "num_clients": 20},
            {"id": "out", "epsilon": None, "num_clients": 20},
        ],
        delta=1e-5, rounds=20, model_dim=600, expected_clients=24, min_clients_per_pool=2,
    )
    plan = make_plan(scenario, method)
    config = TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [8]}, rounds=2, local_steps=1)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run", dataset=small_digits)
    # The engine clips each group to the plan's (possibly per-group) clip norm.
    for mechanism in prepared.engine.mechanisms:
        for group_id, clip in mechanism.clip_norms.items():
            assert clip == plan.group(group_id).clip_norm
    summary = execute_run(prepared, progress=quiet_progress(2))
    assert summary.complete
    for group in plan.groups:
        sigma = group.effective_noise_multiplier
        if method == "nonprivate" or group.epsilon is None:
            assert summary.epsilon_spent[group.id] is None
            continue
        block = plan.pool(group.pool).discrete
        if block is None:  # the continuous path (a method whose pools carry no discrete block)
            phases = [Phase(sampling_rate=group.sampling_rate, noise_multiplier=sigma, steps=2)]
            expected = epsilon_of_phases(phases, 1e-5, plan.scenario.accountant).epsilon  # the ledger's accountant
        else:
            # the default discrete mechanism: the block's Poisson-subsampled Skellam event, recomputed
            # by hand from the block (the group's clip on the pool's grid), at delta less the wrap charge
            rounded = rounded_l2_bound(group.clip_norm, block.scale, block.dimension)
            l2, l1 = released_sensitivities(rounded, rounded_l1_bound(rounded, block.dimension), block.count_factor)
            event = PoissonSampledSkellam(sampling_rate=group.sampling_rate, variance=block.total_variance,
                                          l2_sensitivity=l2, l1_sensitivity=l1, steps=2)
            expected = epsilon_of_events([event], delta=1e-5 - 2 * block.wrap_probability_per_round,
                                         accountant=plan.scenario.accountant).epsilon
            # and the plan states the same event's figure over all its rounds (docs/ledger.md §3)
            whole = event.model_copy(update={"steps": plan.rounds})
            stated = epsilon_of_events([whole], delta=1e-5 - plan.rounds * block.wrap_probability_per_round,
                                       accountant=plan.scenario.accountant).epsilon
            assert group.epsilon_spent == pytest.approx(stated, rel=1e-9)
        assert summary.epsilon_spent[group.id] == pytest.approx(expected, rel=1e-9)
        assert summary.epsilon_spent[group.id] < group.epsilon


@pytest.fixture(scope="module")
def small_digits():
    return load_dataset("digits", num_clients=60, seed=0)
