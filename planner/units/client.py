"""The ``client`` unit: client-level (epsilon, delta)-DP for groups of clients.

Every plan the project made before privacy units is of this kind (docs/planning.md §8):
groups of clients with their own budgets, Poisson sampling per group, pools with one
Gaussian noise draw, secure aggregation. Its ledger is ``planner.ledger``'s
per-group epsilon (docs/ledger.md §1-§3), its verifier ``planner.verify``, its trainer
mechanism clipping plus Gaussian noise shares under secure aggregation
(``trainer/units/client/rounds.py``).
"""

from __future__ import annotations

from planner import ledger
from planner.methods import METHODS
from planner.plan import make_plan
from planner.replan import replan
from planner.report import plan_text
from planner.schema import CLIENT_NOTION, Changes, Plan, Scenario, SecaggMechanism
from planner.units.base import Participations, PrivacyUnit
from planner.verify import verify_executable


def _plan(scenario: Scenario, method: str) -> Plan:
    return make_plan(scenario, method)  # type: ignore[arg-type]  # make_plan checks the name


def _service_plan(scenario: Scenario, method: str) -> Plan:
    return make_plan(scenario, method, clients_needed=False)  # type: ignore[arg-type]  # make_plan checks the name


def _spent(plan: Plan, rounds_run: int) -> dict[str, float | None]:
    return ledger.spent_by_group(plan, rounds_run)


def _verify(plan: Plan) -> None:
    # the unit's verifier is the plan checker's (gdpfed plan verify, a followed re-plan): an
    # understated figure is refused; gdpfed train asks verify_executable to report it instead
    verify_executable(plan)


def _replan(plan: Plan, rounds_done: int, changes: Changes, participations: Participations | None,
            parent_plan_id: str | None, mechanism: SecaggMechanism | None = None) -> Plan:
    del participations  # a client-level ledger counts rounds, not who took part
    return replan(plan, rounds_done, changes, parent_plan_id=parent_plan_id, mechanism=mechanism)


UNIT = PrivacyUnit(
    name="client",
    notion=CLIENT_NOTION,
    scenario_model=Scenario,
    plan_model=Plan,
    methods=(*METHODS, "compare"),
    default_method="gdpfed_plus",
    make_plan=_plan,
    describe=plan_text,
    verify=_verify,
    spent=_spent,
    mechanism="gaussian_secagg",
    label="client-level",
    figure="epsilon",
    entities="groups",
    budget_field="epsilon",
    changes_model=Changes,
    replan=_replan,
    service_plan=_service_plan,
    secagg_mechanisms=True,
)
