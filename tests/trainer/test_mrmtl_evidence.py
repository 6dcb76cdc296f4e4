"""experiments/evidence/mrmtl_map.py builds the rotated-digits silos of trainer.data.silos
(docs/mrmtl.md §7) with the heterogeneity knobs the loader fixes; at the loader's settings
(4 rotation groups, masks on) it must be the loader's data, row for row."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from trainer.data.silos import rotated_digits

MAP = Path(__file__).resolve().parents[2] / "experiments" / "evidence" / "mrmtl_map.py"


def test_map_data_at_the_loaders_settings_is_the_loaders() -> None:
    spec = importlib.util.spec_from_file_location("mrmtl_map_evidence", MAP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sizes = [30, 50, 20, 40, 25]
    ours = module.silo_data(sizes, seed=5, groups=4, mask=True)
    loader = rotated_digits(sizes, seed=5, test_samples=module.TEST_SAMPLES, groups=4)
    assert torch.equal(ours.train.train_x, loader.train.train_x)
    assert torch.equal(ours.train.train_y, loader.train.train_y)
    assert torch.equal(ours.train.test_x, loader.train.test_x)
    # without masks and with one rotation group the images differ from the loader's
    plain = module.silo_data(sizes, seed=5, groups=1, mask=False)
    assert torch.equal(plain.train.train_y, loader.train.train_y)
    assert not torch.equal(plain.train.train_x, loader.train.train_x)
