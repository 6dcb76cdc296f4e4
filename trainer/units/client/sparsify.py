"""Top-k sparsification of a pool's noisy sum (docs/trainer.md §Rounds, step 4).

Applied by the server to the unmasked pool sum, after the noise is in it, so it is
post-processing and costs no privacy (docs/planning.md §3: the server-side aggregation).
"""

from __future__ import annotations

import math

import torch


def keep_count(dim: int, keep_ratio: float) -> int:
    """``k = ceil(kappa d)``, at least 1 and at most ``d``.

    ``kappa d`` is rounded to 9 decimals first so that a ratio written in decimal
    (0.07 * 100 = 7.000000000000001 in floating point) gives the k its writer meant.
    """
    if not 0 < keep_ratio <= 1:
        raise ValueError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    return min(dim, max(1, math.ceil(round(keep_ratio * dim, 9))))


def top_k(vector: torch.Tensor, keep_ratio: float) -> torch.Tensor:
    """``top_k(S)``: ``S`` with all but its ``k`` largest-magnitude coordinates set to 0.

    Exactly ``k = keep_count(d, keep_ratio)`` coordinates are kept (ties broken by
    ``torch.topk``, deterministically for a given input).
    """
    dim = vector.numel()
    k = keep_count(dim, keep_ratio)
    if k >= dim:
        return vector.clone()
    flat = vector.reshape(-1)
    indices = torch.topk(flat.abs(), k, sorted=False).indices
    out = torch.zeros_like(flat)
    out[indices] = flat[indices]
    return out.reshape(vector.shape)
