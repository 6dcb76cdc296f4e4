"""The client unit's steps of the run loop (``trainer.run.steps``): its divergence hint
reads the plan's noise and clip norms, its summary names the secure-aggregation workers and
the pools that ran full mode (docs/trainer.md §Divergence; docs/secure-aggregation.md)."""

from __future__ import annotations

from typing import Any

from trainer.run.divergence import Divergence, divergence_hint
from trainer.run.metrics import RoundRecord
from trainer.run.outcome import RoundOutcome
from trainer.run.prepared import PreparedRun, RunTally
from trainer.run.reporting import RoundReporter
from trainer.run.steps import RoundSteps
from trainer.run.summary import RunSummary
from trainer.units.client.discrete import run_mechanism
from trainer.units.client.rounds import full_mode_reasons
from trainer.units.client.tally import ClientTally


class ClientSteps(RoundSteps):
    """Client-level runs: the shared steps, with the plan's own divergence hint and summary fields."""

    def open_tally(self, prepared: PreparedRun, epsilon_fn: Any) -> RunTally:
        """The run's tally, counting the events of the mechanism the run executes (``secagg_mechanism``,
        resolved from the plan: ``discrete.run_mechanism``)."""
        return ClientTally(prepared.plan, epsilon_fn, mechanism=run_mechanism(prepared.config.secagg_mechanism, prepared.plan))

    def divergence_hint(self, prepared: PreparedRun, outcome: RoundOutcome) -> str:
        return divergence_hint(prepared.plan, prepared.config, prepared.engine.dim, outcome.nonfinite_updates)

    def summary(self, prepared: PreparedRun, records: list[RoundRecord], tally: RunTally, seconds: float,
                plan_id: str | None, reporter: RoundReporter | None, divergence: Divergence | None) -> RunSummary:
        summary = super().summary(prepared, records, tally, seconds, plan_id, reporter, divergence)
        extra: dict[str, Any] = {
            # the simulator's engine: the most processes a session could use; other executors none
            "secagg_workers": getattr(prepared.engine, "secagg_processes", None),
            "secagg_full_reasons": full_mode_reasons(prepared.plan, prepared.config.secagg_mode),
        }
        mechanism = run_mechanism(prepared.config.secagg_mechanism, prepared.plan)
        if mechanism != "gaussian_continuous" or any(pool.discrete is not None for pool in prepared.plan.pools):
            # named wherever the plan carries discrete blocks (the continuous path then runs by
            # request, for comparison); absent for plans without them, whose summaries keep their bytes
            extra["secagg_mechanism"] = mechanism
        return summary.model_copy(update=extra)
