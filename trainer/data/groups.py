"""Which plan group each client belongs to (``docs/trainer.md``, "Clients and groups").

A plan fixes how many clients each privacy group holds; the dataset's clients are dealt
into the groups by a seeded shuffle, so that group membership does not follow data order
(natural clients are listed by size or appearance). ``first`` groups may be filled from
a chosen set of clients before the others are dealt: FedHDP's *skewed* opt-out, where
the clients who opt out all hold one label (``clients_with_label``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset

UNASSIGNED = -1


def assign_groups(
    num_clients_per_group: Sequence[int],
    client_count: int,
    seed: int,
    *,
    first: Sequence[int] = (),
    candidates: np.ndarray | None = None,
) -> list[int]:
    """Group index of each of ``client_count`` clients; ``-1`` for clients in no group.

    A seeded permutation of the clients is cut into consecutive runs of the given sizes.
    More clients than the groups hold leaves the rest unassigned (``UNASSIGNED``; they
    are never sampled). Fewer is an ``InvalidInputError`` naming ``num_clients``: load the
    dataset with ``num_clients`` equal to the plan's population (``iid`` and ``dirichlet``
    split the pooled data into that many clients; a natural split cannot invent clients).

    With ``first`` (group indices) and ``candidates`` (client indices), those groups are
    filled first, in order, from a seeded permutation of the candidates (topped up from the
    other clients, in the seeded order, when there are too few); every other group is then
    dealt as above from the clients left. No candidate at all is an ``InvalidInputError``
    naming ``skewed_label``. Without ``first`` the result is the plain deal, whatever
    ``candidates`` is.
    """
    sizes = [int(size) for size in num_clients_per_group]
    if any(size < 0 for size in sizes):
        raise InvalidInputError("num_clients_per_group", f"sizes must be >= 0, got {sizes}")
    needed = sum(sizes)
    if client_count < needed:
        raise InvalidInputError(
            "num_clients",
            f"the plan's groups hold {needed} clients but the dataset has {client_count}; "
            f"load it with num_clients={needed} (partition 'iid' or 'dirichlet' splits the "
            "data into that many clients)",
        )
    order = np.random.default_rng([seed, 0x6A0]).permutation(client_count)
    groups = [UNASSIGNED] * client_count
    if first:
        pool = np.random.default_rng([seed, 0x5CE]).permutation(np.asarray(candidates, dtype=np.int64))
        if pool.size == 0:
            raise InvalidInputError("skewed_label", "no client holds the chosen label")
        # candidates first; if there are too few, the first groups are topped up from
        # the seeded order of the other clients (the caller reports the shortfall)
        taken = set(pool.tolist())
        fill = np.concatenate([pool, np.array([c for c in order.tolist() if c not in taken], dtype=np.int64)])
        start = 0
        for group in first:
            for client in fill[start : start + sizes[group]]:
                groups[int(client)] = group
            start += sizes[group]
        used = set(fill[:start].tolist())
        order = np.array([c for c in order.tolist() if c not in used], dtype=np.int64)
    start = 0
    for group, size in enumerate(sizes):
        if group in first:
            continue
        for client in order[start : start + size]:
            groups[int(client)] = group
        start += size
    return groups


def clients_with_label(dataset: FederatedDataset, label: int) -> np.ndarray:
    """Clients whose most frequent training label is ``label`` (ties: the smallest label).

    With the ``one_label`` partition these are exactly the clients holding ``label``.
    """
    holders = []
    for client, rows in enumerate(dataset.client_indices):
        labels = dataset.train_y[rows]
        if labels.numel() and int(torch.bincount(labels).argmax()) == label:
            holders.append(client)
    return np.asarray(holders, dtype=np.int64)
