"""Who masks with and shares to whom: the complete graph (SecAgg) or a sparse one (SecAgg+).

``docs/secure-aggregation.md``, "SecAgg+ (sparse mode)". Sparse mode uses a Harary graph H(k, n): the n
clients sit on a ring in a seeded random order and each is joined to the k/2 nearest on
either side (k even), which is k-regular and k-connected. The order comes from public
session randomness; the graph is public, both the server and every client compute it.
A client's share group is itself plus its neighbours; its shares are t_k-of-(k + 1), t_k
from ``SecAggParams.group_threshold`` (Bell et al.'s t, or the pool threshold scaled to the
group). The survivors' connectivity is checked by every client and by the server
(``SessionSetup.connected``, which memoises the answer per survivor set).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence

import numpy as np


def neighbour_sets(
    participants: Sequence[int], neighbours: int | None, order_seed: int
) -> dict[int, tuple[int, ...]]:
    """Each participant's neighbours, sorted. ``neighbours=None`` (full mode) is the complete graph.

    An odd k is rounded up to even (the ring gives k/2 per side); k >= n - 1 is complete.
    """
    ids = sorted(participants)
    n = len(ids)
    if neighbours is None or neighbours + (neighbours % 2) >= n - 1:
        return {u: tuple(v for v in ids if v != u) for u in ids}
    half = (neighbours + 1) // 2
    order = np.random.Generator(np.random.PCG64(order_seed)).permutation(n)
    ring = [ids[i] for i in order]
    result: dict[int, tuple[int, ...]] = {}
    for position, u in enumerate(ring):
        near = {ring[(position + step) % n] for step in range(-half, half + 1) if step != 0}
        result[u] = tuple(sorted(near))
    return result


def scaled_group_threshold(pool_threshold: int, group_size: int, num_participants: int) -> int:
    """t_k = max(1, ceil(group_size * t / n)): the pool threshold scaled to a share group (= t when complete)."""
    return max(1, min(group_size, -(-group_size * pool_threshold // num_participants)))


def share_group(owner: int, graph: Mapping[int, Sequence[int]]) -> tuple[int, ...]:
    """The owner and its neighbours, sorted; member i holds the share at x = i + 1."""
    return tuple(sorted((owner, *graph[owner])))


def is_connected(nodes: Collection[int], graph: Mapping[int, Sequence[int]]) -> bool:
    """Whether the subgraph induced on ``nodes`` is connected (breadth-first search)."""
    remaining = set(nodes)
    if not remaining:
        return True
    start = next(iter(remaining))
    seen = {start}
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for v in graph[u]:
            if v in remaining and v not in seen:
                seen.add(v)
                queue.append(v)
    return len(seen) == len(remaining)
