"""``gdpfed bench dpsgd``: the silo DP-SGD engine's examples/s against Opacus (docs/benchmarks.md, "DP-SGD engine against Opacus").

The same DP-SGD pass is run twice in one process, on the same data, model, Poisson
samples, expected batch B, per-example clip c and noise multipliers sigma_k (read from a
``silo_sample`` plan made by ``planner.units.make_plan``):

- **gdpfed**: ``trainer.units.silo.dpsgd.DpSgdEngine.train``, every silo in one batched
  computation. All three models here are chains of layers, so the engine takes its ghost
  clipping path (docs/mrmtl.md §4.1: one batched forward and backward over silos x
  examples, per-example norms from layer inputs and output gradients, no per-example
  gradients formed); the ``path`` column prints ``DpSgdEngine.gradient_path`` (``ghost``
  or ``torch.func``). The timed call includes drawing the Poisson masks and gathering the
  padded batch.
- **Opacus**: the peer's standard recipe, ``GradSampleModule`` (hooks) + ``DPOptimizer``
  (``noise_multiplier = sigma_k``, ``max_grad_norm = c``, ``expected_batch_size = B``,
  mean loss), one wrapped model and optimizer per silo, silo after silo, since Opacus has
  no way to batch silos that hold different models. To keep the comparison fair to it,
  Opacus is given the very examples our engine samples, already gathered into one tensor
  per silo and step before the clock starts (its data loading is not timed, ours is), and
  its models and optimizers are built outside the timing too.

Examples/s counts the examples the Poisson masks select (the same number for both); our
engine also computes gradients for the padding up to the pass's largest sample, which is
its cost, not counted as work. Workloads: a linear model (650 parameters, the model of
``experiments/mrmtl.yaml``) and the 200-200 MLP (55,210) with 1, 10 and 40 silos, the CNN
(188,810) with 1 and 10; 200 examples per silo (rotated digits), B = 32, one epoch
(7 steps), c = 1, epsilon 1 per silo. Median of 3 timed passes after one warm-up.
``quick``: the linear model, 1 and 4 silos of 64 examples, B = 16, one timed pass.
On the CPU both run on one thread (torch's setting is restored afterwards). Every row
prints the load average and the thread count, and goes to stderr as it finishes.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from bench.report import median

TAKES_DEVICE = True  # gdpfed bench dpsgd --device
# (label, model, model options, silo counts)
Workload = tuple[str, str, dict[str, Any], tuple[int, ...]]
FULL_WORKLOADS: tuple[Workload, ...] = (
    ("linear", "mlp", {"hidden": []}, (1, 10, 40)),
    ("mlp 200-200", "mlp", {}, (1, 10, 40)),
    ("cnn", "cnn", {}, (1, 10)),
)
QUICK_WORKLOADS: tuple[Workload, ...] = (("linear", "mlp", {"hidden": []}, (1, 4)),)


def load_average() -> str:
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "-"


def run(quick: bool, device: str = "cpu") -> list[tuple[str, list[dict[str, Any]]]]:
    import torch

    from trainer.device import choose_device, configure_float_math

    chosen = choose_device(device)
    configure_float_math(allow_tf32=False)
    workloads = QUICK_WORKLOADS if quick else FULL_WORKLOADS
    samples, batch = (64, 16) if quick else (200, 32)
    repeats = 1 if quick else 3
    rows = []
    threads = torch.get_num_threads()
    if chosen.type == "cpu":
        # One thread for both engines, as every experiment cell runs (docs/results.md, Runner):
        # on a shared 2-core machine two OpenMP threads mostly wait for each other (measured:
        # the linear workload's per-example gradients took 18x longer with 2 threads at load 9).
        torch.set_num_threads(1)
    try:
        for label, model_name, options, silo_counts in workloads:
            for silos in silo_counts:
                rows.append(measure(label, model_name, options, silos, samples, batch, repeats, chosen))
                rows[-1]["threads"] = torch.get_num_threads()
                rows[-1]["device"] = str(chosen)
                print(f"bench dpsgd: {rows[-1]}", file=sys.stderr, flush=True)  # each row as it finishes
    finally:
        torch.set_num_threads(threads)
    return [(f"DP-SGD examples per second: gdpfed (all silos batched) vs Opacus (silo by silo), {chosen}", rows)]


def measure(label: str, model_name: str, options: dict[str, Any], silos: int, samples: int, batch: int, repeats: int,
            device: Any) -> dict[str, Any]:
    """One row: both engines run the same DP-SGD pass ``repeats`` times (one warm-up each)."""

    from planner.units import make_plan
    from planner.units.silo_sample import SiloScenario
    from trainer.data.silos import load_silo_data
    from trainer.engines.params import flatten_params
    from trainer.models import build_model
    from trainer.strategies.base import RoundContext
    from trainer.units.silo.dpsgd import DpSgdEngine, SiloMechanism

    scenario = SiloScenario.model_validate({
        "silos": [{"id": f"silo-{k}", "num_samples": samples, "epsilon": 1.0} for k in range(silos)],
        "delta": 1e-5, "rounds": 10, "batch_size": batch, "clip_norm": 1.0,
    })
    plan = make_plan(scenario, "mrmtl")
    data = load_silo_data("rotated_digits", [samples] * silos, seed=0)
    model = build_model(model_name, data.train, seed=0, **options).to(device)
    mechanism = SiloMechanism.from_plan(plan)
    engine = DpSgdEngine(model, data.train, list(range(silos)), mechanism, lr=0.1)
    start = flatten_params(model).to(device).expand(silos, -1).clone()
    contexts = [RoundContext(r, r, seed=0) for r in range(repeats + 1)]
    batches = [opacus_batches(engine, ctx, device) for ctx in contexts]
    examples = [sum(int(x.shape[0]) for per_silo in b for x, _ in per_silo) for b in batches]

    def ours(index: int) -> None:
        engine.train(contexts[index], start)

    peer = OpacusSilos(model, mechanism, lr=0.1, device=device)
    seconds_ours = timed(ours, repeats, device)
    seconds_opacus = timed(lambda index: peer.run(batches[index]), repeats, device)
    measured = examples[1:]
    ours_rate = median([n / s for n, s in zip(measured, seconds_ours)])
    opacus_rate = median([n / s for n, s in zip(measured, seconds_opacus)])
    return {
        "model": label,
        "params": int(start.shape[1]),
        "path": engine.gradient_path,
        "silos": silos,
        "steps": max(mechanism.steps_per_pass),
        "examples_per_pass": int(median(measured)),
        "sigma": round(mechanism.noise_multipliers[0], 3),
        "gdpfed_examples_per_s": ours_rate,
        "opacus_examples_per_s": opacus_rate,
        "ratio": ours_rate / opacus_rate,
        "load": load_average(),
    }


def timed(fn: Any, repeats: int, device: Any) -> list[float]:
    """Seconds of ``fn(1) .. fn(repeats)`` after the warm-up ``fn(0)``, synchronising a GPU."""
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn(0)
    sync()
    seconds = []
    for index in range(1, repeats + 1):
        begin = time.perf_counter()
        fn(index)
        sync()
        seconds.append(time.perf_counter() - begin)
    return seconds


def opacus_batches(engine: Any, ctx: Any, device: Any) -> list[list[tuple[Any, Any]]]:
    """Our engine's Poisson samples for ``ctx``, per silo and step, as ``(x, y)`` tensors on ``device``."""
    rows, valid, active = engine.sample(ctx, 0)
    dataset = engine.dataset
    out = []
    for k in range(engine.num_silos):
        steps = []
        for s in range(rows.shape[1]):
            if not bool(active[k, s]):
                continue
            chosen = rows[k, s][valid[k, s]]
            steps.append((dataset.train_x[chosen].to(device), dataset.train_y[chosen].to(device)))
        out.append(steps)
    return out


class OpacusSilos:
    """One Opacus ``GradSampleModule`` + ``DPOptimizer`` per silo, built once (not timed)."""

    def __init__(self, model: Any, mechanism: Any, lr: float, device: Any) -> None:
        import copy

        import torch
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        self.silos = []
        for k, sigma in enumerate(mechanism.noise_multipliers):
            wrapped = GradSampleModule(copy.deepcopy(model).to(device), loss_reduction="mean")
            optimizer = DPOptimizer(
                torch.optim.SGD(wrapped.parameters(), lr=lr),
                noise_multiplier=sigma,
                max_grad_norm=mechanism.clip_norm,
                expected_batch_size=round(mechanism.sampling_rates[k] * mechanism.num_samples[k]),
                loss_reduction="mean",
            )
            self.silos.append((wrapped, optimizer))

    def run(self, batches: list[list[tuple[Any, Any]]]) -> None:
        import warnings

        from torch.nn import functional as F

        with warnings.catch_warnings():
            # Opacus' hooks on a first layer whose input needs no gradient: harmless, said every step
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            for (wrapped, optimizer), steps in zip(self.silos, batches):
                for x, y in steps:
                    optimizer.zero_grad(set_to_none=True)
                    F.cross_entropy(wrapped(x), y).backward()
                    optimizer.step()
