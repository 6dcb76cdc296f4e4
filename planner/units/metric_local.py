"""The ``metric_local`` unit: local metric (d-)privacy of each client's released model.

(docs/metric-privacy.md §4.) No trusted server: every sampled client releases its whole
locally trained model plus Laplace noise in R^n with relative noise ``nu``
(``trainer/units/metric/mechanism.py``); a release leaks ``n / nu`` within the noise radius,
and a client's leakage is that times its participations (additive composition). Groups
of clients may choose their own ``nu`` or a total leakage budget ``L``; a budget becomes a
participation cap ``floor(L nu / n)`` that the trainer enforces at selection, so the
ledger's figure is a data-independent upper bound. A leakage is not an epsilon: it has no
delta, it scales with the distance between secrets, and it is never added to or shown
beside client-level (epsilon, delta) figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from accounting.choices import SecaggMechanism
from accounting.errors import BudgetConflictError, InvalidInputError, located_validation_error
from accounting.validation import InputModel, NumbersModel
from planner import ledger
from planner.schema import FixedField, GroupId, PlanDocument, check_scenario_fixed, stated_differs
from planner.service_api import MetricGroupLedger, MetricLedgerOut
from planner.units.base import Participations, PrivacyUnit

NAME = "metric_local"
NOTION = "local metric (d-)privacy leakage per client (not an epsilon: no delta, scales with distance)"
METHOD = "metric_laplace"
# Above this leakage per participation the guarantee says nothing useful (design §4.5):
# exp(10) ~ 2e4 between neighbours at the noise radius (large models: n / nu ~ 1e5).
MEANINGLESS_LEAKAGE = 10.0

# how a release's noise radius is chosen (docs/metric-privacy.md §3.1)
RadiusRule = Literal["public", "previous_round", "own_update"]
Leakage = Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]
NoiseMultiplier = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]


# Start-up time: this unit's models build their validators on first use (defer_build), so a
# `gdpfed plan` of a client scenario, which never reads a metric document, does not pay for them.
_DEFERRED = ConfigDict(defer_build=True)


class _Strict(InputModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class MetricGroupSpec(_Strict):
    """Clients that chose the same metric-privacy preference: ``noise_multiplier`` nu,
    a total ``leakage_budget`` L per client, or both (then L only sets the cap).
    ``noise_multiplier: 0`` opts the group out (no noise, no guarantee)."""

    id: GroupId
    num_clients: int = Field(..., ge=1, le=10**9)
    noise_multiplier: NoiseMultiplier | None = Field(None, description="nu: noise norm = nu * radius; 0 = no noise")
    leakage_budget: Leakage | None = Field(None, description="L: total leakage one client may reach over the run")

    @model_validator(mode="after")
    def _one_of(self) -> MetricGroupSpec:
        if self.noise_multiplier is None and self.leakage_budget is None:
            raise ValueError(f"group {self.id}: give noise_multiplier, leakage_budget or both")
        if self.noise_multiplier == 0 and self.leakage_budget is not None:
            raise ValueError(f"group {self.id}: noise_multiplier 0 releases models unchanged and cannot meet a leakage budget")
        return self


class MetricScenario(_Strict):
    """What the metric planner needs (docs/metric-privacy.md §4)."""

    privacy_unit: Literal["metric_local"] = Field(
        "metric_local", description="local metric privacy: each client's released model is Laplace-noised on the client"
    )
    groups: list[MetricGroupSpec] = Field(..., min_length=1, max_length=10_000)
    rounds: int = Field(..., ge=1, le=10**7)
    model_dim: int = Field(..., ge=1, le=10**12, description="n: the dimension of ONE hypothesis (one model)")
    clients_per_round: int = Field(..., ge=1, description="U: clients sampled uniformly without replacement each round")
    hypotheses: int = Field(1, ge=1, le=64, description="k: models the server keeps (IFCA); 1 = FedAvg")
    radius_rule: RadiusRule = Field(
        "public",
        description="public: a configured radius (sound); previous_round: round 0 the configured radius, then one "
        "computed from the previous round's released models (sound); own_update: the client's own update norm (the paper's)",
    )
    radius: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)] | None = Field(
        None, description="the public radius r (rule public; previous_round: round 0's and the reference radius)"
    )
    min_radius: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)] | None = Field(
        None, description="previous_round: the radius never goes below this (bounds the leakage at the reference radius)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> MetricScenario:
        # each refusal is located at the field to fix (accounting.errors.located_validation_error),
        # so the CLI's and the service's one line name it rather than the whole scenario
        def refuse(field: str, message: str) -> Any:
            return located_validation_error(type(self).__name__, [((field,), message, getattr(self, field))])

        if len({g.id for g in self.groups}) != len(self.groups):
            raise refuse("groups", "group ids must be unique")
        if self.clients_per_round > self.total_clients:
            raise refuse("clients_per_round", f"{self.clients_per_round} exceeds the {self.total_clients} clients")
        if self.radius_rule in ("public", "previous_round") and self.radius is None:
            raise refuse("radius", f"radius_rule {self.radius_rule} needs a radius")
        if self.radius_rule == "previous_round" and self.min_radius is None:
            raise refuse("min_radius", "radius_rule previous_round needs a min_radius")
        if self.radius_rule != "previous_round" and self.min_radius is not None:
            raise refuse("min_radius", "applies to radius_rule previous_round only")
        if self.min_radius is not None and self.radius is not None and self.min_radius > self.radius:
            raise refuse("min_radius", f"{self.min_radius:g} exceeds the radius {self.radius:g}")
        return self

    @property
    def total_clients(self) -> int:
        return sum(g.num_clients for g in self.groups)


class MetricGroupPlan(NumbersModel):
    """One group's mechanism and the figures the ledger reports for it."""

    model_config = _DEFERRED

    id: str
    num_clients: int
    noise_multiplier: float
    leakage_budget: float | None
    leakage_per_participation: float | None = Field(description="n / nu; null when nu = 0 (no guarantee)")
    max_participations: int | None = Field(description="floor(L nu / n): the cap the trainer enforces; null = none")
    expected_participations: float = Field(description="q T with q = U / N, before the cap")
    leakage_bound: float | None = Field(description="the most any client of the group can leak over the plan's rounds")
    leakage_bound_at_radius: float | None = Field(
        None,
        description="previous_round: the most any client can leak for secrets within the reference radius r "
        "(each release leaks n r / (nu r_t) there, r_t >= min_radius); other rules: null (equal to leakage_bound "
        "under public)",
    )
    expected_noise_norm: float | None = Field(description="E||rho|| = nu r (public radius); null under own_update")
    noise_std_per_coordinate: float | None = Field(description="sqrt(n + 1) nu r / n (Prop. 3.1); null under own_update")


class MetricPlan(PlanDocument):
    """A ``metric_local`` plan: the trainer's metric mechanism executes it."""

    model_config = _DEFERRED

    privacy_unit: Literal["metric_local"] = Field(
        "metric_local", description="local metric privacy: leakages per client, never epsilons"
    )
    method: Literal["metric_laplace"]
    scenario: MetricScenario
    sampling_rate: float = Field(description="q = U / N, the chance a client is sampled in a round")
    groups: list[MetricGroupPlan]

    def scenario_fixed(self) -> Iterator[FixedField]:
        """What a metric plan's scenario fixes (docs/metric-privacy.md §4): its rounds, the
        groups (ids, in order) and each group's client count, leakage budget and, where the
        scenario gives one, its noise multiplier nu."""
        scenario = self.scenario
        yield "rounds", self.rounds, scenario.rounds - self.start_round
        yield "groups", [g.id for g in self.groups], [g.id for g in scenario.groups]
        for group, spec in zip(self.groups, scenario.groups):
            yield f"groups.{group.id}.num_clients", group.num_clients, spec.num_clients
            yield f"groups.{group.id}.leakage_budget", group.leakage_budget, spec.leakage_budget
            if spec.noise_multiplier is not None:
                yield f"groups.{group.id}.noise_multiplier", group.noise_multiplier, spec.noise_multiplier

    def group(self, group_id: str) -> MetricGroupPlan:
        for group in self.groups:
            if group.id == group_id:
                return group
        raise KeyError(group_id)


def noise_multiplier_for_budget(model_dim: int, sampling_rate: float, rounds: int, leakage_budget: float) -> float:
    """``nu = n q T / L``: the relative noise whose expected total leakage ``q T n / nu`` is ``L``
    (docs/metric-privacy.md §4)."""
    return model_dim * sampling_rate * rounds / leakage_budget


def participation_cap(model_dim: int, noise_multiplier: float, leakage_budget: float) -> int:
    """``floor(L nu / n)``: the most releases of ``n / nu`` each within ``L``; a relative
    tolerance of 1e-12 keeps exact quotients (``L nu / n = 3``) from flooring to 2."""
    quotient = leakage_budget * noise_multiplier / model_dim
    return math.floor(quotient * (1 + 1e-12))


def plan_group(scenario: MetricScenario, spec: MetricGroupSpec) -> MetricGroupPlan:
    n, rounds = scenario.model_dim, scenario.rounds
    q = scenario.clients_per_round / scenario.total_clients
    nu = spec.noise_multiplier
    if nu is None:
        assert spec.leakage_budget is not None  # the spec's validator
        nu = noise_multiplier_for_budget(n, q, rounds, spec.leakage_budget)
    cap = None if spec.leakage_budget is None else participation_cap(n, nu, spec.leakage_budget)
    bound = ledger.metric_client_leakage(n, nu, ledger.metric_participations_bound(rounds, cap))
    public = scenario.radius_rule == "public" and scenario.radius is not None
    radius = scenario.radius or 0.0
    return MetricGroupPlan(
        id=spec.id,
        num_clients=spec.num_clients,
        noise_multiplier=nu,
        leakage_budget=spec.leakage_budget,
        leakage_per_participation=ledger.metric_client_leakage(n, nu, 1),
        max_participations=cap,
        expected_participations=q * rounds,
        leakage_bound=bound,
        leakage_bound_at_radius=(
            bound * radius / scenario.min_radius
            if bound is not None and scenario.radius_rule == "previous_round" and scenario.min_radius else None
        ),
        expected_noise_norm=nu * radius if public else None,
        noise_std_per_coordinate=math.sqrt(n + 1) * nu * radius / n if public else None,
    )


def plan_metric(scenario: MetricScenario, method: str = METHOD) -> MetricPlan:
    """The metric plan of ``scenario`` (docs/metric-privacy.md §4): per group nu (given, or
    ``n q T / L``), leakage ``n / nu`` per participation, the cap ``floor(L nu / n)``, the
    worst-case leakage bound, the expected noise, and warnings."""
    if method != METHOD:
        raise InvalidInputError("method", f"metric_local plans take method {METHOD}, got {method!r}")
    groups = [plan_group(scenario, spec) for spec in scenario.groups]
    warnings = []
    for group in groups:
        if group.leakage_per_participation is None:
            warnings.append(f"group {group.id}: noise_multiplier 0 releases models unchanged: no privacy guarantee")
        elif group.leakage_per_participation > MEANINGLESS_LEAKAGE:
            warnings.append(
                f"group {group.id}: n / nu = {group.leakage_per_participation:.4g} per participation "
                f"(> {MEANINGLESS_LEAKAGE:g}): the guarantee means nothing at this model size"
            )
        if group.max_participations == 0:
            warnings.append(f"group {group.id}: its leakage budget allows no participation (cap 0)")
    if scenario.radius_rule == "previous_round":
        warnings.append(
            "radius_rule previous_round: each round's radius r_t comes from the previous round's releases (public); "
            "a release leaks n / nu within r_t, and n r / (nu r_t) within the reference radius r: see leakage_bound_at_radius"
        )
    if scenario.radius_rule == "own_update":
        warnings.append(
            "radius_rule own_update: the noise scale is each client's own update norm, which depends on its "
            "private data; the leakage n / nu is the paper's heuristic, not a d-privacy guarantee (use public)"
        )
    return MetricPlan(
        method=METHOD,
        rounds=scenario.rounds,
        scenario=scenario,
        sampling_rate=scenario.clients_per_round / scenario.total_clients,
        groups=groups,
        warnings=warnings,
    )


def verify_metric(plan: MetricPlan) -> None:
    """Re-derive every group's mechanism from the plan's own scenario and refuse a document
    whose numbers differ (``InvalidInputError`` naming the field: first those the scenario
    fixes, ``MetricPlan.scenario_fixed``, then those it gives): the trainer never trusts a
    file. A group's leakage bound never exceeds its budget (the cap sees to it)."""
    check_scenario_fixed(plan)
    if plan.start_round > 0 and plan.parent_plan_id is None:
        raise InvalidInputError("parent_plan_id", "a metric plan starting after round 0 is a re-plan and names its parent")
    expected = plan_metric(plan.scenario)
    if not math.isclose(plan.sampling_rate, expected.sampling_rate, rel_tol=1e-12):
        raise InvalidInputError(
            "sampling_rate", stated_differs(plan.sampling_rate, expected.sampling_rate, "the plan's scenario gives")
        )
    for mine, theirs in zip(plan.groups, expected.groups):
        for name in MetricGroupPlan.model_fields:
            if getattr(mine, name) != getattr(theirs, name):
                raise InvalidInputError(
                    f"groups.{mine.id}.{name}",
                    stated_differs(getattr(mine, name), getattr(theirs, name), "the plan's scenario gives"),
                )
        if mine.leakage_budget is not None and mine.leakage_bound is not None and mine.leakage_bound > mine.leakage_budget * (1 + 1e-12):
            raise InvalidInputError(f"groups.{mine.id}", "the leakage bound exceeds the budget")


def spent_metric(plan: MetricPlan, rounds_run: int) -> dict[str, float | None]:
    """Each group's worst-case client leakage after ``rounds_run`` rounds (``planner.ledger``):
    ``min(start_round + rounds_run, cap) n / nu``, an upper bound whoever was sampled; ``None`` for nu = 0."""
    return {
        group.id: ledger.metric_client_leakage(
            plan.scenario.model_dim,
            group.noise_multiplier,
            # a re-plan's cap counts the run's participations, its parents' rounds included
            ledger.metric_participations_bound(plan.start_round + rounds_run, group.max_participations),
        )
        for group in plan.groups
    }


class MetricBudgetChange(_Strict):
    """A group's new total leakage budget per client (docs/metric-privacy.md §4)."""

    id: GroupId
    leakage_budget: Leakage = Field(
        description="L from now on: the participation cap becomes floor(L nu / n) with the group's nu unchanged; "
        "refused below the largest leakage one of its clients has reached"
    )


class MetricChanges(_Strict):
    """Leakage-budget changes of a metric plan's re-plan."""

    groups: list[MetricBudgetChange] = Field(default_factory=list, max_length=10_000)

    @model_validator(mode="after")
    def _unique(self) -> MetricChanges:
        if len({g.id for g in self.groups}) != len(self.groups):
            raise ValueError("each group may be changed once")
        return self


def _median_with(values: list[int], fill: int, fill_count: int) -> float:
    """The median of ``values`` plus ``fill_count`` copies of ``fill`` (never materialised:
    a group may hold a billion clients)."""
    ordered = sorted(values)
    total = len(ordered) + fill_count
    if total == 0:
        return 0.0

    def at(k: int) -> int:  # the k-th smallest of the multiset
        below = [v for v in ordered if v < fill]
        if k < len(below):
            return below[k]
        if k < len(below) + fill_count:
            return fill
        return [v for v in ordered if v >= fill][k - len(below) - fill_count]

    middle = total // 2
    return float(at(middle)) if total % 2 else (at(middle - 1) + at(middle)) / 2


def client_counts(plan: MetricPlan, group: MetricGroupPlan, participations: Participations) -> tuple[list[int], int]:
    """The releases the ledger counts for each reported client of ``group`` and for each of its
    other clients: reported ones plus one per round without participants, within the cap
    (the trainer selects no client past it; docs/ledger.md §8)."""
    cap = group.max_participations

    def bound(count: int) -> int:
        count += participations.unknown_rounds
        return count if cap is None else min(count, max(cap, 0))

    seen = participations.counts.get(group.id, {})
    return [bound(c) for c in seen.values()], bound(0)


def most_participations(plan: MetricPlan, participations: Participations) -> dict[str, int]:
    """Each group's most releases by one client, as the ledger counts them."""
    result = {}
    for group in plan.groups:
        counted, others = client_counts(plan, group, participations)
        unseen = group.num_clients - len(counted)
        result[group.id] = max([*counted, others if unseen > 0 else 0], default=0)
    return result


def ledger_rows(plan: MetricPlan, rounds_counted: int, participations: Participations) -> dict[str, Any]:
    """The metric ledger's own fields (docs/ledger.md §8): per group, its worst-case and median
    leakage over its clients from the run's reported participations."""
    del rounds_counted  # participations (and the rounds without them) are the run's, parents included
    n = plan.scenario.model_dim
    rows = []
    for group in plan.groups:
        counted, others = client_counts(plan, group, participations)
        unseen = group.num_clients - len(counted)
        worst = max([*counted, others if unseen > 0 else 0], default=0)
        median = _median_with(counted, others, unseen)
        per = ledger.metric_client_leakage(n, group.noise_multiplier, 1)
        leak = ledger.metric_client_leakage(n, group.noise_multiplier, worst)
        rows.append(MetricGroupLedger(
            id=group.id, num_clients=group.num_clients, noise_multiplier=group.noise_multiplier,
            leakage_budget=group.leakage_budget, max_participations=group.max_participations,
            leakage_per_participation=per, clients_participated=len(counted),
            participations_max=worst, participations_median=median,
            leakage_spent=leak, leakage_median=None if per is None else per * median,
            leakage_remaining=None if group.leakage_budget is None or leak is None
            else max(group.leakage_budget - leak, 0.0),
        ))
    return {"rounds_without_participants": participations.unknown_rounds, "groups": rows}


def check_participants(plan: MetricPlan, participations: Participations, reported: dict[str, list[int]]) -> None:
    """Refuse a round's participants (docs/ledger.md §8), naming ``participants.<group>``: an
    unknown group, a client id outside the run's clients ``0 .. total_clients - 1`` (the
    trainer deals exactly the plan's clients into its groups), a client listed twice or in
    two groups (``InvalidInputError``), more distinct clients than the group holds, or a
    client whose reported releases would pass its group's participation cap
    (``BudgetConflictError``: the release would exceed the leakage budget)."""
    group_of = {c: g for g, counts in participations.counts.items() for c in counts}
    total = plan.scenario.total_clients
    listed: set[int] = set()
    for group_id, clients in reported.items():
        field = f"participants.{group_id}"
        try:
            group = plan.group(group_id)
        except KeyError:
            raise InvalidInputError(field, f"the plan has no group {group_id!r}") from None
        for client in clients:
            if not 0 <= client < total:
                raise InvalidInputError(
                    field, f"client {client} is not one of the run's {total} clients (ids 0 to {total - 1})"
                )
            if client in listed:
                raise InvalidInputError(field, f"client {client} is listed twice in this round")
            listed.add(client)
            if group_of.get(client, group_id) != group_id:
                raise InvalidInputError(field, f"client {client} released in group {group_of[client]!r} before")
        counts = participations.counts.get(group_id, {})
        new = {c for c in clients if c not in counts}
        if len(counts) + len(new) > group.num_clients:
            raise InvalidInputError(
                field, f"{len(counts) + len(new)} distinct clients would have released, but the group has {group.num_clients}"
            )
        cap = group.max_participations
        if cap is not None:
            # the reported releases only: a round whose participants are still on their way
            # (a completion queued behind the next claim) says nothing about this client, and
            # the ledger already counts such rounds as releases within the cap
            over = [c for c in clients if counts.get(c, 0) + 1 > cap]
            if over:
                raise BudgetConflictError(
                    field, f"client {over[0]} would release more than its cap of {cap} (leakage budget "
                    f"{group.leakage_budget:g}, {NOTION})",
                )


def replan_metric(
    plan: MetricPlan, rounds_done: int, changes: MetricChanges | dict[str, Any],
    participations: Participations | None = None,
    parent_plan_id: str | None = None,
    mechanism: SecaggMechanism | None = None,
) -> MetricPlan:
    """The re-plan of ``plan`` after ``rounds_done`` of its rounds (docs/metric-privacy.md §4).

    Leakages already released cannot change, so every group keeps its noise multiplier nu
    (the child's scenario states it); a new leakage budget L only moves the group's
    participation cap to ``floor(L nu / n)``, which counts every participation of the run
    (the parents' included). ``participations`` is each group's most releases by one
    client so far (the service's ledger): a budget below that client's leakage is refused
    (``BudgetConflictError`` naming ``changes.groups.<i>.leakage_budget``)."""
    del mechanism  # its rounds run no secure-aggregation noise (PrivacyUnit.secagg_mechanisms)
    if not isinstance(changes, MetricChanges):
        changes = MetricChanges.model_validate(changes)
    start, remaining = plan.remaining_rounds(rounds_done, plan.scenario.rounds)
    worst = (
        most_participations(plan, participations) if participations is not None
        else {g.id: ledger.metric_participations_bound(start, g.max_participations)
              for g in plan.groups}
    )
    budgets = {g.id: g.leakage_budget for g in plan.groups}
    n = plan.scenario.model_dim
    for index, change in enumerate(changes.groups):
        if change.id not in budgets:
            raise InvalidInputError(f"changes.groups.{index}.id", f"the plan has no group {change.id!r}")
        group = plan.group(change.id)
        if group.noise_multiplier == 0:
            raise InvalidInputError(
                f"changes.groups.{index}.leakage_budget",
                f"group {change.id} releases its models without noise (nu = 0): no leakage budget can hold",
            )
        reached = ledger.metric_client_leakage(n, group.noise_multiplier, worst[change.id]) or 0.0
        if change.leakage_budget < reached * (1 - 1e-12):
            raise BudgetConflictError(
                f"changes.groups.{index}.leakage_budget",
                f"a client of group {change.id} has already leaked {reached:.6g} ({worst[change.id]} releases of "
                f"n / nu = {n / group.noise_multiplier:.6g}; {NOTION}); a budget of {change.leakage_budget:g} is "
                "below it, and leakage released cannot be taken back",
            )
        budgets[change.id] = change.leakage_budget
    groups = [
        spec.model_copy(update={"noise_multiplier": plan.group(spec.id).noise_multiplier,
                                "leakage_budget": budgets[spec.id]})
        for spec in plan.scenario.groups
    ]
    child = plan_metric(plan.scenario.model_copy(update={"groups": groups}))
    return child.model_copy(update={
        "start_round": start, "rounds": remaining, "parent_plan_id": parent_plan_id,
    })


def describe_metric(plan: MetricPlan) -> str:
    s = plan.scenario
    lines = [
        f"metric_local plan ({NOTION})",
        # a re-plan covers the rounds after its parents' (plan.rounds), while each group's
        # figures below count the whole run's (docs/metric-privacy.md §4)
        f"  {plan.rounds} rounds"
        + (f" (rounds {plan.start_round} .. {s.rounds - 1} of the run's {s.rounds}; the group figures count all "
           f"{s.rounds})" if plan.start_round else "")
        + f", {s.clients_per_round} of {s.total_clients} clients a round (q = {plan.sampling_rate:.4g}), "
        f"k = {s.hypotheses} hypotheses of n = {s.model_dim}, radius rule {s.radius_rule}"
        + (f" (r = {s.radius:g})" if s.radius is not None and s.radius_rule == "public" else "")
        + (f" (r_0 = {s.radius:g}, then from the previous round's releases, within [{s.min_radius:g}, {s.radius:g}])"
           if s.radius_rule == "previous_round" and s.radius is not None and s.min_radius is not None else ""),
    ]
    for g in plan.groups:
        per = "none (no guarantee)" if g.leakage_per_participation is None else f"{g.leakage_per_participation:.4g}"
        cap = "no cap" if g.max_participations is None else f"cap {g.max_participations}"
        bound = "-" if g.leakage_bound is None else f"{g.leakage_bound:.4g}"
        at_radius = "" if g.leakage_bound_at_radius is None else f" ({g.leakage_bound_at_radius:.4g} within r_0)"
        lines.append(
            f"  group {g.id}: nu = {g.noise_multiplier:.4g}, leakage per participation {per}, {cap}, "
            f"expected participations {g.expected_participations:.3g}, worst-case total leakage {bound}{at_radius}"
        )
    lines += [f"  warning: {w}" for w in plan.warnings]
    return "\n".join(lines)


UNIT = PrivacyUnit(
    name=NAME,
    notion=NOTION,
    scenario_model=MetricScenario,
    plan_model=MetricPlan,
    methods=(METHOD,),
    default_method=METHOD,
    make_plan=plan_metric,
    describe=describe_metric,
    verify=verify_metric,
    spent=spent_metric,
    mechanism="metric_laplace",
    label="leakage (metric d-privacy)",
    figure="leakage",
    entities="groups",
    budget_field="leakage_budget",
    changes_model=MetricChanges,
    replan=replan_metric,
    participation_reports=True,
    wire_enums={"RadiusRule": RadiusRule},
    check_participants=check_participants,
    ledger_model=MetricLedgerOut,
    ledger_rows=ledger_rows,
)
