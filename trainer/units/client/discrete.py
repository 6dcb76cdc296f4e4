"""The discrete distributed mechanism in the client unit's pools (docs/secure-aggregation.md
§Discrete noise, "The trainer side").

``--secagg-mechanism skellam`` runs each noised pool's stated ``discrete`` block instead of
the continuous Gaussian shares: every sampled client computes its share from the block
(clip to its group's C_g, scale by s, rotate with the round's public signs, conditional
randomised rounding, its Skellam share, mod 2^b; ``trainer.secagg.discrete.client_share``),
the pool's secure-aggregation session sums the residues mod 2^b (the real protocol, or its
exact-sum simulation), and the server decodes, unrotates and rescales
(``trainer.secagg.discrete.server_decode``). The blocks are re-derived from the plan's
scenario and compared before a run starts (``discrete_pools``): a document is never trusted.
numpy and the planner only, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from accounting.choices import SecaggMechanism
from accounting.errors import InvalidInputError
from planner.discrete import bits_for, count_std, padded_dimension, widest_clip
from planner.discrete import pool_mechanisms as derived_pool_mechanisms
from planner.ledger import epsilon_spent, missing_block_reason
from planner.schema import DiscreteMechanism, Plan
from planner.verify import VERIFY_SLACK
from trainer.choices import SECAGG_MECHANISMS, RequestedMechanism
from trainer.secagg import discrete as dm
from trainer.secagg.encoding import word_dtype
from trainer.strategies.base import PURPOSE_ROTATION, RoundContext
from trainer.units.client.mechanism import finite_update

# Floats of a stated block may differ from the re-derivation by JSON rounding only.
_RELATIVE_TOLERANCE = 1e-9
# The fields a block's calibration sets: its noise and what follows from it (the bit width
# that keeps the wrap-around bound at that noise, and the figures). An earlier release's search
# stopped at another point of the same budget (docs/secure-aggregation.md §Discrete noise,
# "The trainer side"), so a stated block may differ from today's derivation in these alone; it
# then runs at its own noise once that noise is checked (:func:`_check_own_noise`).
_CALIBRATED = frozenset({
    "total_variance", "share_variance", "equivalent_noise_multiplier", "bits", "epsilon",
    "gaussian_epsilon_same_bound", "discretisation_overhead", "gaussian_epsilon", "overhead_vs_continuous",
    "count_noise_std",
})


def run_mechanism(requested: RequestedMechanism, plan: Plan) -> SecaggMechanism:
    """The mechanism a run of ``plan`` executes when it asks for ``requested``
    (``--secagg-mechanism``; docs/secure-aggregation.md §Discrete noise, "The trainer side").

    ``plan`` (the default) follows the plan: ``skellam`` when any pool carries a ``discrete``
    block (the planner states them for every noised pool; ``discrete_pools`` then refuses a
    noised pool without one), ``gaussian_continuous`` for a plan without blocks (one made
    before the discrete mechanism became the planner's default), whose guarantee is
    approximate. A mechanism named is run as named: ``skellam`` on a plan without blocks
    is refused by ``discrete_pools``, ``gaussian_continuous`` on a plan with blocks runs
    the continuous shares for comparison, labelled approximate.
    """
    if requested != "plan":
        return requested
    return "skellam" if any(pool.discrete is not None for pool in plan.pools) else "gaussian_continuous"


@dataclass(frozen=True)
class DiscretePool:
    """One pool's discrete mechanism as the clients and the server run it."""

    pool_id: str
    mechanism: DiscreteMechanism
    # group id -> its clients' parameters: the group's clip norm and L2 bound on the pool's
    # grid, the pool's share variance and bit width, at the block's dimension
    group_params: dict[str, dm.DiscreteParams]
    # the model's parameter count (None: the block's dimension); a smaller model's updates are
    # zero-padded to the block's dimension and the release keeps its first model_dim coordinates
    model_dim: int | None = None
    # the stated block is an earlier calibration's, run at its own noise once checked (_check_own_noise)
    own_noise: bool = False

    @property
    def dim(self) -> int:
        """The model's parameter count: the length of an update and of the released update."""
        return self.mechanism.dimension if self.model_dim is None else self.model_dim

    @property
    def bits(self) -> int:
        return self.mechanism.bits

    @property
    def server_params(self) -> dm.DiscreteParams:
        """What the server's decoding reads (bits, dimension, scale: the same for every group)."""
        return next(iter(self.group_params.values()))

    @property
    def count_factor(self) -> int:
        """m: the count coordinate's factor (0: the block sends no count; adaptive clipping's blocks do)."""
        return self.mechanism.count_factor

    def signs(self, seed: int) -> np.ndarray:
        """The round's public rotation signs from its public seed, of the block's padded length d'
        (``trainer.secagg.discrete.rotation_signs``): the server and every client derive them alike."""
        return dm.rotation_signs(seed, self.mechanism.dimension)

    def padded(self, update: np.ndarray) -> np.ndarray:
        """``update`` followed by zeros up to the block's dimension (docs/secure-aggregation.md
        §Discrete noise, "A model smaller than the plan's model_dim"): zeros change neither its
        norm (so neither clipping) nor, the vector being as long as the block's, any bound the
        block states (D2, D1, the wrap-around bound: all at the block's d')."""
        vector = np.asarray(update, dtype=np.float64)
        missing = self.server_params.dimension - vector.shape[-1]  # the block's dimension, or the model's
        if missing < 0:
            raise ValueError(f"an update of {vector.shape[-1]} coordinates is longer than the block's "
                             f"{self.server_params.dimension}")
        if not missing:
            return vector
        return np.concatenate([vector, np.zeros((*vector.shape[:-1], missing))], axis=-1)

    def share(self, update: np.ndarray, group_id: str, signs: np.ndarray, rng: np.random.Generator,
              clip_norm: float | None = None) -> np.ndarray:
        """One client's encoded share of ``update`` (a non-finite update is sent as zeros,
        ``mechanism.finite_update``), as words of the session's modulus.

        With a count coordinate (adaptive clipping's block) the client clips at the round's
        ``clip_norm`` S^t (the group's C_g when ``None``), multiplies by C_g / S^t, so the grid
        stays the block's (the vector's norm is <= C_g s whatever S^t; the server multiplies
        back), and appends ``trainer.secagg.discrete.count_share`` of its bit
        [norm <= S^t] (docs/secure-aggregation.md §Discrete noise, "Adaptive clipping")."""
        params = self.group_params[group_id]
        vector = self.padded(finite_update(update))
        if not self.count_factor:
            return dm.client_share(vector, params, signs, rng).astype(word_dtype(params.bits))
        clip_t = params.clip_norm if clip_norm is None else float(clip_norm)
        unclipped = bool(np.linalg.norm(vector) <= clip_t)
        relative = dm.clip(vector, clip_t) * (params.clip_norm / clip_t)
        words = dm.client_share(relative, params, signs, rng)
        count = dm.count_share(np.array([unclipped]), self.count_factor, params.share_variance, params.bits, rng)
        return np.concatenate([words, count]).astype(word_dtype(params.bits))

    def absent(self) -> np.ndarray:
        """The placeholder input of a client that drops before masking (never sent)."""
        length = padded_dimension(self.mechanism.dimension) + (1 if self.count_factor else 0)
        return np.zeros(length, dtype=word_dtype(self.bits))

    def decode(self, residues: np.ndarray, signs: np.ndarray, clip_norm: float | None = None) -> np.ndarray:
        """The released update sum from the session's sum mod 2^b; with a count coordinate, the
        update multiplied back by S^t / C (``clip_norm`` S^t) with the released count
        sum (b - 1/2) + Z / (2 m) appended (what ``release.split_counts`` takes apart), or,
        in a run without adaptive clipping (``clip_norm`` ``None``), the update alone. Decoded at
        the block's dimension, of which the model's first ``dim`` coordinates are kept (a
        smaller model's padding decodes to noise alone, dropped)."""
        params = self.server_params
        if not self.count_factor:
            return dm.server_decode(residues, params, signs)[..., : self.dim]
        update = dm.server_decode(residues[:-1], params, signs)[..., : self.dim]
        if clip_norm is None:
            return update
        count = dm.count_decode(residues[-1:], self.count_factor, params.bits)
        return np.append(update * (float(clip_norm) / params.clip_norm), count)


def run_discrete_pools(plan: Plan, dim: int, secagg_mechanism: str, *, adaptive: bool,
                       derived: Mapping[str, DiscreteMechanism] | None = None, checked: Collection[str] = (),
                       skellam_spent: Mapping[str, float] | None = None) -> dict[str, DiscretePool]:
    """Pool id -> its discrete mechanism for a run of ``secagg_mechanism`` (as resolved by
    :func:`run_mechanism`; none for ``gaussian_continuous``), the one check the simulator's
    round engine and the Flower server and nodes make of a run's mechanism (docs/flower.md §2
    "The discrete mechanism").

    Refuses (``InvalidInputError("secagg_mechanism")``) an unknown mechanism; under skellam the
    blocks are ``discrete_pools``' (re-derived and compared), and an ``adaptive`` run needs
    every block to carry the count coordinate (``count_factor``, re-derived from the plan's
    ``adaptive_clip`` block; docs/secure-aggregation.md §Discrete noise, "Adaptive clipping").
    ``derived``: :func:`derived_blocks` of this very plan, when the caller kept them (a Flower
    node, docs/flower.md §2 "The discrete mechanism and the wire version"); else derived here.
    ``checked``: the pools whose stated block this very plan's check accepted at its own noise
    (``DiscretePool.own_noise``), kept by the same caller with ``derived``; not checked again.
    ``skellam_spent``: group id -> this very plan's full-run ledger on skellam, as
    ``planner.verify.verify_executable`` composed it (``discrete_pools``).
    """
    if secagg_mechanism not in SECAGG_MECHANISMS:
        raise InvalidInputError(
            "secagg_mechanism", f"must be {' or '.join(SECAGG_MECHANISMS)}, got {secagg_mechanism!r}"
        )
    if secagg_mechanism != "skellam":
        return {}
    pools = discrete_pools(plan, dim, derived, checked, skellam_spent)
    if adaptive and any(not pool.count_factor for pool in pools.values()):
        raise InvalidInputError(
            "secagg_mechanism",
            "skellam with adaptive clipping needs the plan's adaptive_clip block: its discrete blocks then carry "
            "the count coordinate (plan the scenario with adaptive_clip)",
        )
    return pools


def rotation_seed(ctx: RoundContext, pool_index: int) -> int:
    """The public seed of the rotation signs of pool ``pool_index`` (its place in
    ``plan.pools``) in the round ``ctx``: from the run seed and the round only, so the
    server and every client derive it alike (``trainer.secagg.discrete.rotation_signs``)."""
    return ctx.seed_for(PURPOSE_ROTATION, pool_index)


def derived_blocks(plan: Plan) -> dict[str, DiscreteMechanism]:
    """Pool id -> the discrete block ``planner.discrete.pool_mechanisms`` derives from the plan's
    own scenario and ``colluding_clients`` (docs/secure-aggregation.md §Discrete noise, "The
    trainer side"): what :func:`discrete_pools` compares the stated blocks with. The planner's
    calibration, the costly part of the check; a function of the plan alone, so whoever holds
    the same plan (the same fingerprint) may keep the result. A plan the derivation refuses is
    ``InvalidInputError("secagg_mechanism")``."""
    try:
        return {p.pool: p.mechanism for p in derived_pool_mechanisms(plan, plan.scenario.colluding_clients)}
    except InvalidInputError as error:
        raise InvalidInputError("secagg_mechanism", f"skellam: {error.reason}") from None


def discrete_pools(plan: Plan, dim: int, derived: Mapping[str, DiscreteMechanism] | None = None,
                   checked: Collection[str] = (),
                   skellam_spent: Mapping[str, float] | None = None) -> dict[str, DiscretePool]:
    """Pool id -> its discrete mechanism, for every pool of ``plan`` with noise, after checking the blocks.

    Refuses (``InvalidInputError`` naming the field) a noised pool without a ``discrete`` block
    (plan the scenario with ``secagg_mechanism: skellam``, the default), a block on a pool the scenario does
    not calibrate, a block that differs from ``planner.discrete.pool_mechanisms`` of the
    plan's own scenario and ``colluding_clients`` (every field; floats to a relative 1e-9),
    and a model whose padded dimension exceeds the block's (its bounds would not hold).
    A smaller model runs at the block's dimension, its updates zero-padded
    (:meth:`DiscretePool.padded`; docs/secure-aggregation.md §Discrete noise, "A model smaller
    than the plan's model_dim"): every bound the block states then holds as calibrated.
    Pools without noise keep the fixed-point path: they carry no noise to discretise.
    ``derived``: :func:`derived_blocks` of ``plan``, kept by the caller (derived here when ``None``);
    ``checked``: the pools whose block :func:`_check_own_noise` accepted for ``plan`` before, kept
    by the same caller (the block must still differ from ``derived`` in the calibrated fields alone);
    ``skellam_spent``: group id -> ``plan``'s full-run ledger on skellam, composed by
    ``planner.verify.verify_executable(skellam_spent=)`` for this very plan (``gdpfed train``), read
    by :func:`_check_own_noise` instead of composing it again; a group it lacks is composed there.
    """
    if derived is None:
        derived = derived_blocks(plan)
    pools: dict[str, DiscretePool] = {}
    for pool in plan.pools:
        stated, expected = pool.discrete, derived.get(pool.id)
        field = f"pools.{pool.id}.discrete"
        if expected is None:
            if stated is not None:
                raise InvalidInputError(field, "is stated for a pool the scenario gives no discrete noise")
            continue
        if stated is None:
            # the service's refusal of the same plan's skellam reports says the same (planner.ledger)
            raise InvalidInputError(field, missing_block_reason(pool.id))
        own_noise = _differs(stated, expected) is not None
        if own_noise:
            _require_same(stated, expected, field, skip=_CALIBRATED)
            if pool.id not in checked:
                _check_own_noise(plan, pool.id, stated, field, skellam_spent or {})
        if padded_dimension(dim) > stated.padded_dimension:
            raise InvalidInputError(
                "model",
                f"has {dim} parameters (padded to {padded_dimension(dim)}); pool {pool.id}'s discrete mechanism "
                f"is calibrated for {stated.dimension} (padded to {stated.padded_dimension}): a larger model would "
                f"break its bounds (plan the scenario with model_dim >= {dim})",
            )
        # at the block's padded dimension d', whatever the model's: a smaller model's updates are
        # zero-padded to the block's dimension (running at the model's own, smaller d' would not be
        # sound: the wrap-around bound's rotated-signal term grows as d' shrinks). A model of the
        # block's d' runs at its own dimension, as it always has (D2, D1 and the wrap bound read d' only).
        params = {
            g: dm.DiscreteParams.derived(
                float(plan.group(g).clip_norm), stated.scale, max(dim, stated.dimension), stated.share_variance,
                stated.bits,
            )
            for g in pool.groups
        }
        pools[pool.id] = DiscretePool(pool.id, stated, params, dim, own_noise)
    return pools


def _differs(stated: DiscreteMechanism, expected: DiscreteMechanism, skip: frozenset[str] = frozenset()) -> str | None:
    """The first field of ``stated`` (outside ``skip``) that is not ``expected``'s; None if none."""
    for name, want in expected.model_dump().items():
        if name in skip:
            continue
        have = getattr(stated, name)
        if isinstance(want, float) and isinstance(have, (int, float)) and not isinstance(have, bool):
            same = math.isclose(float(have), want, rel_tol=_RELATIVE_TOLERANCE, abs_tol=0.0)
        else:
            same = have == want
        if not same:
            return name
    return None


def _require_same(
    stated: DiscreteMechanism, expected: DiscreteMechanism, field: str, skip: frozenset[str] = frozenset()
) -> None:
    """Refuse the first field of ``stated`` (outside ``skip``) that is not ``expected``'s."""
    name = _differs(stated, expected, skip)
    if name is not None:
        raise InvalidInputError(
            f"{field}.{name}",
            f"states {getattr(stated, name)!r}, the plan's scenario derives {getattr(expected, name)!r}: "
            "the block was altered",
        )


def _check_own_noise(plan: Plan, pool_id: str, stated: DiscreteMechanism, field: str,
                     skellam_spent: Mapping[str, float]) -> None:
    """A block whose every field but the calibrated ones (``_CALIBRATED``) is the derivation's
    runs at its own noise when that noise is one the planner could have stated: the shares
    sum to the total (``share_variance`` x ``honest_survivors``), ``bits`` is the smallest
    width keeping the wrap-around bound at that noise (``planner.discrete.bits_for``), the
    count coordinate's std follows from it, and every member group's full-run Skellam
    ledger at that noise is within its budget (``planner.ledger.epsilon_spent`` on skellam,
    the events the run counts; ``skellam_spent``'s figure where verification composed it for
    this plan, docs/ledger.md §5). Anything else is refused naming the field, "altered"."""
    total = stated.share_variance * stated.honest_survivors
    if not math.isclose(total, stated.total_variance, rel_tol=_RELATIVE_TOLERANCE, abs_tol=0.0):
        raise InvalidInputError(
            f"{field}.share_variance",
            f"states {stated.share_variance!r}, but total_variance / honest_survivors is "
            f"{stated.total_variance / stated.honest_survivors!r}: the block was altered",
        )
    bits, _ = bits_for(
        stated.wrap_probability_per_round, stated.max_clients, widest_clip(plan, pool_id), stated.scale,
        stated.dimension, stated.share_variance, stated.count_factor,
    )
    if bits != stated.bits:
        raise InvalidInputError(
            f"{field}.bits", f"states {stated.bits}, its own noise needs {bits} to keep the wrap-around bound "
            f"{stated.wrap_probability_per_round:g} per round: the block was altered",
        )
    std = count_std(stated.total_variance, stated.count_factor)
    if std is not None:
        if stated.count_noise_std is None or not math.isclose(stated.count_noise_std, std, rel_tol=_RELATIVE_TOLERANCE):
            raise InvalidInputError(
                f"{field}.count_noise_std", f"states {stated.count_noise_std!r}, its own noise gives {std!r}: "
                "the block was altered",
            )
    for group_id in plan.pool(pool_id).groups:
        group = plan.group(group_id)
        if group.epsilon is None or group.sampling_rate <= 0:
            continue
        # the figure planner.verify's step 6 composed for this very plan, when the caller kept it
        spent = skellam_spent[group_id] if group_id in skellam_spent else epsilon_spent(
            plan, group, plan.rounds, mechanism="skellam")
        if spent is not None and spent > group.epsilon * (1 + VERIFY_SLACK):
            raise InvalidInputError(
                f"{field}.total_variance",
                f"states {stated.total_variance!r}: group {group_id}'s Skellam events at that noise spend epsilon "
                f"{spent:.10g} over the plan's {plan.rounds} rounds, above its budget {group.epsilon:g}: "
                "the block was altered",
            )


