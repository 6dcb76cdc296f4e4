"""``TrainConfig``: a run's settings except the plan (``config.json``; docs/trainer.md §CLI).

Kept free of torch and of the planner so that ``gdpfed train`` checks every option
(``config_from_args``) and refuses a bad one before the trainer, and torch with it, is
imported (issue 26 §3), and so that the parser (``trainer/run/options.py``) derives its
choices and defaults from these fields. ``trainer.runner`` re-exports these names.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, field_validator

from accounting.choices import RequestedSecagg
from accounting.validation import InputModel, finite_number
from trainer.choices import SECAGG_EXECUTION_HELP, SECAGG_MECHANISM_HELP, RequestedMechanism, SecAggExecution


def secagg_worker_count(value: Any) -> int | str:
    """A ``secagg_workers`` setting: ``"auto"`` or a positive integer (a string of one from
    the command line); anything else is a ``ValueError`` saying what it takes."""
    if value == "auto":
        return "auto"
    count = int(value) if isinstance(value, str) and value.strip().isdigit() else value
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return count
    raise ValueError(f"must be a positive integer or auto, got {value!r}")


# A float setting: NaN and both infinities are 'must be a finite number' (accounting's one
# check, before the field's bounds), where an infinite --lr, --server-lr or --alpha passed the
# bound gt=0 and was refused only after the data and model were built, or not at all
# (docs/trainer.md §CLI).
FiniteFloat = Annotated[float, BeforeValidator(finite_number)]


class TrainConfig(InputModel):
    """Everything about a run except the plan (stored as ``config.json``; no secrets)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    model: str
    model_options: dict[str, Any] = Field(
        default_factory=dict, description="model constructor options, e.g. {\"hidden\": [64]} (see trainer.models)"
    )
    rounds: int = Field(ge=1, description="rounds of the plan to run (<= plan.rounds)")
    partition: Literal["iid", "dirichlet", "one_label", "natural"] = "iid"
    alpha: FiniteFloat = Field(0.5, gt=0, description="Dirichlet concentration (partition dirichlet)")
    dataset_options: dict[str, Any] = Field(
        default_factory=dict,
        description="the loader's options, e.g. {\"client_test_fraction\": 0.2} (docs/trainer.md §Data)",
    )
    opt_out_assignment: Literal["random", "skewed"] = Field(
        "random",
        description="random: clients dealt into groups at random; skewed: the opted-out groups' clients "
        "all hold skewed_label (FedHDP's skewed setting)",
    )
    skewed_label: int = Field(7, ge=0, description="the label every opted-out client holds when opt_out_assignment is skewed")
    local_steps: int = Field(5, ge=1)
    lr: FiniteFloat = Field(0.05, gt=0)
    momentum: FiniteFloat = Field(0.0, ge=0, lt=1)
    batch_size: int = Field(32, ge=1)
    engine: Literal["batched", "loop"] = "batched"
    seed: int = Field(0, ge=0)
    eval_every: int = Field(1, ge=1)
    server_lr: FiniteFloat = Field(1.0, gt=0)
    server_momentum: FiniteFloat = Field(0.0, ge=0, lt=1)
    late_dropout_fraction: float = Field(0.0, ge=0, le=1)
    secagg_mode: RequestedSecagg = Field(
        "auto", description="secure-aggregation graph per pool: auto (the plan's choice), full, or sparse (SecAgg+)"
    )
    secagg_execution: SecAggExecution = Field(
        "protocol", description=f"{SECAGG_EXECUTION_HELP} (docs/secure-aggregation.md §Exact)"
    )
    secagg_mechanism: RequestedMechanism = Field(
        "plan", description=f"{SECAGG_MECHANISM_HELP} (docs/secure-aggregation.md §Discrete noise)"
    )
    secagg_workers: int | Literal["auto"] = Field(
        "auto",
        description="processes a secure-aggregation session's clients may run in: a positive integer (at most "
        "that many), or auto (every core, for sessions large enough to pay); results do not depend on it "
        "(docs/secure-aggregation.md §Parallel)",
    )
    checkpoint_every: int = Field(1, ge=1)
    strategy: str = Field("plan", description="training strategy (trainer.units.strategies); plan = the plan's own")
    strategy_options: dict[str, Any] = Field(
        default_factory=dict, description="the strategy's options, validated by its options model"
    )

    @field_validator("late_dropout_fraction", mode="before")
    @classmethod
    def _fraction(cls, value: Any) -> Any:
        # pydantic's bounds would call nan "not less than or equal to 1": one message for every miss
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value <= 1:
            raise ValueError(f"must be a number in [0, 1], got {value}")
        return value

    @field_validator("secagg_workers", mode="before")
    @classmethod
    def _worker_count(cls, value: Any) -> Any:
        return secagg_worker_count(value)

    def fingerprint_data(self) -> dict[str, Any]:
        """What a checkpoint's configuration fingerprint covers: every field, except the
        fields added after runs were first checkpointed while they hold their defaults, so
        that a run started before they existed still resumes, and ``secagg_workers``, which
        changes no result (a resumed run may change it).

        A field whose default changed keeps the fingerprint of its old default
        (``FORMER_DEFAULTS``): ``secagg_mechanism`` was ``gaussian_continuous`` until the
        default became ``plan``, and a client run records the mechanism its plan resolves to
        (``trainer.units.client.discrete.run_mechanism``), so a run started before the change
        (continuous) and one started after on a plan without discrete blocks fingerprint alike.
        """
        data = self.model_dump(mode="json", exclude={"secagg_workers"})
        for name in LATER_CONFIG_FIELDS:
            if data[name] in (type(self).model_fields[name].get_default(call_default_factory=True),
                              *FORMER_DEFAULTS.get(name, ())):
                del data[name]
        return data


# TrainConfig fields a checkpoint fingerprint leaves out while they are at their defaults.
LATER_CONFIG_FIELDS = (
    "strategy", "strategy_options", "dataset_options", "opt_out_assignment", "skewed_label", "secagg_execution",
    "secagg_mechanism",
)
# LATER_CONFIG_FIELDS whose default changed: their former defaults, left out of the fingerprint too.
FORMER_DEFAULTS: dict[str, tuple[Any, ...]] = {"secagg_mechanism": ("gaussian_continuous",)}
