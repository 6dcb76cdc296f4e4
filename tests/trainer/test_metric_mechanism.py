"""The Laplace sampler in R^n and SanitizeUpdate (docs/metric-privacy.md §2-§3).

Statistical tests use fixed seeds and thresholds far in the tails (KS p > 1e-4, means
within 5 standard errors), so they fail for a wrong distribution, not by bad luck.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from accounting.errors import InvalidInputError
from accounting.metric import laplace_log_density, laplace_log_normaliser
from trainer.units.metric.mechanism import next_public_radius, sample_laplace, sanitize


def draws(dim: int, epsilon: float, count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([sample_laplace(dim, epsilon, rng) for _ in range(count)])


@pytest.mark.parametrize("dim", [1, 2, 11, 1000])
def test_norm_is_gamma_n_over_epsilon(dim: int) -> None:
    epsilon = 0.7
    rho = draws(dim, epsilon, 2000, seed=dim)
    norms = np.linalg.norm(rho, axis=1)
    assert stats.kstest(norms, stats.gamma(a=dim, scale=1 / epsilon).cdf).pvalue > 1e-4
    # E||rho|| = n / epsilon; sd of the mean = sqrt(n) / epsilon / sqrt(count)
    assert abs(norms.mean() - dim / epsilon) < 5 * math.sqrt(dim) / epsilon / math.sqrt(len(norms))


def test_a_wrong_norm_law_fails_the_ks_test() -> None:
    # The test above can fail: Gamma(n, 1/eps) is rejected for draws with another shape.
    rho = draws(11, 0.7, 2000)
    norms = np.linalg.norm(rho, axis=1)
    assert stats.kstest(norms, stats.gamma(a=10, scale=1 / 0.7).cdf).pvalue < 1e-4


@pytest.mark.parametrize("dim", [2, 11])
def test_coordinate_variance_and_uniform_direction(dim: int) -> None:
    epsilon, count = 2.0, 40_000
    rho = draws(dim, epsilon, count, seed=10 + dim)
    # Prop. 3.1: every coordinate has variance (n + 1) / epsilon^2 and mean 0
    variance = (dim + 1) / epsilon**2
    np.testing.assert_allclose(rho.var(axis=0), variance, rtol=0.05)
    assert np.all(np.abs(rho.mean(axis=0)) < 5 * math.sqrt(variance / count))
    directions = rho / np.linalg.norm(rho, axis=1, keepdims=True)
    assert np.all(np.abs(directions.mean(axis=0)) < 5 / math.sqrt(dim * count))
    np.testing.assert_allclose(np.cov(directions.T), np.eye(dim) / dim, atol=0.02 / math.sqrt(dim))


def test_one_dimension_is_the_scalar_laplace() -> None:
    rho = draws(1, 1.5, 4000, seed=3)[:, 0]
    assert stats.kstest(rho, stats.laplace(scale=1 / 1.5).cdf).pvalue > 1e-4


@pytest.mark.parametrize("dim", [1, 2, 3, 5])
def test_density_normalises(dim: int) -> None:
    epsilon = 1.3
    log_k = laplace_log_normaliser(dim, epsilon)
    sphere = 2 * math.pi ** (dim / 2) / math.gamma(dim / 2)
    mass, _ = integrate.quad(lambda r: sphere * r ** (dim - 1) * math.exp(log_k - epsilon * r), 0, math.inf)
    assert mass == pytest.approx(1.0, rel=1e-8)


def test_d_privacy_inequality_on_random_points() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        dim = int(rng.integers(1, 30))
        epsilon = float(rng.uniform(0.01, 10))
        x, a, b = (rng.normal(scale=float(rng.uniform(0.1, 10)), size=dim) for _ in range(3))
        gap = laplace_log_density(list(x), list(a), epsilon) - laplace_log_density(list(x), list(b), epsilon)
        assert gap <= epsilon * float(np.linalg.norm(a - b)) + 1e-9
    # tight on the line through a and b, beyond b: the bound is the best possible
    a, b, x = np.zeros(3), np.array([1.0, 0, 0]), np.array([3.0, 0, 0])
    assert laplace_log_density(list(x), list(b), 2.0) - laplace_log_density(list(x), list(a), 2.0) == pytest.approx(2.0)


def test_sanitize_noise_norm_is_nu_r_under_both_rules() -> None:
    dim, nu = 11, 3.0
    base = np.zeros(dim)
    trained = np.full(dim, 0.5)
    own = float(np.linalg.norm(trained))
    rng = np.random.default_rng(1)
    for rule, radius in (("own_update", own), ("public", 0.2)):
        out = [sanitize(trained, base, nu, rng, radius_rule=rule, public_radius=0.2) for _ in range(3000)]  # type: ignore[arg-type]
        assert all(o.radius == pytest.approx(radius) and o.epsilon == pytest.approx(dim / (nu * radius)) for o in out)
        norms = np.array([np.linalg.norm(o.released - trained) for o in out])
        np.testing.assert_allclose([o.noise_norm for o in out], norms)
        # ||rho|| ~ Gamma(n, nu r / n): mean nu r, sd nu r / sqrt(n)
        assert abs(norms.mean() - nu * radius) < 5 * nu * radius / math.sqrt(dim) / math.sqrt(len(norms))


def test_sanitize_limits_and_errors() -> None:
    rng = np.random.default_rng(2)
    trained, base = np.array([1.0, 2.0]), np.array([0.5, 2.0])
    quiet = sanitize(trained, base, 0.0, rng, radius_rule="own_update")
    np.testing.assert_array_equal(quiet.released, trained)
    assert quiet.epsilon == math.inf
    tiny = sanitize(trained, base, 1e-9, rng, radius_rule="own_update")
    assert np.linalg.norm(tiny.released - trained) < 1e-6
    diverged = sanitize(np.array([math.nan, 1.0]), base, 5.0, rng, radius_rule="own_update")
    np.testing.assert_array_equal(diverged.released, base)
    with pytest.raises(InvalidInputError, match="radius"):
        sanitize(trained, base, 1.0, rng, radius_rule="public")
    with pytest.raises(InvalidInputError, match="radius_rule"):
        sanitize(trained, base, 1.0, rng, radius_rule="median", public_radius=1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="noise_multiplier"):
        sanitize(trained, base, -1.0, rng, radius_rule="own_update")


def test_same_generator_seed_same_release() -> None:
    a = sanitize(np.ones(5), np.zeros(5), 2.0, np.random.default_rng([1, 2, 8, 3]), public_radius=1.0)
    b = sanitize(np.ones(5), np.zeros(5), 2.0, np.random.default_rng([1, 2, 8, 3]), public_radius=1.0)
    np.testing.assert_array_equal(a.released, b.released)


def test_next_public_radius_is_the_debiased_median_release_distance_clipped() -> None:
    """docs/metric-privacy.md §3.1: d_i = distance of release i to its nearest broadcast model,
    r' = sqrt(median(d_i^2 - (n + 1) nu_i^2 r^2 / n)) within [min_radius, max_radius]."""
    broadcast = np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0]])
    released = np.array([[0.0, 3.0, 4.0], [10.0, 0.0, 1.0], [1.0, 0.0, 0.0], [9.0, 2.0, 0.0]])
    nus = np.array([0.0, 1.0, 1.0, 2.0])
    radius = 0.5
    squares = np.array([25.0, 1.0, 1.0, 5.0]) - 4 / 3 * (nus * radius) ** 2
    expected = math.sqrt(float(np.median(squares)))
    assert next_public_radius(released, broadcast, nus, radius, 0.01, 10.0) == pytest.approx(expected)
    # nu = 0 everywhere: the median distance itself
    assert next_public_radius(released, broadcast, np.zeros(4), radius, 0.01, 10.0) == pytest.approx(math.sqrt(3.0))
    assert next_public_radius(released, broadcast, nus, radius, 2.0, 10.0) == 2.0  # floor
    assert next_public_radius(released, broadcast, nus, radius, 0.01, 0.7) == 0.7  # ceiling
    assert next_public_radius(released[:0], broadcast, nus[:0], radius, 0.01, 10.0) == radius  # nothing released
    # pure noise around the start points: the estimate falls back to the floor, not to nu r
    rng = np.random.default_rng(0)
    start = np.zeros(1000)
    noisy = np.stack([sanitize(start, start, 5.0, rng, public_radius=1.0).released for _ in range(20)])
    raw = float(np.median(np.linalg.norm(noisy, axis=1)))
    assert raw == pytest.approx(5.0, rel=0.1)  # the undebiased median would be about nu r
    assert next_public_radius(noisy, start[None], np.full(20, 5.0), 1.0, 0.05, 10.0) < 0.4 * raw
