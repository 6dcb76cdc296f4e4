"""experiments/evidence/mrmtl_map.py sweeps the heterogeneity knobs of the rotated-digits
silos (docs/mrmtl.md §7, docs/results.md §8.2) through ``trainer.data.silos.rotated_digits``
(``groups``, ``masks``). The map's cells in docs/results.md were trained on the data of the
script's own copy of the loader; the pins below were recorded from that copy before it was
replaced by the loader's ``masks`` option, so the published cells stay reproducible."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

from trainer.data.silos import rotated_digits

MAP = Path(__file__).resolve().parents[2] / "experiments" / "evidence" / "mrmtl_map.py"
SIZES = [30, 50, 20, 40, 25]

# sha256 (first 16 hex digits) of train_x, train_y, test_x, test_y at seed 5
PINS = {
    (1, False): "5d9789c552567c3f", (1, True): "f8e0d6f9467d54dd",
    (2, False): "f933db4a121e6247", (2, True): "4c586e9781cd8389",
    (4, False): "ef30c2f16317cdc6", (4, True): "7a0408bbd31981e4",
}


def _map_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mrmtl_map_evidence", MAP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("groups", "mask"), sorted(PINS))
def test_map_data_is_the_data_its_cells_were_trained_on(groups: int, mask: bool) -> None:
    data = _map_module().silo_data(SIZES, seed=5, groups=groups, mask=mask)
    digest = hashlib.sha256()
    for tensor in (data.train.train_x, data.train.train_y, data.train.test_x, data.train.test_y):
        digest.update(tensor.numpy().tobytes())
    assert digest.hexdigest()[:16] == PINS[(groups, mask)]


def test_masks_off_draws_the_same_rows_and_blanks_none() -> None:
    masked = rotated_digits(SIZES, seed=5, groups=2)
    plain = rotated_digits(SIZES, seed=5, groups=2, masks=False)
    assert torch.equal(plain.train.train_y, masked.train.train_y)
    assert torch.equal(plain.train.test_y, masked.train.test_y)
    changed = plain.train.train_x != masked.train.train_x
    assert changed.any()
    # where they differ, the masked image is blanked (the normalised zero) and the plain one is not
    blank = masked.train.train_x[changed]
    assert torch.allclose(blank, blank[0].expand_as(blank))
