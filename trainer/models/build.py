"""``build_model``: a model that fits a dataset (``docs/trainer.md``, "Models")."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from accounting.errors import InvalidInputError
from trainer.choices import MODELS as MODELS  # re-exported by trainer.models
from trainer.choices import model_key, unknown_model
from trainer.data.dataset import FederatedDataset
from trainer.models.cnn import CNN
from trainer.models.lstm import CharLSTM
from trainer.models.mean import ScalarMean
from trainer.models.mlp import MLP
from trainer.models.resnet import ResNet18GN


def build_model(name: str, dataset: FederatedDataset, seed: int, **options: Any) -> nn.Module:
    """Model ``name`` sized for ``dataset``, initialised from ``seed``.

    ``options`` go to the model's constructor: ``hidden`` (mlp: tuple of widths; cnn:
    dense width), ``channels`` (cnn), ``base_width`` (resnet18), ``embedding_dim``,
    ``hidden_size``, ``num_layers`` (lstm). A model that does not fit the data (an image
    model on vectors, a classifier on next-character data or the reverse) is an
    ``InvalidInputError`` naming ``model``. The global RNG is left as it was.
    """
    key = model_key(name)
    if key is None:
        raise InvalidInputError("model", unknown_model(name))
    shape = tuple(dataset.input_shape)
    # regression data takes the scalar mean or an mlp with one output (the metric-privacy
    # synthetic regression's bias-free linear map); mean fits nothing else
    if (key == "mean" and dataset.task != "regression") or (dataset.task == "regression" and key not in ("mean", "mlp")):
        raise InvalidInputError(
            "model", f"mean estimates the mean of regression data; {dataset.name} is {dataset.task} data and {key} "
            f"{'needs' if key == 'mean' else 'does not fit'} it (regression data takes mean or mlp)"
        )
    if key == "mean":
        factory: Callable[..., nn.Module] = ScalarMean
        accepted: Callable[..., Any] = ScalarMean.__init__
    elif key == "lstm":
        if dataset.task != "next_char":
            raise InvalidInputError(
                "model", f"lstm predicts next characters; {dataset.name} is {dataset.task} data"
            )
        factory = functools.partial(CharLSTM, dataset.num_classes)
        accepted = CharLSTM.__init__
    elif dataset.task == "next_char":
        raise InvalidInputError(
            "model", f"{key} does not fit next-character data ({dataset.name}); use lstm"
        )
    elif key == "mlp":
        features = 1
        for size in shape:
            features *= size
        factory = functools.partial(MLP, features, dataset.num_classes)
        accepted = MLP.__init__
    else:
        if len(shape) != 3:
            raise InvalidInputError(
                "model",
                f"{key} needs images [C, H, W]; {dataset.name} has inputs of shape {list(shape)}; "
                "use mlp",
            )
        if key == "cnn":
            if shape[1] < 4 or shape[2] < 4:
                raise InvalidInputError("model", f"cnn needs images of at least 4x4, got {list(shape)}")
            factory = functools.partial(CNN, shape, dataset.num_classes)
            accepted = CNN.__init__
        else:
            factory = functools.partial(ResNet18GN, shape[0], dataset.num_classes)
            accepted = ResNet18GN.__init__
    fixed = {"self", "input_features", "input_shape", "num_classes", "in_channels", "vocab_size"}
    allowed = [p for p in inspect.signature(accepted).parameters if p not in fixed]
    for option in options:
        if option not in allowed:
            raise InvalidInputError(
                "model", f"{key} takes no option {option!r} (it takes: {', '.join(allowed)})"
            )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory(**options)
    return model
