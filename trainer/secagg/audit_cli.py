"""``gdpfed audit discrete``: the empirical privacy audit of the discrete pipeline (docs/secure-aggregation.md §Audit).

Runs the real client and server arithmetic many times on two neighbouring inputs and
prints the accounted epsilon beside the audited lower bound (Clopper-Pearson, 95%);
``--noise-std-factor`` and ``--unconditioned`` build the broken variants the audit must
catch. numpy only; the heavy work happens in the handler.
"""

from __future__ import annotations

import argparse
from typing import Annotated, Any

from pydantic import Field

from accounting.validation import Flag, InputModel


class AuditRequest(InputModel):
    """The audit's settings, validated like every external input (one line naming the field)."""

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


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        description="Empirical privacy audit: a lower bound on epsilon from many runs on neighbouring inputs.",
    )
    parser.add_argument("mechanism", choices=["discrete"], help="what to audit: the distributed Skellam pipeline")
    # each option says what it sets and its default (the help printed only the names)
    parser.add_argument("--clients", type=str, default="3",
                        help="clients in each round's sum, the audited target among them (default 3)")
    parser.add_argument("--dimension", type=str, default="8", help="update dimension d (default 8)")
    parser.add_argument("--clip-norm", type=str, default="1.0", help="L2 clip norm C of each update (default 1)")
    parser.add_argument("--scale", type=str, default="16", help="discretisation scale s (default 16)")
    parser.add_argument("--share-variance", type=str, default="114",
                        help="each client's Skellam noise variance, integer units (default 114)")
    parser.add_argument("--delta", type=str, default="1e-5", help="delta of both epsilons (default 1e-5)")
    parser.add_argument("--runs", type=str, default="200000",
                        help="runs per neighbouring input (default 200000; the bound tightens with more)")
    parser.add_argument("--seed", type=str, default="1", help="random seed (default 1)")
    parser.add_argument("--noise-std-factor", type=str, default="1.0", help="broken variant: scale the noise std")
    parser.add_argument("--unconditioned", action="store_true", help="broken variant: plain randomised rounding")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> tuple[dict[str, object], str]:
    from trainer.secagg.discrete_audit import audit_discrete  # start-up time: gdpfed's parsers load this module

    request = AuditRequest.model_validate(
        {
            "clients": args.clients,
            "dimension": args.dimension,
            "clip_norm": args.clip_norm,
            "scale": args.scale,
            "share_variance": args.share_variance,
            "delta": args.delta,
            "runs": args.runs,
            "seed": args.seed,
            "noise_std_factor": args.noise_std_factor,
            "conditional": not args.unconditioned,
        }
    )
    result = audit_discrete(**request.model_dump())
    verdict = "VIOLATED: the lower bound exceeds the accounted epsilon" if result["violated"] else "consistent"
    text = (
        f"audit {args.mechanism}: accounted epsilon {result['accounted_epsilon']:.4g}, "
        f"lower bound {result['epsilon_lower_bound']:.4g} ({result['confidence']:.0%} confidence, "
        f"{result['runs']} runs per input, delta {result['delta']:g}): {verdict}"
    )
    return result, text
