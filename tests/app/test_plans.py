"""Plans over HTTP with the real planner: create, read, list/page, re-plan, errors."""

from __future__ import annotations

import copy

import pytest

from planner.units import load_plan
from tests.app.conftest import SMALL_SCENARIO, TestClient, auth


def _create(client: TestClient, **overrides: object) -> dict:
    body = {"scenario": copy.deepcopy(SMALL_SCENARIO), **overrides}
    response = client.post("/v1/plans", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def test_create_read_and_the_document_is_a_plan(client: TestClient, planner_token: str) -> None:
    created = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO}, headers=auth(planner_token))
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["method"] == "gdpfed_plus" and plan["created_by"] == "planner-1"
    assert plan["created_at"].endswith("Z") or "+00:00" in plan["created_at"]
    fetched = client.get(f"/v1/plans/{plan['id']}", headers=auth(planner_token)).json()
    assert fetched == plan
    document = load_plan(fetched)  # the trainer can run the response as is
    assert [g.id for g in document.groups] == ["strict", "medium", "loose"]
    assert all(g.epsilon_spent is not None and g.epsilon_spent <= g.epsilon * (1 + 1e-9) for g in document.groups)


def test_compare_method(client: TestClient) -> None:
    plan = _create(client, method="compare")
    assert plan["comparison"] and {row["method"] for row in plan["comparison"]} >= {"dp_fedavg", "gdpfed_plus"}


def test_paging_by_cursor_and_offset(client: TestClient) -> None:
    ids = [_create(client)["id"] for _ in range(5)]
    first = client.get("/v1/plans?limit=2").json()
    assert first["total"] == 5 and [p["id"] for p in first["items"]] == ids[::-1][:2]
    second = client.get(f"/v1/plans?limit=2&cursor={first['next_cursor']}").json()
    third = client.get(f"/v1/plans?limit=2&cursor={second['next_cursor']}").json()
    assert [p["id"] for p in second["items"] + third["items"]] == ids[::-1][2:]
    assert third["next_cursor"] is None
    by_offset = client.get("/v1/plans?limit=2&offset=2").json()
    assert [p["id"] for p in by_offset["items"]] == ids[::-1][2:4]
    bad = client.get("/v1/plans?cursor=garbage")
    assert bad.status_code == 422 and bad.json()["field"] == "cursor"
    assert client.get("/v1/plans?limit=0").json()["field"] == "limit"


def test_invalid_and_infeasible_scenarios(client: TestClient) -> None:
    scenario = copy.deepcopy(SMALL_SCENARIO)
    scenario["groups"][1]["epsilon"] = -1
    invalid = client.post("/v1/plans", json={"scenario": scenario})
    assert invalid.status_code == 422
    assert invalid.json() | {"message": ""} == {"code": "invalid_input", "field": "scenario.groups.1.epsilon", "message": ""}
    too_many = copy.deepcopy(SMALL_SCENARIO)
    too_many["expected_clients"] = 1000  # more than the 300 clients there are
    infeasible = client.post("/v1/plans", json={"scenario": too_many})
    assert infeasible.status_code == 422 and infeasible.json()["code"] in ("infeasible", "invalid_input")
    assert client.post("/v1/plans", json={"scenario": SMALL_SCENARIO, "method": "magic"}).json()["field"] == "method"
    assert client.get("/v1/plans/unknown").json()["code"] == "not_found"


def test_replan_defaults_to_ledger_and_links_parent(client: TestClient) -> None:
    plan = _create(client)
    for index in range(6):
        client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index})
    lowered = client.post(f"/v1/plans/{plan['id']}/replan", json={"rounds_done": 3})
    assert lowered.status_code == 409 and lowered.json()["field"] == "rounds_done"
    changes = {"groups": [{"id": "strict", "epsilon": 2.0}]}
    child = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": changes})
    assert child.status_code == 201, child.text
    child = child.json()
    assert child["parent_plan_id"] == plan["id"] and child["start_round"] == 6
    assert child["rounds"] == SMALL_SCENARIO["rounds"] - 6
    strict = next(g for g in child["groups"] if g["id"] == "strict")
    assert strict["epsilon"] == 2.0
    again = client.post(f"/v1/plans/{plan['id']}/replan", json={})
    assert again.status_code == 409 and child["id"] in again.json()["message"]
    listed = client.get("/v1/plans?limit=5").json()["items"]
    assert listed[0]["parent_plan_id"] == plan["id"]
    # The child's ledger starts with the parent's six rounds.
    ledger = client.get(f"/v1/plans/{child['id']}/ledger").json()
    assert {g["id"]: g["steps"] for g in ledger["groups"]}["medium"] == 6


def test_replan_validates_its_body_before_it_checks_the_plans_state(client: TestClient) -> None:
    """docs/service.md §Errors: validation first (422 naming the field), state second (409). A
    malformed ``changes`` sent to a plan that cannot be re-planned now (already re-planned, a
    population's, ``rounds_done`` below the ledger's count) is 422 at ``changes.<path>``; the same
    request with a valid body is that state's 409. Before, the state was checked first: 409."""
    malformed = [({"groups": [{"id": "strict", "epsilon": "high"}]}, "changes.groups.0.epsilon"),
                 ({"grups": []}, "changes.grups"),
                 ({"groups": [{"id": "strict", "epsilon": True}]}, "changes.groups.0.epsilon")]
    valid = {"groups": [{"id": "strict", "epsilon": 2.0}]}

    def refusals(plan_id: str, **extra: object) -> None:
        for changes, field in malformed:
            refused = client.post(f"/v1/plans/{plan_id}/replan", json={"changes": changes, **extra})
            assert refused.status_code == 422, refused.text
            assert (refused.json()["code"], refused.json()["field"]) == ("invalid_input", field), refused.text
        state = client.post(f"/v1/plans/{plan_id}/replan", json={"changes": valid, **extra})
        assert state.status_code == 409 and state.json()["code"] == "conflict", state.text

    plan = _create(client)
    for index in range(3):
        assert client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index}).status_code == 201
    refusals(plan["id"], rounds_done=1)  # below the ledger's 3 rounds
    assert client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": valid}).status_code == 201
    refusals(plan["id"])  # already re-planned
    population = client.post("/v1/populations", json={"name": "p", "scenario": SMALL_SCENARIO}).json()
    refusals(client.post(f"/v1/populations/{population['id']}/plans").json()["id"])  # a population's plan
    assert client.post("/v1/plans/unknown/replan", json={"changes": {"grups": []}}).status_code == 404


def test_planner_key_cannot_replan(client: TestClient, planner_token: str) -> None:
    plan = _create(client)
    assert client.post(f"/v1/plans/{plan['id']}/replan", json={}, headers=auth(planner_token)).status_code == 403


def test_compute_timeout_is_503(db_url: str) -> None:
    from app.main import create_app
    from app.settings import Settings
    from tests.app.conftest import OPERATOR_TOKEN

    settings = Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN, compute_timeout_seconds=0.001)
    with TestClient(create_app(settings, announce_key=False), headers=auth(OPERATOR_TOKEN)) as client:
        scenario = copy.deepcopy(SMALL_SCENARIO)
        scenario["groups"] = [{"id": f"g{i}", "epsilon": 1 + i / 10, "num_clients": 50} for i in range(40)]
        response = client.post("/v1/plans", json={"scenario": scenario, "method": "compare"})
        assert response.status_code == 503 and response.json()["code"] == "timeout"
        assert "gdpfed_compute_timeouts_total 1.0" in client.get("/metrics").text


def test_max_groups_setting(db_url: str) -> None:
    from app.main import create_app
    from app.settings import Settings
    from tests.app.conftest import OPERATOR_TOKEN

    settings = Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN, max_groups=2)
    with TestClient(create_app(settings, announce_key=False), headers=auth(OPERATOR_TOKEN)) as client:
        response = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO})
        assert response.status_code == 422 and response.json()["field"] == "scenario.groups"


def test_the_service_returns_dittos_advisory_lambdas(client: TestClient) -> None:
    """docs/planning.md §14: alpha^2 and tau^2 in the scenario give predicted.ditto_lambdas per
    group; without them none and no error; one without the other is a 422 naming the missing one."""
    assert _create(client)["predicted"]["ditto_lambdas"] is None
    scenario = copy.deepcopy(SMALL_SCENARIO)
    scenario |= {"sampling_variance_per_coordinate": 1e-4, "heterogeneity_variance_per_coordinate": 2e-5}
    advice = _create(client, scenario=scenario)["predicted"]["ditto_lambdas"]
    assert set(advice["lambdas"]) == {"strict", "medium", "loose"}
    assert all(value is None or value > 0 for value in advice["lambdas"].values())
    assert max(advice["assumed_ratios"].values()) == 1.0 and advice["assumptions"]
    del scenario["heterogeneity_variance_per_coordinate"]
    refused = client.post("/v1/plans", json={"scenario": scenario})
    assert refused.status_code == 422 and "heterogeneity_variance_per_coordinate" in refused.json()["message"]


def test_replan_of_a_plan_with_discrete_blocks_records_the_skellam_events(client: TestClient) -> None:
    """A plan whose pools state discrete blocks (its run executes skellam, the default) is
    re-planned through the service: the child records each group's spent Skellam events and
    wrap-around charge and states blocks calibrated on them, so a trainer can run it
    (docs/planning.md §9); a budget below what those events spent is 409 naming the field."""
    import accounting
    from planner.discrete import pool_mechanisms, spent_record

    plan = _create(client, scenario={**copy.deepcopy(SMALL_SCENARIO), "report_discrete": True})
    parent = load_plan(plan)
    assert all(pool.discrete is not None for pool in parent.pools if pool.noise_multiplier > 0)
    for index in range(4):
        client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index})
    events, wrap = spent_record(parent, parent.group("strict"), 4)
    spent = accounting.epsilon_of_events(events, parent.scenario.delta - wrap, parent.accountant).epsilon
    below = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": {"groups": [
        {"id": "strict", "epsilon": spent * 0.9}]}})
    assert below.status_code == 409 and below.json()["field"] == "changes.groups.0.epsilon", below.text
    raised = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": {"groups": [{"id": "strict", "epsilon": 1.5}]}})
    assert raised.status_code == 201, raised.text
    child = load_plan(raised.json())
    assert child.start_round == 4
    strict = child.group("strict")
    assert strict.spent_discrete == events and strict.spent_wrap_probability == wrap
    assert all(pool.discrete is not None for pool in child.pools if pool.noise_multiplier > 0), child.warnings
    # the blocks are the ones the trainer derives from the child itself
    assert {p.pool: p.mechanism for p in pool_mechanisms(child)} == {
        p.id: p.discrete for p in child.pools if p.discrete is not None}


def test_a_skellam_runs_lowered_budget_is_checked_against_its_skellam_events(client: TestClient) -> None:
    """Issue 27: the service re-plans with the mechanism the run reported. After 2 rounds of the plan
    group strict's Gaussian phases spent 1.75316 and its Skellam events 1.75328 (the blocks sit on the
    continuous answer's lattice point at delta less the wrap charge, docs/accounting.md §13.5): a
    budget between the two is one a continuous run has not spent but a skellam run has. The plan whose
    run reported skellam refuses it (409 naming the field) and its ledger counts the Skellam figure;
    the population's member plan, whose run reported gaussian_continuous, refuses one below its
    Gaussian figure as spent, and finds room left under the one between (refused only because that
    room cannot sample min_clients_per_pool); before, the larger record refused any budget between
    the two as spent, whatever the run reported."""
    from planner import ledger as plan_ledger
    from tests.trainer.test_reporting import SCENARIO

    scenario = {**SCENARIO, "rounds": 4}
    plan = _create(client, scenario=scenario)
    population = client.post("/v1/populations", json={"name": "skellam", "scenario": scenario}).json()
    member = client.post(f"/v1/populations/{population['id']}/plans").json()
    parent = load_plan(plan)
    gaussian = plan_ledger.epsilon_spent(parent, parent.group("strict"), 2)
    skellam = plan_ledger.epsilon_spent(parent, parent.group("strict"), 2, mechanism="skellam")
    assert gaussian is not None and skellam is not None and gaussian < skellam * (1 - 1e-5)
    assert load_plan(member).model_dump(exclude={"created_at"}) == parent.model_dump(exclude={"created_at"})
    for plan_id, mechanism in ((plan["id"], "skellam"), (member["id"], "gaussian_continuous")):
        for index in range(2):
            report = {"round_index": index, "secagg_mechanism": mechanism}
            assert client.post(f"/v1/plans/{plan_id}/rounds", json=report).status_code == 201
    ledger = client.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert {row["id"]: row["epsilon_spent"] for row in ledger["groups"]}["strict"] == skellam

    between = (skellam + gaussian) / 2
    refused = client.post(f"/v1/plans/{plan['id']}/replan",
                          json={"changes": {"groups": [{"id": "strict", "epsilon": between}]}})
    assert refused.status_code == 409 and refused.json()["field"] == "changes.groups.0.epsilon", refused.text
    assert f"{skellam:.6g}" in refused.text
    below = client.patch(f"/v1/populations/{population['id']}/groups/strict", json={"epsilon": gaussian * 0.999})
    assert below.status_code == 409 and "spent" in below.text, below.text
    # between the records a continuous run has room left (what it did not spend): the budget check
    # passes and the re-plan is refused only because the room is too small for min_clients_per_pool
    changed = client.patch(f"/v1/populations/{population['id']}/groups/strict", json={"epsilon": between})
    assert changed.status_code == 409 and "spent" not in changed.text, changed.text
    assert "can expect at most" in changed.text and "min_clients_per_pool" in changed.text


def test_post_replan_lowering_a_skellam_run_to_exhaustion_then_raising_keeps_its_skellam_events(
    client: TestClient,
) -> None:
    """The operator workflow through POST /replan: after 2 skellam rounds every budget is lowered to
    what it spent (the child has no noised pool, so no block), 1 round of the child runs, then the
    budgets are raised. The grandchild records the spent Skellam events (the run's mechanism is the
    reported one, not "has blocks") and its ledger is those events then its own, as an independent
    composition; before, the grandchild dropped them and stated no block."""
    import accounting
    from planner import ledger as plan_ledger
    from planner.discrete import group_event

    scenario = {**copy.deepcopy(SMALL_SCENARIO), "rounds": 8, "accountant": "rdp"}
    created = _create(client, scenario=scenario)
    parent = load_plan(created)
    assert all(pool.discrete is not None for pool in parent.pools if pool.noise_multiplier > 0)
    for index in range(2):
        report = {"round_index": index, "secagg_mechanism": "skellam"}
        assert client.post(f"/v1/plans/{created['id']}/rounds", json=report).status_code == 201
    spent = plan_ledger.spent_by_group(parent, 2, mechanism="skellam")
    lowered = client.post(f"/v1/plans/{created['id']}/replan", json={"changes": {"groups": [
        *({"id": gid, "epsilon": eps} for gid, eps in spent.items()),
        {"id": "public", "opt_out": True, "num_clients": 100},
    ]}})
    assert lowered.status_code == 201, lowered.text
    child, child_id = load_plan(lowered.json()), lowered.json()["id"]
    assert all(pool.discrete is None for pool in child.pools)
    assert all(child.group(gid).status == "exhausted" for gid in spent)
    report = {"round_index": 2, "secagg_mechanism": "skellam"}
    assert client.post(f"/v1/plans/{child_id}/rounds", json=report).status_code == 201
    raised = client.post(f"/v1/plans/{child_id}/replan", json={"changes": {"groups": [
        {"id": g["id"], "epsilon": g["epsilon"]} for g in SMALL_SCENARIO["groups"]]}})  # type: ignore[attr-defined]
    assert raised.status_code == 201, raised.text
    grandchild, grandchild_id = load_plan(raised.json()), raised.json()["id"]
    assert grandchild.start_round == 3
    for index in range(3, 5):
        report = {"round_index": index, "secagg_mechanism": "skellam"}
        assert client.post(f"/v1/plans/{grandchild_id}/rounds", json=report).status_code == 201, index
    ledger = client.get(f"/v1/plans/{grandchild_id}/ledger").json()
    assert ledger["secagg_mechanism"] == "skellam"
    for row in ledger["groups"]:
        if row["id"] == "public":
            continue
        first, group = parent.group(row["id"]), grandchild.group(row["id"])
        ran, own = group_event(parent, first, 2), group_event(grandchild, group, 2)
        block, new = parent.pool(first.pool).discrete, grandchild.pool(group.pool).discrete
        assert ran is not None and own is not None and block is not None and new is not None, grandchild.warnings
        assert group.spent_discrete == [ran]
        delta = parent.scenario.delta - 2 * block.wrap_probability_per_round - 2 * new.wrap_probability_per_round
        expected = accounting.epsilon_of_events([ran, own], delta, "rdp").epsilon
        assert row["epsilon_spent"] == pytest.approx(expected, rel=1e-9)


def test_replan_of_a_prv_plan_after_skellam_reports(client: TestClient) -> None:
    """POST /replan of a prv plan (blocks calibrated by rdp, which prices their Skellam events; prv cannot)
    failed with 'accountant prv does not support poisson_sampled_skellam events'; after two skellam reports
    it is 201 now, the same for closed_form."""
    from tests.trainer.test_reporting import SCENARIO

    for accountant in ("prv", "closed_form"):
        plan = _create(client, scenario={**SCENARIO, "rounds": 4, "accountant": accountant})
        for index in range(2):
            report = {"round_index": index, "secagg_mechanism": "skellam"}
            assert client.post(f"/v1/plans/{plan['id']}/rounds", json=report).status_code == 201
        replanned = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": {}})
        assert replanned.status_code == 201, replanned.text
        child = load_plan(replanned.json())
        assert child.accountant == accountant and child.start_round == 2
        assert all(g.status == "active" and g.spent_discrete for g in child.groups)
