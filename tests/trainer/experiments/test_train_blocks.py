"""A bad value in a train block is refused when the configuration is read, naming the block
it came from: a setting's, a dataset's or the shared one (docs/results.md §Runner)."""

from __future__ import annotations

import pytest

from app.cli import run as gdpfed
from tests.trainer.experiments.test_runner import TINY


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (TINY + "settings: [{name: plain}, {name: exact, train: {secagg_execution: exact-sum}}]\n",
         "settings.exact.train.secagg_execution: Input should be 'protocol' or 'exact_sum'"),
        (TINY.replace("options: {max_test_samples: 100}}", "options: {max_test_samples: 100}, train: {lr: -1}}"),
         "datasets.digits.train.lr: Input should be greater than 0"),
        (TINY.replace("lr: 0.1}", "lr: 0.1, secagg_workers: 0}"),
         "train.secagg_workers: must be a positive integer or auto, got 0 (setting default, dataset digits)"),
    ],
)
def test_a_bad_train_value_names_its_block_before_any_cell_runs(tmp_path, capsys, text, where):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    code = gdpfed(["experiment", str(config), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"gdpfed experiment: error: config: {config}: {where}"), err
    assert not (tmp_path / "o" / "cells").exists()
