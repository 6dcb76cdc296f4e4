"""Round time and what secure aggregation costs in it (``gdpfed bench rounds``).

One federated round of the trainer, end to end, on the ``digits`` data with a CNN sized to
about 1e5 parameters and 50 expected clients a round, split into its stages: client
selection, local training, privatisation (clip + fixed-point encoding + noise share),
secure aggregation, server aggregation (top-k, fixed denominator, server step),
privacy accounting, and one evaluation. The peer on the same inputs in the same run is
the same round with secure aggregation replaced by its unmasked reference
(``trainer.secagg.plain_sum``: the same encoding, summed in the clear), so the ratio is
the price of the protocol. Plans: ``dp_fedavg`` (one pool of 50) and ``gdpfed`` (three
pools of about 17), each with the full graph and with SecAgg+ (``sparse``).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STAGES = ("select", "train", "privatize", "secagg", "aggregate")


@contextlib.contextmanager
def _unmasked_sums() -> Iterator[None]:
    """Swap the round engine's ``secure_sum`` for the unmasked reference sum."""
    import trainer.rounds as rounds
    from trainer.secagg import SecAggResult, plain_sum

    real = rounds.secure_sum

    def plain(vectors: Any, params: Any, *, seed: int, drop_before_masking: Any = (), drop_before_unmasking: Any = ()) -> Any:
        gone = set(drop_before_masking)
        kept = {u: v for u, v in vectors.items() if u not in gone}
        total = plain_sum(kept, params, seed=seed)
        return SecAggResult(sum=total, aborted=False, survivors=sorted(kept), dropped=sorted(gone), reason=None)

    rounds.secure_sum = plain
    try:
        yield
    finally:
        rounds.secure_sum = real


def _scenario(total_clients: int, expected: int, dim: int) -> Any:
    from planner import Scenario

    per_group = total_clients // 3
    return Scenario(
        groups=[
            {"id": "strict", "epsilon": 2.0, "num_clients": per_group},
            {"id": "medium", "epsilon": 4.0, "num_clients": per_group},
            {"id": "relaxed", "epsilon": 8.0, "num_clients": per_group},
        ],
        delta=1e-5,
        rounds=100,
        clip_norm=1.0,
        model_dim=dim,
        expected_clients=expected,
        keep_ratio=1.0,
        min_clients_per_pool=5,
    )


def _measure(plan: Any, config: Any, dataset: Any, mode: str, rounds: int, unmasked: bool) -> dict[str, Any]:
    """Median stage times over ``rounds`` rounds after one warm-up round, plus one evaluation."""
    from trainer.engines import evaluate
    from trainer.run.ledger import PrivacyLedger
    from trainer.run.runner import prepare_run
    from trainer.strategies import RoundContext

    config = config.model_copy(update={"secagg_mode": mode})
    with tempfile.TemporaryDirectory() as tmp:  # prepare_run writes nothing; it only needs a path
        prepared = prepare_run(plan, plan.model_dump(mode="json"), config, Path(tmp) / "run", dataset=dataset)
    ledger = PrivacyLedger(plan)
    params = prepared.initial_params
    samples: dict[str, list[float]] = {stage: [] for stage in (*STAGES, "account", "total", "clients")}
    with _unmasked_sums() if unmasked else contextlib.nullcontext():
        for index in range(rounds + 1):  # round 0 warms up the engines
            params, outcome = prepared.engine.run(RoundContext(index, index, config.seed), params)
            ledger.record_round()
            tick = time.perf_counter()
            ledger.spent()
            account = time.perf_counter() - tick
            if index == 0:
                continue
            for stage in STAGES:
                samples[stage].append(outcome.timing[stage])
            samples["account"].append(account)
            samples["total"].append(sum(outcome.timing.values()) + account)
            samples["clients"].append(sum(outcome.survived.values()))
    tick = time.perf_counter()
    evaluate(prepared.model, params, dataset.test)
    row = {name: statistics.median(values) for name, values in samples.items()}
    row["evaluate"] = time.perf_counter() - tick
    row["d"] = prepared.engine.dim
    return row


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    from planner import make_plan
    from trainer.data import load_dataset
    from trainer.run.runner import TrainConfig

    total, expected = (30, 12) if quick else (150, 50)
    model_options = {"channels": [4, 8], "hidden": 16} if quick else {"channels": [32, 64], "hidden": 160}
    measured_rounds = 1 if quick else 3
    local_steps = 1 if quick else 5
    dataset = load_dataset("digits", num_clients=total, seed=0)
    config = TrainConfig(
        dataset="digits", model="cnn", model_options=model_options, rounds=100, local_steps=local_steps, batch_size=32, lr=0.05
    )
    variants = (("secagg full", "full", False), ("secagg sparse (SecAgg+)", "sparse", False), ("unmasked sum (peer)", "full", True))
    rows = []
    for method in ("dp_fedavg", "gdpfed"):
        plan = make_plan(_scenario(total, expected, 100_000), method, clients_needed=False)
        measured = {label: _measure(plan, config, dataset, mode, measured_rounds, unmasked) for label, mode, unmasked in variants}
        peer = measured["unmasked sum (peer)"]
        for label, m in measured.items():
            rows.append({
                "plan": method,
                "pools": len(plan.pools),
                "aggregation": label,
                "clients": m["clients"],
                "d": m["d"],
                "round_s": m["total"],
                "train_s": m["train"],
                "privatize_s": m["privatize"],
                "secagg_s": m["secagg"],
                "aggregate_s": m["aggregate"],
                "account_s": m["account"],
                "evaluate_s": m["evaluate"],
                "secagg_share": m["secagg"] / m["total"],
                "secagg_vs_unmasked": m["secagg"] / peer["secagg"],
                "round_vs_unmasked": m["total"] / peer["total"],
            })
    title = (
        f"Round time and secure-aggregation share (digits, cnn d={rows[0]['d']}, "
        f"{expected} expected clients, median of {measured_rounds} rounds, seconds)"
    )
    return [(title, rows)]
