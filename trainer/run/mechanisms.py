"""Training mechanisms: how the trainer executes the plans of each privacy unit.

(docs/architecture.md §Privacy units.) A privacy unit (``planner.units``) names the
mechanism that runs its plans; this registry maps the name to the code: ``prepare``
validates everything and builds the run (data, model, population, strategy, round
engine), ``ledger`` counts what its rounds spend. ``gdpfed train`` dispatches here, so a
plan whose unit has no mechanism in this trainer is refused by name before anything is
written, and the client-level mechanism never runs a plan of another unit
(``trainer.units.client.mechanism.pool_mechanisms`` refuses it too).

To add a mechanism: define ``MECHANISM = TrainingMechanism(...)`` in its own module and
add its line to ``MECHANISMS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accounting.errors import InvalidInputError
from planner.schema import PlanDocument
from trainer.units.client.ledger import PrivacyLedger


@dataclass(frozen=True)
class TrainingMechanism:
    """One entry of the mechanism registry.

    ``prepare(plan, plan_document, config, out, **options) -> PreparedRun`` (the options
    of ``trainer.run.runner.prepare_run``); ``ledger(plan, epsilon_fn)`` the run's privacy
    ledger (``record_round``, ``spent``, ``final_spent``, ``state_dict``); ``execute``
    (``None``: ``trainer.run.runner.execute_run``'s client-level loop) runs a prepared
    run of this mechanism with ``execute_run``'s arguments. ``unused_options`` are the
    ``TrainConfig`` fields the mechanism never reads: ``gdpfed train`` refuses them when
    given (``unused_reason`` says why) and the run's config.json leaves them out.
    """

    name: str
    summary: str
    prepare: Callable[..., Any]
    ledger: Callable[..., Any]
    execute: Callable[..., Any] | None = None
    unused_options: tuple[str, ...] = ()
    unused_reason: str = ""

    def recorded_config(self, config: Any) -> dict[str, Any]:
        """The run's ``config.json``: ``config`` without the options this mechanism never reads."""
        return dict(config.model_dump(mode="json", exclude=set(self.unused_options)))

    def secagg_execution(self, config: Any) -> str | None:
        """The summary's ``secagg_execution``: ``config``'s, or ``None`` for a mechanism that
        runs no secure aggregation (it never reads the option)."""
        return None if "secagg_execution" in self.unused_options else str(config.secagg_execution)


def _prepare_client_run(*args: Any, **kwargs: Any) -> Any:
    from trainer.run.runner import prepare_client_run  # the runner imports this module

    return prepare_client_run(*args, **kwargs)


GAUSSIAN_SECAGG = TrainingMechanism(
    name="gaussian_secagg",
    summary="client-level DP: clip each client's update, add Gaussian noise shares, secure aggregation per pool",
    prepare=_prepare_client_run,
    ledger=PrivacyLedger,
)

def _prepare_silo_run(*args: Any, **kwargs: Any) -> Any:
    from trainer.units.silo.run import prepare_silo_run

    return prepare_silo_run(*args, **kwargs)


def _silo_ledger(*args: Any, **kwargs: Any) -> Any:
    from trainer.units.silo.run import SiloLedger

    return SiloLedger(*args, **kwargs)


DPSGD_SILO = TrainingMechanism(
    name="dpsgd_silo",
    summary="silo sample-level DP: every silo runs DP-SGD (per-example clip, Poisson examples, Gaussian noise) every round",
    prepare=_prepare_silo_run,
    ledger=_silo_ledger,
    # trainer/units/silo/run.py reads dataset, model, model_options, rounds, lr, seed, strategy,
    # strategy_options; the round loop eval_every and checkpoint_every. Nothing else.
    unused_options=(
        "partition", "alpha", "dataset_options", "opt_out_assignment", "skewed_label", "local_steps", "momentum",
        "batch_size", "engine", "server_lr", "server_momentum", "late_dropout_fraction", "secagg_mode",
        "secagg_execution", "secagg_workers",
    ),
    unused_reason="they take batch sizes, steps per round, noise and clipping from the plan, train every silo in "
    "every round with plain DP-SGD and use no secure aggregation (docs/mrmtl.md §1, §6); leave it out",
)

def _prepare_metric_run(*args: Any, **kwargs: Any) -> Any:
    from trainer.units.metric.run import prepare_metric_run

    return prepare_metric_run(*args, **kwargs)


def _execute_metric_run(*args: Any, **kwargs: Any) -> Any:
    from trainer.units.metric.run import execute_metric_run

    return execute_metric_run(*args, **kwargs)


def _metric_ledger(plan: Any, epsilon_fn: Any = None) -> Any:
    from trainer.units.metric.ledger import MetricLedger

    return MetricLedger(plan, epsilon_fn)


METRIC_LAPLACE = TrainingMechanism(
    name="metric_laplace",
    summary="local metric privacy: each client releases its model plus Laplace noise in R^n; no secure aggregation",
    prepare=_prepare_metric_run,
    ledger=_metric_ledger,
    execute=_execute_metric_run,
    # trainer/units/metric/run.py deals clients into groups at random (build_population's
    # default) and its engine (trainer/units/metric/rounds.py) drops no client after training and
    # aggregates no secret shares: it never reads these.
    unused_options=(
        "opt_out_assignment", "skewed_label", "late_dropout_fraction", "secagg_mode", "secagg_execution",
        "secagg_workers",
    ),
    unused_reason="each client releases its own model with Laplace noise; there is no secure aggregation, no "
    "dropout after masking and no opted-out group to skew (docs/metric-privacy.md §5); leave it out",
)

MECHANISMS: dict[str, TrainingMechanism] = {m.name: m for m in (GAUSSIAN_SECAGG, METRIC_LAPLACE, DPSGD_SILO)}


def mechanism_for(plan: PlanDocument) -> TrainingMechanism:
    """The mechanism that executes ``plan``'s privacy unit, or ``InvalidInputError`` naming
    the unit and the mechanism it needs."""
    from planner.units import unit_of

    unit = unit_of(plan)
    mechanism = MECHANISMS.get(unit.mechanism)
    if mechanism is None:
        raise InvalidInputError(
            "privacy_unit",
            f"{unit.name} plans ({unit.notion}) need the {unit.mechanism!r} training mechanism, "
            f"which this trainer does not have (it has {', '.join(MECHANISMS)})",
        )
    return mechanism
