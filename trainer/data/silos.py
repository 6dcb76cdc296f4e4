"""Cross-silo data for the ``silo_sample`` unit (docs/mrmtl.md §7).

A silo dataset is a ``FederatedDataset`` whose clients are the silos, in the plan's
order, with exactly the plan's ``n_k`` training examples each, plus each silo's own test
rows (``test_indices[k]`` into ``test_x``): MR-MTL evaluates each silo's personal model
on its own test split, sample-weighted.

- ``rotated_digits``: scikit-learn's 8x8 digits in ``groups`` rotation groups (0, 90,
  180, 270 degrees) of ``silos / groups`` silos (silo k is in group ``k mod groups``). Each
  silo draws its ``n_k`` training examples without replacement from the training pool
  (80% of the digits; silos' draws may overlap, as independent institutions' data may)
  and ``test_samples`` from the held-out pool, rotates them by its group's angle and, with
  a silo-specific probability ``p_k ~ U[0.1, 0.9]``, blanks a silo-specific 2x2 patch of
  each image. Similar silos (same rotation) share a task; the masks make every silo differ.
- ``mean_estimation``: the paper's section-6 toy as data: silo k's points are
  ``w_k + N(0, sigma^2)`` with ``w_k ~ N(0, tau^2)``, one feature, a regression target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.choices import silo_dataset_key, unknown_silo_dataset
from trainer.data.dataset import FederatedDataset
from trainer.data.rotation import rotate_images


@dataclass(frozen=True)
class SiloData:
    """Training data per silo (``train.client_indices[k]``) and test rows per silo."""

    train: FederatedDataset
    test_indices: tuple[torch.Tensor, ...]

    def test_of(self, silo: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.test_indices[silo]
        return self.train.test_x[rows], self.train.test_y[rows]


def load_silo_data(spec: str, silo_sizes: Sequence[int], *, seed: int, test_samples: int = 100,
                   groups: int = 4, data_std: float = 0.4, task_std: float = 0.08) -> SiloData:
    """The silo dataset ``spec`` (``SILO_DATASETS``) with ``silo_sizes[k]`` training examples in silo k."""
    key = silo_dataset_key(spec)
    if key == "rotated_digits":
        return rotated_digits(silo_sizes, seed=seed, test_samples=test_samples, groups=groups)
    if key == "mean_estimation":
        return mean_estimation(silo_sizes, seed=seed, test_samples=test_samples, data_std=data_std, task_std=task_std)
    raise InvalidInputError("dataset", unknown_silo_dataset(spec))


def _package(name: str, task: str, train: list[tuple[np.ndarray, np.ndarray]], test: list[tuple[np.ndarray, np.ndarray]],
             num_classes: int) -> SiloData:
    train_x = torch.from_numpy(np.concatenate([x for x, _ in train]))
    train_y = torch.from_numpy(np.concatenate([y for _, y in train]))
    test_x = torch.from_numpy(np.concatenate([x for x, _ in test]))
    test_y = torch.from_numpy(np.concatenate([y for _, y in test]))
    offsets = np.cumsum([0, *(len(y) for _, y in train)])
    test_offsets = np.cumsum([0, *(len(y) for _, y in test)])
    dataset = FederatedDataset(
        name=name, task=task,  # type: ignore[arg-type]
        train_x=train_x, train_y=train_y,
        client_indices=tuple(torch.arange(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])),
        client_ids=tuple(f"silo-{k:03d}" for k in range(len(train))),
        test_x=test_x, test_y=test_y, num_classes=num_classes, input_shape=tuple(train_x.shape[1:]),
    )
    return SiloData(dataset, tuple(torch.arange(int(a), int(b)) for a, b in zip(test_offsets[:-1], test_offsets[1:])))


def rotated_digits(silo_sizes: Sequence[int], *, seed: int, test_samples: int = 100, groups: int = 4,
                   masks: bool = True) -> SiloData:
    """Digits rotated by ``90 * (k mod groups)`` degrees with a silo-specific 2x2 patch mask
    (docs/mrmtl.md §7); ``groups`` and ``masks`` are the heterogeneity knobs the MR-MTL map
    sweeps (docs/results.md §8.2). Without masks the same rows are drawn, none blanked."""
    from sklearn.datasets import load_digits

    if not 1 <= groups <= 4:
        raise InvalidInputError("groups", f"rotated_digits has 1 to 4 rotation groups, got {groups}")
    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32) / 16.0
    labels = np.asarray(bunch.target, dtype=np.int64)
    rng = np.random.default_rng([seed, 12])
    order = rng.permutation(len(labels))
    cut = int(0.8 * len(labels))
    pool, held = order[:cut], order[cut:]
    mean, std = float(images[pool].mean()), float(images[pool].std())
    train, test = [], []
    for k, size in enumerate(silo_sizes):
        if size > len(pool):
            raise InvalidInputError(f"silos.{k}.num_samples", f"rotated_digits silos hold at most {len(pool)} examples, got {size}")
        silo_rng = np.random.default_rng([seed, 12, k])
        patch = silo_rng.integers(0, 7, size=2)
        # drawn whether or not it is used, so both mask settings draw the same rows
        probability = silo_rng.uniform(0.1, 0.9)
        if not masks:
            probability = 0.0
        parts = []
        for rows, count in ((pool, size), (held, min(test_samples, len(held)))):
            chosen = silo_rng.choice(rows, count, replace=False)
            x = rotate_images(images[chosen], k % groups)
            blank = silo_rng.random(count) < probability
            x[blank, patch[0]:patch[0] + 2, patch[1]:patch[1] + 2] = 0.0
            parts.append((((x - mean) / std)[:, None].astype(np.float32), labels[chosen]))
        train.append(parts[0])
        test.append(parts[1])
    return _package("rotated_digits", "classification", train, test, 10)


def mean_estimation(silo_sizes: Sequence[int], *, seed: int, test_samples: int = 100, data_std: float = 0.4,
                    task_std: float = 0.08) -> SiloData:
    """Section 6's toy: silo k's points are ``w_k + N(0, data_std^2)``, ``w_k ~ N(0, task_std^2)``.

    ``train_x`` is ``[n, 1]`` (the point) and ``train_y`` the same point as a float target;
    the model is a scalar ``w`` and the loss ``(w - x)^2 / 2`` (task ``regression``).
    """
    rng = np.random.default_rng([seed, 6])
    tasks = rng.normal(0.0, task_std, size=len(silo_sizes))
    train, test = [], []
    for k, size in enumerate(silo_sizes):
        points = (tasks[k] + rng.normal(0.0, data_std, size=size)).astype(np.float32)
        held = (tasks[k] + rng.normal(0.0, data_std, size=test_samples)).astype(np.float32)
        train.append((points[:, None], points))
        test.append((held[:, None], held))
    return _package("mean_estimation", "regression", train, test, 1)
