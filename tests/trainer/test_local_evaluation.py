"""Local test data through a run: accuracy by group in rounds.jsonl and summary.json, the
skewed opt-out assignment, and the config fields that select them (docs/trainer.md §Data,
§Clients and groups, §Evaluation)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from tests.trainer.trainer_plans import hand_plan, quiet_progress
from trainer.data import assign_groups, clients_with_label, load_dataset
from trainer.engines import evaluate_clients
from trainer.run.metrics import read_rounds
from trainer.run.preparation import build_population
from trainer.runner import TrainConfig, execute_run, prepare_run

ROUNDS = 2


@pytest.fixture(scope="module")
def plan():
    # 36 private clients and 4 opted out, everyone sampled every round
    return hand_plan(
        [("private", 3.0, 36, 1.0), ("out", None, 4, 1.0)],
        [("P1", ["private"], 1.0, 4, 1.0), ("P2", ["out"], 0.0, 1, 1.0)],
        rounds=ROUNDS,
        model_dim=700,
    )


@pytest.fixture(scope="module")
def one_label():
    return load_dataset("digits", num_clients=40, partition="one_label", seed=0, client_test_fraction=0.25)


def config(**overrides):
    base = dict(dataset="digits", model="mlp", model_options={"hidden": [10]}, rounds=ROUNDS, local_steps=2, lr=0.1,
                batch_size=8, partition="one_label", dataset_options={"client_test_fraction": 0.25})
    base.update(overrides)
    return TrainConfig(**base)


def test_a_run_reports_each_groups_local_accuracy(plan, one_label, tmp_path):
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config(), tmp_path / "run", dataset=one_label)
    summary = execute_run(prepared, progress=quiet_progress(ROUNDS))
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    assert set(records[-1].accuracy_by_group) == {"private", "out"}
    # the reported numbers are the global model's per-client accuracies averaged per group
    params = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["global_params"]
    assert summary.accuracy_by_group is not None
    for group, clients in prepared.population.group_clients.items():
        scores = evaluate_clients(prepared.model, params, one_label, clients.tolist())
        expected = float(np.mean((scores.correct.double() / scores.count.double()).numpy()))
        assert summary.accuracy_by_group[group] == pytest.approx(expected)
        assert records[-1].accuracy_by_group[group] == pytest.approx(expected)
    stored = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert stored["accuracy_by_group"] == summary.accuracy_by_group
    assert stored["personal_accuracy"] is None  # the plan strategy keeps no personal models


def test_without_local_test_data_there_is_no_accuracy_by_group(plan, tmp_path):
    data = load_dataset("digits", num_clients=40, seed=0)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config(partition="iid", dataset_options={}),
                           tmp_path / "run", dataset=data)
    summary = execute_run(prepared, progress=quiet_progress(ROUNDS))
    assert summary.accuracy_by_group is None
    assert read_rounds(tmp_path / "run" / "rounds.jsonl")[-1].accuracy_by_group == {}


def test_skewed_assignment_fills_opted_out_groups_with_one_label(plan, one_label):
    population, warnings = build_population(plan, one_label, seed=3, opt_out_assignment="skewed", skewed_label=7)
    assert warnings == []
    sevens = set(clients_with_label(one_label, 7).tolist())
    assert len(sevens) == 4 and set(population.clients("out").tolist()) <= sevens
    assert population.clients("private").size == 36
    random, _ = build_population(plan, one_label, seed=3)
    labels_out = {int(one_label.train_y[one_label.client_indices[c][0]]) for c in random.clients("out")}
    assert labels_out != {7}  # a random deal draws the opted-out clients from several labels
    # a label held by too few clients: the rest are dealt at random, and the run is told
    few = hand_plan([("private", 3.0, 30, 1.0), ("out", None, 10, 1.0)],
                    [("P1", ["private"], 1.0, 4, 1.0), ("P2", ["out"], 0.0, 1, 1.0)], rounds=ROUNDS, model_dim=700)
    short, warnings = build_population(few, one_label, seed=3, opt_out_assignment="skewed", skewed_label=7)
    assert sevens <= set(short.clients("out").tolist()) and short.clients("out").size == 10
    assert len(warnings) == 1 and "only 4 clients hold label 7" in warnings[0]
    # a label nobody holds is refused, naming the option
    with pytest.raises(InvalidInputError) as info:
        build_population(plan.model_copy(update={"groups": plan.groups}), one_label, seed=3,
                         opt_out_assignment="skewed", skewed_label=11)
    assert info.value.field == "skewed_label"


def test_assign_groups_with_first_groups_keeps_the_plain_deal_otherwise():
    plain = assign_groups([3, 5, 2], 12, seed=4)
    assert assign_groups([3, 5, 2], 12, seed=4, first=(), candidates=np.arange(12)) == plain
    skewed = assign_groups([3, 5, 2], 12, seed=4, first=[2], candidates=np.array([0, 1, 2]))
    assert [c for c, g in enumerate(skewed) if g == 2] in ([0, 1], [0, 2], [1, 2])
    assert sorted(skewed) == sorted(plain)
    topped_up = assign_groups([3, 5, 2], 12, seed=4, first=[2], candidates=np.array([9]))
    assert topped_up[9] == 2 and topped_up.count(2) == 2 and sorted(topped_up) == sorted(plain)


def test_config_fingerprint_ignores_new_fields_at_their_defaults():
    base = TrainConfig(dataset="digits", model="mlp", rounds=2)
    data = base.fingerprint_data()
    for name in ("dataset_options", "opt_out_assignment", "skewed_label", "strategy", "strategy_options"):
        assert name not in data
    skewed = TrainConfig(dataset="digits", model="mlp", rounds=2, opt_out_assignment="skewed")
    assert skewed.fingerprint_data()["opt_out_assignment"] == "skewed"


def test_evaluate_clients_matches_evaluate_on_each_clients_rows(one_label):
    from trainer.engines import evaluate, num_params
    from trainer.models import build_model

    torch.manual_seed(0)
    model = build_model("mlp", one_label, seed=0, hidden=[10])
    clients = [0, 3, 5, 17]
    rows = torch.randn(len(clients), num_params(model), dtype=torch.float64) * 0.3
    model = model.double()
    per_row = evaluate_clients(model, rows, one_label, clients, batch_size=7)  # several vmap chunks
    shared = evaluate_clients(model, rows[1], one_label, clients, batch_size=5)
    for i, client in enumerate(clients):
        x, y = one_label.client_test_data(client)
        single = evaluate(model, rows[i], (x, y))
        assert per_row.count[i] == y.numel() > 0
        assert float(per_row.accuracy[i]) == pytest.approx(single["accuracy"])
        assert float(per_row.loss[i]) == pytest.approx(single["loss"], rel=1e-9)
    same = evaluate(model, rows[1], one_label.client_test_data(clients[1]))
    assert float(shared.accuracy[1]) == pytest.approx(same["accuracy"])
    assert shared.mean_accuracy() == pytest.approx(float(shared.accuracy.mean()))
    with pytest.raises(InvalidInputError):
        evaluate_clients(model, rows, load_dataset("digits", num_clients=40, seed=0), clients)
