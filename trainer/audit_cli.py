"""``gdpfed audit MECHANISM``: empirical privacy audits of the real release code (docs/secure-aggregation.md §Audit).

Each audit runs a mechanism's own code many times on two neighbouring inputs and prints
the accounted epsilon beside the audited lower bound (Clopper-Pearson, 95%,
``accounting.audit``): ``discrete`` the distributed Skellam pipeline
(``trainer/secagg/discrete_audit.py``), ``client`` the client-level Gaussian release
(``trainer/units/client/audit.py``), ``silo`` one DP-SGD step (``trainer/units/silo/audit.py``),
``metric`` the metric Laplace release (``trainer/units/metric/audit.py``).
``--noise-std-factor`` (and, for discrete, ``--unconditioned``) builds the broken variants
the audit must catch. numpy only here; the heavy work happens in the handler.
"""

from __future__ import annotations

import argparse
from typing import Annotated, Any

from pydantic import Field

from accounting.errors import InvalidInputError
from accounting.validation import Flag, InputModel

MECHANISMS = ("discrete", "client", "silo", "metric")
# delta and runs per mechanism when not given: the discrete audit's as before; the Gaussian
# audits at 1e-3 (at 1e-5 their accounted epsilon sits where 20,000 runs cannot reach); the
# metric release is pure DP, so any delta holds and a small one costs the bound nothing
DEFAULT_DELTA = {"discrete": 1e-5, "client": 1e-3, "silo": 1e-3, "metric": 1e-6}
DEFAULT_RUNS = {"discrete": 200_000, "client": 20_000, "silo": 20_000, "metric": 20_000}
# the options that set the discrete pipeline only
DISCRETE_ONLY = ("clients", "dimension", "clip_norm", "scale", "share_variance")


class AuditRequest(InputModel):
    """The discrete audit's settings, validated like every external input (one line naming the field)."""

    clients: int = Field(3, ge=1, le=1000)
    dimension: int = Field(8, ge=1, le=4096)
    clip_norm: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = 1.0
    scale: Annotated[float, Field(gt=0, le=2.0**30, allow_inf_nan=False)] = 16.0
    share_variance: Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)] = 114.0
    delta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 1e-5
    runs: int = Field(200_000, ge=4, le=10_000_000)
    seed: int = Field(1, ge=0)
    noise_std_factor: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = 1.0
    conditional: Flag = True


class UnitAuditRequest(InputModel):
    """The client, silo and metric audits' settings (their mechanisms' parameters are fixed:
    docs/secure-aggregation.md §Audit)."""

    delta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
    runs: int = Field(ge=4, le=10_000_000)
    seed: int = Field(1, ge=0)
    noise_std_factor: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = 1.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        description="Empirical privacy audit: a lower bound on epsilon from many runs on neighbouring inputs.",
    )
    parser.add_argument(
        "mechanism", choices=MECHANISMS,
        help="what to audit: discrete (the distributed Skellam pipeline), client (the client-level Gaussian "
        "release), silo (one DP-SGD step), metric (the metric Laplace release)",
    )
    # each option says what it sets and its default (the help printed only the names)
    parser.add_argument("--clients", type=str, default=None,
                        help="discrete: clients in each round's sum, the audited target among them (default 3)")
    parser.add_argument("--dimension", type=str, default=None, help="discrete: update dimension d (default 8)")
    parser.add_argument("--clip-norm", type=str, default=None, help="discrete: L2 clip norm C of each update (default 1)")
    parser.add_argument("--scale", type=str, default=None, help="discrete: discretisation scale s (default 16)")
    parser.add_argument("--share-variance", type=str, default=None,
                        help="discrete: each client's Skellam noise variance, integer units (default 114)")
    parser.add_argument("--delta", type=str, default=None,
                        help="delta of both epsilons (default 1e-5 discrete, 1e-3 client and silo, 1e-6 metric)")
    parser.add_argument("--runs", type=str, default=None,
                        help="runs per neighbouring input (default 200000 discrete, 20000 the others; "
                        "the bound tightens with more)")
    parser.add_argument("--seed", type=str, default="1", help="random seed (default 1)")
    parser.add_argument("--noise-std-factor", type=str, default="1.0",
                        help="broken variant: scale the noise std (default 1, the real mechanism)")
    parser.add_argument("--unconditioned", action="store_true",
                        help="discrete, broken variant: plain randomised rounding (default off)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_handle)


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _handle(args: argparse.Namespace) -> tuple[dict[str, object], str]:
    mechanism = args.mechanism
    common = {
        "delta": args.delta if args.delta is not None else DEFAULT_DELTA[mechanism],
        "runs": args.runs if args.runs is not None else DEFAULT_RUNS[mechanism],
        "seed": args.seed,
        "noise_std_factor": args.noise_std_factor,
    }
    if mechanism == "discrete":
        # each audit's module loads in the handler (start-up time: gdpfed audit --help)
        from trainer.secagg.discrete_audit import audit_discrete

        request = AuditRequest.model_validate(
            {**_given(args, DISCRETE_ONLY), **common, "conditional": not args.unconditioned}
        )
        result = audit_discrete(**request.model_dump())
    else:
        stray = [name for name in DISCRETE_ONLY if getattr(args, name) is not None]
        if args.unconditioned:
            stray.append("unconditioned")
        if stray:
            option = "--" + stray[0].replace("_", "-")
            raise InvalidInputError(option, f"sets the discrete pipeline only, not the {mechanism} audit")
        settings = UnitAuditRequest.model_validate(common).model_dump()
        # torch (silo) and the units load only for the audit asked for
        if mechanism == "client":
            from trainer.units.client.audit import audit_client

            result = audit_client(**settings)
        elif mechanism == "silo":
            from trainer.units.silo.audit import audit_silo

            result = audit_silo(**settings)
        else:
            from trainer.units.metric.audit import audit_metric

            result = audit_metric(**settings)
    from accounting.audit import audit_text  # start-up time, as the audits above (scipy.stats)

    return result, audit_text(mechanism, result)
