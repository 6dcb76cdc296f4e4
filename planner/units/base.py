"""What a privacy unit is: whom a plan protects, and everything that changes with it.

docs/architecture.md §Privacy units. A unit bundles the scenario it plans from, the plan
document it produces, the ledger that says what its rounds spend, the verifier the
trainer runs before round 0 and the name of its mechanism, the randomised release that
the trainer implements (docs/architecture.md §Vocabulary).
Figures of different units are different privacy notions (client-level DP, silo
sample-level DP, metric privacy): ``notion`` labels them wherever they are shown, and
no code adds or compares figures across units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from accounting.choices import SecaggMechanism
from planner.schema import PlanDocument

# plan -> rounds run -> the figure of record per protected entity (group, silo or client)
# in the unit's own notion; None where the entity has no guarantee (opted out).
SpentFn = Callable[[Any, int], dict[str, float | None]]


@dataclass(frozen=True)
class Participations:
    """Who released in a run's counted rounds, for units whose ledger counts participations
    (``PrivacyUnit.participation_reports``; docs/ledger.md §8): per group, each client's
    reported releases, and the counted rounds whose participants were never reported (each
    counts as one more release of every client: never optimistic)."""

    counts: dict[str, dict[int, int]] = field(default_factory=dict)
    unknown_rounds: int = 0


# plan, rounds done, changes, the run's participations (or None), the parent's id, the run's
# secure-aggregation noise mechanism (None: unknown, or a unit without one) -> the child plan
# for the remaining rounds
ReplanFn = Callable[[Any, int, Any, "Participations | None", "str | None", "SecaggMechanism | None"], PlanDocument]
# plan, rounds counted, participations -> the unit's own fields of the service's ledger
LedgerRowsFn = Callable[[Any, int, Participations], dict[str, Any]]


@dataclass(frozen=True)
class PrivacyUnit:
    """One entry of the privacy-unit registry (``planner.units.UNITS``).

    ``scenario_model`` and ``plan_model`` declare ``privacy_unit: Literal[name]`` (a test
    checks it); ``plan_model.scenario_fixed()`` lists the plan's fields its scenario fixes,
    which every plan read and ``verify`` refuse to see differ
    (``planner.schema.check_scenario_fixed``, docs/ledger.md §5). ``make_plan(scenario, method)`` plans a scenario of this unit;
    ``methods`` are the names it accepts (``default_method`` when none is given).
    ``describe(plan)`` is the text ``gdpfed plan`` prints. ``verify(plan)`` raises ``InvalidInputError`` unless the plan is consistent and
    within every budget (the trainer runs it on every plan, whatever its origin).
    ``spent(plan, rounds_run)`` is the ledger: each protected entity's figure after that
    many rounds, never optimistic. ``mechanism`` names the unit's randomised release
    (``gaussian_secagg``, ``dpsgd_silo``, ``metric_laplace``), by which the trainer's unit
    registry (``trainer.units.registry``) finds the unit that executes such plans.

    What the service needs to serve such plans without naming the unit
    (docs/service.md §Privacy units): ``label`` is the short name every figure is shown
    under ("silo sample-level"), ``figure`` what the figures are (``epsilon`` or
    ``leakage``), ``entities`` the scenario's list of protected entities (``groups``,
    ``silos``), ``budget_field`` their budget's field name. ``changes_model`` is the body
    of a budget change and ``replan(plan, rounds_done, changes, participations,
    parent_plan_id, mechanism)`` the child plan for the remaining rounds (``participations``: the
    run's, for units whose ledger counts them; ``mechanism``: the noise mechanism the run
    reported, for units with ``secagg_mechanisms``, else ``None``, as while it is unknown). ``participation_reports`` says whether
    round reports carry which clients released (``check_participants(plan,
    participations, reported)`` refuses a report, naming the field). ``ledger_model`` is
    the service's ledger body of the unit's plans and ``ledger_rows(plan, rounds_counted,
    participations)`` its unit-specific fields; both ``None`` for the client unit, whose
    rows the service computes itself (``app.services.ledger.group_ledgers``).
    ``secagg_mechanisms``: its rounds run secure aggregation with a choice of noise
    mechanism (``accounting.choices.SecaggMechanism``), which round reports state and the
    ledger counts (``planner.ledger``'s ``mechanism``; docs/ledger.md §3); other units'
    reports leave ``secagg_mechanism`` out.
    """

    name: str
    notion: str
    scenario_model: type[BaseModel]
    plan_model: type[PlanDocument]
    methods: tuple[str, ...]
    default_method: str
    make_plan: Callable[[Any, str], PlanDocument]
    describe: Callable[[Any], str]
    verify: Callable[[Any], object]  # raises unless safe; what it returns (the silo unit's findings) is not read here
    spent: SpentFn
    mechanism: str
    label: str
    figure: Literal["epsilon", "leakage"]
    entities: str
    budget_field: str
    changes_model: type[BaseModel]
    replan: ReplanFn | None = None
    participation_reports: bool = False
    secagg_mechanisms: bool = False
    check_participants: Callable[[Any, Participations, dict[str, list[int]]], None] | None = None
    ledger_model: type[BaseModel] | None = None
    ledger_rows: LedgerRowsFn | None = None
    # the planner without advisory extras a request need not wait for (the client unit's
    # clients-needed search); None: make_plan
    service_plan: Callable[[Any, str], PlanDocument] | None = None
    # Literals of the unit's models, each a named enum of the service's OpenAPI document
    wire_enums: dict[str, Any] = field(default_factory=dict)

    def entity_count(self, scenario: Any) -> int:
        """How many protected entities ``scenario`` lists (``scenario.<entities>``)."""
        return len(getattr(scenario, self.entities))
