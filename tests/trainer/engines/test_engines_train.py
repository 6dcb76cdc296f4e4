from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from accounting.errors import InvalidInputError
from trainer.data import FederatedDataset, load_dataset
from trainer.engines import (
    LocalTrainingConfig,
    client_rows,
    evaluate,
    flatten_params,
    num_params,
    train_clients,
    unflatten_params,
)
from trainer.models import build_model

CONFIG = LocalTrainingConfig(local_steps=3, batch_size=8, lr=0.1, momentum=0.9, weight_decay=1e-3)


@pytest.fixture(scope="module")
def digits() -> FederatedDataset:
    return load_dataset("digits", num_clients=12, seed=0)


@pytest.fixture(scope="module")
def synthetic() -> FederatedDataset:
    # Natural sizes include clients smaller than some batch sizes used below.
    return load_dataset("synthetic", num_clients=8, partition="natural", seed=0)


@pytest.fixture(scope="module")
def plays(shakespeare_path: Path) -> FederatedDataset:
    return load_dataset(f"shakespeare:{shakespeare_path}", num_clients=6, partition="natural",
                        seed=0, sequence_length=20)


def _both(model, data, clients, config, dtype, **kwargs):
    start = flatten_params(model).to(dtype)
    kept = start.clone()
    loop = train_clients("loop", model, start, data, clients, config, seed=3, round_index=2, device="cpu")
    batched = train_clients("batched", model, start, data, clients, config, seed=3, round_index=2,
                            device="cpu", **kwargs)
    assert torch.equal(start, kept)  # the global parameters are not touched
    return loop, batched


@pytest.mark.parametrize(
    ("name", "data", "options"),
    [("mlp", "synthetic", {}), ("cnn", "digits", {}), ("lstm", "plays", {"hidden_size": 32})],
)
def test_engines_agree_in_float32(name, data, options, request) -> None:
    dataset = request.getfixturevalue(data)
    model = build_model(name, dataset, seed=1, **options)
    loop, batched = _both(model, dataset, [0, 2, 5], CONFIG, torch.float32, max_batch_clients=2)
    assert loop.shape == (3, num_params(model)) and loop.dtype == torch.float32
    assert loop.abs().max() > 1e-3  # clients really moved
    assert (loop - batched).abs().max() < 1e-5


@pytest.mark.parametrize(
    ("name", "data", "options", "config"),
    [
        ("mlp", "synthetic", {}, CONFIG),
        ("cnn", "digits", {}, CONFIG),
        ("lstm", "plays", {"hidden_size": 32}, CONFIG),
        # Full-width ResNet-18 on 8x8 digits, one step: float32 grouped convolutions
        # under vmap sum in another order (differences near 1e-5), so this pair is
        # compared in double precision only.
        ("resnet18", "digits", {}, LocalTrainingConfig(local_steps=1, batch_size=4, lr=0.05, momentum=0.9)),
    ],
)
def test_engines_agree_in_float64(name, data, options, config, request) -> None:
    dataset = request.getfixturevalue(data)
    model = build_model(name, dataset, seed=1, **options)
    loop, batched = _both(model, dataset, [1, 4], config, torch.float64)
    assert loop.abs().max() > 1e-4
    assert (loop - batched).abs().max() < 1e-10


def test_chunking_does_not_change_updates(digits) -> None:
    model = build_model("mlp", digits, seed=0)
    start = flatten_params(model)
    whole = train_clients("batched", model, start, digits, range(7), CONFIG, seed=1, round_index=0, device="cpu")
    chunks = train_clients("batched", model, start, digits, range(7), CONFIG, seed=1, round_index=0,
                           device="cpu", max_batch_clients=3)
    assert torch.allclose(whole, chunks, atol=1e-6)


def test_updates_are_reproducible_from_seed(digits) -> None:
    model = build_model("mlp", digits, seed=0)
    start = flatten_params(model)

    def run(seed: int, round_index: int) -> torch.Tensor:
        return train_clients("batched", model, start, digits, [0, 3], CONFIG, seed=seed,
                             round_index=round_index, device="cpu")

    assert torch.equal(run(1, 0), run(1, 0))
    assert not torch.allclose(run(1, 0), run(1, 1))
    assert not torch.allclose(run(1, 0), run(2, 0))


def test_client_rows_follow_the_documented_stream(digits, synthetic) -> None:
    config = LocalTrainingConfig(local_steps=4, batch_size=16, lr=0.1)
    rows = client_rows(digits, 2, config, seed=5, round_index=1)
    assert rows.shape == (4, 16)
    assert rows.unique().numel() == 64  # 120 samples >= 64: no repeats
    assert set(rows.flatten().tolist()) <= set(digits.client_indices[2].tolist())
    assert torch.equal(rows, client_rows(digits, 2, config, seed=5, round_index=1))
    # A client with fewer samples than a batch sees each sample floor/ceil(B/n) times.
    small = min(range(synthetic.num_clients), key=lambda c: synthetic.client_sizes()[c])
    size = synthetic.client_sizes()[small]
    big = LocalTrainingConfig(local_steps=2, batch_size=size * 2 + 3, lr=0.1)
    stream = client_rows(synthetic, small, big, seed=0, round_index=0).flatten().numpy()
    first_pass = stream[:size]
    assert sorted(first_pass.tolist()) == sorted(synthetic.client_indices[small].tolist())
    counts = np.unique(stream, return_counts=True)[1]
    assert counts.max() - counts.min() <= 1


def test_a_few_local_steps_on_digits_reduce_the_loss() -> None:
    data = load_dataset("digits", num_clients=1, seed=0)
    model = build_model("cnn", data, seed=0)
    start = flatten_params(model)
    config = LocalTrainingConfig(local_steps=25, batch_size=32, lr=0.05, momentum=0.9)
    update = train_clients("batched", model, start, data, [0], config, seed=0, round_index=0, device="cpu")
    before = evaluate(model, start, data.test)
    after = evaluate(model, start + update[0], data.test)
    assert after["loss"] < 0.5 * before["loss"]
    assert after["accuracy"] > 0.5 > 0.2 > before["accuracy"]


def test_evaluate_matches_a_direct_computation(digits) -> None:
    model = build_model("mlp", digits, seed=0)
    x, y = digits.test
    logits = model(x).detach()
    expected_loss = float(nn.functional.cross_entropy(logits, y))
    expected_accuracy = float((logits.argmax(1) == y).float().mean())
    result = evaluate(model, flatten_params(model), digits.test, batch_size=50)
    assert result["loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert result["accuracy"] == pytest.approx(expected_accuracy)
    named = evaluate(model, dict(model.named_parameters()), digits.test)
    assert named["loss"] == pytest.approx(expected_loss, rel=1e-5)


def test_flatten_unflatten_round_trip(digits) -> None:
    model = build_model("cnn", digits, seed=0)
    flat = flatten_params(model)
    assert flat.shape == (num_params(model),)
    named = unflatten_params(flat, model)
    assert list(named) == [k for k, _ in model.named_parameters()]
    assert all(torch.equal(named[k], p) for k, p in model.named_parameters())
    stacked = torch.stack([flat, 2 * flat])
    batched = unflatten_params(stacked, model)
    assert torch.equal(flatten_params(batched, batch_dims=1), stacked)
    with pytest.raises(ValueError):
        unflatten_params(flat[:-1], model)


def test_empty_client_list_gives_no_updates(digits) -> None:
    model = build_model("mlp", digits, seed=0)
    out = train_clients("batched", model, flatten_params(model), digits, [], CONFIG, seed=0, round_index=0, device="cpu")
    assert out.shape == (0, num_params(model))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"engine": "turbo"}, "engine"),
        ({"max_batch_clients": 0}, "max_batch_clients"),
        ({"global_params": torch.zeros(3)}, "global_params"),
        ({"client_indices": [99]}, "client_indices"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments_are_refused(digits, change, field) -> None:
    model = build_model("mlp", digits, seed=0)
    arguments = {"engine": "batched", "model": model, "global_params": flatten_params(model),
                 "dataset": digits, "client_indices": [0], "config": CONFIG, "seed": 0,
                 "round_index": 0, "device": "cpu", **change}
    with pytest.raises(InvalidInputError) as info:
        train_clients(**arguments)
    assert info.value.field == field


def test_model_with_batchnorm_is_refused(digits) -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.BatchNorm1d(10))
    with pytest.raises(InvalidInputError) as info:
        train_clients("batched", model, flatten_params(model), digits, [0], CONFIG, seed=0, round_index=0, device="cpu")
    assert info.value.field == "model"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"local_steps": 0}, "local_steps"), ({"batch_size": 0}, "batch_size"), ({"lr": 0.0}, "lr"),
     ({"momentum": 1.0}, "momentum"), ({"weight_decay": -1.0}, "weight_decay")],
)
def test_config_validation(kwargs, field) -> None:
    arguments = {"local_steps": 1, "batch_size": 1, "lr": 0.1, **kwargs}
    with pytest.raises(InvalidInputError) as info:
        LocalTrainingConfig(**arguments)
    assert info.value.field == field


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_both_gradient_paths_of_the_batched_engine_agree(digits, name) -> None:
    from trainer.engines.batched import summed_gradients, vmap_gradients
    from trainer.engines.batches import gather_batches
    from trainer.engines.params import param_shapes

    model = build_model(name, digits, seed=0).double()
    shapes = param_shapes(model)
    x, y = gather_batches(digits, [0, 1, 2], CONFIG, seed=0, round_index=0,
                          device=torch.device("cpu"), dtype=torch.float64)
    weights = flatten_params(model).expand(3, -1).clone()
    weights[1] += 0.01  # clients at different points
    via_vmap = vmap_gradients(model, shapes)(weights, x[:, 0], y[:, 0])
    via_sum = summed_gradients(model, shapes)(weights, x[:, 0], y[:, 0])
    assert via_vmap.abs().max() > 1e-3
    assert (via_vmap - via_sum).abs().max() < 1e-12


def _personal_inputs(model, dtype, count):
    base = flatten_params(model).to(dtype)
    generator = torch.Generator().manual_seed(7)
    start = base + 0.05 * torch.randn(count, base.numel(), generator=generator).to(dtype)
    anchor = base - 0.05 * torch.randn(count, base.numel(), generator=generator).to(dtype)
    return base, start, anchor


@pytest.mark.parametrize(("name", "data"), [("mlp", "synthetic"), ("cnn", "digits")])
def test_engines_agree_from_personal_starts_with_a_proximal_anchor(name, data, request) -> None:
    dataset = request.getfixturevalue(data)
    model = build_model(name, dataset, seed=1)
    clients = [0, 2, 5]
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.float64, 1e-10)):
        base, start, anchor = _personal_inputs(model, dtype, len(clients))
        prox = torch.tensor([0.0, 0.5, 2.0])
        kept = start.clone()
        results = [
            train_clients(engine, model, base, dataset, clients, CONFIG, seed=3, round_index=2, device="cpu",
                          start=start, anchor=anchor, prox=prox, **extra)
            for engine, extra in (("loop", {}), ("batched", {"max_batch_clients": 2}))
        ]
        assert torch.equal(start, kept)  # the caller's start rows are not touched
        assert results[0].abs().max() > 1e-3
        assert (results[0] - results[1]).abs().max() < tolerance
        # A shared [d] anchor means the same as that row repeated per client.
        shared = train_clients("batched", model, base, dataset, clients, CONFIG, seed=3, round_index=2,
                               device="cpu", start=start, anchor=anchor[1], prox=prox)
        repeated = train_clients("batched", model, base, dataset, clients, CONFIG, seed=3, round_index=2,
                                 device="cpu", start=start, anchor=anchor[1].expand(3, -1), prox=prox)
        assert torch.equal(shared, repeated)


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_start_rows_equal_to_the_global_model_change_nothing(engine, digits) -> None:
    model = build_model("mlp", digits, seed=0)
    base = flatten_params(model)
    plain = train_clients(engine, model, base, digits, [1, 4], CONFIG, seed=1, round_index=0, device="cpu")
    started = train_clients(engine, model, base, digits, [1, 4], CONFIG, seed=1, round_index=0, device="cpu",
                            start=base.expand(2, -1).clone(), anchor=base + 1.0, prox=0.0)
    assert torch.equal(plain, started)


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_one_proximal_step_moves_by_lr_times_mu_towards_the_anchor(engine, digits) -> None:
    # One plain SGD step: both runs evaluate the loss gradient at the same start point, so
    # the proximal run differs by exactly -lr * mu * (s - a).
    model = build_model("mlp", digits, seed=0)
    config = LocalTrainingConfig(local_steps=1, batch_size=8, lr=0.1)
    base, start, anchor = _personal_inputs(model, torch.float64, 2)
    mu = torch.tensor([0.3, 1.5], dtype=torch.float64)
    common = dict(seed=2, round_index=1, device="cpu", start=start)
    plain = train_clients(engine, model, base, digits, [0, 3], config, **common)
    proximal = train_clients(engine, model, base, digits, [0, 3], config, anchor=anchor, prox=mu, **common)
    expected = -config.lr * mu.unsqueeze(1) * (start - anchor)
    assert torch.allclose(proximal - plain, expected, atol=1e-12)
    # Without an anchor the proximal term pulls towards the global parameters.
    towards_global = train_clients(engine, model, base, digits, [0, 3], config, prox=mu, **common)
    assert torch.allclose(towards_global - plain, -config.lr * mu.unsqueeze(1) * (start - base), atol=1e-12)


def test_start_anchor_and_prox_are_validated(digits) -> None:
    model = build_model("mlp", digits, seed=0)
    base = flatten_params(model)
    d = base.numel()
    call = lambda **kw: train_clients("batched", model, base, digits, [0, 1], CONFIG, seed=0,  # noqa: E731
                                      round_index=0, device="cpu", **kw)
    with pytest.raises(InvalidInputError, match="start"):
        call(start=torch.zeros(3, d))
    with pytest.raises(InvalidInputError, match="anchor"):
        call(anchor=torch.zeros(d + 1), prox=0.1)
    with pytest.raises(InvalidInputError, match="prox"):
        call(prox=[0.1, 0.2, 0.3])
    with pytest.raises(InvalidInputError, match="prox"):
        call(prox=-1.0)
    with pytest.raises(InvalidInputError, match="prox"):
        call(prox=float("nan"))

