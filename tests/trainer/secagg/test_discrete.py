"""The discrete mechanism's client and server arithmetic (docs/secure-aggregation.md §Discrete noise).

The Skellam sampler against the exact pmf (chi-square), alone and summed over a random
number of survivors; the rotation against scipy's Hadamard matrix; conditional rounding's
bound; the modular encoding; and the whole pipeline's released noise with dropouts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import linalg, stats

from planner.discrete import rounded_l2_bound
from trainer.secagg import discrete as dm


def _chi_square_p(samples: np.ndarray, variance: float) -> float:
    """p-value of a chi-square test of integer samples against Skellam(variance): bins with >= 5 expected."""
    dist = stats.skellam(variance / 2.0, variance / 2.0)
    n = samples.size
    lo, hi = int(dist.ppf(1e-4)), int(dist.ppf(1 - 1e-4))
    edges = np.arange(lo, hi + 1)
    probs = dist.pmf(edges)
    # Pool the tails into the end bins so every expected count is positive and honest.
    probs[0] += dist.cdf(lo - 1)
    probs[-1] += dist.sf(hi)
    observed = np.bincount(np.clip(samples, lo, hi) - lo, minlength=edges.size).astype(float)
    expected = probs * n
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("variance", [0.3, 2.0, 17.5, 400.0])
def test_a_skellam_share_has_the_exact_pmf(variance: float) -> None:
    rng = np.random.default_rng(int(variance * 10))
    samples = dm.skellam_share(variance, (200_000,), rng)
    assert _chi_square_p(samples, variance) > 1e-4


def test_the_chi_square_test_rejects_a_wrong_variance() -> None:
    # The test has power: a share with 10% too little variance fails it.
    samples = dm.skellam_share(18.0, (200_000,), np.random.default_rng(3))
    assert _chi_square_p(samples, 20.0) < 1e-6


def test_sums_over_a_random_number_of_survivors_are_skellam_of_the_summed_variance() -> None:
    rng = np.random.default_rng(11)
    share = 3.7
    for _ in range(4):
        survivors = int(rng.integers(2, 40))
        total = dm.skellam_share(share, (survivors, 50_000), rng).sum(axis=0)
        assert _chi_square_p(total, survivors * share) > 1e-4, survivors
    # and a mixture over survivor counts is the matching mixture of Skellams (checked per count above);
    # the released variance is what the planner counts: survivors * share.
    counts = rng.integers(5, 30, size=20_000)
    totals = np.array([dm.skellam_share(share, (int(c),), rng).sum() for c in counts])
    standardised = totals / np.sqrt(counts * share)
    assert abs(standardised.var() - 1.0) < 0.05


def test_the_rotation_is_the_orthonormal_hadamard_matrix_and_is_undone() -> None:
    rng = np.random.default_rng(0)
    for d in (1, 5, 8, 33):
        signs = dm.rotation_signs(7, d)
        n = signs.size
        assert n == 1 << max(0, (d - 1).bit_length())
        x = rng.normal(size=(3, d))
        padded = np.zeros((3, n))
        padded[:, :d] = x
        expected = (padded * signs) @ (linalg.hadamard(n) / math.sqrt(n)).T
        np.testing.assert_allclose(dm.rotate(x, signs), expected, atol=1e-12)
        np.testing.assert_allclose(dm.unrotate(dm.rotate(x, signs), signs, d), x, atol=1e-12)
        np.testing.assert_allclose(np.linalg.norm(dm.rotate(x, signs), axis=1), np.linalg.norm(x, axis=1))
    assert not np.array_equal(dm.rotation_signs(1, 64), dm.rotation_signs(2, 64))


def test_conditional_rounding_always_meets_the_bound_where_plain_rounding_does_not() -> None:
    rng = np.random.default_rng(5)
    d = 256
    # Every coordinate halfway between two grid points: the worst case for rounding noise,
    # a norm of sqrt(d)/2 = C s that plain rounding exceeds by sqrt(Binomial(d, 1/2)).
    rotated = np.full((4000, d), 0.5)
    bound = rounded_l2_bound(clip_norm=8.0, scale=1.0, dimension=d, beta=math.exp(-0.5))  # a draw fails often
    plain = dm.randomised_round(rotated, rng)
    conditioned = dm.conditional_round(rotated, bound, rng)
    assert np.all(np.linalg.norm(conditioned, axis=1) <= bound)
    assert np.any(np.linalg.norm(plain, axis=1) > bound)  # the conditioning is what makes the bound hold
    assert np.all(np.abs(conditioned - rotated) < 1)
    # on random rotated updates too
    signs = dm.rotation_signs(1, d)
    x = dm.rotate(dm.clip(rng.normal(size=(2000, d)), 1.0) * 3.0, signs)
    assert np.all(
        np.linalg.norm(dm.conditional_round(x, rounded_l2_bound(1.0, 3.0, d), rng), axis=1)
        <= rounded_l2_bound(1.0, 3.0, d)
    )


def test_encoding_sums_exactly_mod_2_to_the_b_and_a_narrower_width_wraps() -> None:
    rng = np.random.default_rng(9)
    values = rng.integers(-1000, 1000, size=(30, 64))
    exact = values.sum(axis=0)
    bits = int(np.abs(exact).max()).bit_length() + 2
    np.testing.assert_array_equal(dm.decode(dm.modular_sum(dm.encode(values, bits), bits), bits), exact)
    narrow = int(np.abs(exact).max()).bit_length()
    assert not np.array_equal(dm.decode(dm.modular_sum(dm.encode(values, narrow), narrow), narrow), exact)


def test_zero_updates_release_the_planned_noise_with_dropouts() -> None:
    rng = np.random.default_rng(21)
    params = dm.DiscreteParams.derived(clip_norm=1.0, scale=64.0, dimension=20, share_variance=50.0, bits=24)
    signs = dm.rotation_signs(3, params.dimension)
    runs, participants = 4000, 12
    shares = np.stack(
        [dm.client_share(np.zeros((runs, params.dimension)), params, signs, rng) for _ in range(participants)]
    )
    survivors = rng.integers(6, participants + 1, size=runs)  # dropouts: a random number of survivors per run
    alive = np.arange(participants)[:, None] < survivors[None, :]
    residues = dm.modular_sum(np.where(alive[:, :, None], shares, np.uint64(0)), params.bits)
    released = dm.server_decode(residues, params, signs)
    # Unrotated Skellam noise per coordinate over the scale: variance survivors * share / s^2.
    standardised = released * params.scale / np.sqrt(survivors * params.share_variance)[:, None]
    assert abs(standardised.var() - 1.0) < 0.03 and abs(standardised.mean()) < 0.01
    # Before unrotation the integer sum itself is Skellam(survivors * share): exact pmf, not just the variance.
    at_twelve = survivors == participants
    integers = dm.decode(residues[at_twelve], params.bits)[:, 0]
    assert _chi_square_p(integers, participants * params.share_variance) > 1e-4


def test_the_pipeline_releases_the_clipped_sum_plus_noise() -> None:
    rng = np.random.default_rng(4)
    params = dm.DiscreteParams.derived(clip_norm=2.0, scale=2.0**12, dimension=100, share_variance=1e4, bits=32)
    signs = dm.rotation_signs(8, params.dimension)
    updates = rng.normal(size=(5, params.dimension))
    shares = np.stack([dm.client_share(u[None, :], params, signs, rng)[0] for u in updates])
    released = dm.server_decode(dm.modular_sum(shares, params.bits), params, signs)
    expected = dm.clip(updates, params.clip_norm).sum(axis=0)
    # noise std sqrt(5e4)/s = 0.055 per coordinate, rounding below 5/s
    assert np.max(np.abs(released - expected)) < 0.4
