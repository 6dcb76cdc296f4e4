"""The real trainer on MR-MTL's mean-estimation toy agrees with the closed form (docs/mrmtl.md §3.4).

Each case trains the silo mechanism end to end (the planner's sigma_k, the DP-SGD engine,
the strategy, the ledger; ``experiments/evidence/mean_estimation.py`` ``train``) and
compares every silo's final model with ``planner.mean_estimation.iterated_coefficients``:
given the run's true means and data means, the final models are Gaussian with a mean and
covariance the coefficients give exactly, so the Mahalanobis distance of the residuals is
chi-square with as many degrees of freedom as the covariance's rank. A wrong step size,
prox weight or anchor, a missed or extra step, or noise of the wrong scale moves it far
outside the 99.9% interval.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy import stats

from planner.mean_estimation import iterated_coefficients

EVIDENCE = Path(__file__).resolve().parents[2] / "experiments" / "evidence" / "mean_estimation.py"


def evidence() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mean_estimation_evidence", EVIDENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# epsilon 1: the noise dominates and its scale is tested; epsilon 50: the noise is small and
# the deterministic path (steps, lr, prox, anchor) is tested to a fraction of it
@pytest.mark.parametrize(("method", "prox", "epsilon"), [
    ("local", 0.0, 1.0), ("mrmtl", 1.0, 1.0), ("mrmtl", 1.0, 50.0), ("mrmtl", 4.0, 50.0), ("fedavg", 0.0, 50.0),
])
def test_trainer_matches_the_iterated_closed_form(tmp_path: Path, method: str, prox: float, epsilon: float) -> None:
    ev = evidence()
    silos, samples, rounds, epochs, lr = 200, 50, 4, 2, 0.3
    run = ev.train(method, prox, num_silos=silos, num_samples=samples, epsilon=epsilon, rounds=rounds,
                   local_epochs=epochs, lr=lr, seed=3, out=tmp_path)
    final, _ = iterated_coefficients(
        num_silos=silos, num_samples=samples, data_std=ev.DATA_STD, task_std=ev.TASK_STD,
        step_noise_std=run["sigma"] * ev.CLIP, prox=prox, lr=lr, rounds=rounds, steps_per_round=epochs,
        method="fedavg" if method == "fedavg" else "mrmtl",
    )
    # the run's draws of the toy's sources: task z_k = w_k / tau, data e_k = (xbar_k - w_k) sqrt(n) / sigma
    sources = np.concatenate([run["tasks"] / ev.TASK_STD,
                              (run["data_means"] - run["tasks"]) * np.sqrt(samples) / ev.DATA_STD])
    residual = run["models"] - final[:, :2 * silos] @ sources
    noise = final[:, 2 * silos:]
    covariance = noise @ noise.T
    rank = int(np.linalg.matrix_rank(covariance))
    distance = float(residual @ np.linalg.pinv(covariance) @ residual)
    low, high = stats.chi2.ppf([0.0005, 0.9995], rank)
    assert rank == (1 if method == "fedavg" else silos)
    assert low < distance < high, (distance, rank)


def test_closed_form_endpoints_are_the_papers() -> None:
    """At lr 1 and one step a round, local training is the private mean and FedAvg the mean
    of the private means: Lemma 6.7's E(0) and E(infinity) with sigma_DP = sigma_k c."""
    from planner.mean_estimation import expected_error, iterated_error, local_variance

    sizes = dict(num_silos=20, num_samples=200, data_std=0.4, task_std=0.08, step_noise_std=14.57, lr=1.0, rounds=3)
    local_var = local_variance(0.4**2, 200, 14.57)
    assert iterated_error(prox=0.0, **sizes) == pytest.approx(expected_error(20, local_var, 0.08**2, 0.0), rel=1e-12)
    assert iterated_error(prox=0.0, method="fedavg", **sizes) == pytest.approx(
        expected_error(20, local_var, 0.08**2, 1e15), rel=1e-9)
