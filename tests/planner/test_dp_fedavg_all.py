"""``dp_fedavg_all`` (docs/planning.md §2): FedHDP's DP-FedAvg baseline, where opted-out
groups are planned private at the strictest epsilon."""

from __future__ import annotations

import pytest

from accounting.errors import InvalidInputError
from planner import make_plan
from planner.plan import COMPARE_ORDER, compare
from planner.schema import Scenario
from tests.planner.conftest import independent_epsilon, random_scenario
from tests.planner.test_methods import INDEPENDENT_SLACK


def scenario(out_epsilon=None, strict=2.0):
    return Scenario(
        groups=[{"id": "strict", "epsilon": strict, "num_clients": 300},
                {"id": "loose", "epsilon": 8.0, "num_clients": 300},
                {"id": "out", "epsilon": out_epsilon, "num_clients": 30}],
        delta=1e-4, rounds=40, clip_norm=1.0, model_dim=1000, expected_clients=40,
    )


def test_opted_out_groups_are_private_at_the_strictest_epsilon_in_one_pool():
    plan = make_plan(scenario(), "dp_fedavg_all", clients_needed=False)
    out = plan.group("out")
    assert out.epsilon == 2.0 and out.epsilon_spent is not None and out.phases
    assert len({g.pool for g in plan.groups}) == 1 and plan.pools[0].noise_multiplier > 0
    for group in plan.groups:
        assert group.epsilon is not None
        assert independent_epsilon(group.phases, plan.scenario.delta, plan.accountant) <= group.epsilon * (1 + INDEPENDENT_SLACK)
    assert plan.scenario.group("out").epsilon is None  # the scenario still says they opted out
    assert any("dp_fedavg_all" in w and "out" in w for w in plan.warnings)
    # the same noise as dp_fedavg on the scenario where they chose the strictest budget
    same = make_plan(scenario(out_epsilon=2.0), "dp_fedavg", clients_needed=False)
    assert plan.pools[0].noise_multiplier == pytest.approx(same.pools[0].noise_multiplier, rel=1e-12)
    # while dp_fedavg keeps them noiseless
    assert make_plan(scenario(), "dp_fedavg", clients_needed=False).group("out").epsilon is None


@pytest.mark.parametrize("seed", range(4))
def test_random_scenarios_meet_every_groups_budget(seed):
    drawn = random_scenario(seed)
    assert any(group.epsilon is not None for group in drawn.groups)  # the seeds are chosen to have one
    plan = make_plan(drawn, "dp_fedavg_all", clients_needed=False)
    for group in plan.groups:
        assert group.epsilon is not None
        if group.phases:
            spent = independent_epsilon(group.phases, plan.scenario.delta, plan.accountant)
            assert spent <= group.epsilon * (1 + INDEPENDENT_SLACK)


def test_not_a_recommendation_and_needs_a_private_group():
    assert "dp_fedavg_all" not in COMPARE_ORDER
    assert all(row.method != "dp_fedavg_all" for row in compare(scenario()).comparison or [])
    nobody = Scenario(groups=[{"id": "out", "epsilon": None, "num_clients": 30}], delta=1e-4, rounds=5,
                      clip_norm=1.0, model_dim=10, expected_clients=5)
    with pytest.raises(InvalidInputError) as info:
        make_plan(nobody, "dp_fedavg_all", clients_needed=False)
    assert info.value.field == "method"
