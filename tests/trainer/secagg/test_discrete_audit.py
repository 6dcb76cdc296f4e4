"""The audit of the discrete pipeline (docs/secure-aggregation.md §Audit).

The real client and server arithmetic, run 200,000 times on each of two neighbouring
inputs: the lower bound on epsilon stays below the accounted epsilon, and the broken
variants (noise std halved; halved with unconditioned rounding) exceed it, so the same
audit would catch them.
"""

from __future__ import annotations

import math

import pytest

import accounting
from accounting.audit import epsilon_lower_bound
from accounting.events import PoissonSampledSkellam
from planner.discrete import bits_for, rounded_l1_bound
from trainer.secagg import discrete as dm
from trainer.secagg.discrete_audit import pipeline_scores

CLIENTS, CLIP, SCALE, DIMENSION, SHARE, DELTA, RUNS = 3, 1.0, 16.0, 8, 114.0, 1e-5, 200_000


@pytest.fixture(scope="module")
def setting() -> tuple[dm.DiscreteParams, float]:
    bits, _ = bits_for(1e-9, CLIENTS, CLIP, SCALE, DIMENSION, SHARE)
    params = dm.DiscreteParams.derived(CLIP, SCALE, DIMENSION, SHARE, bits)
    event = PoissonSampledSkellam(
        sampling_rate=1.0,
        variance=SHARE * CLIENTS,
        l2_sensitivity=params.l2_bound,
        l1_sensitivity=rounded_l1_bound(params.l2_bound, DIMENSION),
        steps=1,
    )
    # the figure of record (pld), which the audit compares with (tighter than rdp's 4.34 here)
    return params, accounting.epsilon_of_events([event], delta=DELTA, accountant="pld").epsilon


def test_the_audited_lower_bound_is_below_the_accounted_epsilon(setting: tuple[dm.DiscreteParams, float]) -> None:
    params, accounted = setting
    without, with_ = pipeline_scores(params, clients=CLIENTS, runs=RUNS, seed=1)
    result = epsilon_lower_bound(without, with_, DELTA)
    assert 1.0 < result.epsilon_lower < accounted  # evidence of real leakage, within the accounted figure


@pytest.mark.parametrize("conditional", [True, False])
def test_halved_noise_is_caught(setting: tuple[dm.DiscreteParams, float], conditional: bool) -> None:
    params, accounted = setting
    without, with_ = pipeline_scores(
        params, clients=CLIENTS, runs=RUNS, seed=1, noise_std_factor=0.5, conditional=conditional
    )
    assert epsilon_lower_bound(without, with_, DELTA).epsilon_lower > accounted
    assert not math.isinf(accounted)


def test_the_audit_compares_with_the_figure_of_record(setting: tuple[dm.DiscreteParams, float]) -> None:
    """``gdpfed audit discrete`` compares the lower bound with pld's epsilon of the round, what a
    plan's block and its ledger state (it compared with rdp's, 4.34 against pld's 4.00 here, so
    a pipeline leaking between the two passed)."""
    from trainer.secagg.discrete_audit import audit_discrete

    _, accounted = setting
    result = audit_discrete(runs=1000)
    assert result["accountant"] == "pld" and result["accounted_epsilon"] == accounted
