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


def verify_client_plan(plan: Plan, *, skellam_spent: dict[str, float] | None = None) -> None:
    """The client unit's verifier (docs/ledger.md §5): ``planner.verify.verify_executable``, an
    understated figure refused. It is the plan checker's (``gdpfed plan verify``) and a followed
    re-plan's (the trainer's ``TrainingUnit.verify``, which passes ``skellam_spent`` to keep the
    full-run Skellam ledgers it composed for the successor's engine); ``gdpfed train`` asks
    verify_executable to report an understated figure of its first plan instead."""
    verify_executable(plan, skellam_spent=skellam_spent)


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
    verify=verify_client_plan,
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
