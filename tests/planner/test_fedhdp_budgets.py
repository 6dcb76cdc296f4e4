"""FedHDP's reported budgets (T = 500, delta = 1e-4) from our ledger, and the same from
Google's dp-accounting (../shared/design/fedhdp.md §2.3: MNIST, FMNIST, FEMNIST)."""

from __future__ import annotations

import pytest

from accounting.events import Phase
from planner.ledger import default_epsilon_fn
from tests.planner.conftest import independent_epsilon

ROUNDS = 500
DELTA = 1e-4


@pytest.mark.parametrize(
    ("sampling_rate", "noise_multiplier", "paper_epsilon"),
    [(0.05, 1.5, 3.6), (0.03, 4.0, 0.58), (0.03, 1.0, 4.12)],
)
def test_the_papers_budgets_from_our_ledger(sampling_rate, noise_multiplier, paper_epsilon):
    phases = [Phase(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, steps=ROUNDS)]
    ours = default_epsilon_fn(phases, DELTA, "rdp")
    assert ours == pytest.approx(paper_epsilon, rel=0.02)
    assert ours == pytest.approx(independent_epsilon(phases, DELTA), rel=2e-3)
