"""``gdpfed bench audit``: how tight the empirical audits' lower bound gets per second of CPU.

For each audit of ``gdpfed audit`` (docs/secure-aggregation.md §Audit) - the client-level
Gaussian release, one silo DP-SGD step, the metric Laplace release and the discrete
(Skellam) pipeline - at growing numbers of releases per input: the Clopper-Pearson lower
bound (95%) as a share of the accounted epsilon, and the CPU seconds the audit took
(``time.process_time``: the process's own CPU, not the wall clock of a shared machine).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trainer.secagg.discrete_audit import audit_discrete
from trainer.units.client.audit import audit_client
from trainer.units.metric.audit import audit_metric
from trainer.units.silo.audit import audit_silo

AUDITS: dict[str, Callable[..., dict[str, Any]]] = {
    "client": audit_client,
    "silo": audit_silo,
    "metric": audit_metric,
    "discrete": audit_discrete,
}


def tightness_rows(run_counts: list[int], seed: int = 3) -> list[dict[str, Any]]:
    rows = []
    for name, audit in AUDITS.items():
        for runs in run_counts:
            start = time.process_time()
            result = audit(runs=runs, seed=seed)
            cpu = time.process_time() - start
            share = result["epsilon_lower_bound"] / result["accounted_epsilon"]
            rows.append(
                {
                    "mechanism": name,
                    "runs_per_input": runs,
                    "delta": result["delta"],
                    "accounted_epsilon": round(result["accounted_epsilon"], 4),
                    "lower_bound": round(result["epsilon_lower_bound"], 4),
                    "lower_/_accounted": round(share, 3),
                    "cpu_s": round(cpu, 2),
                    "us_per_release": round(1e6 * cpu / (2 * runs), 1),
                }
            )
    return rows


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    counts = [1_000, 4_000] if quick else [1_000, 10_000, 100_000]
    return [("Audit tightness per CPU second (Clopper-Pearson 95%, gdpfed audit's settings)", tightness_rows(counts))]
