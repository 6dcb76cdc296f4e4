"""Hand-built plans for the trainer's tests (the plan document is the contract; these
exercise the trainer without depending on the planner's optimiser)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TextIO, cast

from accounting.events import Phase
from planner.schema import GroupPlan, Plan, PoolPlan, Predicted, Scenario


def hand_plan(
    groups: Sequence[tuple[str, float | None, int, float]],
    pools: Sequence[tuple[str, Sequence[str], float, int, float]],
    *,
    rounds: int = 10,
    clip_norm: float = 1.0,
    model_dim: int = 100,
    expected_clients: float | None = None,
    dropout_rate: float = 0.0,
    method: str = "gdpfed_plus",
    start_round: int = 0,
    delta: float = 1e-5,
    clip_norms: dict[str, float] | None = None,
) -> Plan:
    """``groups``: (id, epsilon, num_clients, sampling_rate); ``pools``: (id, group ids,
    noise_multiplier, secagg_threshold, keep_ratio).

    The result is an executable plan (``planner.verify`` accepts it): each group's phase
    uses its effective multiplier ``noise_std_P / C_g``, and a budget the mechanism would
    overspend is raised to what it spends, in the scenario as in the group (these tests
    exercise the mechanism, not the calibration; ``tests/planner/test_verify.py`` covers
    refusing overspending plans). Raised by a relative 1e-6 margin, which the group's
    ``epsilon_spent`` states too: a run's ledger (the exact rdp composition of the same
    phases) then reads 1e-6 below the plan, e.g. 4.728507067217623 against the stated
    4.72851179572469; the ledger's is the true spend, the plan's figure is the margin.
    """
    from planner.ledger import default_epsilon_fn

    clip_norms = clip_norms or {}
    total_expected = sum(n * q for _, _, n, q in groups)
    k = expected_clients if expected_clients is not None else total_expected
    pool_of = {g: pid for pid, members, *_ in pools for g in members}
    sigma_of = {pid: sigma for pid, _, sigma, _, _ in pools}

    def effective(gid: str) -> float:
        return sigma_of[pool_of[gid]] * clip_norm / clip_norms.get(gid, clip_norm)

    def budget(gid: str, eps: float | None, q: float) -> float | None:
        if eps is None or q == 0 or effective(gid) == 0:
            return eps
        spent = default_epsilon_fn([Phase(sampling_rate=q, noise_multiplier=effective(gid), steps=rounds)], delta, "rdp")
        return max(eps, spent * (1 + 1e-6))

    # the scenario fixes each group's budget, clients and clip norm (planner.schema.check_scenario_fixed)
    scenario = Scenario(
        groups=[
            {"id": gid, "epsilon": budget(gid, eps, q), "num_clients": n, "clip_norm": clip_norms.get(gid)}
            for gid, eps, n, q in groups
        ],
        delta=delta,
        rounds=start_round + rounds,
        clip_norm=clip_norm,
        model_dim=model_dim,
        expected_clients=k,
        dropout_rate=dropout_rate,
        min_clients_per_pool=1,
        accountant="rdp",  # the plan below says rdp; pld is the scenario default since issue 26
    )
    group_plans = [
        GroupPlan(
            id=gid,
            epsilon=budget(gid, eps, q),
            num_clients=n,
            pool=pool_of[gid],
            sampling_rate=q,
            expected_clients=q * n,
            aggregation_weight=q * n / k,
            clip_norm=clip_norms.get(gid, clip_norm),
            noise_multiplier_required=effective(gid) if eps is not None else None,
            effective_noise_multiplier=effective(gid) if eps is not None else None,
            epsilon_spent=budget(gid, eps, q),
            phases=(
                [Phase(sampling_rate=q, noise_multiplier=effective(gid), steps=rounds)]
                if eps is not None and q > 0 and sigma_of[pool_of[gid]] > 0 and rounds > 0
                else []
            ),
        )
        for gid, eps, n, q in groups
    ]
    pool_plans = [
        PoolPlan(
            id=pid,
            groups=list(members),
            noise_multiplier=sigma,
            noise_std=sigma * clip_norm,
            keep_ratio=keep,
            expected_clients=sum(q * n for gid, _, n, q in groups if gid in members),
            secagg_threshold=m,
            noise_share_std=sigma * clip_norm / math.sqrt(m),
            abort_probability=0.0,
            expected_noise_inflation=1.0,
        )
        for pid, members, sigma, m, keep in pools
    ]
    return Plan(
        method=method,
        accountant="rdp",
        scenario=scenario,
        rounds=rounds,
        start_round=start_round,
        groups=group_plans,
        pools=pool_plans,
        predicted=Predicted(noise_energy=0.0, sparsification_error=0.0, objective=0.0),
    )


class NullStream:
    """A non-terminal stream that discards what it is given (quiet progress output)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def quiet_progress(total_rounds: int) -> Any:
    from trainer.run.progress import Progress

    return Progress(total_rounds, 0, stream=cast(TextIO, NullStream()), use_bar=False)


def interrupt_after(total_rounds: int, rounds_done: int) -> Any:
    """Quiet progress that raises ``KeyboardInterrupt`` once ``rounds_done`` rounds are done
    (an interrupted run, to check that ``--resume`` continues it exactly)."""
    from trainer.run.progress import Progress

    class InterruptAfter(Progress):
        remaining = rounds_done

        def round_done(self, record: Any) -> None:
            super().round_done(record)
            self.remaining -= 1
            if self.remaining == 0:
                raise KeyboardInterrupt

    return InterruptAfter(total_rounds, 0, stream=cast(TextIO, NullStream()), use_bar=False)


def comparable(records: Any) -> list[dict[str, Any]]:
    """Round records without their timings (equal across runs of the same seed)."""
    return [r.model_dump(exclude={"seconds", "timing"}) for r in records]
