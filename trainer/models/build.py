"""``build_model``: a model that fits a dataset (``docs/trainer.md``, "Models")."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import torch
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError
from torch import nn

from accounting.errors import InvalidInputError, message_line, shown, validation_error_line
from trainer.choices import MODELS as MODELS  # re-exported by trainer.models
from trainer.choices import model_key, unknown_model
from trainer.data.dataset import FederatedDataset
from trainer.models.cnn import CNN
from trainer.models.lstm import CharLSTM
from trainer.models.mean import ScalarMean
from trainer.models.mlp import MLP
from trainer.models.resnet import ResNet18GN

# A layer width, channel count or layer count: a positive JSON integer (not a float, not a boolean).
_Width = Annotated[int, Field(strict=True, ge=1)]


class _ModelOptions(BaseModel):
    model_config = ConfigDict(extra="allow")


class _MLPOptions(_ModelOptions):
    hidden: list[_Width] = Field(default_factory=lambda: [200, 200])  # [] is the linear model (metric regression)
    bias: StrictBool = True


class _CNNOptions(_ModelOptions):
    channels: tuple[_Width, _Width] = (32, 64)
    hidden: _Width = 512


class _ResNetOptions(_ModelOptions):
    base_width: _Width = 64


class _LSTMOptions(_ModelOptions):
    embedding_dim: _Width = 8
    hidden_size: _Width = 256
    num_layers: _Width = 2


# The values each model's options may take; the constructors trust them (a width of 0 built a
# model that trains nothing, -1 was torch's traceback, ``bias="x"`` a biased model).
_OPTION_SCHEMAS: dict[str, type[_ModelOptions]] = {
    "mlp": _MLPOptions, "cnn": _CNNOptions, "resnet18": _ResNetOptions, "lstm": _LSTMOptions, "mean": _ModelOptions,
}


def check_model_options(key: str, options: dict[str, Any]) -> None:
    """Refuse a value model ``key``'s constructor cannot take (docs/trainer.md §Models): widths,
    channels and layer counts are positive integers, ``bias`` a boolean. The error is
    ``InvalidInputError("model-option NAME", ...)``, the field ``gdpfed train --model-option``
    names (``model-option hidden.0: Input should be greater than or equal to 1``)."""
    try:
        _OPTION_SCHEMAS[key].model_validate(options)
    except ValidationError as exc:
        field, message = validation_error_line(exc.errors(include_url=False))
        raise InvalidInputError(f"model-option {field}" if field else "model-option", message) from None


def build_model(name: str, dataset: FederatedDataset, seed: int, **options: Any) -> nn.Module:
    """Model ``name`` sized for ``dataset``, initialised from ``seed``.

    ``options`` go to the model's constructor: ``hidden`` (mlp: tuple of widths; cnn:
    dense width), ``channels`` (cnn), ``base_width`` (resnet18), ``embedding_dim``,
    ``hidden_size``, ``num_layers`` (lstm). A model that does not fit the data (an image
    model on vectors, a classifier on next-character data or the reverse) is an
    ``InvalidInputError`` naming ``model``; an option the model does not take names ``model``,
    a value it cannot take ``model-option NAME`` (``check_model_options``). The global RNG is
    left as it was.
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
    check_model_options(key, options)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            model = factory(**options)
        except (RuntimeError, MemoryError) as exc:
            # the options are valid values, so what fails here is the allocation (hidden=[10**11]):
            # torch's RuntimeError was a traceback, exit 1
            reason = message_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise InvalidInputError("model-option", f"{key} cannot be built with {shown(options)}: {reason}") from None
    return model
