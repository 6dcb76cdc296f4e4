"""``load_dataset``: one entry point for every dataset (``docs/trainer.md``, "Data").

A spec is a bundled name (``BUNDLED_DATASETS``: ``synthetic``, ``synthetic:ALPHA,BETA``,
``leaf_synthetic``, ``metric_synthetic``, ``digits``), a format with a path
(``shakespeare:PATH``, ``idx:PATH``, ``cifar10:PATH``, ``svhn:PATH``, ``leaf:PATH``, ...)
or a bare path whose format is detected from what it holds. Silo plans load
``trainer.data.silos`` instead; a silo dataset's name here is refused saying so.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accounting.errors import InvalidInputError
from trainer.choices import DATASET_HELP, SILO_DATASETS, SPEC_HELP
from trainer.data.cifar10 import load_cifar10
from trainer.data.dataset import FederatedDataset
from trainer.data.digits import load_digits_dataset
from trainer.data.idx import idx_files, load_idx
from trainer.data.leaf_json import load_leaf
from trainer.data.leaf_synthetic import load_leaf_synthetic
from trainer.data.metric_synthetic import load_metric_synthetic
from trainer.data.shakespeare import load_shakespeare
from trainer.data.svhn import load_svhn
from trainer.data.synthetic import load_synthetic

_PATH_LOADERS: dict[str, Callable[..., FederatedDataset]] = {
    "shakespeare": load_shakespeare,
    "idx": load_idx,
    "mnist": load_idx,
    "fashion-mnist": load_idx,
    "cifar10": load_cifar10,
    "svhn": load_svhn,
    "leaf": load_leaf,
}
# The dataset names (BUNDLED_DATASETS, PATH_FORMATS: these loaders' keys, in order;
# SILO_DATASETS) and the help and unknown-name message made from them are
# trainer.choices', which the parser reads without torch;
# tests/trainer/data/test_dataset_names.py keeps _PATH_LOADERS's keys equal to PATH_FORMATS.


def load_dataset(
    spec: str,
    *,
    num_clients: int,
    partition: str = "iid",
    alpha: float = 0.5,
    seed: int,
    **options: Any,
) -> FederatedDataset:
    """The dataset named by ``spec`` split into ``num_clients`` clients.

    ``partition`` is ``iid``, ``dirichlet`` (label skew with concentration ``alpha``) or
    ``natural`` (the data's own clients; ``synthetic``, ``shakespeare``, LEAF). ``options``
    are the loader's keyword options (``sequence_length``, ``min_samples``,
    ``test_fraction``, ``max_test_samples``, ...); an option the loader does not take is an
    ``InvalidInputError`` naming it.
    """
    name, _, argument = spec.partition(":")
    key = name.strip().lower()
    if key == "synthetic":
        if argument:
            options.update(_synthetic_parameters(argument))
        return _call(load_synthetic, spec, (), num_clients, partition, alpha, seed, options)
    if key == "leaf_synthetic" and not argument:
        return _call(load_leaf_synthetic, spec, (), num_clients, partition, alpha, seed, options)
    if key == "metric_synthetic" and not argument:
        return _call(load_metric_synthetic, spec, (), num_clients, partition, alpha, seed, options)
    if key == "digits" and not argument:
        return _call(load_digits_dataset, spec, (), num_clients, partition, alpha, seed, options)
    if key in _PATH_LOADERS and argument:
        path = Path(argument).expanduser()
        if not path.exists():
            raise InvalidInputError("dataset", f"{argument!r} does not exist")
        loader = _PATH_LOADERS[key]
    else:
        path = Path(spec).expanduser()
        if not path.exists():
            if key.replace("-", "_") in SILO_DATASETS:
                raise InvalidInputError(
                    "dataset", f"{spec} is a silo dataset, for silo plans; client and metric_local plans take {SPEC_HELP}"
                )
            raise InvalidInputError("dataset", f"unknown dataset {spec!r}; {DATASET_HELP}")
        loader = detect_format(path)
    return _call(loader, spec, (path,), num_clients, partition, alpha, seed, options)


def detect_format(path: Path) -> Callable[..., FederatedDataset]:
    """The loader for what ``path`` holds, judged by file names and extensions."""
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".json":
            return load_leaf
        if suffix == ".mat":
            return load_svhn
        if suffix == ".txt":
            return load_shakespeare
    elif path.is_dir():
        if idx_files(path):
            return load_idx
        if any(path.glob("data_batch_*")):
            return load_cifar10
        if (path / "train_32x32.mat").is_file():
            return load_svhn
        if (path / "train").is_dir() or any(path.glob("*.json")):
            return load_leaf
    raise InvalidInputError(
        "dataset",
        f"cannot recognise the data at {str(path)!r}: expected IDX files "
        "(train-images-idx3-ubyte...), CIFAR-10 batches (data_batch_*), SVHN "
        "(train_32x32.mat), LEAF JSON, or a .txt of plays",
    )


def _synthetic_parameters(argument: str) -> dict[str, float]:
    try:
        alpha_text, beta_text = argument.split(",")
        return {"synthetic_alpha": float(alpha_text), "synthetic_beta": float(beta_text)}
    except ValueError as exc:
        raise InvalidInputError(
            "dataset", f"synthetic takes ALPHA,BETA (e.g. synthetic:1,1), got {argument!r}"
        ) from exc


def _call(
    loader: Callable[..., FederatedDataset],
    spec: str,
    positional: tuple[Any, ...],
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    options: dict[str, Any],
) -> FederatedDataset:
    accepted = [
        parameter.name
        for parameter in inspect.signature(loader).parameters.values()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        and parameter.name not in {"num_clients", "partition", "alpha", "seed"}
    ]
    for option in options:
        if option not in accepted:
            raise InvalidInputError(
                option, f"is not an option of dataset {spec!r} (it takes: {', '.join(accepted)})"
            )
    return loader(
        *positional, num_clients=num_clients, partition=partition, alpha=alpha, seed=seed, **options
    )
