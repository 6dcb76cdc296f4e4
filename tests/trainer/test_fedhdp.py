"""FedHDP strategy (docs/trainer.md §FedHDP): per-pool ratios, Ditto personal models that
never change what is released, the ledger, checkpoint/resume, option errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from tests.trainer.test_strategies import Interrupt
from tests.trainer.trainer_plans import hand_plan, quiet_progress
from trainer.data import load_dataset
from trainer.engines import LocalTrainingConfig, train_clients
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.run.plots import local_accuracy_series
from trainer.runner import TrainConfig, execute_run, prepare_run
from trainer.strategies import RoundContext
from trainer.units.client.strategies import FedHDPStrategy, PlanStrategy
from trainer.units.strategies import build_strategy

ROUNDS = 4


@pytest.fixture(scope="module")
def plan():
    # 36 private clients and 4 opted out, sampled at q = 0.5
    return hand_plan(
        [("private", 3.0, 36, 0.5), ("out", None, 4, 0.5)],
        [("P1", ["private"], 1.0, 2, 1.0), ("P2", ["out"], 0.0, 1, 1.0)],
        rounds=ROUNDS,
        model_dim=700,
        method="gdpfed",
    )


@pytest.fixture(scope="module")
def data():
    return load_dataset("digits", num_clients=40, partition="one_label", seed=0, client_test_fraction=0.25)


def config(**overrides):
    base = dict(dataset="digits", model="mlp", model_options={"hidden": [10]}, rounds=ROUNDS, local_steps=2, lr=0.1,
                batch_size=8, partition="one_label", dataset_options={"client_test_fraction": 0.25}, eval_every=2)
    base.update(overrides)
    return TrainConfig(**base)


def run(plan, data, out, strategy="plan", options=None, resume=False, progress=None):
    cfg = config(strategy=strategy, strategy_options=options or {})
    prepared = prepare_run(plan, plan.model_dump(mode="json"), cfg, out, resume=resume, dataset=data)
    summary = execute_run(prepared, progress=progress or quiet_progress(ROUNDS))
    return prepared, summary


def strategy(plan, data, **options):
    from trainer.models import build_model

    model = build_model("mlp", data, seed=0, hidden=[10])
    local = LocalTrainingConfig(local_steps=2, batch_size=8, lr=0.1)
    return build_strategy("fedhdp", options, plan, model=model, dataset=data, engine="batched", local=local,
                          device=torch.device("cpu"))


def pool_sums(dim=700):
    generator = torch.Generator().manual_seed(1)
    return {"P1": torch.randn(dim, generator=generator, dtype=torch.float64),
            "P2": torch.randn(dim, generator=generator, dtype=torch.float64)}


def test_ratio_one_is_the_plan_strategys_aggregation_bit_for_bit(plan, data):
    ctx = RoundContext(0, 0, 0)
    fedhdp = strategy(plan, data, ratios={"P1": 1.0})
    plain = PlanStrategy(plan, fedhdp.model, data, engine="batched", local=fedhdp.local, device=torch.device("cpu"))
    sums = pool_sums()
    assert torch.equal(fedhdp.aggregate(ctx, sums, 700), plain.aggregate(ctx, sums, 700))
    assert torch.equal(fedhdp.aggregate(ctx, {"P1": None, "P2": sums["P2"]}, 700),
                       plain.aggregate(ctx, {"P1": None, "P2": sums["P2"]}, 700))


def test_ratios_weight_pools_over_a_fixed_denominator(plan, data):
    ctx = RoundContext(0, 0, 0)
    sums = pool_sums()
    k_private, k_out = plan.pool("P1").expected_clients, plan.pool("P2").expected_clients
    r = 0.1
    got = strategy(plan, data, ratios={"P1": r}).aggregate(ctx, sums, 700)
    assert torch.allclose(got, (r * sums["P1"] + sums["P2"]) / (r * k_private + k_out), rtol=1e-12)
    # r = 0: only the opted-out pool counts
    only_out = strategy(plan, data, ratios={"P1": 0.0}).aggregate(ctx, sums, 700)
    assert torch.allclose(only_out, sums["P2"] / k_out, rtol=1e-12)
    # an aborted pool adds 0 and the denominator stays
    aborted = strategy(plan, data, ratios={"P1": r}).aggregate(ctx, {"P1": sums["P1"], "P2": None}, 700)
    assert torch.allclose(aborted, r * sums["P1"] / (r * k_private + k_out), rtol=1e-12)


def test_personal_models_are_ditto_steps_and_leave_the_released_rows_alone(plan, data):
    ctx = RoundContext(0, 0, 0)
    fedhdp = strategy(plan, data, lambdas={"private": 0.5, "out": 0.01}, personal_lr=0.05)
    plain = PlanStrategy(plan, fedhdp.model, data, engine="batched", local=fedhdp.local, device=torch.device("cpu"))
    params = torch.cat([p.detach().flatten() for p in fedhdp.model.parameters()])
    clients = np.array([0, 1, 2, 37])
    groups = ["private", "private", "private", "out"]
    rows = fedhdp.client_update(ctx, params, clients, groups)
    assert torch.equal(rows, plain.client_update(ctx, params, clients, groups))
    # first visit: the personal model starts at the received model, anchored there, lambda per group
    local = LocalTrainingConfig(local_steps=2, batch_size=8, lr=0.05)
    expected = params + train_clients("batched", fedhdp.model, params, data, clients.tolist(), local, seed=0,
                                      round_index=0, device="cpu", prox=[0.5, 0.5, 0.5, 0.01])
    for row, client in enumerate(clients.tolist()):
        assert torch.allclose(fedhdp.personal[client], expected[row], atol=1e-6)
    # a second visit starts from the personal model, not the global one
    later = RoundContext(1, 1, 0)
    before = fedhdp.personal[0].clone()
    fedhdp.client_update(later, params, np.array([0]), ["private"])
    again = before + train_clients("batched", fedhdp.model, params, data, [0], local, seed=0, round_index=1,
                                   device="cpu", start=before[None], anchor=params, prox=0.5)[0]
    assert torch.allclose(fedhdp.personal[0], again, atol=1e-6)
    assert fedhdp.personal.keys() == {0, 1, 2, 37}  # created lazily: only clients that trained


def test_runs_release_and_account_exactly_what_the_plan_strategy_does(plan, data, tmp_path):
    _, plain = run(plan, data, tmp_path / "plan")
    prepared, personal = run(plan, data, tmp_path / "fedhdp", "fedhdp", {"lambdas": 0.1})
    # r = 1 with personal models: the same global model, bit for bit, and the same ledger
    a = load_checkpoint(tmp_path / "plan" / "checkpoint.pt")
    b = load_checkpoint(tmp_path / "fedhdp" / "checkpoint.pt")
    assert torch.equal(a["global_params"], b["global_params"])
    assert a["ledger"] == b["ledger"]
    assert personal.accuracy_by_group == plain.accuracy_by_group
    assert personal.personal_accuracy is not None and plain.personal_accuracy is None
    assert set(personal.personal_accuracy_by_group or {}) == {"private", "out"}
    stored = json.loads((tmp_path / "fedhdp" / "summary.json").read_text())
    assert stored["personal_accuracy"] == personal.personal_accuracy
    assert (tmp_path / "fedhdp" / "local_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = read_rounds(tmp_path / "fedhdp" / "rounds.jsonl")
    assert set(local_accuracy_series(records)) == {"global, private", "global, out", "personal, private", "personal, out"}
    # other ratios change the model but never the privacy spent
    run(plan, data, tmp_path / "small_r", "fedhdp", {"ratios": {"P1": 0.1}, "lambdas": 1.0})
    c = load_checkpoint(tmp_path / "small_r" / "checkpoint.pt")
    assert c["ledger"] == a["ledger"]
    assert not torch.equal(c["global_params"], a["global_params"])


def test_personal_models_survive_checkpoint_and_resume(plan, data, tmp_path):
    whole, _ = run(plan, data, tmp_path / "whole", "fedhdp", {"ratios": {"P1": 0.2}})
    with pytest.raises(KeyboardInterrupt):
        run(plan, data, tmp_path / "split", "fedhdp", {"ratios": {"P1": 0.2}}, progress=Interrupt(2))
    resumed, _ = run(plan, data, tmp_path / "split", "fedhdp", {"ratios": {"P1": 0.2}}, resume=True)
    assert resumed.strategy.personal.keys() == whole.strategy.personal.keys()
    assert all(torch.equal(resumed.strategy.personal[c], whole.strategy.personal[c]) for c in whole.strategy.personal)
    a = load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert torch.equal(a["global_params"], b["global_params"])


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"ratios": {"P9": 0.1}}, ["ratios", "unknown pool 'P9'"]),
        ({"ratios": {"P1": 1.5}}, ["ratios", "[0, 1]"]),
        ({"ratios": {"P2": 0.5}}, ["ratios", "no noise"]),
        ({"lambdas": {"nobody": 0.1}}, ["lambdas", "unknown group 'nobody'"]),
        ({"lambdas": -1.0}, ["lambdas", ">= 0"]),
        ({"adaptive_clip": True}, ["adaptive_clip", "no adaptive_clip block"]),
    ],
)
def test_bad_options_are_named(plan, data, options, words):
    with pytest.raises(InvalidInputError) as info:
        strategy(plan, data, **options)
    text = f"{info.value.field} {info.value}"
    assert all(word in text for word in words), text


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ("high", "strategy-option lambdas", "must be a number >= 0, or a mapping of group id to a number >= 0"),
        ([0.1], "strategy-option lambdas", "must be a number >= 0, or a mapping of group id to a number >= 0"),
        (-1.0, "strategy-option lambdas", "must be a number >= 0, or a mapping of group id to a number >= 0"),
        ({"private": "x"}, "strategy-option lambdas.private", "Input should be a valid number"),
        ({"private": -1}, "strategy-option lambdas.private", "Input should be greater than or equal to 0"),
    ],
)
def test_a_bad_lambdas_option_is_one_error_at_the_key_given(value, field, message):
    """lambdas is a number or a mapping: one error saying so (or at the mapping's key), not
    one per union member under pydantic's member tags (lambdas.dict[str,...], lambdas.float)."""
    from trainer.units.strategies import STRATEGIES

    with pytest.raises(InvalidInputError) as info:
        STRATEGIES["fedhdp"].parse_options({"lambdas": value})
    assert info.value.field == field and info.value.reason == f"{message} (strategy fedhdp)" or (
        message == "Input should be a valid number" and info.value.reason.startswith(message)
    ), (info.value.field, info.value.reason)


def test_fedhdp_is_registered_with_its_options():
    from trainer.units.strategies import STRATEGIES

    spec = STRATEGIES["fedhdp"]
    assert spec.strategy is FedHDPStrategy and spec.default_plan_method == "gdpfed"


def test_default_ratios_come_from_the_plan_and_given_ones_override(data):
    from planner import make_plan
    from planner.schema import Scenario

    scenario = Scenario(groups=[{"id": "private", "epsilon": 3.6, "num_clients": 36}, {"id": "out", "epsilon": None, "num_clients": 4}],
                        delta=1e-4, rounds=4, clip_norm=1.0, model_dim=700, expected_clients=20, update_dispersion=0.5,
                        min_clients_per_pool=1)
    plan = make_plan(scenario, "gdpfed", clients_needed=False)
    assert plan.predicted.fedhdp is not None
    predicted = plan.predicted.fedhdp.ratios
    assert strategy(plan, data).ratios == predicted
    private_pool = plan.group("private").pool
    assert strategy(plan, data, ratios={private_pool: 0.3}).ratios[private_pool] == 0.3


def quadratic_toy(clients_private=30, clients_out=10, rows=4, seed=3):
    """Regression data of the point-estimation model: client j's rows have mean phi_hat_j."""
    from trainer.data.dataset import FederatedDataset

    rng = np.random.default_rng(seed)
    n = clients_private + clients_out
    phi_hat = 0.5 + rng.normal(0.0, 0.8, n)
    y = np.repeat(phi_hat, rows) + np.tile([-0.3, 0.1, 0.3, -0.1], n)  # each client's rows average phi_hat_j
    data = FederatedDataset(
        name="quadratic", task="regression", train_x=torch.zeros(n * rows, 1), train_y=torch.tensor(y, dtype=torch.float32),
        client_indices=tuple(torch.arange(j * rows, (j + 1) * rows) for j in range(n)),
        client_ids=tuple(f"c{j}" for j in range(n)), test_x=torch.zeros(2, 1), test_y=torch.zeros(2),
        num_classes=1, input_shape=(1,),
    )
    return data, torch.tensor(y, dtype=torch.float64).reshape(n, rows).mean(dim=1)


def test_lemma_7_quadratic_toy_through_the_round_engine():
    """Design note §2.7 3(b), docs/trainer.md §FedHDP: on f_j(w) = mean (w - y)^2 one full-batch
    step at lr 1/2 lands on phi_hat_j, so each client releases phi_hat_j - theta (the paper's
    eta = 1); the Ditto step at personal_lr 1/(2 + lambda_e) lands on (phi_hat_j + lam
    theta) / (1 + lam) with lam = lambda_e / 2 (eq. 48; the engine's loss is twice the paper's
    (w - phi_hat)^2 / 2), whatever the personal model was. With q = 1 and thresholds at the pool
    sizes the round releases the pools' sums with noise N_p^2 gamma^2 on the private one, so the
    global model is the r-weighted psi mean; over seeds its variance is Lemma 1's noise term."""
    from scipy import stats

    from planner.fedhdp import server_mse
    from trainer.models import build_model
    from trainer.strategies import Population
    from trainer.units.client.rounds import RoundEngine

    n_private, n_out, clip, gamma2, ratio = 30, 10, 10.0, 0.01, 0.25
    sigma = n_private * gamma2**0.5 / clip
    toy = hand_plan([("private", 1e3, n_private, 1.0), ("out", None, n_out, 1.0)],
                    [("P1", ["private"], sigma, n_private, 1.0), ("P2", ["out"], 0.0, n_out, 1.0)],
                    rounds=2, clip_norm=clip, model_dim=1, method="gdpfed")
    data, phi_hat = quadratic_toy(n_private, n_out)
    lam = {"private": 0.25, "out": 0.05}  # the paper's lambda; the engine's prox weight is twice it

    def engine(personal_lr, **options):
        model = build_model("mean", data, seed=0)
        fedhdp = FedHDPStrategy(toy, model, data, engine="batched", device=torch.device("cpu"),
                                local=LocalTrainingConfig(local_steps=1, batch_size=4, lr=0.5),
                                ratios={"P1": ratio}, personal_lr=personal_lr, **options)
        population = Population({"private": np.arange(n_private), "out": np.arange(n_private, n_private + n_out)})
        return fedhdp, RoundEngine(toy, fedhdp, population, 1, rounds=2, secagg_execution="exact_sum",
                                   keep_pool_sums=True)

    theta0 = torch.tensor([0.2], dtype=torch.float64)
    private, out = slice(0, n_private), slice(n_private, None)
    # Round 1: every client releases phi_hat_j - theta0; the opted-out pool's sum has no noise
    fedhdp, rounds = engine(1.0, personalize=False)
    theta1, outcome = rounds.run(RoundContext(0, 0, 0), theta0)
    grid = {m.pool_id: 1.0 / m.scale for m in rounds.mechanisms}  # each client's value is rounded to this grid
    opted_out_sum = float(outcome.pool_sums["P2"][0])
    assert opted_out_sum == pytest.approx(float((phi_hat[out] - theta0).sum()), abs=n_out * grid["P2"])
    psi_private = float(outcome.pool_sums["P1"][0]) / n_private + float(theta0)  # the private set's noised mean
    psi_out = opted_out_sum / n_out + float(theta0)
    weighted = (n_out * psi_out + ratio * n_private * psi_private) / (n_out + ratio * n_private)
    assert float(theta1[0]) == pytest.approx(weighted, abs=1e-9)
    # over seeds: centred on the r-weighted phi_hat mean, with Lemma 1's noise term (sigma_c^2 = 0: data fixed)
    draws = np.array([float(rounds.run(RoundContext(0, 0, s), theta0)[0][0]) for s in range(120)])
    centre = float((phi_hat[out].sum() + ratio * phi_hat[private].sum()) / (n_out + ratio * n_private))
    variance = server_mse(ratio, 0.0, n_out, n_private, gamma2)
    assert abs(draws.mean() - centre) < 4 * (variance / draws.size) ** 0.5
    low, high = stats.chi2.ppf([0.0005, 0.9995], draws.size - 1) / (draws.size - 1)
    assert variance * low < draws.var(ddof=1) < variance * high
    # Rounds 1 and 2 with Ditto at personal_lr 1/(1 + lam) in the paper's terms
    lambda_e = {g: 2 * v for g, v in lam.items()}
    for group, members in (("private", range(n_private)), ("out", range(n_private, n_private + n_out))):
        fedhdp, rounds = engine(1.0 / (2 + lambda_e[group]), lambdas=lambda_e)
        received = theta0
        for index in range(2):
            after, _ = rounds.run(RoundContext(index, index, 0), received)
            for j in members:
                expected = (float(phi_hat[j]) + lam[group] * float(received[0])) / (1 + lam[group])
                assert float(fedhdp.personal[j][0]) == pytest.approx(expected, abs=1e-5)
            received = after


def test_a_run_without_client_test_rows_warns_that_personal_models_go_unevaluated(plan, tmp_path):
    """Without per-client test rows a fedhdp run reported ``personal_accuracy_by_group: null``
    and said nothing; now it warns before round 0 (console and summary.json's warnings), naming
    the option that holds rows out. With rows, or without personal models, there is no warning."""
    bare = load_dataset("digits", num_clients=40, partition="one_label", seed=0)
    cfg = config(strategy="fedhdp", dataset_options={}, rounds=2)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), cfg, tmp_path / "bare", dataset=bare)
    summary = execute_run(prepared, progress=quiet_progress(2))
    assert summary.personal_accuracy_by_group is None
    [warning] = [w for w in summary.warnings if w.startswith("fedhdp:")]
    assert "client_test_fraction" in warning and "personalize=false" in warning
    assert warning in json.loads((tmp_path / "bare" / "summary.json").read_text())["warnings"]

    off = config(strategy="fedhdp", strategy_options={"personalize": False}, dataset_options={}, rounds=2)
    assert not [w for w in prepare_run(plan, plan.model_dump(mode="json"), off, tmp_path / "off", dataset=bare).warnings
                if w.startswith("fedhdp:")]
    with_rows = load_dataset("digits", num_clients=40, partition="one_label", seed=0, client_test_fraction=0.25)
    kept = prepare_run(plan, plan.model_dump(mode="json"), config(strategy="fedhdp"), tmp_path / "rows", dataset=with_rows)
    assert not [w for w in kept.warnings if w.startswith("fedhdp:")]
