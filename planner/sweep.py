"""How every group's optimal rate moves as one group's budget sweeps (docs/planning.md §11).

This is the paper's sampling-rate figure: the other groups' budgets stay fixed, one
group's epsilon takes each value in turn, and the plan's rates are recorded. The PNG is
drawn with matplotlib's Agg backend (imported only when a plot is asked for).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from accounting.errors import GdpfedError, InvalidInputError
from planner.plan import check_method, make_plan
from planner.schema import AccountantName, PlanMethod, Scenario


class SweepResult(BaseModel):
    """Rates (and J) of every group, one entry per swept epsilon; None where infeasible."""

    group_id: str
    method: PlanMethod
    accountant: AccountantName = Field(description="the accountant every point is calibrated with (the scenario's)")
    epsilons: list[float]
    sampling_rates: dict[str, list[float | None]] = Field(description="group id -> q_g per swept epsilon")
    expected_clients: dict[str, list[float | None]] = Field(description="group id -> q_g N_g per swept epsilon")
    noise_energy: list[float | None]
    objective: list[float | None]
    errors: list[str | None] = Field(description="why a point is infeasible (null where it is not)")


def sweep(
    scenario: Scenario, group_id: str, epsilons: Sequence[float], method: PlanMethod = "gdpfed_plus"
) -> SweepResult:
    """Plan ``scenario`` once per value of ``group_id``'s epsilon (docs/planning.md §11)."""
    if not isinstance(scenario, Scenario):
        scenario = Scenario.model_validate(scenario)
    scenario.group(group_id)  # InvalidInputError("group", ...) for an unknown id
    check_method(method)
    values = [swept_epsilon(value, i) for i, value in enumerate(epsilons)]
    if not values:
        raise InvalidInputError("epsilons", "give at least one epsilon")
    ids = [g.id for g in scenario.groups]
    rates: dict[str, list[float | None]] = {i: [] for i in ids}
    clients: dict[str, list[float | None]] = {i: [] for i in ids}
    energy: list[float | None] = []
    objective: list[float | None] = []
    errors: list[str | None] = []
    for value in values:
        groups = [g.model_copy(update={"epsilon": value}) if g.id == group_id else g for g in scenario.groups]
        point = scenario.model_copy(update={"groups": groups})
        try:
            # a sweep reads the design only: no clients_needed, no epsilon_rdp / epsilon_tight
            plan = make_plan(point, method, clients_needed=False, figures=False)
        except GdpfedError as exc:
            for i in ids:
                rates[i].append(None)
                clients[i].append(None)
            energy.append(None)
            objective.append(None)
            errors.append(exc.message)
            continue
        for g in plan.groups:
            rates[g.id].append(g.sampling_rate)
            clients[g.id].append(g.expected_clients)
        energy.append(plan.predicted.noise_energy)
        objective.append(plan.predicted.objective)
        errors.append(None)
    return SweepResult(
        group_id=group_id,
        method=method,
        accountant=scenario.accountant,
        epsilons=values,
        sampling_rates=rates,
        expected_clients=clients,
        noise_energy=energy,
        objective=objective,
        errors=errors,
    )


def plot_sweep(result: SweepResult, path: str | Path, *, watermark: str | None = None) -> Path:
    """A PNG with one line per group: its optimal rate against the swept epsilon;
    ``watermark`` (e.g. the experiments' smoke-size mark) is written across it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    out = Path(path)
    figure, axes = plt.subplots(figsize=(6, 4))
    try:
        for group_id, series in result.sampling_rates.items():
            points = [(e, q) for e, q in zip(result.epsilons, series) if q is not None]
            if points:
                xs, ys = zip(*points)
                axes.plot(xs, ys, marker="o", label=group_id)
        axes.set_xscale("log")
        axes.set_xticks(result.epsilons)
        axes.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        axes.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axes.set_xlabel(f"epsilon of group {result.group_id}")
        axes.set_ylabel("sampling rate q")
        axes.set_title(f"{result.method}: optimal sampling rates")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
        figure.tight_layout()
        if watermark:
            figure.text(0.5, 0.5, watermark, ha="center", va="center", rotation=20, fontsize=22,
                        color="red", alpha=0.35, fontweight="bold", zorder=10)
        try:
            figure.savefig(out, format="png", dpi=120)
        except OSError as exc:
            raise InvalidInputError("plot", f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        plt.close(figure)
    return out


def swept_epsilon(value: object, index: int) -> float:
    """The sweep's ``index``-th epsilon as a float: a positive finite number, else refused naming
    ``epsilons[index]`` (the command line renames it ``--epsilons``; docs/planning.md §11)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"epsilons[{index}]", f"not a number: {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
        raise InvalidInputError(f"epsilons[{index}]", f"must be a positive finite number, got {value!r}")
    return number
