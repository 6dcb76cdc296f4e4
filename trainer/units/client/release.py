"""A client-level round's result, assembled the same way by every executor of the round
(the simulator's ``RoundEngine`` and the Flower scale-out's ``FlowerRoundEngine``): each
pool's released sum or abort, the never-below-``m_P`` guard, the strategy's aggregate and
server step, and the ``RoundOutcome`` (docs/trainer.md §Rounds; docs/flower.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from trainer.strategies.base import RoundContext, Strategy
from trainer.units.client.adaptive_clip import adaptive_controller
from trainer.units.client.mechanism import PoolMechanism, at_clip


@dataclass
class PoolResults:
    """What each pool's secure-aggregation session released this round, in pool order."""

    pool_sums: dict[str, np.ndarray | None] = field(default_factory=dict)
    survived: dict[str, int] = field(default_factory=dict)
    aborted: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    def abort(self, pool_id: str, reason: str) -> None:
        """The pool released nothing this round, for ``reason``."""
        self.pool_sums[pool_id] = None
        self.survived[pool_id] = 0
        self.aborted.append(pool_id)
        self.reasons[pool_id] = reason

    def release(self, mechanism: PoolMechanism, total: np.ndarray | None, survivors: int) -> None:
        """The pool's session released ``total``, the sum of ``survivors`` inputs.

        Secure aggregation must never release a sum of fewer than ``m_P`` inputs: its noise
        would be below ``sigma_P^2 C^2`` (``RuntimeError``, a bug, never bad input)."""
        if survivors < mechanism.threshold:
            raise RuntimeError(
                f"pool {mechanism.pool_id}: secure aggregation released a sum of "
                f"{survivors} < m_P={mechanism.threshold} inputs"
            )
        self.pool_sums[mechanism.pool_id] = total
        self.survived[mechanism.pool_id] = survivors


def too_few_sampled(sampled: int, mechanism: PoolMechanism) -> str:
    """The abort reason of a pool with fewer clients sampled than its threshold ``m_P``."""
    return f"{sampled} clients sampled, fewer than the threshold m_P={mechanism.threshold}"


def server_step(strategy: Strategy, ctx: RoundContext, global_params: torch.Tensor,
                pool_sums: dict[str, np.ndarray | None], dim: int) -> torch.Tensor:
    """The next global parameters: the strategy's aggregate of the released sums, then its server update."""
    device = global_params.device
    released = {pool_id: None if total is None else torch.from_numpy(total).to(device)
                for pool_id, total in pool_sums.items()}
    update = strategy.aggregate(ctx, released, dim)
    return strategy.server_update(ctx, global_params, update)


def round_mechanisms(strategy: Strategy, mechanisms: list[PoolMechanism], dim: int
                     ) -> tuple[float | None, list[PoolMechanism]]:
    """The round's clip norm ``S^t`` (``None``: fixed clipping) and the pools' mechanisms at
    it: the strategy's adaptive-clipping controller, when it runs one, sets the round's
    clip, noise shares, grid and value bound (docs/trainer.md §Adaptive clipping)."""
    controller = adaptive_controller(strategy)
    if controller is None:
        return None, mechanisms
    return controller.clip_norm, [at_clip(m, controller.clip_norm, dim) for m in mechanisms]


def split_counts(pool_sums: dict[str, np.ndarray | None], dim: int
                 ) -> tuple[dict[str, np.ndarray | None], dict[str, float | None]]:
    """Adaptive clipping's released sums split into the update sums (the first ``dim``
    coordinates) and each pool's noisy count (the last; ``None`` for an aborted pool)."""
    counts = {pool_id: None if total is None else float(total[-1]) for pool_id, total in pool_sums.items()}
    return {pool_id: None if total is None else total[:dim] for pool_id, total in pool_sums.items()}, counts
