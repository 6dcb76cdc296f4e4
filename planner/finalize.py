"""From a design to a plan: exact calibration, verification, secure aggregation, objective.

docs/planning.md §8. Every sigma in the plan is an exact calibration at the chosen rate
(never an interpolated value); a pool's noise is the maximum its members need; every
group's epsilon is re-computed over its full phase list and compared with its target. A
verification above the target is a bug and raises; it is never returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from accounting.accountants import AccountantName, get_accountant
from accounting.errors import InfeasibleError
from accounting.events import Phase, PoissonSampledSkellam
from accounting.results import EpsilonReport
from accounting.validation import NOISE_MULTIPLIER_MAX, NOISE_MULTIPLIER_MIN
from planner import calibration
from planner import ledger as plan_ledger
from planner.adaptive_clip import adaptive_pools
from planner.calibration import GroupCalibration
from planner.discrete import with_blocks
from planner.fedhdp import ditto_lambda_prediction, fedhdp_prediction
from planner.learnability import noise_to_signal
from planner.methods import METHODS, Design
from planner.objective import objective_terms
from planner.problem import Problem
from planner.schema import GroupPlan, Plan, PoolPlan, Predicted
from planner.secagg import planned_participants, pool_thresholds, secagg_graph
from planner.verify import VERIFY_SLACK

# How often a prv plan raises a group's sigma after a failed verification before using rdp.
_PRV_ATTEMPTS = 3


class PlanVerificationError(AssertionError):
    """A verified epsilon exceeded its target: a bug in calibration or planning, never a user error."""


@dataclass(frozen=True)
class History:
    """Per-group state carried from parent plans (re-planning; docs/planning.md §9)."""

    statuses: tuple[str, ...]
    unprotected_rounds: tuple[int, ...]
    start_round: int = 0
    parent_plan_id: str | None = None
    # the parent's run executed the discrete mechanism: each group's spent Skellam events and
    # the wrap-around probability they charged to delta (planner.discrete.spent_record); empty
    # for a continuous parent
    spent_discrete: tuple[tuple[PoissonSampledSkellam, ...], ...] = ()
    spent_wrap: tuple[float, ...] = ()


@dataclass(frozen=True)
class PendingFigures:
    """What a plan's ``epsilon_rdp`` / ``epsilon_tight`` are computed from (docs/ledger.md §3):
    the verified groups' histories and the figures their verification already gave
    (``known[accountant][i]``), so a plan can be finalised first and given its figures only
    if it is kept (``compare`` ranks every method and keeps one; docs/planning.md §10)."""

    group_ids: tuple[str, ...]
    histories: tuple[tuple[Phase, ...], ...]
    delta: float
    known: dict[AccountantName, list[float | None]]

    def apply(self, plan: Plan) -> Plan:
        """``plan`` with, under the skellam mechanism, each noised pool's discrete block and the
        Skellam mechanism's figures for the groups it prices (:func:`with_discrete`,
        docs/secure-aggregation.md §Discrete noise), and both figures of every other verified
        group (``planner.ledger.epsilon_figures``): like the figures, only a plan that is kept
        needs the blocks, so ``compare`` calibrates the recommended plan's pools alone, and a
        group's Gaussian figures are not composed where its Skellam ones are stated."""
        stated, executed = _blocks_and_figures(plan)
        wanted = [i for i, group_id in enumerate(self.group_ids) if group_id not in executed]
        figures: dict[str, plan_ledger.EpsilonFigures] = {}
        if wanted:
            known = {name: [values[i] for i in wanted] for name, values in self.known.items()}
            computed = plan_ledger.epsilon_figures([self.histories[i] for i in wanted], self.delta, known)
            figures = {self.group_ids[i]: both for i, both in zip(wanted, computed, strict=True)}
        groups = [
            g.model_copy(update={"epsilon_rdp": figures[g.id].rdp, "epsilon_tight": figures[g.id].tight})
            if g.id in figures else g
            for g in stated.groups
        ]
        return _predicting(_stating(stated.model_copy(update={"groups": groups}), executed, both=True))


def with_discrete(plan: Plan) -> Plan:
    """``plan`` with each noised pool's ``discrete`` block under the skellam mechanism
    (``planner.discrete.with_blocks``; docs/secure-aggregation.md §Discrete noise), and every
    group whose run that mechanism prices by Skellam events stating that mechanism's figures
    (docs/ledger.md §3, "What a plan states"): ``epsilon_spent``, and ``epsilon_rdp`` and
    ``epsilon_tight`` where the plan states them, of its full-run ledger
    (``planner.ledger.executed_figures``: its Skellam events at delta less the wrap-around
    charge, the block's certified figure reused), ``sound`` only if that figure meets its
    budget too, and no PRV bound (prv cannot account the Skellam event). Every other group,
    and a plan of the continuous mechanism, is unchanged; the continuous Gaussian's figure at
    equal noise stays in each block (``gaussian_epsilon``)."""
    stated, executed = _blocks_and_figures(plan)
    return _predicting(_stating(stated, executed, both=False))


def _blocks_and_figures(plan: Plan) -> tuple[Plan, dict[str, plan_ledger.StatedFigures]]:
    """``plan`` with its blocks (``with_blocks``) and the figures of the groups they price (none
    without a block: the continuous mechanism, or no block calibrated, which its warning says)."""
    stated, certified = with_blocks(plan)
    if all(pool.discrete is None for pool in stated.pools):
        return stated, {}
    return stated, plan_ledger.executed_figures(stated, certified)


def _stating(plan: Plan, executed: dict[str, plan_ledger.StatedFigures], *, both: bool) -> Plan:
    """``plan`` whose groups in ``executed`` that state a figure state those instead (``both``:
    ``epsilon_rdp`` and ``epsilon_tight`` too; else only where the plan states them). A group
    marked ``sound: false`` (a raw closed-form sigma that rdp refutes: the plan is not run, the
    verifier refuses it) keeps its verified figure, which is above its budget and so above
    the Skellam figure, calibrated within it: the larger is never optimistic."""
    if not executed:
        return plan
    groups = [
        g.model_copy(update={
            "epsilon_spent": executed[g.id].spent,
            "epsilon_rdp": executed[g.id].figures.rdp if both or g.epsilon_rdp is not None else None,
            "epsilon_tight": executed[g.id].figures.tight if both or g.epsilon_tight is not None else None,
            "epsilon_spent_prv_upper": None,
            "sound": g.epsilon is not None and executed[g.id].spent <= float(g.epsilon) * (1 + VERIFY_SLACK),
        })
        if g.id in executed and g.epsilon_spent is not None and g.sound else g
        for g in plan.groups
    ]
    return plan.model_copy(update={"groups": groups})


def noise_to_signal_warning(ratio: float | None) -> str | None:
    """The plan's warning for a predicted noise-to-signal ratio above 1 (docs/planning.md §13)."""
    if ratio is None or not ratio > 1:
        return None
    return (
        f"predicted noise-to-signal ratio {ratio:.3g} > 1: each round's aggregated noise is larger than "
        "the aggregate of every sampled client's update at its clip norm, so the model is unlikely to "
        "learn; more clients per round, a smaller model or larger budgets lower it (docs/planning.md §13)"
    )


def _predicting(plan: Plan) -> Plan:
    """``plan`` whose ``predicted.noise_to_signal`` (and its warning) counts the noise its pools'
    blocks add (``planner.learnability.update_noise_std``; docs/planning.md §13): the prediction
    is made with the design, before the blocks exist, from the continuous Gaussian, whose noise
    the Skellam block's can exceed several times (the rdp route). A plan without blocks is
    returned as it is. ``noise_energy`` and the objective stay the design's (the methods
    minimise and ``compare`` ranks them on the continuous noise, docs/planning.md §3)."""
    if all(pool.discrete is None for pool in plan.pools):
        return plan
    before = plan.predicted.noise_to_signal
    ratio = noise_to_signal(plan.groups, plan.pools, plan.scenario.model_dim)
    if ratio == before:
        return plan
    old, new = noise_to_signal_warning(before), noise_to_signal_warning(ratio)
    warnings = [new if w == old else w for w in plan.warnings if new is not None or w != old]
    if new is not None and new not in warnings:
        warnings.append(new)
    return plan.model_copy(update={
        "predicted": plan.predicted.model_copy(update={"noise_to_signal": ratio}),
        "warnings": warnings,
    })


def finalize(problem: Problem, design: Design, history: History | None = None) -> Plan:
    """The plan of ``design``: calibrate, verify, add secure aggregation and J (docs/planning.md §8)."""
    plan, figures = finalize_without_figures(problem, design, history)
    return figures.apply(plan)


def finalize_without_figures(
    problem: Problem, design: Design, history: History | None = None
) -> tuple[Plan, PendingFigures]:
    """:func:`finalize`'s plan with ``epsilon_rdp`` / ``epsilon_tight`` still null, and what
    they are computed from (``PendingFigures.apply``): the tight figure of an rdp plan is
    one PLD composition per group, which a plan that is only ranked never shows."""
    s = problem.scenario
    n = problem.n_groups
    hist = history or History(statuses=tuple("active" for _ in range(n)), unprotected_rounds=tuple(0 for _ in range(n)))
    rates = np.clip(np.asarray(design.rates, dtype=float), 0.0, 1.0)
    rates[problem.frozen] = 0.0
    for g in np.flatnonzero(~np.isfinite(rates)).tolist():
        # a budget whose noise leaves float range (closed_form's sigma / q at epsilon 1e-300 squares
        # to inf): refused naming its group, not as a sampling_rate the scenario does not have
        raise InfeasibleError(
            f"{problem.label(g)} has no finite sampling rate: the noise its budget needs under "
            f"{s.accountant} is out of floating-point range; give it a larger epsilon"
        )
    warnings = list(problem.notes) + list(design.warnings)
    noisy = problem.active_private & (rates > 0) & (design.noise_rule != "none")
    idx = np.flatnonzero(noisy)
    labels = [problem.label(g) for g in range(n)]
    accountants: dict[int, AccountantName] = {int(g): s.accountant for g in idx}
    required: dict[int, GroupCalibration] = {}

    for attempt in range(_PRV_ATTEMPTS + 1):
        _calibrate(problem, rates, idx, accountants, required, labels)
        pool_std, clip = _pool_noise(problem, design, rates, required)
        phases, reports = _verify(problem, design, rates, pool_std, clip, accountants, required)
        # An accountant with a fallback (prv) can fail, or disagree slightly between calibration
        # and verification; the others cannot, and a miss of theirs is a bug (raised below).
        retry = [g for g, (_, ok) in reports.items() if not ok and g in accountants and _fallback(accountants[g])]
        if not retry:
            break
        for g in retry:
            report, _ = reports[g]
            verified = float(report.epsilon)  # type: ignore[attr-defined]
            failing, fallback = accountants[g], _fallback(accountants[g])
            assert fallback is not None
            if report.fallback or attempt == _PRV_ATTEMPTS:  # type: ignore[attr-defined]
                # it could not verify (or keeps disagreeing): calibrate with its fallback (conservative)
                accountants[g] = fallback
                required.pop(g, None)
                warnings.append(
                    f"{labels[g]}: {failing} could not verify its epsilon; calibrated with {fallback} instead"
                )
                continue
            # PRV's discretisation differs between the calibration and the verification of the
            # whole history (its error scales with a reference epsilon), so the two upper bounds
            # can differ by a fraction of a per cent. Raise sigma, never lower it, and re-verify.
            effective = float(pool_std[_pool_index(design, g)] / clip[g])
            bump = 1.0 + 1.5 * (verified / float(problem.epsilons[g]) - 1.0) + 1e-4
            required[g] = replace(required[g], noise_multiplier=effective * bump, epsilon=None)
            warnings.append(
                f"{labels[g]}: {failing} verification of its history gave epsilon {verified:.6g} above its target; "
                f"sigma raised by {100 * (bump - 1):.2g}% and re-verified"
            )

    for g in idx.tolist():
        cal = required[g]
        if cal.replaced:
            warnings.append(
                f"{labels[g]}: the closed-form sigma misses its target under rdp at q={rates[g]:.4g}; "
                "replaced by the rdp sigma (set raw_closed_form to keep the formula)"
            )
        if not cal.sound:
            warnings.append(
                f"{labels[g]}: raw closed-form sigma does not meet epsilon under rdp; this group is "
                "marked sound: false"
            )
        if cal.fallback:
            warnings.append(
                f"{labels[g]}: {s.accountant} failed ({cal.reason}); its sigma comes from {_fallback(s.accountant)}"
            )
        if cal.warning:
            warnings.append(f"{labels[g]}: {cal.warning}")

    group_plans = _group_plans(problem, design, rates, pool_std, clip, required, phases, reports, hist, warnings)
    figures = _pending_figures(problem, design, reports, phases)
    pool_plans, pool_expected = _pool_plans(problem, design, rates, pool_std, warnings)
    # adaptive clipping: each pool's sigma_Delta and sigma_b for its z_eff (docs/planning.md §15)
    pool_plans = adaptive_pools(s, pool_plans, {g.id: g.clip_norm for g in group_plans if g.sampling_rate > 0})
    terms = objective_terms(
        pool_expected,
        pool_std,
        np.asarray(design.keep_ratios, dtype=float),
        expected_clients=problem.expected_clients,
        model_dim=s.model_dim,
        update_norm_bound=s.objective_update_norm,
        sparsity_exponent=s.sparsity_exponent,
        bias_weight=s.bias_weight,
    )
    warnings.extend(_bound_warnings(problem, design, rates))
    ratio = noise_to_signal(group_plans, pool_plans, s.model_dim)
    loud = noise_to_signal_warning(ratio)
    if loud is not None:
        warnings.append(loud)
    # the skellam mechanism's blocks are added with the figures, to a plan that is kept
    # (PendingFigures.apply), and the ratio then counts their noise (_predicting)
    plan = Plan(
        method=design.method,
        accountant=s.accountant,
        scenario=s,
        rounds=problem.rounds,
        start_round=hist.start_round,
        parent_plan_id=hist.parent_plan_id,
        groups=group_plans,
        pools=pool_plans,
        predicted=Predicted(
            noise_energy=terms.noise_energy,
            sparsification_error=terms.sparsification_error,
            objective=terms.objective,
            noise_to_signal=ratio,
            fedhdp=fedhdp_prediction(s, group_plans, pool_plans),
            ditto_lambdas=ditto_lambda_prediction(s, group_plans, pool_plans),
        ),
        warnings=_unique(warnings),
    )
    return plan, figures


def _fallback(accountant: AccountantName) -> AccountantName | None:
    return get_accountant(accountant).fallback


def _pool_index(design: Design, group: int) -> int:
    return next(p for p, members in enumerate(design.pools) if group in members)


def _calibrate(
    problem: Problem,
    rates: np.ndarray,
    idx: np.ndarray,
    accountants: dict[int, AccountantName],
    required: dict[int, GroupCalibration],
    labels: list[str],
) -> None:
    """Exact sigma for every noisy group not yet calibrated, batched per accountant."""
    s = problem.scenario
    todo = [int(g) for g in idx if int(g) not in required]
    for name in sorted({accountants[g] for g in todo}):
        batch = [g for g in todo if accountants[g] == name]
        results = calibration.calibrate_groups(
            rates[batch],
            problem.epsilons[batch],
            problem.rounds,
            s.delta,
            name,
            [problem.spent[g] for g in batch],
            s.raw_closed_form,
            [labels[g] for g in batch],
        )
        required.update(zip(batch, results))


def _pool_noise(
    problem: Problem, design: Design, rates: np.ndarray, required: dict[int, GroupCalibration]
) -> tuple[np.ndarray, np.ndarray]:
    """Noise std per pool and clip norm per group (docs/planning.md §2).

    ``max`` rule: s_P = max over sampled private members of C_g sigma_g. ``scale`` rule
    (idp_scale): one std for the pool and per-group clips C_g = s / sigma_g, with s set so
    that the members' mean clip (weighted by N_g) equals their mean configured clip.
    """
    std = np.zeros(len(design.pools))
    clip = np.asarray(design.clip_norms, dtype=float).copy()
    for p, members in enumerate(design.pools):
        noisy = [g for g in members if g in required]
        if not noisy:
            continue
        sigma = np.array([required[g].noise_multiplier for g in noisy])
        if design.noise_rule == "scale":
            n = problem.num_clients[noisy]
            base = problem.clip_norms[noisy]
            std[p] = float(np.dot(n, base) / np.dot(n, 1.0 / sigma))
            clip[noisy] = std[p] / sigma
        else:
            std[p] = float(np.max(clip[noisy] * sigma))
    return std, clip


def _verify(
    problem: Problem,
    design: Design,
    rates: np.ndarray,
    pool_std: np.ndarray,
    clip: np.ndarray,
    accountants: dict[int, AccountantName],
    required: dict[int, GroupCalibration],
) -> tuple[dict[int, list[Phase]], dict[int, tuple[object, bool]]]:
    """Each private group's full history and its verified epsilon (docs/planning.md §8).

    A group that runs at exactly the sigma its calibration evaluated last (a pool of one, or
    the member that sets the pool's noise) has that evaluation's epsilon as its verified
    one where it is the verifier's own answer for the same history bit for bit
    (``GroupCalibration.epsilon``, pld), and so has every group with the same history: each
    distinct history is composed once (``calibration.verify_groups`` dedupes the rest).
    """
    s = problem.scenario
    pool_of = {g: p for p, members in enumerate(design.pools) for g in members}
    phases: dict[int, list[Phase]] = {}
    checked: list[int] = []
    known: dict[int, EpsilonReport] = {}
    delta = float(s.delta)
    for g in range(problem.n_groups):
        history = list(problem.spent[g])
        if g in accountants:
            effective = float(pool_std[pool_of[g]] / clip[g])
            if not NOISE_MULTIPLIER_MIN <= effective <= NOISE_MULTIPLIER_MAX:
                # a budget at the edge of its domain (closed_form at epsilon 1e-300: sigma about
                # 1e299) asks for noise outside every accountant's domain: refused naming the
                # group, not as a noise_multiplier the scenario does not have
                raise InfeasibleError(
                    f"{problem.label(g)} needs noise multiplier {effective:.3g} under {accountants[g]}, outside "
                    f"the accountants' domain [{NOISE_MULTIPLIER_MIN:g}, {NOISE_MULTIPLIER_MAX:g}] (its noise is "
                    "out of floating-point range); give it a larger epsilon"
                )
            history.append(Phase(sampling_rate=float(rates[g]), noise_multiplier=effective, steps=problem.rounds))
            cal = required.get(g)
            verifier = get_accountant(accountants[g]).verified_by
            if cal is not None and cal.epsilon is not None and cal.noise_multiplier == effective:
                known[g] = EpsilonReport(epsilon=cal.epsilon, delta=delta, accountant=verifier, accountant_used=verifier)
        phases[g] = history
        if problem.private[g] and history:
            checked.append(g)
    # a group of the same pool at the same rate has the same history: that answer too
    shared = {(k.accountant, calibration.history_key(phases[g])): k for g, k in known.items()}
    for g in checked:
        if g in accountants and g not in known:
            verifier = get_accountant(accountants[g]).verified_by
            report = shared.get((verifier, calibration.history_key(phases[g])))
            if report is not None:
                known[g] = report
    todo = [g for g in checked if g not in known]
    verified = dict(zip(todo, calibration.verify_groups(
        [phases[g] for g in todo], s.delta, [accountants.get(g, s.accountant) for g in todo]
    ) if todo else [], strict=True))
    reports: dict[int, tuple[object, bool]] = {}
    for g in checked:
        report = known.get(g) or verified[g]
        reports[g] = (report, report.epsilon <= float(problem.epsilons[g]) * (1 + VERIFY_SLACK))
    return phases, reports


def _group_plans(
    problem: Problem,
    design: Design,
    rates: np.ndarray,
    pool_std: np.ndarray,
    clip: np.ndarray,
    required: dict[int, GroupCalibration],
    phases: dict[int, list[Phase]],
    reports: dict[int, tuple[object, bool]],
    hist: History,
    warnings: list[str],
) -> list[GroupPlan]:
    pool_of = {g: p for p, members in enumerate(design.pools) for g in members}
    prv_upper_of = _prv_report(problem, design, reports, phases, warnings)
    plans = []
    for g in range(problem.n_groups):
        p = pool_of[g]
        cal = required.get(g)
        sound = cal.sound if cal is not None else True
        eps_spent = None
        prv_upper = None
        if problem.private[g] and g in reports and design.noise_rule != "none":
            report, ok = reports[g]
            eps_spent = float(report.epsilon)  # type: ignore[attr-defined]
            if not ok and g in required and sound:
                raise PlanVerificationError(
                    f"{problem.label(g)}: verified epsilon {eps_spent:.6g} exceeds its target "
                    f"{problem.epsilons[g]:g} at q={rates[g]:.6g}, sigma={pool_std[p] / clip[g]:.6g}"
                )
            if not ok and g not in required and hist.statuses[g] != "exhausted":
                warnings.append(
                    f"{problem.label(g)}: its spent history already gives epsilon {eps_spent:.4g}, above "
                    "its budget; it is not sampled again"
                )
            prv_upper = prv_upper_of.get(g)
        plans.append(
            GroupPlan(
                id=problem.ids[g],
                epsilon=None if np.isnan(problem.epsilons[g]) else float(problem.epsilons[g]),
                num_clients=int(problem.num_clients[g]),
                pool=f"P{p + 1}",
                sampling_rate=float(rates[g]),
                expected_clients=float(rates[g] * problem.num_clients[g]),
                aggregation_weight=float(rates[g] * problem.num_clients[g] / problem.expected_clients),
                clip_norm=float(clip[g]),
                noise_multiplier_required=cal.noise_multiplier if cal is not None else None,
                effective_noise_multiplier=(
                    float(pool_std[p] / clip[g]) if cal is not None else (0.0 if rates[g] > 0 else None)
                ),
                epsilon_spent=eps_spent,
                epsilon_spent_prv_upper=prv_upper,
                sound=sound,
                phases=phases[g],
                spent_phase_count=len(problem.spent[g]),
                unprotected_rounds=hist.unprotected_rounds[g],
                status=hist.statuses[g],
                spent_discrete=list(hist.spent_discrete[g]) if hist.spent_discrete else [],
                spent_wrap_probability=hist.spent_wrap[g] if hist.spent_wrap else 0.0,
            )
        )
    return plans


def _pending_figures(
    problem: Problem,
    design: Design,
    reports: dict[int, tuple[object, bool]],
    phases: dict[int, list[Phase]],
) -> PendingFigures:
    """Every verified group's history for its rdp and tight epsilon (docs/ledger.md §3), with
    its verified figure where the verifying accountant is one of the two (reused, not recomputed)."""
    wanted = [] if design.noise_rule == "none" else [
        g for g in range(problem.n_groups) if problem.private[g] and g in reports and phases[g]
    ]
    known: dict[AccountantName, list[float | None]] = {}
    for i, g in enumerate(wanted):
        report: EpsilonReport = reports[g][0]  # type: ignore[assignment]
        known.setdefault(report.accountant, [None] * len(wanted))[i] = float(report.epsilon)
    return PendingFigures(
        group_ids=tuple(problem.ids[g] for g in wanted),
        histories=tuple(tuple(phases[g]) for g in wanted),
        delta=float(problem.scenario.delta),
        known=known,
    )


def _prv_report(
    problem: Problem,
    design: Design,
    reports: dict[int, tuple[object, bool]],
    phases: dict[int, list[Phase]],
    warnings: list[str],
) -> dict[int, float | None]:
    """``report_prv``: every reported group's PRV upper bound, in one call with one deadline."""
    s = problem.scenario
    if not s.report_prv or design.noise_rule == "none":
        return {}
    wanted = [g for g in range(problem.n_groups) if problem.private[g] and g in reports and phases[g]]
    if not wanted:
        return {}
    uppers, reason = calibration.prv_uppers([phases[g] for g in wanted], s.delta)
    if reason:
        warnings.append(reason)
    return dict(zip(wanted, uppers))


def _pool_plans(
    problem: Problem, design: Design, rates: np.ndarray, pool_std: np.ndarray, warnings: list[str]
) -> tuple[list[PoolPlan], np.ndarray]:
    s = problem.scenario
    plans = []
    expected = np.zeros(len(design.pools))
    thresholds = pool_thresholds(
        [(problem.num_clients[members], rates[members]) for members in design.pools], s.dropout_rate, s.abort_probability
    )
    for p, members in enumerate(design.pools):
        n = problem.num_clients[members]
        q = rates[members]
        expected[p] = float(np.dot(n, q))
        private = bool(np.any(problem.private[members])) and design.noise_rule != "none"
        threshold = thresholds[p]
        if expected[p] > 0 and threshold is not None:
            m, abort = threshold.threshold, threshold.abort_probability
            inflation = threshold.expected_survivors / m
            if not threshold.meets_target:
                warnings.append(
                    f"pool P{p + 1}: even a threshold of 1 aborts with probability {abort:.3g} per round, "
                    f"above abort_probability={s.abort_probability:g}"
                )
        else:
            m, abort, inflation = 1, 1.0, 0.0
        if private and 0 < expected[p] < s.min_clients_per_pool:
            warnings.append(
                f"pool P{p + 1} ({', '.join(problem.ids[g] for g in members)}) expects "
                f"{expected[p]:.3g} clients a round, below min_clients_per_pool={s.min_clients_per_pool}"
            )
        graph = secagg_graph(planned_participants(expected[p]), s.dropout_rate, s.abort_probability)
        plans.append(
            PoolPlan(
                id=f"P{p + 1}",
                groups=[problem.ids[g] for g in members],
                noise_multiplier=float(pool_std[p] / s.clip_norm),
                noise_std=float(pool_std[p]),
                keep_ratio=float(design.keep_ratios[p]),
                expected_clients=expected[p],
                secagg_threshold=int(m),
                noise_share_std=float(pool_std[p] / np.sqrt(m)),
                abort_probability=float(abort),
                expected_noise_inflation=float(inflation),
                secagg_mode=graph.mode,
                secagg_participants=graph.num_clients,
                secagg_neighbours=graph.neighbours,
                secagg_share_threshold=graph.share_threshold,
                secagg_corrupt_fraction=graph.corrupt_fraction,
                secagg_dropout_fraction=graph.dropout_fraction,
            )
        )
    return plans, expected


def _bound_warnings(problem: Problem, design: Design, rates: np.ndarray) -> list[str]:
    """Rates pinned at a bound of an optimised method (the optimum may want to go further)."""
    method = METHODS[design.method]
    if not method.optimises_rates:
        return []
    out = []
    m = problem.scenario.min_clients_per_pool
    for g in np.flatnonzero(problem.active).tolist():
        q = rates[g]
        floor = problem.min_rates[g]
        if method.minimises_objective and problem.private[g] and [g] in design.pools:
            floor = max(floor, m / problem.num_clients[g])
        if floor > 0 and q <= floor * (1 + 1e-9):
            out.append(f"{problem.label(g)}: sampling rate at its lower bound {floor:.4g}")
        elif q >= 1.0 - 1e-12:
            out.append(f"{problem.label(g)}: sampling rate at its upper bound 1")
    if method.minimises_objective:
        opted = np.flatnonzero(problem.active & ~problem.private & (rates > 0))
        if opted.size and np.any(problem.active_private):
            out.append(
                "opted-out groups carry no noise, so the objective prefers sampling them; set "
                "min_sampling_rate on private groups to keep them represented"
            )
    return out


def _unique(items: Sequence[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)
