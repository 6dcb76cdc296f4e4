"""What a Flower run is told: the run configuration (the server's) and the node configuration (the node's).

(docs/flower.md §3.) Flower hands an app two flat key/value maps:

- **run config** (``[tool.flwr.app.config]`` in the bundle, overridable with
  ``flwr run --run-config``): the run's ``gdpfed train`` settings with hyphens
  (``local-steps``, ``model-options`` as a JSON string, ...) plus the Flower run's own
  (``FlowerOptions``). Whoever starts the run chooses it, so nothing privacy-relevant is
  taken from it on a client: clip norms, noise shares and thresholds come from the
  node's own copy of the plan.
- **node config** (``flower-supernode --node-config``): set by whoever runs the node.
  ``gdpfed-group`` (the node's privacy group, required), ``partition-id`` (its client
  index in the run's dataset), optionally ``gdpfed-plan`` (a plan file on the node that
  pins the plan: the node refuses any other) and ``gdpfed-device``.
  ``gdpfed-simulation = true`` is for simulations only: the group is dealt from
  ``partition-id`` as ``gdpfed train`` deals it and the noise is drawn from the run seed,
  so a run reproduces ``gdpfed train``'s numbers, and so the server could subtract it.

torch-free: the ClientApp reads its node config in every message's process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accounting.errors import InvalidInputError, validation_error_line
from accounting.validation import InputModel
from trainer.run.config import TrainConfig

# Run-config keys that configure the Flower run rather than the training (TrainConfig).
FLOWER_KEYS = (
    "out-dir", "resume", "report-to", "plan-id", "step-timeout", "min-nodes", "wait-timeout", "device",
)
NODE_GROUP = "gdpfed-group"
NODE_PARTITION = "partition-id"
NODE_PLAN = "gdpfed-plan"
NODE_DEVICE = "gdpfed-device"
NODE_SIMULATION = "gdpfed-simulation"
NODE_PERSONAL_METRICS = "gdpfed-personal-metrics"


class FlowerOptions(InputModel):
    """The Flower run's own settings (run config keys, hyphenated)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    out_dir: str = Field(alias="out-dir", min_length=1, description="run directory on the ServerApp's host")
    resume: bool = Field(False, description="continue the run in out-dir from its checkpoint")
    report_to: str = Field("", alias="report-to", description="gdpfed service URL ('' = no reporting)")
    plan_id: str = Field("", alias="plan-id", description="the service's plan id (default: the plan's 'id')")
    step_timeout: float = Field(
        600.0, alias="step-timeout", gt=0, description="seconds to wait for the nodes' replies at each protocol step"
    )
    min_nodes: int = Field(1, alias="min-nodes", ge=1, description="connected nodes to wait for before round 0")
    wait_timeout: float = Field(300.0, alias="wait-timeout", gt=0, description="seconds to wait for min-nodes")
    device: str = Field("auto", description="device of the ServerApp's evaluation and aggregation")


def split_run_config(run_config: Mapping[str, Any]) -> tuple[FlowerOptions, dict[str, Any]]:
    """(Flower options, TrainConfig fields) from Flower's flat run config.

    ``model-options``, ``strategy-options`` and ``dataset-options`` are JSON strings (Flower config values are
    scalars). TrainConfig validates the rest (unknown keys included).
    """
    flower: dict[str, Any] = {}
    train: dict[str, Any] = {}
    for key, value in run_config.items():
        if key.endswith("-options"):  # model-, strategy-, dataset-options
            value = _json_option(key, value)
        if key in FLOWER_KEYS:
            flower[key] = value
        else:
            train[key.replace("-", "_")] = value
    return _validated(FlowerOptions, flower), train


def train_config(run_config: Mapping[str, Any]) -> Any:
    """The run's ``TrainConfig``."""
    _, fields = split_run_config(run_config)
    config = _validated(TrainConfig, fields)
    if config.late_dropout_fraction:
        raise InvalidInputError(
            "late-dropout-fraction", "is a simulation setting; on Flower, nodes drop out for real"
        )
    if config.secagg_execution != "protocol":
        raise InvalidInputError(
            "secagg-execution", "is a simulation setting; on Flower, the nodes run the real protocol"
        )
    if config.secagg_workers != "auto":
        raise InvalidInputError(
            "secagg-workers", "is a simulation setting; on Flower, every node runs its own secure-aggregation client"
        )
    if config.opt_out_assignment != "random":
        # nodes declare their own group (node config); a study's skewed dealing is the simulator's
        raise InvalidInputError(
            "opt-out-assignment", "is a simulation setting; on Flower, each node's group is its own --node-config"
        )
    return config


def run_mechanism(config: Any, plan: Any) -> str:
    """The noise mechanism a client-level run of ``plan`` executes: its configuration's
    ``secagg_mechanism`` resolved against the plan (``plan``, the default, runs skellam where
    the plan's noised pools state discrete blocks: ``trainer.units.client.discrete.run_mechanism``),
    as ``gdpfed train`` resolves it. The ServerApp's engine and membership and every node ask
    this one function, so both ends of the wire decide the mechanism alike (docs/flower.md §2
    "The discrete mechanism and the wire version")."""
    # start-up time: the settings are read by every Flower message; the client unit loads torch
    from trainer.units.client.discrete import run_mechanism as resolved

    return str(resolved(config.secagg_mechanism, plan))


def run_config_of(options: FlowerOptions, config: Any) -> dict[str, Any]:
    """The flat run config (inverse of ``split_run_config``) for a bundle's defaults."""
    values: dict[str, Any] = {}
    for name, value in config.model_dump(mode="json").items():
        values[name.replace("_", "-")] = json.dumps(value) if isinstance(value, (dict, list)) else value
    for name, value in options.model_dump(mode="json", by_alias=True).items():
        values[name] = json.dumps(value) if isinstance(value, (dict, list)) else value
    return values


def _validated(model: Any, fields: dict[str, Any]) -> Any:
    """``model`` from run-config fields; a bad field is one ``InvalidInputError`` naming its
    run-config key (``local-steps``, ``strategy-options.rank``), worded as the command line and
    the service word pydantic's errors (``accounting.errors.validation_error_line``)."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        field, message = validation_error_line(exc.errors(include_url=False))
        key, dot, rest = field.partition(".")
        raise InvalidInputError(key.replace("_", "-") + dot + rest if field else "run-config", message) from None


def _json_option(key: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidInputError(key, f"{value!r} is not JSON ({exc.msg})") from None


class NodeSettings(BaseModel):
    """A node's own settings, from its ``--node-config``."""

    model_config = ConfigDict(extra="ignore")

    group: str | None = None
    partition_id: int | None = Field(None, ge=0)
    plan_path: Path | None = None
    device: str = "cpu"
    simulation: bool = False
    # answer the server's request for this node's personal model's scores (in the clear)
    personal_metrics: bool = True

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, Any]) -> NodeSettings:
        simulation = _flag(node_config.get(NODE_SIMULATION, False))
        personal_metrics = _flag(node_config.get(NODE_PERSONAL_METRICS, True))
        plan = node_config.get(NODE_PLAN)
        return cls(
            group=str(node_config[NODE_GROUP]) if node_config.get(NODE_GROUP) not in (None, "") else None,
            partition_id=node_config.get(NODE_PARTITION),
            plan_path=Path(str(plan)) if plan not in (None, "") else None,
            device=str(node_config.get(NODE_DEVICE, "cpu")),
            simulation=simulation,
            personal_metrics=personal_metrics,
        )

    def require_partition(self) -> int:
        if self.partition_id is None:
            raise InvalidInputError(
                NODE_PARTITION, "the node config needs partition-id (this node's client index in the run's dataset)"
            )
        return self.partition_id


def _flag(value: Any) -> bool:
    """A node-config switch: a boolean, or a string (``1``/``true``/``yes`` is true)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)
