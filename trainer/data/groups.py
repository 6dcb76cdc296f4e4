"""Which plan group each client belongs to (``docs/trainer.md``, "Clients and groups").

A plan fixes how many clients each privacy group holds; the dataset's clients are dealt
into the groups by a seeded shuffle, so that group membership does not follow data order
(natural clients are listed by size or appearance).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accounting.errors import InvalidInputError

UNASSIGNED = -1


def assign_groups(
    num_clients_per_group: Sequence[int], client_count: int, seed: int
) -> list[int]:
    """Group index of each of ``client_count`` clients; ``-1`` for clients in no group.

    A seeded permutation of the clients is cut into consecutive runs of the given sizes.
    More clients than the groups hold leaves the rest unassigned (``UNASSIGNED``; they
    are never sampled). Fewer is an ``InvalidInputError`` naming ``num_clients``: load the
    dataset with ``num_clients`` equal to the plan's population (``iid`` and ``dirichlet``
    split the pooled data into that many clients; a natural split cannot invent clients).
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
    start = 0
    for group, size in enumerate(sizes):
        for client in order[start : start + size]:
            groups[int(client)] = group
        start += size
    return groups
