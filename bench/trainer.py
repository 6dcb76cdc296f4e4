"""``gdpfed bench trainer``: client updates per second, batched (``torch.func``) vs loop engine.

Both engines train the same clients from the same global parameters on the same
minibatches (``trainer/engines/batches.py``) in one process; the ratio is batched / loop.
Workloads: the small CNN on ``digits`` and the LEAF-size character LSTM (embedding 8,
2 x 256) on ``shakespeare`` with 8, 32 and 128 clients a round, 5 local steps (batch 16
for the CNN, 16 windows of 80 characters for the LSTM); in full mode also the MLP on
``synthetic`` (a model small enough that per-step Python overhead, not arithmetic,
dominates the loop engine). The plays come from
``$GDPFED_SHAKESPEARE`` or ``../shared/data/tinyshakespeare.txt`` beside the repository;
without either a generated play is used and the table says so. ``quick``: 8 clients,
1 step. Each engine is warmed up once per model before timing.

``device`` (``gdpfed bench trainer --device cuda``) runs both engines on that device with
IEEE float32 math (``trainer.device.configure_float_math``), synchronising before each
clock reading. On a CUDA device the workloads are those of the GPU table in
``docs/benchmarks.md`` ("Training engines on a GPU"): CNN and MLP (200-200) on
``digits`` with 8, 32, 128 and 512 clients, the LSTM with 8, 32 and 128, and
ResNet-18 on ``digits`` (2 local steps) with 8 and 32.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Literal

from bench.report import median, time_calls

CLIENT_COUNTS = (8, 32, 128)
GPU_CLIENT_COUNTS = (8, 32, 128, 512)
GPU_RESNET_CLIENT_COUNTS = (8, 32)
LOCAL_STEPS = 5
RESNET_LOCAL_STEPS = 2
BATCH_SIZE = 16
TAKES_DEVICE = True  # gdpfed bench trainer --device


def run(quick: bool, device: str = "cpu") -> list[tuple[str, list[dict[str, Any]]]]:
    import tempfile

    import torch

    from trainer.data import load_dataset
    from trainer.device import choose_device, configure_float_math

    chosen = choose_device(device)
    configure_float_math(allow_tf32=False)
    gpu = chosen.type == "cuda" and not quick
    counts = (8,) if quick else CLIENT_COUNTS
    wide = GPU_CLIENT_COUNTS if gpu else counts
    steps = 1 if quick else LOCAL_STEPS
    rows: list[dict[str, Any]] = []
    digits = load_dataset("digits", num_clients=max(wide), seed=0)
    rows += _measure("cnn", digits, "digits", {}, wide, steps, repeats=1 if quick else 3, device=chosen)
    if gpu:
        rows += _measure("mlp", digits, "digits", {}, wide, steps, repeats=3, device=chosen)
    elif not quick:
        synthetic = load_dataset("synthetic", num_clients=max(counts), partition="natural", seed=0)
        rows += _measure("mlp", synthetic, "synthetic", {}, counts, steps, repeats=3, device=chosen)
    with tempfile.TemporaryDirectory() as scratch:
        path, source = shakespeare_source(Path(scratch))
        plays = load_dataset(
            f"shakespeare:{path}", num_clients=max(counts), partition="natural", seed=0
        )
        rows += _measure("lstm", plays, f"shakespeare ({source})", {}, counts, steps, repeats=1, device=chosen)
    if gpu:
        rows += _measure(
            "resnet18", digits, "digits", {}, GPU_RESNET_CLIENT_COUNTS, RESNET_LOCAL_STEPS, repeats=1, device=chosen
        )
    for row in rows:
        row["threads"] = torch.get_num_threads()
        row["device"] = str(chosen)
    return [(f"Training engines: client updates per second (batched vs loop, {chosen})", rows)]


def shakespeare_source(scratch: Path) -> tuple[Path, str]:
    """The plays file to use and how it was found (env var, shared file, or generated)."""
    configured = os.environ.get("GDPFED_SHAKESPEARE")
    if configured and Path(configured).is_file():
        return Path(configured), "GDPFED_SHAKESPEARE"
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare.txt"
    if shared.is_file():
        return shared, "tinyshakespeare.txt"
    path = scratch / "generated_plays.txt"
    path.write_text(_generated_play(), encoding="ascii")
    return path, "generated text: tinyshakespeare.txt not found"


def _generated_play() -> str:
    """A seeded stand-in: 150 roles speaking random words, in the plays' block format."""
    import numpy as np

    rng = np.random.default_rng(0)
    words = "the and to of my you that in is not with me it for his be your this but he have".split()
    blocks = []
    for _ in range(3000):
        role = f"Speaker {int(rng.integers(150))}"
        speech = " ".join(rng.choice(words, int(rng.integers(8, 60))))
        blocks.append(f"{role}:\n{speech.capitalize()}.\n")
    return "\n".join(blocks)


def _measure(
    model_name: str,
    dataset: Any,
    label: str,
    options: dict[str, Any],
    counts: tuple[int, ...],
    steps: int,
    repeats: int,
    device: Any,
) -> list[dict[str, Any]]:
    import torch

    from trainer.engines import LocalTrainingConfig, flatten_params, train_clients
    from trainer.models import build_model

    model = build_model(model_name, dataset, seed=0, **options).to(device)
    start = flatten_params(model)
    config = LocalTrainingConfig(local_steps=steps, batch_size=BATCH_SIZE, lr=0.05, momentum=0.9)

    engines: tuple[Literal["loop", "batched"], ...] = ("loop", "batched")

    def call(engine: Literal["loop", "batched"], clients: int) -> None:
        train_clients(engine, model, start, dataset, range(clients), config, seed=0,
                      round_index=1, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # kernels run asynchronously: stop the clock after them

    for engine in engines:
        call(engine, 2)  # warm-up: allocator, thread pool, first-call dispatch
    rows = []
    for clients in counts:
        seconds = {
            engine: median(time_calls(functools.partial(call, engine, clients), repeats=repeats, warmup=0))
            for engine in engines
        }
        loop_rate = clients / seconds["loop"]
        batched_rate = clients / seconds["batched"]
        rows.append({
            "model": model_name,
            "params": sum(p.numel() for p in model.parameters()),
            "dataset": label,
            "clients": clients,
            "local_steps": steps,
            "batch": BATCH_SIZE,
            "loop_updates_per_s": loop_rate,
            "batched_updates_per_s": batched_rate,
            "ratio": batched_rate / loop_rate,
        })
    return rows
