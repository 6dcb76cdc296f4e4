"""Human-readable text for plans, comparisons and sweeps (what ``gdpfed plan`` prints)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from planner import ledger as plan_ledger
from planner.adaptive_clip import initial_clip_norm
from planner.schema import CLIENT_NOTION, MECHANISM_LABELS, Plan
from planner.secagg import graph_and_reason, graph_label, planned_participants


def plan_text(plan: Plan) -> str:
    """Groups, pools, predicted terms, warnings and (for compare) the comparison table."""
    lines = [
        f"plan: method={plan.method} accountant={plan.accountant} rounds={plan.rounds} "
        f"(start round {plan.start_round}) K={plan.scenario.participation:g} delta={plan.scenario.delta:g}",
        f"privacy: {privacy_text(plan)}",
    ]
    if plan.parent_plan_id:
        lines.append(f"parent plan: {plan.parent_plan_id}")
    lines.append("")
    lines.append(
        table(
            ["group", "epsilon", "N", "q", "exp. clients", "pool", "sigma eff", "eps spent", "status"],
            [
                [
                    g.id,
                    "opted out" if g.epsilon is None else _num(g.epsilon),
                    str(g.num_clients),
                    _num(g.sampling_rate),
                    _num(g.expected_clients),
                    g.pool,
                    _num(g.effective_noise_multiplier),
                    _num(g.epsilon_spent) + ("" if g.sound else " (unsound)"),
                    g.status,
                ]
                for g in plan.groups
            ],
        )
    )
    lines.append("")
    lines.extend(pool_lines(plan))
    predicted = plan.predicted
    lines.append("")
    lines.append(
        f"predicted: noise energy {_num(predicted.noise_energy)}, sparsification error "
        f"{_num(predicted.sparsification_error)}, objective J {_num(predicted.objective)}"
    )
    lines.extend(learnability_lines(plan))
    if plan.comparison is not None:
        lines.append("")
        lines.append("comparison (one row per method; * = recommended):")
        lines.append(comparison_text(plan))
    if plan.recommendation is not None:
        lines.append("")
        lines.append(f"recommended: {plan.recommendation.method} ({plan.recommendation.reason})")
    if plan.warnings:
        lines.append("")
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in plan.warnings)
    return "\n".join(lines)


def privacy_text(plan: Plan) -> str:
    """What a client plan's figures are: the notion and the mechanism its groups' 'eps spent' is
    of (``planner.ledger.stated_mechanism``; docs/planning.md §8), as a silo plan's
    ``privacy:`` line names its notion."""
    mechanism = plan_ledger.stated_mechanism(plan)
    if mechanism == "skellam":
        how = (
            f"exact; threat model: honest-but-curious server, {plan.scenario.colluding_clients} colluding "
            "client(s), see below"
        )
    elif plan.scenario.mechanism == "skellam":
        how = "approximate: the plan states no discrete block, see warnings"
    else:
        how = "approximate"
    return f"{CLIENT_NOTION}; secagg_mechanism={mechanism} ({how})"


def pool_lines(plan: Plan) -> list[str]:
    """The pool table. With an ``adaptive_clip`` block (docs/planning.md §15) each pool also
    shows ``sigma_Delta`` (the update's noise multiplier) and ``sigma_b`` (the count's noise
    std), and its noise std and share std are those of the first round's update,
    ``sigma_Delta S^0`` and ``sigma_Delta S^0 / sqrt(m_P)`` (``S^t`` moves after it); ``sigma``
    stays ``z_eff``, the multiplier the ledger composes."""
    settings = plan.scenario.adaptive_clip
    header = ["pool", "groups", "sigma", "noise std", "keep", "exp. clients", "m_P", "share std", "abort p", "secagg"]
    if settings is not None:
        header[3:3] = ["sigma_Delta", "sigma_b"]
        header[5] = "noise std (S^0)"
    start_clip = initial_clip_norm(plan.scenario)
    rows = []
    for p in plan.pools:
        noise_std, share_std = p.noise_std, p.noise_share_std
        adaptive: list[str] = []
        if settings is not None:
            update = p.update_noise_multiplier or 0.0
            noise_std = update * start_clip
            share_std = noise_std / math.sqrt(p.secagg_threshold)
            adaptive = [_num(p.update_noise_multiplier), _num(p.count_noise_std)]
        rows.append([
            p.id,
            ",".join(p.groups) if len(p.groups) <= 4 else f"{len(p.groups)} groups",
            _num(p.noise_multiplier),
            *adaptive,
            _num(noise_std),
            _num(p.keep_ratio),
            _num(p.expected_clients),
            str(p.secagg_threshold),
            _num(share_std),
            _num(p.abort_probability),
            _graph_text(plan, p),
        ])
    lines = [table(header, rows)]
    lines.extend(discrete_lines(plan))
    if settings is not None:
        lines.append(
            f"adaptive clipping: S^0 = {_num(start_clip)}, target quantile {settings.target_quantile:g}, "
            f"learning rate {settings.learning_rate:g}; sigma is z_eff (what the ledger composes), the update "
            "gets noise std sigma_Delta S^t and the count of unclipped clients sigma_b (docs/planning.md §15)"
        )
    return lines


def _graph_text(plan: Plan, pool: Any) -> str:
    """The pool's stated graph; a full one with the reason SecAgg+ was not taken where one
    was weighed (``full (SecAgg+ k=70 saves < 4x)``, docs/secure-aggregation.md §Automatic mode)."""
    label = graph_label(pool.secagg_mode, pool.secagg_neighbours, pool.secagg_share_threshold)
    if pool.secagg_mode != "full":
        return label
    _, reason = graph_and_reason(
        planned_participants(pool.expected_clients), float(plan.scenario.dropout_rate), plan.scenario.abort_probability
    )
    return label if reason is None else f"{label} ({reason})"


def learnability_lines(plan: Plan) -> list[str]:
    """The noise-to-signal ratio and the sizes that bring it to 1 and 0.1 (docs/planning.md §13)."""
    predicted = plan.predicted
    if predicted.noise_to_signal is None:
        return []
    lines = [
        f"noise-to-signal ratio {_num(predicted.noise_to_signal)} (aggregated noise norm over the largest "
        f"aggregated update, model_dim {plan.scenario.model_dim}; above 1 the model is unlikely to learn)"
    ]
    for needed in predicted.clients_needed:
        if needed.expected_clients is None:
            lines.append(f"  to reach {needed.target:g}: {needed.note}")
            continue
        lines.append(
            f"  to reach {needed.target:g}: K = {_num(needed.expected_clients)} clients per round, population "
            f"{needed.total_clients} (this plan's rates and noise multipliers; ratio {_num(needed.noise_to_signal)})"
            + (f"; {needed.note}" if needed.note else "")
        )
    return lines


def comparison_text(plan: Plan) -> str:
    rows = []
    for row in plan.comparison or []:
        name = row.method + (" *" if row.recommended else "")
        if not row.feasible:
            rows.append([name, "infeasible", "", "", "", "", "", "", row.error or ""])
            continue
        sigmas = " ".join(f"{p.id}({','.join(p.groups)})={_num(p.noise_multiplier)}" for p in row.pools)
        rates = " ".join(f"{k}={_num(v)}" for k, v in row.sampling_rates.items())
        if len(row.pools) > 4 or sum(len(p.groups) for p in row.pools) > 6:
            sigmas = f"{len(row.pools)} pools, max {_num(max(row.noise_multipliers.values()))}"
        if len(row.sampling_rates) > 4:
            rates = f"{len(row.sampling_rates)} groups"
        rows.append([
            name, row.accountant or "", row.mechanism or "", _num(row.noise_energy), _num(row.sparsification_error), _num(row.objective),
            _num(row.noise_to_signal), sigmas, rates,
        ])
    return table(
        ["method", "acct", "mechanism", "noise energy", "sparsif. error", "J", "noise/signal", "sigma per pool (groups)",
         "q per group"],
        rows,
    )


def sweep_text(result: Any) -> str:
    ids = list(result.sampling_rates)
    header = [f"eps({result.group_id})", *[f"q[{i}]" for i in ids], "noise energy", "J"]
    rows = []
    for k, eps in enumerate(result.epsilons):
        if result.errors[k]:
            rows.append([_num(eps), *["-" for _ in ids], "-", f"infeasible: {result.errors[k]}"])
            continue
        rows.append(
            [
                _num(eps),
                *[_num(result.sampling_rates[i][k]) for i in ids],
                _num(result.noise_energy[k]),
                _num(result.objective[k]),
            ]
        )
    title = f"sweep of group {result.group_id}'s epsilon ({result.method}, accountant {result.accountant}):"
    return title + "\n" + table(header, rows)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return "\n".join(out)


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.3g}"
    return f"{value:.4g}"


def discrete_lines(plan: Plan) -> list[str]:
    """The mechanism the noised pools' secure aggregation carries (docs/secure-aggregation.md
    §Discrete noise): under skellam each pool's calibration (grid, b, rounding bound, shares,
    epsilon and its overhead over the continuous Gaussian at equal noise) and the threat model
    it assumes; under gaussian_continuous one line saying it is approximate. Nothing for a
    plan without noise."""
    if not any(p.noise_multiplier > 0 for p in plan.pools):
        return []
    pools = [p for p in plan.pools if p.discrete is not None]
    if not pools:
        reason = (
            "the plan states no discrete block (see warnings)" if plan.scenario.mechanism == "skellam"
            else "secagg_mechanism: gaussian_continuous"
        )
        return ["", f"secure aggregation noise: {MECHANISM_LABELS['gaussian_continuous']}; {reason}"]
    rows = [
        [
            p.id,
            _num(m.scale),
            str(m.bits),
            _num(m.l2_sensitivity),
            str(m.honest_survivors),
            _num(m.share_variance),
            _num(m.equivalent_noise_multiplier),
            f"{_num(m.epsilon)} ({m.accountant})",
            f"{100 * m.discretisation_overhead:.2f}%",
            f"{100 * m.overhead_vs_continuous:.2f}%",
        ]
        for p in pools
        if (m := p.discrete) is not None
    ]
    header = ["pool", "scale s", "b", "D2", "t - c", "share var", "sigma eq", "eps", "vs same bound", "vs continuous"]
    c = plan.scenario.colluding_clients
    # adaptive clipping's count coordinate (docs/secure-aggregation.md §Discrete noise, "Adaptive clipping")
    counted = [
        f"{p.id}: m = {m.count_factor}, count noise std {_num(m.count_noise_std)}"
        for p in pools
        if (m := p.discrete) is not None and m.count_factor
    ]
    count_lines = (
        [f"adaptive clipping's count coordinate (+-m per client, D2 with it sqrt(D2^2 + m^2)): {'; '.join(counted)}"]
        if counted
        else []
    )
    return [
        "",
        f"secure aggregation noise: {MECHANISM_LABELS['skellam']} (secagg_mechanism: skellam; the groups' 'eps spent' is "
        "this mechanism's, each pool's continuous Gaussian of equal noise is the 'vs continuous' column):",
        table(header, rows),
        f"threat model: honest-but-curious server, {c} colluding client(s) (colluding_clients; default 0), each "
        "pool's noise counted from its t - c honest survivors alone; randomized Hadamard rotation, conditional "
        "randomized rounding to the L2 bound D2, shares mod 2^b, wrap-around probability charged to delta",
        *count_lines,
    ]
