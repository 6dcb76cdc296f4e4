"""Infeasible scenarios name the cause and the group (docs/planning.md §7)."""

from __future__ import annotations

import pytest

from accounting.errors import InfeasibleError
from planner import make_plan
from tests.planner.conftest import worked_scenario


def test_more_expected_clients_than_clients():
    with pytest.raises(InfeasibleError, match="K=400 exceeds the 300 clients"):
        make_plan(worked_scenario(1, expected_clients=400))


def test_expected_clients_too_small_for_the_pool_minimum():
    with pytest.raises(InfeasibleError, match="min_clients_per_pool=20"):
        make_plan(worked_scenario(20), "gdpfed_plus")


def test_group_smaller_than_the_pool_minimum_is_named():
    scenario = worked_scenario(
        10, groups=[{"id": "tiny", "epsilon": 1.0, "num_clients": 5}, {"id": "big", "epsilon": 2.0, "num_clients": 500}]
    )
    with pytest.raises(InfeasibleError, match="group 'tiny'.*fewer than min_clients_per_pool=10"):
        make_plan(scenario, "gdpfed_minus")


@pytest.mark.parametrize("method", ["gdpfed", "dp_fedavg", "idp_scale"])
def test_budget_needing_sigma_above_the_cap_names_the_group(method):
    scenario = worked_scenario(
        1,
        groups=[{"id": "paranoid", "epsilon": 0.001, "num_clients": 100}, {"id": "ok", "epsilon": 2.0, "num_clients": 100}],
        rounds=100_000,
    )
    with pytest.raises(InfeasibleError, match="'paranoid'.*cap"):
        make_plan(scenario, method)


@pytest.mark.parametrize("method", ["gdpfed_plus", "pooled_plus", "idp_sample"])
def test_optimised_methods_name_a_group_infeasible_even_at_its_lowest_rate(method):
    scenario = worked_scenario(
        1,
        groups=[
            {"id": "paranoid", "epsilon": 0.001, "num_clients": 100, "min_sampling_rate": 0.15},
            {"id": "ok", "epsilon": 2.0, "num_clients": 100},
        ],
        rounds=100_000,
    )
    with pytest.raises(InfeasibleError, match="'paranoid'.*cap"):
        make_plan(scenario, method)
    # without the floor the optimiser lowers its rate until it is feasible
    relaxed = scenario.model_copy(update={"groups": [scenario.groups[0].model_copy(update={"min_sampling_rate": 0.0}),
                                                     scenario.groups[1]]})
    assert make_plan(relaxed, "gdpfed_plus").group("paranoid").sampling_rate < 0.15


def test_min_sampling_rates_above_k():
    scenario = worked_scenario(
        1,
        groups=[
            {"id": "a", "epsilon": 1.0, "num_clients": 100, "min_sampling_rate": 0.2},
            {"id": "b", "epsilon": 2.0, "num_clients": 100, "min_sampling_rate": 0.2},
        ],
    )
    with pytest.raises(InfeasibleError, match="min_sampling_rate"):
        make_plan(scenario, "gdpfed_plus")


def test_subnormal_and_absurd_numbers_are_refused_by_the_schema_with_field_names():
    """Found by schemathesis: a subnormal K or clip norm used to divide by zero in a solver."""
    import pydantic

    from planner import Scenario

    bad = {
        "groups": [{"id": "0", "epsilon": None, "num_clients": 1, "keep_ratio": 5e-324, "clip_norm": 5e-324}],
        "delta": 0.697,
        "rounds": 1,
        "model_dim": 1,
        "accountant": "prv",
        "expected_clients": 5e-324,
        "keep_ratio": 5e-324,
        "sparsity_exponent": 5e-324,
        "update_norm_bound": 5e-324,
        "min_clients_per_pool": 1,
    }
    with pytest.raises(pydantic.ValidationError) as info:
        Scenario.model_validate(bad)
    fields = {".".join(str(p) for p in e["loc"]) for e in info.value.errors()}
    assert {"expected_clients", "sparsity_exponent", "update_norm_bound"} <= fields
    assert any(f.startswith("groups.0.clip_norm") for f in fields)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"expected_clients": None}, "expected_clients"),  # neither participation setting
        ({"sampling_rate": 0.1}, "sampling_rate"),  # both
        ({"sampling_variance_per_coordinate": 0.1}, "heterogeneity_variance_per_coordinate"),
        ({"heterogeneity_variance_per_coordinate": 0.1}, "sampling_variance_per_coordinate"),
    ],
)
def test_cross_field_refusals_name_a_field_not_the_whole_input(change: dict, field: str) -> None:
    """The one line of gdpfed plan and POST /v1/plans names the field to fix
    (``expected_clients: give exactly one of ...``), never ``input:`` or ``scenario``."""
    import json

    import pydantic

    from accounting.errors import validation_error_line
    from planner import Scenario

    document = json.loads(worked_scenario(1).model_dump_json(exclude_none=True))
    document.update(change)
    document = {k: v for k, v in document.items() if v is not None}
    with pytest.raises(pydantic.ValidationError) as refused:
        Scenario.model_validate(document)
    assert validation_error_line(refused.value.errors())[0] == field
