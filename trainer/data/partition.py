"""Splitting a pool of samples across clients (``docs/trainer.md``, "Partitions").

* ``iid``: a seeded permutation cut into ``num_clients`` near-equal parts.
* ``dirichlet``: client ``k`` draws label proportions ``q_k ~ Dir(alpha * p)`` (``p`` the
  pooled label frequencies, Hsu et al. 2019) and fills its near-equal share of the
  samples by drawing labels from ``q_k`` without replacement; a label that runs out is
  dropped and ``q_k`` renormalised over the labels left. Small ``alpha`` gives clients few
  labels each, large ``alpha`` approaches ``iid``. Every client gets ``floor(n/N)`` or
  ``ceil(n/N)`` samples, so none is empty.
* ``one_label``: every client holds samples of a single label (FedHDP's non-IID MNIST).
  Labels get clients in proportion to their sample counts (rounded by largest remainder;
  every label gets at least one client when there are at least as many clients as labels), and
  each label's samples, shuffled, are cut into near-equal parts for its clients.
* ``natural``: the clients the data came with (roles, LEAF users, synthetic devices);
  the ``num_clients`` largest are kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accounting.errors import InvalidInputError

PARTITIONS = ("iid", "dirichlet", "one_label", "natural")


def iid_partition(num_samples: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """Indices ``0..num_samples-1`` shuffled with ``seed`` and cut into ``num_clients`` parts."""
    _check_counts(num_samples, num_clients)
    order = np.random.default_rng([seed, 0x11D]).permutation(num_samples)
    return [np.sort(part) for part in np.array_split(order, num_clients)]


def dirichlet_partition(
    labels: np.ndarray, num_clients: int, alpha: float, seed: int
) -> list[np.ndarray]:
    """Label-skewed split: client ``k`` draws labels from ``q_k ~ Dir(alpha * p)``.

    ``p`` is the empirical label distribution; sizes are as equal as possible. See the
    module docstring for the without-replacement rule.
    """
    if not np.isfinite(alpha) or alpha <= 0:
        raise InvalidInputError("alpha", f"must be a positive number, got {alpha}")
    labels = np.asarray(labels)
    _check_counts(labels.shape[0], num_clients)
    rng = np.random.default_rng([seed, 0xD1A])
    classes, encoded = np.unique(labels, return_inverse=True)
    pools = [rng.permutation(np.flatnonzero(encoded == c)) for c in range(classes.size)]
    remaining = np.array([pool.size for pool in pools])
    taken = np.zeros(classes.size, dtype=np.int64)
    prior = remaining / remaining.sum()
    sizes = [part.size for part in np.array_split(np.arange(labels.shape[0]), num_clients)]
    parts: list[np.ndarray] = []
    for size in sizes:
        weights = rng.dirichlet(np.maximum(alpha * prior, 1e-12))
        counts = np.zeros(classes.size, dtype=np.int64)
        missing = size
        while missing > 0:
            # Draw the still-missing labels from q_k over the labels not yet exhausted.
            available = remaining - counts > 0
            masked = np.where(available, weights, 0.0)
            if masked.sum() <= 0:
                masked = available.astype(float)
            draw = rng.multinomial(missing, masked / masked.sum())
            draw = np.minimum(draw, remaining - counts)
            counts += draw
            missing -= int(draw.sum())
        rows = [pools[c][taken[c] : taken[c] + counts[c]] for c in range(classes.size)]
        taken += counts
        remaining -= counts
        parts.append(np.sort(np.concatenate(rows)))
    return parts


def one_label_partition(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """Each client's samples all carry one label; see the module docstring for the counts.

    Clients are listed in a seeded random order, so client index says nothing about the
    label. With fewer clients than labels, the labels left without a client are unused.
    """
    labels = np.asarray(labels)
    _check_counts(labels.shape[0], num_clients)
    rng = np.random.default_rng([seed, 0x1AB])
    classes, encoded = np.unique(labels, return_inverse=True)
    sizes = np.bincount(encoded, minlength=classes.size)
    share = num_clients * sizes / sizes.sum()
    counts = np.floor(share).astype(np.int64)
    if num_clients >= classes.size:
        counts = np.maximum(counts, 1)
    # Hand out the clients floor() left over to the labels furthest below their share;
    # the one-client minimum can overshoot: take back from those furthest above it.
    while counts.sum() < num_clients:
        counts[int(np.argmax(share - counts))] += 1
    while counts.sum() > num_clients:
        counts[int(np.argmax(np.where(counts > 1, counts - share, -np.inf)))] -= 1
    # No label gets more clients than samples: with N <= n, N n_c / n <= n_c, and neither
    # rounding up nor the one-client minimum can pass the integer n_c >= 1.
    parts: list[np.ndarray] = []
    for c in range(classes.size):
        rows = rng.permutation(np.flatnonzero(encoded == c))
        if counts[c] > 0:  # with fewer clients than labels, some labels are left out
            parts.extend(np.sort(part) for part in np.array_split(rows, int(counts[c])))
    order = rng.permutation(len(parts))
    return [parts[i] for i in order]


def natural_partition(
    groups: Sequence[tuple[str, np.ndarray]], num_clients: int, dataset: str
) -> list[tuple[str, np.ndarray]]:
    """The ``num_clients`` largest natural clients (ties keep data order), in data order."""
    if num_clients < 1:
        raise InvalidInputError("num_clients", f"must be at least 1, got {num_clients}")
    nonempty = [(name, rows) for name, rows in groups if rows.size > 0]
    if len(nonempty) < num_clients:
        raise InvalidInputError(
            "num_clients",
            f"{dataset} has only {len(nonempty)} natural clients with enough samples, "
            f"{num_clients} were asked for; ask for at most {len(nonempty)} or use "
            "partition='iid' or 'dirichlet' to split the pooled data into more clients",
        )
    order = sorted(range(len(nonempty)), key=lambda i: (-nonempty[i][1].size, i))
    keep = sorted(order[:num_clients])
    return [nonempty[i] for i in keep]


def _check_counts(num_samples: int, num_clients: int) -> None:
    if num_clients < 1:
        raise InvalidInputError("num_clients", f"must be at least 1, got {num_clients}")
    if num_clients > num_samples:
        raise InvalidInputError(
            "num_clients",
            f"{num_clients} clients cannot share {num_samples} training samples "
            "(every client needs at least one)",
        )
