"""The audits of the client-level Gaussian, the silo DP-SGD step and the metric Laplace release
(docs/secure-aggregation.md §Audit).

Each runs the unit's real release code on two neighbouring inputs: the Clopper-Pearson lower
bound stays below the accounted epsilon, and the same audit of the variant with the noise
std halved exceeds it. The short versions run 10,000 releases per input (seconds); the slow
ones (GDPFED_FULL=1) 100,000, where the bound reaches 65-85% of the accounted figure.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from trainer.units.client.audit import audit_client
from trainer.units.metric.audit import audit_metric
from trainer.units.silo.audit import audit_silo

AUDITS: dict[str, Callable[..., dict[str, object]]] = {
    "client": audit_client,
    "silo": audit_silo,
    "metric": audit_metric,
}
FULL = bool(os.environ.get("GDPFED_FULL"))


@pytest.mark.parametrize("mechanism", sorted(AUDITS))
def test_the_lower_bound_is_below_the_accounted_epsilon_and_halved_noise_is_caught(mechanism: str) -> None:
    audit = AUDITS[mechanism]
    sound = audit(runs=10_000, seed=1)
    assert sound["mechanism"] == mechanism and sound["runs"] == 10_000
    accounted, lower = float(sound["accounted_epsilon"]), float(sound["epsilon_lower_bound"])  # type: ignore[arg-type]
    assert 0.5 * accounted < lower < accounted  # evidence of real leakage, within the accounted figure
    assert sound["violated"] is False
    broken = audit(runs=10_000, seed=1, noise_std_factor=0.5)
    assert broken["violated"] is True and float(broken["epsilon_lower_bound"]) > accounted  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", sorted(AUDITS))
def test_with_more_runs_the_bound_tightens_and_stays_below(mechanism: str) -> None:
    if not FULL:
        pytest.skip("GDPFED_FULL=1 runs the 100,000-release audits")
    result = AUDITS[mechanism](runs=100_000, seed=2)
    accounted, lower = float(result["accounted_epsilon"]), float(result["epsilon_lower_bound"])  # type: ignore[arg-type]
    assert 0.6 * accounted < lower < accounted
