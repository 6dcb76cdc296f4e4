"""Pooled arrays + a partition choice -> a ``FederatedDataset`` (``docs/trainer.md``, "Data").

Every loader ends here, so the partition rules, the ``num_clients`` checks and the
optional test-set cap are the same for every dataset.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset, Task
from trainer.data.partition import (
    PARTITIONS,
    dirichlet_partition,
    iid_partition,
    natural_partition,
    one_label_partition,
)


def federate(
    *,
    name: str,
    task: Task,
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    num_classes: int,
    partition: str,
    num_clients: int,
    alpha: float,
    seed: int,
    natural: Sequence[tuple[str, np.ndarray]] | None = None,
    vocab: str | None = None,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
    natural_tests: Sequence[tuple[str, np.ndarray]] | None = None,
) -> FederatedDataset:
    """Split the training rows into clients and package everything.

    ``natural`` lists the data's own clients as ``(client_id, row_indices)``; with
    ``partition`` ``iid``, ``dirichlet`` or ``one_label`` the rows of all natural clients
    (or all rows when there are none) are pooled and re-split into ``num_clients`` clients
    named ``client-00000``... ``max_test_samples`` keeps a seeded random subset of the
    test set.

    Local test rows (``FederatedDataset.client_test_indices``, docs/trainer.md §Data):
    ``client_test_fraction`` in (0, 1) holds out that share of every client's rows
    (``round(f n_i)``, at least one and leaving at least one for training) from a generator
    seeded by ``seed``; ``natural_tests`` (``(client_id, rows)``, rows outside every
    client's training rows) are the natural clients' own test records (LEAF's per-user test
    files), used with ``partition="natural"``. A client without test records then has none.
    """
    if partition not in PARTITIONS:
        raise InvalidInputError(
            "partition", f"unknown partition {partition!r}; use one of {', '.join(PARTITIONS)}"
        )
    if not 0 <= client_test_fraction < 1:
        raise InvalidInputError("client_test_fraction", f"must be in [0, 1), got {client_test_fraction}")
    if client_test_fraction > 0 and natural_tests is not None and partition == "natural":
        raise InvalidInputError(
            "client_test_fraction", f"{name} has its own per-client test records; leave client_test_fraction at 0"
        )
    ids, parts = split_clients(name, partition, train_y, num_clients, alpha, seed, natural)
    client_tests: list[np.ndarray] | None = None
    if client_test_fraction > 0:
        parts, client_tests = hold_out_client_tests(parts, ids, client_test_fraction, seed)
    elif natural_tests is not None and partition == "natural":
        own: dict[str, list[np.ndarray]] = {}
        for client_id, rows in natural_tests:
            own.setdefault(client_id, []).append(np.asarray(rows, dtype=np.int64))
        client_tests = [np.concatenate(own.get(client_id, [np.zeros(0, dtype=np.int64)])) for client_id in ids]
    test_x, test_y = subsample_tests(test_x, test_y, max_test_samples, seed)
    return FederatedDataset(
        name=name,
        task=task,
        train_x=train_x,
        train_y=train_y,
        client_indices=tuple(torch.from_numpy(np.asarray(p, dtype=np.int64)) for p in parts),
        client_ids=tuple(ids),
        test_x=test_x,
        test_y=test_y,
        num_classes=num_classes,
        input_shape=tuple(train_x.shape[1:]),
        vocab=vocab,
        client_test_indices=None if client_tests is None else tuple(
            torch.from_numpy(np.asarray(rows, dtype=np.int64)) for rows in client_tests
        ),
    )


def hold_out_client_tests(
    parts: Sequence[np.ndarray], ids: Sequence[str], fraction: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``(training rows, local test rows)`` per client: a seeded ``fraction`` of each client's rows.

    Client ``i`` with ``n_i`` rows keeps ``round(fraction n_i)`` of them for testing,
    clamped to ``[1, n_i - 1]``; a client with a single row cannot be split and is an
    ``InvalidInputError`` naming ``client_test_fraction``.
    """
    rng = np.random.default_rng([seed, 0xC7E5])
    training, testing = [], []
    for client_id, rows in zip(ids, parts):
        size = int(np.asarray(rows).size)
        if size < 2:
            raise InvalidInputError(
                "client_test_fraction",
                f"client {client_id} has {size} sample(s); holding out local test data needs at least 2",
            )
        count = min(max(int(round(fraction * size)), 1), size - 1)
        shuffled = rng.permutation(np.asarray(rows))
        testing.append(np.sort(shuffled[:count]))
        training.append(np.sort(shuffled[count:]))
    return training, testing


def federate_images(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray] | None,
    *,
    num_classes: int | None,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    test_fraction: float,
    max_test_samples: int | None,
    client_test_fraction: float = 0.0,
) -> FederatedDataset:
    """NCHW ``(images, labels)`` arrays -> a classification ``FederatedDataset``.

    The image loaders share this tail: without a ``test`` pair a seeded ``test_fraction``
    of ``train`` is held out (``split_test``), pixels are standardised by the training
    part (``standardize_images``) and the rows are partitioned (``federate``).
    ``num_classes=None`` means one more than the largest label in train or test.
    """
    train_images, train_labels = train
    if test is None:
        train_rows, test_rows = split_test(train_labels.size, test_fraction, seed)
        test_images, test_labels = train_images[test_rows], train_labels[test_rows]
        train_images, train_labels = train_images[train_rows], train_labels[train_rows]
    else:
        test_images, test_labels = test
    if num_classes is None:
        num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    train_x, test_x = standardize_images(train_images, test_images)
    return federate(
        name=name,
        task="classification",
        train_x=train_x,
        train_y=torch.from_numpy(train_labels),
        test_x=test_x,
        test_y=torch.from_numpy(test_labels),
        num_classes=num_classes,
        partition=partition,
        num_clients=num_clients,
        alpha=alpha,
        seed=seed,
        max_test_samples=max_test_samples,
        client_test_fraction=client_test_fraction,
    )


def split_test(num_samples: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded ``(train_rows, test_rows)`` for data that comes without a test part."""
    if not 0 < test_fraction < 1:
        raise InvalidInputError("test_fraction", f"must be in (0, 1), got {test_fraction}")
    order = np.random.default_rng([seed, 0x5E7]).permutation(num_samples)
    test_count = max(1, int(round(test_fraction * num_samples)))
    if test_count >= num_samples:
        raise InvalidInputError(
            "dataset", f"{num_samples} samples are too few to hold out a test set"
        )
    return np.sort(order[test_count:]), np.sort(order[:test_count])


def standardize_images(
    train: np.ndarray, test: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """NCHW images scaled by the training set's per-channel mean and std, as float32."""
    train_f = train.astype(np.float32)
    test_f = test.astype(np.float32)
    mean = train_f.mean(axis=(0, 2, 3), keepdims=True)
    std = train_f.std(axis=(0, 2, 3), keepdims=True)
    std = np.where(std > 0, std, 1.0).astype(np.float32)
    return (
        torch.from_numpy((train_f - mean) / std),
        torch.from_numpy((test_f - mean) / std),
    )


def split_clients(name: str, partition: str, train_y: torch.Tensor, num_clients: int, alpha: float, seed: int,
                  natural: Sequence[tuple[str, np.ndarray]] | None) -> tuple[list[str], list[np.ndarray]]:
    """The clients' ids and training rows: the data's own clients (``natural``), or the
    pooled rows re-split by ``partition`` into ``num_clients`` named ``client-00000``..."""
    if partition == "natural":
        if natural is None:
            raise InvalidInputError(
                "partition",
                f"{name} has no natural clients; use partition='iid' or 'dirichlet'",
            )
        kept = natural_partition(natural, num_clients, name)
        return [client_id for client_id, _ in kept], [rows for _, rows in kept]
    if natural is None:
        pooled = np.arange(train_y.shape[0])
    else:
        pooled = np.sort(np.concatenate([rows for _, rows in natural]))
    labels = train_y.numpy()[pooled]
    if partition == "iid":
        positions = iid_partition(pooled.size, num_clients, seed)
    elif partition == "one_label":
        positions = one_label_partition(labels, num_clients, seed)
    else:
        positions = dirichlet_partition(labels, num_clients, alpha, seed)
    width = max(5, len(str(num_clients - 1)))
    return [f"client-{i:0{width}d}" for i in range(num_clients)], [pooled[p] for p in positions]


def subsample_tests(test_x: torch.Tensor, test_y: torch.Tensor, max_test_samples: int | None,
                    seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """At most ``max_test_samples`` test rows, a seeded random subset (all when fewer)."""
    if max_test_samples is None:
        return test_x, test_y
    if max_test_samples < 1:
        raise InvalidInputError(
            "max_test_samples", f"must be at least 1, got {max_test_samples}"
        )
    if max_test_samples < test_y.shape[0]:
        keep = np.sort(
            np.random.default_rng([seed, 0x7E57]).choice(
                test_y.shape[0], max_test_samples, replace=False
            )
        )
        index = torch.from_numpy(keep)
        test_x, test_y = test_x[index], test_y[index]
    return test_x, test_y
