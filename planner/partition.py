"""Contiguous partitions of groups sorted by epsilon (docs/planning.md §4.4).

``pooled_plus`` puts groups with neighbouring budgets into one pool. A contiguous partition
of n sorted groups is a set of cut points, so there are 2^(n-1) of them: few enough to try
all for small n. For many groups the candidates are the contiguous partitions whose pools
are unions of at most ``blocks`` quantile blocks, plus all-singletons.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations

EXHAUSTIVE_LIMIT = 8


def contiguous_partitions(items: Sequence[int]) -> Iterator[list[list[int]]]:
    """Every partition of ``items`` (in their order) into contiguous runs."""
    n = len(items)
    for cut_count in range(n):
        for cuts in combinations(range(1, n), cut_count):
            bounds = (0, *cuts, n)
            yield [list(items[bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)]


def quantile_blocks(items: Sequence[int], blocks: int) -> list[list[int]]:
    """``items`` split into at most ``blocks`` contiguous runs of near-equal length."""
    n = len(items)
    count = min(blocks, n)
    edges = [round(i * n / count) for i in range(count + 1)]
    return [list(items[edges[i] : edges[i + 1]]) for i in range(count) if edges[i + 1] > edges[i]]


def candidate_partitions(items: Sequence[int], blocks: int = EXHAUSTIVE_LIMIT) -> list[list[list[int]]]:
    """All contiguous partitions for len(items) <= blocks; else block-level ones plus singletons.

    docs/planning.md §4.4: for many groups the search covers every partition whose pools
    are unions of consecutive quantile blocks (which includes the single shared pool), and
    the all-singletons partition, so the chosen J is never above either extreme.
    """
    if len(items) <= blocks:
        return list(contiguous_partitions(items))
    coarse = quantile_blocks(items, blocks)
    result = []
    for partition in contiguous_partitions(list(range(len(coarse)))):
        result.append([[g for b in pool for g in coarse[b]] for pool in partition])
    result.append([[g] for g in items])
    return result
