import pytest
import torch
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from accounting.errors import InvalidInputError
from trainer.data import FederatedDataset, load_dataset
from trainer.data.shakespeare import VOCAB
from trainer.models import MODELS, build_model


def _chars(length: int = 12) -> FederatedDataset:
    x = torch.randint(0, 95, (40, length), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 95, (40,), generator=torch.Generator().manual_seed(1))
    return FederatedDataset(
        name="chars", task="next_char", train_x=x, train_y=y,
        client_indices=(torch.arange(20), torch.arange(20, 40)), client_ids=("a", "b"),
        test_x=x[:5], test_y=y[:5], num_classes=95, input_shape=(length,), vocab=VOCAB,
    )


@pytest.fixture(scope="module")
def digits() -> FederatedDataset:
    return load_dataset("digits", num_clients=4, seed=0)


@pytest.fixture(scope="module")
def synthetic() -> FederatedDataset:
    return load_dataset("synthetic", num_clients=4, partition="natural", seed=0)


def _vmapped_gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    params = {k: v.detach().unsqueeze(0).repeat(2, *[1] * v.dim()) for k, v in model.named_parameters()}

    def loss(p, xb, yb):
        return F.cross_entropy(functional_call(model, p, (xb,)), yb)

    return vmap(grad(loss))(params, torch.stack([x, x]), torch.stack([y, y]))


@pytest.mark.parametrize(
    ("name", "data", "options", "classes"),
    [("mlp", "synthetic", {}, 10), ("cnn", "digits", {}, 10),
     ("resnet18", "digits", {"base_width": 8}, 10), ("lstm", "chars", {"hidden_size": 16}, 95)],
)
def test_models_forward_and_vmap_grad_match_autograd(name, data, options, classes, request) -> None:
    dataset = _chars() if data == "chars" else request.getfixturevalue(data)
    # Double precision: grouped convolutions under vmap sum in another order.
    model = build_model(name, dataset, seed=0, **options).double()
    assert not list(model.buffers())
    x, y = dataset.train_x[:6], dataset.train_y[:6]
    x = x.double() if x.is_floating_point() else x
    logits = model(x)
    assert logits.shape == (6, classes)
    F.cross_entropy(logits, y).backward()
    grads = _vmapped_gradients(model, x, y)
    for key, parameter in model.named_parameters():
        assert torch.allclose(grads[key][1], parameter.grad, atol=1e-10), key


def test_cnn_dense_width_follows_the_input(digits) -> None:
    model = build_model("cnn", digits, seed=0)
    assert model.classifier[0].in_features == 64 * 2 * 2
    assert sum(p.numel() for p in model.parameters()) == 188_810


def test_lstm_default_is_leaf_size() -> None:
    model = build_model("lstm", _chars(), seed=0)
    shapes = {k: tuple(v.shape) for k, v in model.named_parameters()}
    assert shapes["embedding.weight"] == (95, 8)
    assert shapes["weight_hh.1"] == (1024, 256) and shapes["head.weight"] == (95, 256)


def test_lstm_matches_torch_lstm_with_copied_weights() -> None:
    ours = build_model("lstm", _chars(), seed=0, hidden_size=16, num_layers=2)
    reference = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True)
    with torch.no_grad():
        for layer in range(2):
            getattr(reference, f"weight_ih_l{layer}").copy_(ours.weight_ih[layer])
            getattr(reference, f"weight_hh_l{layer}").copy_(ours.weight_hh[layer])
            getattr(reference, f"bias_ih_l{layer}").copy_(ours.bias[layer])
            getattr(reference, f"bias_hh_l{layer}").zero_()
    x = _chars().train_x[:3]
    embedded = ours.embedding(x.long())
    output, _ = reference(embedded)
    assert torch.allclose(ours(x), ours.head(output[:, -1]), atol=1e-6)


def test_lstm_fast_path_outside_vmap_is_the_same_function(monkeypatch) -> None:
    """The loop engine's LSTM runs torch.lstm (cuDNN on a GPU); under vmap the explicit steps run."""
    from trainer.engines import LocalTrainingConfig, flatten_params, train_clients

    model = build_model("lstm", _chars(), seed=0, hidden_size=16).double()
    x, y = _chars().train_x[:6], _chars().train_y[:6]
    calls = []
    fused = torch.lstm
    monkeypatch.setattr(torch, "lstm", lambda *args: calls.append(1) or fused(*args))
    logits = model(x)
    assert calls  # called directly: the fused kernel
    F.cross_entropy(logits, y).backward()
    calls.clear()
    grads = _vmapped_gradients(model, x, y)  # under vmap(grad): the explicit steps
    assert not calls
    for key, parameter in model.named_parameters():
        assert torch.allclose(grads[key][1], parameter.grad, atol=1e-12), key

    data = _chars()
    config = LocalTrainingConfig(local_steps=2, batch_size=4, lr=0.5)
    start = flatten_params(model).float()
    model = model.float()
    loop = train_clients("loop", model, start, data, [0, 1], config, seed=0, round_index=0, device="cpu")
    assert calls
    calls.clear()
    batched = train_clients("batched", model, start, data, [0, 1], config, seed=0, round_index=0, device="cpu")
    assert not calls
    assert loop.abs().max() > 1e-3 and (loop - batched).abs().max() < 1e-5


def test_same_seed_same_weights_and_global_rng_untouched(digits) -> None:
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("cnn", digits, seed=7)
    after = torch.rand(1)
    b = build_model("cnn", digits, seed=7)
    c = build_model("cnn", digits, seed=8)
    assert torch.equal(expected, after)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


@pytest.mark.parametrize(
    ("name", "data"),
    [("lstm", "digits"), ("cnn", "chars"), ("mlp", "chars"), ("resnet18", "chars"),
     ("cnn", "synthetic"), ("resnet18", "synthetic"), ("lstm", "synthetic"), ("vgg", "digits")],
)
def test_model_that_does_not_fit_the_data_is_refused(name, data, request) -> None:
    dataset = _chars() if data == "chars" else request.getfixturevalue(data)
    with pytest.raises(InvalidInputError) as info:
        build_model(name, dataset, seed=0)
    assert info.value.field == "model"


def test_unknown_model_option_is_refused(digits) -> None:
    with pytest.raises(InvalidInputError, match="hidden_size"):
        build_model("cnn", digits, seed=0, hidden_size=3)


@pytest.mark.parametrize(
    ("name", "data", "options", "field"),
    [("mlp", "digits", {"hidden": [0]}, "model-option hidden.0"),  # built a model that learns nothing
     ("mlp", "digits", {"hidden": [16, -1]}, "model-option hidden.1"),  # torch's RuntimeError traceback
     ("mlp", "digits", {"hidden": [1.5]}, "model-option hidden.0"),
     ("mlp", "digits", {"hidden": [True]}, "model-option hidden.0"),
     ("mlp", "digits", {"bias": "no"}, "model-option bias"),  # a truthy string built a biased model
     ("cnn", "digits", {"channels": [-1, 4]}, "model-option channels.0"),
     ("cnn", "digits", {"hidden": 0}, "model-option hidden"),
     ("resnet18", "digits", {"base_width": 0}, "model-option base_width"),
     ("lstm", "chars", {"num_layers": -2}, "model-option num_layers")],
)
def test_option_values_a_model_cannot_take_are_refused_naming_the_option(name, data, options, field, request) -> None:
    dataset = _chars() if data == "chars" else request.getfixturevalue(data)
    with pytest.raises(InvalidInputError) as info:
        build_model(name, dataset, seed=0, **options)
    assert info.value.field == field


def test_valid_option_values_still_build(digits, synthetic) -> None:
    assert sum(p.numel() for p in build_model("mlp", synthetic, seed=0, hidden=[], bias=False).parameters()) == 60 * 10
    assert build_model("cnn", digits, seed=0, channels=[4, 8], hidden=16) is not None
    assert build_model("lstm", _chars(), seed=0, embedding_dim=2, hidden_size=4, num_layers=1) is not None


def test_a_model_too_large_to_allocate_is_one_error_naming_the_options(digits, monkeypatch) -> None:
    """hidden=[10**11] is a valid width whose weights torch cannot allocate: its RuntimeError
    was a traceback (exit 1). The allocation is stood in for: a real one may be granted by an
    overcommitting kernel and then killed for memory."""
    import trainer.models.build as build
    from trainer.models.mlp import MLP

    class Huge(MLP):
        def __init__(self, input_features, num_classes, hidden=(200, 200), bias=True):
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory\nmore")

    monkeypatch.setattr(build, "MLP", Huge)
    with pytest.raises(InvalidInputError) as info:
        build_model("mlp", digits, seed=0, hidden=[10**11])
    assert info.value.field == "model-option"
    assert "can't allocate memory" in info.value.reason and "\n" not in info.value.reason


def test_models_listed() -> None:
    assert MODELS == ("mlp", "cnn", "resnet18", "lstm", "mean")
