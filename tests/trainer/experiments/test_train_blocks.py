"""A bad value in a train block is refused when the configuration is read, naming the block
it came from: a setting's, a dataset's or the shared one (docs/results.md §Runner)."""

from __future__ import annotations

import pytest

from tests.trainer.experiments.test_runner import TINY, assert_refused_before_any_cell

SILO_TINY = """
name: silos
scenario:
  privacy_unit: silo_sample
  silos: [{id: s0, num_samples: 100, epsilon: 1.0}, {id: s1, num_samples: 100, epsilon: 1.0}]
  delta: 0.00001
  rounds: 2
  batch_size: 10
  clip_norm: 1.0
train: {lr: 0.1}
methods: [mrmtl]
datasets:
  - {name: rotated, spec: rotated_digits, model: mlp, model_options: {hidden: []}}
seeds: [0]
"""
METRIC_TINY = """
name: metric
scenario:
  privacy_unit: metric_local
  groups: [{id: all, num_clients: 20, noise_multiplier: 5.0}]
  rounds: 2
  clients_per_round: 4
  hypotheses: 2
  radius_rule: public
  radius: 0.1
train: {local_steps: 1, batch_size: 8, lr: 0.1}
methods: [metric_ifca]
datasets:
  - {name: digits, spec: digits, model: mlp, model_options: {hidden: [8]}, options: {max_test_samples: 100}}
seeds: [0]
"""


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (TINY + "settings: [{name: plain}, {name: exact, train: {secagg_execution: exact-sum}}]\n",
         "settings.exact.train.secagg_execution: Input should be 'protocol' or 'exact_sum'"),
        (TINY.replace("options: {max_test_samples: 100}}", "options: {max_test_samples: 100}, train: {lr: -1}}"),
         "datasets.digits.train.lr: Input should be greater than 0"),
        (TINY.replace("lr: 0.1}", "lr: 0.1, secagg_workers: 0}"),
         "train.secagg_workers: must be a positive integer or auto, got 0 (setting default, dataset digits)"),
        # an option the cell's mechanism never reads, as gdpfed train refuses --secagg on a
        # metric or silo plan (unused_options), instead of the cell ignoring it
        (METRIC_TINY + "settings: [{name: plain}, {name: sa, train: {secagg_mode: full}}]\n",
         "settings.sa.train.secagg_mode: metric_local runs do not use --secagg: "),
        (METRIC_TINY + "settings: [{name: ex, train: {secagg_execution: exact_sum}}]\n",
         "settings.ex.train.secagg_execution: metric_local runs do not use --secagg-execution: "),
        (SILO_TINY + "settings: [{name: w, train: {secagg_workers: 2}}]\n",
         "settings.w.train.secagg_workers: silo_sample runs do not use --secagg-workers: "),
        (SILO_TINY.replace("hidden: []}}", "hidden: []}, train: {local_steps: 3}}"),
         "datasets.rotated.train.local_steps: silo_sample runs do not use --local-steps: "),
        (METRIC_TINY.replace("lr: 0.1}", "lr: 0.1, late_dropout_fraction: 0.1}"),
         "train.late_dropout_fraction: metric_local runs do not use --late-dropout-fraction: "),
    ],
)
def test_a_bad_train_value_names_its_block_before_any_cell_runs(tmp_path, capsys, text, where):
    assert_refused_before_any_cell(tmp_path, capsys, text, where)

