"""The local metric-privacy mechanism: Laplace noise in R^n on a client's released model.

(docs/metric-privacy.md §2-§3.) A client of a ``metric_local`` plan releases its whole
locally trained model plus noise with density ``K exp(-eps ||x - x0||)``; the trainer's
metric engine (``trainer/units/metric/rounds.py``) calls ``sanitize`` for every participant
with a generator of its own (``PURPOSE_LAPLACE``), so no strategy draws or sees the noise
before it is added. numpy only: no torch, no clipping, no Gaussian noise shares, no
secure aggregation (the released vectors are individual by design: k-means needs them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from accounting.errors import InvalidInputError

RadiusRule = Literal["public", "own_update"]
RADIUS_RULES: tuple[RadiusRule, ...] = ("public", "own_update")


def sample_laplace(dim: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """One draw of ``rho`` with density ``K exp(-epsilon ||rho||)`` in ``R^dim`` (docs/metric-privacy.md §2).

    ``||rho|| ~ Gamma(shape dim, scale 1/epsilon)`` and the direction is uniform on the
    sphere (a normalised standard Gaussian), independent of the norm: the density depends
    on ``rho`` only through its norm, and the radial density ``r^(dim-1) exp(-epsilon r)``
    is that Gamma's.
    """
    if dim < 1:
        raise InvalidInputError("model_dim", f"must be at least 1, got {dim}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidInputError("epsilon", f"must be a positive finite number, got {epsilon}")
    direction = rng.standard_normal(dim)
    length = float(np.linalg.norm(direction))
    while length == 0.0:  # probability zero, but a zero vector has no direction
        direction = rng.standard_normal(dim)
        length = float(np.linalg.norm(direction))
    radius = float(rng.gamma(shape=dim, scale=1.0 / epsilon))
    return direction * (radius / length)


@dataclass(frozen=True)
class Sanitized:
    """One client's release: ``released = trained + rho`` and the numbers that made it.

    ``epsilon`` is the Laplace parameter ``n / (nu r)`` (``inf`` when no noise was added:
    ``nu = 0`` or ``r = 0``); ``radius`` is ``r``; ``noise_norm`` is ``||rho||``.
    """

    released: np.ndarray
    epsilon: float
    radius: float
    noise_norm: float


def next_public_radius(
    released: np.ndarray,
    broadcast: np.ndarray,
    noise_multipliers: np.ndarray,
    radius: float,
    min_radius: float,
    max_radius: float,
) -> float:
    """The ``previous_round`` rule's next radius (docs/metric-privacy.md §3.1), from public data only.

    ``released [m, n]`` are the round's released models, ``broadcast [k, n]`` the models
    the server sent (the clients' possible start points; a client's own choice is never
    sent), ``noise_multipliers [m]`` each release's nu and ``radius`` the round's radius
    ``r_t``. ``d_i`` is release i's distance to its nearest broadcast model. The noise
    rho_i has mean zero, is independent of the update and ``E||rho_i||^2 = n (n + 1) /
    eps^2 = (n + 1) nu_i^2 r_t^2 / n``, so ``d_i^2 - E||rho_i||^2`` is a noisy estimate of
    the squared update size; the next radius is the square root of their median, clipped
    to ``[min_radius, max_radius]`` (the raw median of ``d_i`` would grow like ``nu r_t``
    round after round; the upper clip keeps one round's stray releases from inflating
    the next round's noise). Nothing released: ``r_t`` clipped.
    """
    released = np.asarray(released, dtype=np.float64)
    if released.shape[0] == 0:
        return float(min(max(radius, min_radius), max_radius))
    n = released.shape[1]
    distances = np.sqrt(((released[:, None, :] - np.asarray(broadcast, dtype=np.float64)[None]) ** 2).sum(-1)).min(1)
    noise_square = (n + 1) / n * (np.asarray(noise_multipliers, dtype=np.float64) * radius) ** 2
    estimate = float(np.median(distances**2 - noise_square))
    return float(min(max(math.sqrt(max(estimate, 0.0)), min_radius), max_radius))


def sanitize(
    trained: np.ndarray,
    base: np.ndarray,
    noise_multiplier: float,
    rng: np.random.Generator,
    *,
    radius_rule: RadiusRule = "public",
    public_radius: float | None = None,
) -> Sanitized:
    """SanitizeUpdate (the paper's Algorithm 2) with a radius rule (docs/metric-privacy.md §3).

    ``r`` is ``public_radius`` (rule ``public``: data-independent, the sound variant) or
    ``||trained - base||`` (rule ``own_update``: the paper's, whose noise scale depends on
    the private update). ``epsilon = n / (nu r)`` and ``released = trained + rho`` with
    ``rho ~ L_{0, epsilon}``, so ``E||rho|| = n / epsilon = nu r``. ``nu = 0`` releases
    ``trained`` unchanged (no guarantee: non-private IFCA); ``r = 0`` under ``own_update``
    is the limit ``epsilon -> inf`` (no noise; the released model is the public start
    point). A non-finite ``trained`` is replaced by ``base`` (the client sends its start
    point, like a zero update under the client-level mechanism).
    """
    trained = np.asarray(trained, dtype=np.float64)
    base = np.asarray(base, dtype=np.float64)
    if trained.ndim != 1 or trained.shape != base.shape:
        raise InvalidInputError("trained", f"trained {trained.shape} and base {base.shape} must be equal 1-d shapes")
    if not (math.isfinite(noise_multiplier) and noise_multiplier >= 0):
        raise InvalidInputError("noise_multiplier", f"must be a non-negative finite number, got {noise_multiplier}")
    if not bool(np.isfinite(trained).all()):
        trained = base.copy()
    if radius_rule == "public":
        if public_radius is None or not (math.isfinite(public_radius) and public_radius > 0):
            raise InvalidInputError("radius", f"the public radius rule needs a positive radius, got {public_radius}")
        radius = float(public_radius)
    elif radius_rule == "own_update":
        radius = float(np.linalg.norm(trained - base))
    else:
        raise InvalidInputError("radius_rule", f"must be one of {', '.join(RADIUS_RULES)}, got {radius_rule!r}")
    dim = trained.shape[0]
    if noise_multiplier == 0 or radius == 0:
        return Sanitized(released=trained.copy(), epsilon=math.inf, radius=radius, noise_norm=0.0)
    epsilon = dim / (noise_multiplier * radius)
    noise = sample_laplace(dim, epsilon, rng)
    return Sanitized(
        released=trained + noise, epsilon=epsilon, radius=radius, noise_norm=float(np.linalg.norm(noise))
    )
