"""What the operator console shows, computed by the service (docs/service.md §Console).

Every privacy figure on the console comes from here, and here from the service's ledger
(``app.services.ledger``, which counts rounds) and ``planner.ledger`` (what they cost): the
page's JavaScript only draws numbers, it never computes one. Each figure is labelled with
its unit: the privacy notion (client-level DP unless the plan names another), the
accountant and delta; a client-level plan's with the noise mechanism its run executes (the
continuous one labelled approximate) and, for the discrete one, the threat model its
guarantee holds under.
"""

from __future__ import annotations

from sqlalchemy import select

from accounting.accountants import get_accountant
from app.deps import AppState
from app.models import PlanRecord
from app.schemas import (
    ConsoleComparison,
    ConsoleGroup,
    ConsoleLineage,
    ConsolePlan,
    ConsolePlanRow,
    ConsolePopulation,
    GroupLedger,
    LedgerOut,
    SpentSeries,
)
from app.services import ledger as ledger_service
from app.services import plans as plan_service
from app.services import populations as population_service
from planner import ledger as plan_ledger
from planner.schema import MECHANISM_LABELS, Plan, SecaggMechanism
from planner.units import privacy_unit, unit_of

# Points of the epsilon-over-rounds chart: every round up to this many, else evenly spaced.
SERIES_POINTS = 25
# Accountants that run in child processes (PRV) cost about half a second an evaluation:
# their charts get fewer points.
SERIES_POINTS_SLOW = 6


def unit_label(plan: Plan, mechanism: SecaggMechanism = plan_ledger.CONTINUOUS) -> str:
    """How the console names the privacy figures of ``plan`` run on ``mechanism``: its unit's
    notion, delta and the accountant that priced them, the ledger's own (``planner.ledger.
    rows_accountant``: a prv plan's Skellam rows are rdp's, docs/ledger.md §3), so the label
    above the figures is the one ``GET /v1/plans/{id}/ledger`` states with them."""
    notion = unit_of(plan).notion
    accountant = plan_ledger.rows_accountant(plan, mechanism)
    return f"epsilon: {notion}, delta={plan.scenario.delta:g}, accountant {accountant}"


def mechanism_text(mechanism: SecaggMechanism | None, rows: list[GroupLedger]) -> str | None:
    """The noise mechanism a client-level ledger's figures count, in words (exact or approximate),
    and for the discrete one the threat model of its rows' pools (``threat_model``: colluding
    clients, honest survivors); ``None`` while no round of the run was reported."""
    if mechanism is None:
        return None
    lines = list(dict.fromkeys(row.threat_model for row in rows if row.threat_model))
    threat = f"; threat model: {' | '.join(lines)}" if lines else ""
    return f"noise mechanism: {MECHANISM_LABELS[mechanism]}{threat}"


def population_view(state: AppState, population_id: str) -> ConsolePopulation:
    """The population, its groups' budgets and spending, the spending over rounds, the plans."""
    with state.sessions() as session:
        population = population_service.get_population(session, population_id)
        records = list(session.scalars(
            select(PlanRecord).where(PlanRecord.population_id == population_id).order_by(PlanRecord.pk)
        ))
        counted = {r.id: ledger_service.rounds_counted(session, r) for r in records}
        children = {r.parent_id: r.id for r in records if r.parent_id is not None}
        active = next((r for r in records if r.id == population.active_plan_id), None)
        chain = ledger_service.plan_chain(session, active) if active is not None else []
        mechanism = ledger_service.run_mechanism(session, active) if active is not None else None
    lineage = [
        ConsoleLineage(id=r.id, parent_plan_id=r.parent_id, superseded_by=children.get(r.id), method=r.method,
                       accountant=r.accountant, start_round=r.start_round, rounds=r.rounds,
                       rounds_counted=counted[r.id], created_at=r.created_at, created_by=r.created_by,
                       active=r.id == population.active_plan_id)
        for r in records
    ]
    budgets = {g.id: g.epsilon for g in population.scenario.groups}
    if active is None:
        groups = [ConsoleGroup(id=g.id, epsilon=g.epsilon, num_clients=g.num_clients) for g in population.scenario.groups]
        return ConsolePopulation(population=population, unit=None, groups=groups, lineage=lineage, series=None)
    stages = [(plan_service.to_plan(r), r.start_round, counted[r.id]) for r in chain]
    ledgers, series = state.compute.run(spending, stages, mechanism or plan_ledger.CONTINUOUS)
    plan = stages[-1][0]
    groups = [
        ConsoleGroup(id=g.id, epsilon=budgets.get(g.id), num_clients=g.num_clients, epsilon_spent=row.epsilon_spent,
                     epsilon_rdp=row.epsilon_rdp, epsilon_tight=row.epsilon_tight, epsilon_remaining=row.epsilon_remaining, opted_out=row.opted_out,
                     sampling_rate=g.sampling_rate, pool=g.pool)
        for g, row in zip(plan.groups, ledgers)
    ]
    return ConsolePopulation(population=population, unit=unit_label(plan, mechanism or plan_ledger.CONTINUOUS),
                             groups=groups, lineage=lineage,
                             series=series, rounds_counted=counted[chain[-1].id] + chain[-1].start_round,
                             mechanism=mechanism_text(mechanism, ledgers))


def spending(stages: list[tuple[Plan, int, int]],
             mechanism: SecaggMechanism = plan_ledger.CONTINUOUS) -> tuple[list[GroupLedger], SpentSeries]:
    """The active plan's ledger rows and each group's epsilon after every counted round.

    ``stages`` is the plan chain, oldest first: (plan, its start round, rounds it counts);
    ``mechanism`` the run's (one for the whole chain: a run keeps its mechanism).
    The epsilon after global round r is ``planner.ledger.epsilon_spent`` of the plan that
    covers r, after ``r - start`` of its rounds (its history holds its parents' phases), the
    number the ledger endpoint reports (docs/ledger.md §2-§4). The points are every round up to
    ``SERIES_POINTS``, else evenly spaced, plus the start round of every re-plan in the chain:
    the budget is a step at the round the re-plan took effect, which an evenly spaced point
    after it would draw one or more rounds late (docs/service.md §Console). Runs on the compute pool.
    """
    plan, _, rounds = stages[-1]
    rows = ledger_service.group_ledgers(plan, rounds, mechanism)
    total = stages[-1][1] + rounds
    # an accountant whose questions run in child processes (prv) costs about a second a point
    slow = any(get_accountant(stage[0].accountant).runs_in_child for stage in stages)
    points = SERIES_POINTS_SLOW if slow else SERIES_POINTS
    spaced = {round(total * k / points) for k in range(points + 1)} if total > points else set(range(total + 1))
    wanted = sorted(spaced | {start for _, start, _ in stages[1:] if start <= total})
    series: dict[str, list[float | None]] = {g.id: [] for g in plan.groups}
    budgets: dict[str, list[float | None]] = {g.id: [] for g in plan.groups}
    for global_round in wanted:
        stage = next(s for s in reversed(stages) if s[1] <= global_round or s is stages[0])
        stage_plan, start, _ = stage
        for group_id in series:
            try:
                group = stage_plan.group(group_id)
            except KeyError:  # added later: nothing spent before it existed
                series[group_id].append(0.0)
                budgets[group_id].append(None)
                continue
            series[group_id].append(
                plan_ledger.epsilon_spent(stage_plan, group, max(0, global_round - start), mechanism=mechanism)
            )
            budgets[group_id].append(stage_plan.scenario.group(group_id).epsilon)  # the budget its scenario fixes
    return list(rows), SpentSeries(rounds=wanted, epsilon_spent=series, budget=budgets)


def plan_view(state: AppState, plan_id: str) -> ConsolePlan:
    """A plan of any unit: its ledger's rows (``GET /v1/plans/{id}/ledger``) as budget, spent
    and remaining under its unit's label, and its lineage. Which fields of the ledger those
    are is the unit's (``entities``, ``budget_field``, ``figure``): nothing here names a unit."""
    with state.sessions() as session:
        record = plan_service.load_record(session, plan_id)
        chain = ledger_service.plan_chain(session, record)
        counted = {r.id: ledger_service.rounds_counted(session, r) for r in chain}
        child = plan_service.child_of(session, plan_id)
    unit = privacy_unit(record.privacy_unit)
    ledger = ledger_service.ledger(state, plan_id)
    rows = [
        ConsolePlanRow(id=row.id, budget=getattr(row, unit.budget_field),
                       spent=getattr(row, f"{unit.figure}_spent"), remaining=getattr(row, f"{unit.figure}_remaining"))
        for row in getattr(ledger, unit.entities)
    ]
    details = [f"{unit.label}: {unit.notion}"]
    if unit.figure == "epsilon":  # an (epsilon, delta) figure names its delta and accountant
        known = ledger.model_dump(include={"delta", "accountant"})
        details.append(f"delta={known['delta']:g}, accountant {known['accountant']}")
    lineage = [
        ConsoleLineage(id=r.id, parent_plan_id=r.parent_id, superseded_by=next_.id if next_ else child.id if child else None,
                       method=r.method, accountant=r.accountant, start_round=r.start_round, rounds=r.rounds,
                       rounds_counted=counted[r.id], created_at=r.created_at, created_by=r.created_by,
                       active=r.id == record.id and child is None)  # a re-planned plan is superseded
        for r, next_ in zip(chain, [*chain[1:], None])
    ]
    mechanism = mechanism_text(ledger.secagg_mechanism, ledger.groups) if isinstance(ledger, LedgerOut) else None
    return ConsolePlan(
        plan_id=record.id, privacy_unit=unit.name, label=unit.label, figure=unit.figure, entities=unit.entities,
        budget_field=unit.budget_field, mechanism=mechanism,
        unit=", ".join(details), rounds_counted=record.start_round + counted[record.id], rows=rows, lineage=lineage,
    )


def comparison(state: AppState, population_id: str) -> ConsoleComparison:
    """Every method on the population as it is now (not stored): rows and the recommendation."""
    with state.sessions() as session:
        population = population_service.get_population(session, population_id)
    plan = plan_service.compute_plan(state, population.scenario, "compare")
    return ConsoleComparison(unit=unit_label(plan), recommendation=plan.recommendation,
                             comparison=plan.comparison or [])
