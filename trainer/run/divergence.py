"""Learnability at the start of a run and divergence at its end (docs/trainer.md §Divergence).

Before round 0 the trainer prints the plan's noise-to-signal ratio for the model it built
(docs/planning.md §13; it grows with the square root of the parameter count, so a model
of another size than the plan's ``model_dim`` changes it). When a round leaves the global
parameters or the test loss non-finite, the run stops after that round (its privacy is
spent and recorded) and the summary carries a ``Divergence`` with a hint built from the
run's own numbers; the command line exits with ``EXIT_DIVERGED``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from accounting.errors import GdpfedError
from planner.learnability import aggregated_noise_norm, noise_to_signal
from planner.schema import Plan

# Exit code of ``gdpfed train`` when training diverged (2: bad input, 3: reports undelivered).
EXIT_DIVERGED = 4


class Divergence(BaseModel):
    """Where and why a run stopped because its model stopped being a number."""

    round: int = Field(description="global index of the round whose result was not finite (in rounds.jsonl)")
    reason: str
    hint: str = Field(description="what to change, with this run's numbers")
    kept_round: int = Field(description="the checkpoint holds the parameters from before this round")


class TrainingDivergedError(GdpfedError):
    """Training stopped cleanly after a non-finite round (exit code 4, docs/trainer.md §CLI)."""

    exit_code = EXIT_DIVERGED


def learnability_message(plan: Plan, dim: int) -> tuple[str, bool]:
    """The start-of-run line about the plan's noise-to-signal ratio for this model; True if it is > 1."""
    ratio = noise_to_signal(plan.groups, plan.pools, dim)
    if ratio is None:
        return "the plan samples no clients: there is no signal to learn from", True
    planned = plan.scenario.model_dim
    size = f"this model's {dim:,} parameters" + (
        "" if dim == planned else f" (the plan assumed model_dim {planned:,})"
    )
    text = f"plan noise-to-signal ratio {ratio:.3g} for {size}"
    if ratio > 1:
        text += (
            ": each round's aggregated noise is larger than any update the clients can send, so the model "
            "is unlikely to learn" + _clients_needed_text(plan, dim) + " (docs/planning.md §13)"
        )
    return text, ratio > 1


def _clients_needed_text(plan: Plan, dim: int) -> str:
    for needed in plan.predicted.clients_needed:
        if needed.target == 1.0 and needed.expected_clients is not None and dim == plan.scenario.model_dim:
            return (
                f"; about {needed.expected_clients:.0f} clients per round from {needed.total_clients:,} would bring "
                "it to 1"
            )
    return ""


def divergence_hint(plan: Plan, config: Any, dim: int, nonfinite_updates: int) -> str:
    """What to change, in this run's numbers: server step, clip norm, model size, the plan's ratio."""
    ratio = noise_to_signal(plan.groups, plan.pools, dim) or 0.0
    noise = aggregated_noise_norm(plan.pools, dim, plan.scenario.participation)
    clip = plan.scenario.clip_norm
    parts = []
    if nonfinite_updates:
        parts.append(
            f"{nonfinite_updates} client(s) produced non-finite local updates this round: lower --lr "
            f"(now {config.lr:g}) or --local-steps (now {config.local_steps})"
        )
    parts.append(
        f"each round moves the parameters by server_lr x noise = {config.server_lr:g} x {noise:.3g} in noise "
        f"alone: lower --server-lr (now {config.server_lr:g}) or the plan's clip_norm (now {clip:g}; the noise "
        "scales with it)"
    )
    if ratio > 1:
        parts.append(
            f"the plan's noise-to-signal ratio is {ratio:.3g} for this {dim:,}-parameter model (above 1 the noise "
            "of a round exceeds any update): use a smaller model, more clients per round or larger budgets "
            "(gdpfed plan prints the clients needed)"
        )
    else:
        parts.append(f"the plan's noise-to-signal ratio is {ratio:.3g} for this {dim:,}-parameter model")
    return "; ".join(parts)
