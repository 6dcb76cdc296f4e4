"""The trainer's lists of choices, each named once: the run configuration's fields
(``trainer/run/config.py``), the command line's choices and help (``trainer/run/options.py``)
and the registries that build what the names name (``trainer/models/build.py``,
``trainer/data/load.py``, ``trainer/data/silos.py``, ``trainer/units/client/rounds.py``) read them here.

It imports nothing but ``accounting.choices`` (which imports nothing), so building ``gdpfed train``'s parser loads neither torch nor the
registries (docs/architecture.md §Registries). A secure-aggregation graph and what a run
asks for (``RequestedSecagg``) and a pool's noise mechanism (``SecaggMechanism``) are the
planner's, in ``accounting.choices``.
"""

from __future__ import annotations

from typing import Literal, get_args

from accounting.choices import SecaggMechanism as SecaggMechanism

# How a round's secure aggregation is executed (docs/secure-aggregation.md §Exact).
SecAggExecution = Literal["protocol", "exact_sum"]
SECAGG_EXECUTIONS: tuple[SecAggExecution, ...] = get_args(SecAggExecution)
SECAGG_EXECUTION_HELP = (
    "protocol: real secure aggregation; exact_sum: its bit-identical release without the "
    "cryptography, for experiments on learning"
)

# The noise a pool's secure aggregation carries (``gdpfed train --secagg-mechanism``): named once,
# in accounting.choices (the plan states both), re-exported here beside the other run choices.
SECAGG_MECHANISMS: tuple[SecaggMechanism, ...] = get_args(SecaggMechanism)
# What a run may ask for: a mechanism by name, or ``plan`` (the default): the one the plan
# states, skellam where its noised pools carry discrete blocks, else gaussian_continuous
# (trainer.units.client.discrete.run_mechanism; docs/secure-aggregation.md §Discrete noise).
RequestedMechanism = Literal["plan", SecaggMechanism]
REQUESTED_MECHANISMS: tuple[RequestedMechanism, ...] = get_args(RequestedMechanism)
SECAGG_MECHANISM_HELP = (
    "plan: skellam where the plan's noised pools carry discrete blocks, else gaussian_continuous; "
    "skellam: the plan's calibrated distributed Skellam shares (exact; the plan must carry the blocks); "
    "gaussian_continuous: each client's Gaussian share rounded to the grid (approximate: the rounding "
    "after noise is not accounted)"
)

# The models trainer.models.build.build_model builds (docs/trainer.md §Models).
MODELS = ("mlp", "cnn", "resnet18", "lstm", "mean")


def model_key(name: str) -> str | None:
    """The entry of ``MODELS`` that ``name`` names (case, ``-`` and ``_`` ignored), ``None`` for
    none: ``build_model``'s reading, which ``gdpfed flower app`` applies before it writes a bundle."""
    key = name.strip().lower().replace("-", "").replace("_", "")
    return key if key in MODELS else None


def unknown_model(name: str) -> str:
    """The refusal of a model name ``model_key`` does not know (field ``model``)."""
    return f"unknown model {name!r}; use one of {', '.join(MODELS)}"

# The bundled datasets trainer.data.load.load_dataset builds by name (client and
# metric_local runs; a ``synthetic`` spec may also carry ``:ALPHA,BETA``), the formats it
# reads from a path (its _PATH_LOADERS, in this order), and the datasets silo plans train on
# (trainer.data.silos).
BUNDLED_DATASETS = ("synthetic", "leaf_synthetic", "metric_synthetic", "digits")
PATH_FORMATS = ("shakespeare", "idx", "mnist", "fashion-mnist", "cifar10", "svhn", "leaf")
SILO_DATASETS = ("rotated_digits", "mean_estimation")


def silo_dataset_key(spec: str) -> str | None:
    """The entry of ``SILO_DATASETS`` that ``spec`` names (case ignored, ``-`` read as ``_``),
    ``None`` for none: ``load_silo_data``'s reading, which ``gdpfed flower app`` applies to a silo
    plan before it writes a bundle."""
    key = spec.strip().lower().replace("-", "_")
    return key if key in SILO_DATASETS else None


def unknown_silo_dataset(spec: str) -> str:
    """The refusal of a silo plan's dataset ``silo_dataset_key`` does not know (field ``dataset``)."""
    return f"silo plans train on {', '.join(SILO_DATASETS)}, got {spec!r} (other datasets are for client and metric_local plans)"
SPEC_HELP = ", ".join(
    [*BUNDLED_DATASETS[:1], "synthetic:ALPHA,BETA", *BUNDLED_DATASETS[1:], *(f"{key}:PATH" for key in PATH_FORMATS)]
) + ", or a path to such data"
DATASET_HELP = f"for client and metric_local plans: {SPEC_HELP}; for silo plans: {', '.join(SILO_DATASETS)}"
