"""Noise shares, grid encoding and the value bound (trainer/units/client/noise.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from accounting.errors import InvalidInputError
from trainer.units.client import noise


def test_noise_share_std_divides_by_sqrt_threshold():
    assert noise.noise_share_std(2.0, 1.5, 9) == pytest.approx(1.0)
    with pytest.raises(InvalidInputError):
        noise.noise_share_std(1.0, 1.0, 0)
    with pytest.raises(InvalidInputError):
        noise.noise_share_std(-1.0, 1.0, 3)


def test_check_pool_noise_refuses_under_noised_shares():
    noise.check_pool_noise("p", noise_std=2.0, share_std=2.0 / 3.0, secagg_threshold=9)
    with pytest.raises(InvalidInputError, match="under-noises"):
        noise.check_pool_noise("p", noise_std=2.0, share_std=2.0 / 3.0 * 0.99, secagg_threshold=9)


def test_tail_multiplier_meets_union_bound():
    for draws in (1.0, 1e6, 1e10):
        z = noise.noise_tail_multiplier(draws, 1e-9)
        assert draws * 2 * stats.norm.sf(z) == pytest.approx(1e-9, rel=1e-6)
    assert 9 < noise.noise_tail_multiplier(1e10) < 10


def test_encoding_clips_with_rounding_margin_is_unbiased_and_never_exceeds_clip():
    rng = np.random.default_rng(0)
    dim, clip = 200, 1.0
    row = rng.standard_normal(dim) * 5
    scale = noise.grid_scale(clip, 0.0, dim) / 256  # a coarse grid makes the test meaningful
    margin = noise.rounding_margin(dim, scale)
    assert 0 < margin < clip
    draws = np.array([noise.encode_clipped(row, clip, scale, rng) for _ in range(400)])
    assert np.all(draws == np.round(draws))
    assert (np.linalg.norm(draws, axis=1) / scale).max() <= clip
    clipped = row * (clip - margin) / np.linalg.norm(row)
    # Unbiased: the mean of the draws is the clipped row (up to sampling error).
    assert np.abs(draws.mean(axis=0) / scale - clipped).max() < 0.2 / scale
    short = row / np.linalg.norm(row) * 0.5
    assert np.abs(noise.encode_clipped(short, clip, scale, rng) / scale - short).max() < 1 / scale


def test_grid_values_are_exact_and_bound_covers_clip_plus_noise():
    scale = noise.grid_scale(1.0, 0.01, 10_000)
    assert math.log2(scale).is_integer()
    assert scale >= 4096 / 0.01
    bound = noise.value_bound(1.0, 0.01, scale, 9.0)
    assert bound == pytest.approx(1.0 + 0.09 + 2 / scale)
    share = noise.draw_noise_share(1000, 0.01, scale, np.random.default_rng(1))
    assert np.all(share == np.round(share))
    assert np.std(share / scale) == pytest.approx(0.01, rel=0.1)
    assert not noise.draw_noise_share(5, 0.0, scale, np.random.default_rng(1)).any()
