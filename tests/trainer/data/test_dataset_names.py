"""The dataset names (``trainer.choices``: ``BUNDLED_DATASETS``, ``PATH_FORMATS``,
``SILO_DATASETS``) are the one list the registry, the ``--dataset`` help and the
unknown-dataset message are made from: the help left out ``leaf_synthetic``,
``rotated_digits`` and ``metric_synthetic``, and a client plan given ``rotated_digits`` (a
bundled silo dataset) was told the name was unknown."""

from __future__ import annotations

import pytest

from accounting.errors import InvalidInputError
from app import cli as app_cli
from trainer.choices import BUNDLED_DATASETS, DATASET_HELP, PATH_FORMATS, SILO_DATASETS, SPEC_HELP
from trainer.data import load_dataset
from trainer.data.load import _PATH_LOADERS
from trainer.data.silos import load_silo_data


def test_the_help_names_every_registered_dataset():
    """The loaders are keyed by the names the torch-free help is made from."""
    assert tuple(_PATH_LOADERS) == PATH_FORMATS
    for name in (*BUNDLED_DATASETS, *SILO_DATASETS, *(f"{key}:PATH" for key in _PATH_LOADERS)):
        assert name in DATASET_HELP


def test_train_help_lists_every_dataset(capsys, monkeypatch):
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    with pytest.raises(SystemExit):
        app_cli.run(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name in ("leaf_synthetic", "metric_synthetic", "rotated_digits", "mean_estimation", "for silo plans"):
        assert name in help_text


@pytest.mark.parametrize("name", BUNDLED_DATASETS)
def test_every_bundled_name_loads(name):
    assert load_dataset(name, num_clients=4, seed=0).num_clients == 4


@pytest.mark.parametrize("name", SILO_DATASETS)
def test_a_silo_dataset_for_a_client_plan_is_named_as_one(name):
    with pytest.raises(InvalidInputError) as exc:
        load_dataset(name, num_clients=4, seed=0)
    assert exc.value.field == "dataset"
    assert exc.value.reason == f"{name} is a silo dataset, for silo plans; client and metric_local plans take {SPEC_HELP}"
    assert load_silo_data(name, [20, 20], seed=0).train.num_clients == 2


def test_an_unknown_name_lists_what_each_privacy_unit_takes():
    with pytest.raises(InvalidInputError) as exc:
        load_dataset("nope", num_clients=4, seed=0)
    assert exc.value.reason == f"unknown dataset 'nope'; {DATASET_HELP}"
    with pytest.raises(InvalidInputError, match="other datasets are for client and metric_local plans"):
        load_silo_data("digits", [20, 20], seed=0)
