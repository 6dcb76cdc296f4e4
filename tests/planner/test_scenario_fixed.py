"""A plan cannot lie about what its own scenario fixes (issue 25 §3; docs/ledger.md §5).

A plan file carries its scenario. A hand edit that raised ``groups[strict].epsilon`` from 1
to 10 (alone, or with a sampling rate to match) used to verify, train, and report "spent
0.5605 of 10" or spend 1.844 of a budget of 1. Every field a plan's scenario fixes must
state the scenario's value: reading the plan (``load_plan_document``) and every unit's
verifier refuse anything else, naming the field. Each tamper below edits a real planned
plan of each kind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accounting.accountants import DEFAULT_ACCOUNTANT
from accounting.errors import InvalidInputError
from planner import Changes, make_plan, replan
from planner.schema import Plan, Scenario
from planner.units import UNITS, load_plan, load_plan_document, privacy_unit
from planner.units.metric_local import MetricScenario, plan_metric
from planner.units.silo_sample import SiloScenario
from planner.units.silo_sample import make_plan as make_silo_plan
from planner.verify import verify_executable

ROOT = Path(__file__).resolve().parents[2]
CLIENT_SCENARIO = json.loads((ROOT / "examples" / "scenario.json").read_text())
SILO_SCENARIO = {
    "privacy_unit": "silo_sample",
    "silos": [{"id": "a", "num_samples": 400, "epsilon": 1.0}, {"id": "b", "num_samples": 100, "epsilon": 2.0}],
    "delta": 1e-5, "rounds": 10, "batch_size": 16, "clip_norm": 1.0,
}
METRIC_SCENARIO = {
    "privacy_unit": "metric_local",
    "groups": [
        {"id": "fixed", "num_clients": 60, "noise_multiplier": 5.0, "leakage_budget": 2.0},
        {"id": "budget", "num_clients": 40, "leakage_budget": 3.0},
    ],
    "rounds": 20, "model_dim": 2, "clients_per_round": 7, "radius": 0.5,
}


def client_document(**overrides: Any) -> dict[str, Any]:
    scenario = Scenario.model_validate({**CLIENT_SCENARIO, **overrides})
    return make_plan(scenario, "gdpfed_plus").model_dump(mode="json")


def silo_document() -> dict[str, Any]:
    return make_silo_plan(SiloScenario.model_validate(SILO_SCENARIO), "mrmtl").model_dump(mode="json")


def metric_document() -> dict[str, Any]:
    return plan_metric(MetricScenario.model_validate(METRIC_SCENARIO)).model_dump(mode="json")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit of one field, ``groups.0.epsilon`` style (list entries by index)."""

    def edit(document: dict[str, Any]) -> None:
        *parents, last = [int(key) if key.isdigit() else key for key in path.split(".")]
        target: Any = document
        for key in parents:
            target = target[key]
        target[last] = value

    return edit


def _drop_last(entries: str) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        document[entries].pop()

    return edit


# (plan kind, the plan, an edit, the field named, what it states, what the scenario fixes)
TAMPERS: list[tuple[str, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None], str, str, str]] = [
    ("client", client_document, _set("groups.0.epsilon", 10), "groups.strict.epsilon", "10", "1"),
    ("client", client_document, _set("groups.0.num_clients", 1000), "groups.strict.num_clients", "1000", "100"),
    ("client", client_document, _set("groups.1.clip_norm", 2.0), "groups.medium.clip_norm", "2", "1"),
    ("client", client_document, _set("rounds", 50), "rounds", "50", "100"),
    ("client", client_document, _set("accountant", "prv"), "accountant", "'prv'", f"'{DEFAULT_ACCOUNTANT}'"),
    ("client", client_document, _drop_last("groups"), "groups", "['strict', 'medium']",
     "['strict', 'medium', 'relaxed']"),
    ("silo", silo_document, _set("silos.0.epsilon", 10), "silos.a.epsilon", "10", "1"),
    ("silo", silo_document, _set("silos.1.num_samples", 200), "silos.b.num_samples", "200", "100"),
    ("silo", silo_document, _set("silos.0.clip_norm", 0.5), "silos.a.clip_norm", "0.5", "1"),
    ("silo", silo_document, _set("rounds", 5), "rounds", "5", "10"),
    ("silo", silo_document, _set("accountant", "prv"), "accountant", "'prv'", f"'{DEFAULT_ACCOUNTANT}'"),
    ("silo", silo_document, _set("batch_size", 8), "batch_size", "8", "16"),
    ("silo", silo_document, _drop_last("silos"), "silos", "['a']", "['a', 'b']"),
    ("metric", metric_document, _set("groups.0.leakage_budget", 20.0), "groups.fixed.leakage_budget", "20", "2"),
    ("metric", metric_document, _set("groups.1.leakage_budget", None), "groups.budget.leakage_budget", "null", "3"),
    ("metric", metric_document, _set("groups.0.noise_multiplier", 50.0), "groups.fixed.noise_multiplier", "50", "5"),
    ("metric", metric_document, _set("groups.1.num_clients", 400), "groups.budget.num_clients", "400", "40"),
    ("metric", metric_document, _set("rounds", 10), "rounds", "10", "20"),
    ("metric", metric_document, _drop_last("groups"), "groups", "['fixed']", "['fixed', 'budget']"),
]
IDS = [f"{kind}-{field}" for kind, _, _, field, *_ in TAMPERS]


@pytest.mark.parametrize(("kind", "make", "edit", "field", "stated", "fixed"), TAMPERS, ids=IDS)
def test_a_field_the_scenario_fixes_is_refused_by_name(
    kind: str, make: Callable[[], dict[str, Any]], edit: Callable[[dict[str, Any]], None], field: str,
    stated: str, fixed: str,
) -> None:
    document = make()
    unit = privacy_unit(document["privacy_unit"])
    unit.verify(load_plan_document(document))  # the planned plan is accepted
    edit(document)
    expected = f"states {stated}, but the plan's scenario fixes {fixed}"
    with pytest.raises(InvalidInputError) as read:
        load_plan_document(document)  # every reader of a plan: train, resume, flower, the service
    assert (read.value.field, read.value.reason) == (field, expected)
    with pytest.raises(InvalidInputError) as verified:
        unit.verify(unit.plan_model.model_validate(document))  # a plan object built without the reader
    assert (verified.value.field, verified.value.reason) == (field, expected)


def _declared(plan: Any) -> set[str]:
    """The fields ``plan.scenario_fixed()`` yields, each group's or silo's id as ``*``."""
    return {re.sub(r"^(groups|silos)\.[^.]+\.", r"\1.*.", field) for field, *_ in plan.scenario_fixed()}


@pytest.mark.parametrize("kind", ["client", "silo", "metric"])
def test_every_field_a_plan_kind_declares_fixed_is_tampered_above(kind: str) -> None:
    make: dict[str, Callable[[], dict[str, Any]]] = {
        "client": client_document, "silo": silo_document, "metric": metric_document,
    }
    tampered = {re.sub(r"^(groups|silos)\.[^.]+\.", r"\1.*.", field) for k, _, _, field, *_ in TAMPERS if k == kind}
    assert _declared(load_plan_document(make[kind]())) == tampered


def test_every_registered_plan_kind_declares_its_scenario_fixed_fields() -> None:
    from planner.schema import PlanDocument

    for unit in UNITS.values():
        assert unit.plan_model.scenario_fixed is not PlanDocument.scenario_fixed, unit.name


def test_raising_a_budget_with_a_matching_rate_is_refused() -> None:
    """The issue's second case: strict's epsilon raised to 10 and its rate, noise and phase
    made to match (the plan of a scenario where strict has 10), under a scenario that fixes 1."""
    honest = client_document()
    raised = client_document(groups=[{**CLIENT_SCENARIO["groups"][0], "epsilon": 10.0}, *CLIENT_SCENARIO["groups"][1:]])
    assert raised["groups"][0]["sampling_rate"] > honest["groups"][0]["sampling_rate"]
    verify_executable(load_plan(raised))  # consistent with its own scenario
    lying = {**raised, "scenario": honest["scenario"]}
    with pytest.raises(InvalidInputError) as info:
        load_plan_document(lying)
    assert info.value.field == "groups.strict.epsilon" and "states 10, but the plan's scenario fixes 1" in info.value.message


def test_unmodified_plans_of_every_origin_still_verify() -> None:
    """Planned and re-planned plans (a budget changed, a group added and one removed), a
    compare plan, an idp_scale plan (its clip norms derived) and a version 1 file."""
    for plan_document in (
        client_document(),
        client_document(accountant="closed_form"),
        make_plan(Scenario.model_validate(CLIENT_SCENARIO), "compare").model_dump(mode="json"),
        make_plan(Scenario.model_validate({**CLIENT_SCENARIO, "groups": [
            {**CLIENT_SCENARIO["groups"][0], "clip_norm": 0.5}, *CLIENT_SCENARIO["groups"][1:]]}), "idp_scale",
        ).model_dump(mode="json"),
        json.loads((ROOT / "tests" / "planner" / "data" / "plan_v1.json").read_text()),
        silo_document(),
        metric_document(),
    ):
        plan = load_plan_document(plan_document)
        privacy_unit(plan.privacy_unit).verify(plan)
    parent = Plan.model_validate(client_document())
    changes = Changes.model_validate({"groups": [
        {"id": "strict", "epsilon": 1.5}, {"id": "relaxed", "remove": True},
        {"id": "late", "epsilon": 3.0, "num_clients": 50},
    ]})
    child = replan(parent, 40, changes, parent_plan_id="p1")
    grandchild = replan(child, 20, Changes(), parent_plan_id="p2")
    for plan in (child, grandchild):
        loaded = load_plan_document(plan.model_dump(mode="json"))
        assert isinstance(loaded, Plan)
        verify_executable(loaded)
    edited = grandchild.model_dump(mode="json")
    edited["rounds"] = 60  # the re-plan covers scenario.rounds - start_round = 100 - 60
    with pytest.raises(InvalidInputError) as info:
        load_plan_document(edited)
    assert (info.value.field, info.value.reason) == ("rounds", "states 60, but the plan's scenario fixes 40")


def test_opted_out_groups_of_every_method_verify_and_dp_fedavg_all_fixes_them_at_the_strictest() -> None:
    """An opt-out scenario (FedHDP's, examples/fedhdp.json) planned by every client method
    reads back; dp_fedavg_all plans its opted-out groups private at the strictest budget, so
    there the scenario fixes that value (a looser one is refused), elsewhere null."""
    scenario = Scenario.model_validate(json.loads((ROOT / "examples" / "fedhdp.json").read_text()))
    opted_out = [g.id for g in scenario.groups if g.epsilon is None]
    strictest = min(g.epsilon for g in scenario.groups if g.epsilon is not None)
    assert opted_out
    for method in ("dp_fedavg", "dp_fedavg_all", "gdpfed", "gdpfed_plus", "idp_sample", "pooled_plus", "compare"):
        document = make_plan(scenario, method).model_dump(mode="json")
        load_plan_document(document)
    document = make_plan(scenario, "dp_fedavg_all").model_dump(mode="json")
    index = [g["id"] for g in document["groups"]].index(opted_out[0])
    assert document["groups"][index]["epsilon"] == strictest
    document["groups"][index]["epsilon"] = strictest * 2
    with pytest.raises(InvalidInputError) as info:
        load_plan_document(document)
    assert info.value.field == f"groups.{opted_out[0]}.epsilon"
    assert info.value.reason == f"states {strictest * 2:g}, but the plan's scenario fixes {strictest:g}"
