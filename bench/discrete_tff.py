"""``gdpfed bench discrete``, last table: gdpfed's discrete pipeline against TFF's DistributedDpSumFactory.

One aggregation round of n clients at dimension d, without the secure-aggregation
cryptography on either side (TFF's test context runs its secure modular sum as a plain
modular sum; here the clients' encoded shares are summed mod 2^b with
``trainer.secagg.discrete.modular_sum``), so what is timed is each side's published
pipeline: per client clip, scale, randomised Hadamard rotation, conditional randomised
rounding, Skellam share, mod 2^b; at the server the modular sum, decoding, unrotation and
rescaling. gdpfed's clients run one at a time (as deployed clients do), TFF's through its
runtime. Same noise multiplier, clip and number of clients; each side picks its own scale and
bit width (gdpfed the planner's, ``planner.discrete``; TFF its own from ``bits = 20``).

TFF cannot share gdpfed's environment (it pins numpy 1.x and TensorFlow 2.14), so its side runs
``bench/peers/tff_distributed_dp.py`` under the interpreter named by ``GDPFED_TFF_PYTHON`` in a
subprocess of the same benchmark run; without it the table says how to run it
(docs/benchmarks.md, "Discrete vs TFF").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from planner.discrete import bits_for, choose_scale, rounded_l2_bound
from trainer.secagg import discrete as dm

TFF_PYTHON_VARIABLE = "GDPFED_TFF_PYTHON"
TFF_PEER = Path(__file__).with_name("peers") / "tff_distributed_dp.py"
NOISE_MULTIPLIER = 1.0
TFF_BITS = 20


def gdpfed_round_s(clients: int, dimension: int, repeats: int) -> tuple[float, int]:
    """Median seconds of one round of ``clients`` shares (one at a time), their modular sum and the decode; and b."""
    scale = choose_scale(1.0, dimension)
    l2_bound = rounded_l2_bound(1.0, scale, dimension)
    share_variance = (NOISE_MULTIPLIER * l2_bound) ** 2 / clients
    bits, _ = bits_for(1e-8, clients, 1.0, scale, dimension, share_variance)
    params = dm.DiscreteParams.derived(1.0, scale, dimension, share_variance, bits)
    rng = np.random.default_rng(0)
    updates = rng.normal(size=(clients, dimension)) / np.sqrt(dimension)
    signs = dm.rotation_signs(0, dimension)

    def one_round() -> np.ndarray:
        shares = np.stack([dm.client_share(update, params, signs, rng) for update in updates])
        return dm.server_decode(dm.modular_sum(shares, bits), params, signs)

    one_round()  # warm-up, as TFF's side gets one
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_round()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), bits


def tff_round_s(settings: list[dict[str, Any]], python: str) -> dict[tuple[int, int], float | str]:
    """TFF's median round seconds per (clients, dimension), from the peer program; a reason where it failed.

    The peer runs in a session of its own and its output goes to files, not pipes: TFF's test
    context starts a worker binary that outlives the Python process and would hold a pipe open,
    so the whole process group is killed once the peer has answered."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            peer = subprocess.Popen(
                [python, str(TFF_PEER), json.dumps(settings)], stdout=out, stderr=err, text=True,
                start_new_session=True,
            )
        except OSError as error:
            return {(s["clients"], s["dimension"]): f"not run: {error}" for s in settings}
        try:
            code: int | str = peer.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            code = "timed out after 1800 s"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(peer.pid, signal.SIGKILL)
            peer.wait()
        out.seek(0)
        err.seek(0)
        lines, errors = out.read().splitlines(), err.read().strip().splitlines()
    found: dict[tuple[int, int], float | str] = {}
    for line in lines:
        if line.startswith("{"):
            row = json.loads(line)
            found[(row["clients"], row["dimension"])] = float(row["round_s"])
    reason = f"failed ({code}): {(errors or ['no output'])[-1][:160]}"
    return {(s["clients"], s["dimension"]): found.get((s["clients"], s["dimension"]), reason) for s in settings}


def tff_rows(settings: list[tuple[int, int]], repeats: int) -> list[dict[str, Any]]:
    """Per (clients, d): gdpfed's and TFF's median round seconds and TFF / gdpfed."""
    python = os.environ.get(TFF_PYTHON_VARIABLE)
    peer_settings = [
        {"clients": n, "dimension": d, "bits": TFF_BITS, "noise_multiplier": NOISE_MULTIPLIER, "repeats": repeats}
        for n, d in settings
    ]
    peer = (
        tff_round_s(peer_settings, python)
        if python
        else {(n, d): f"not run: set {TFF_PYTHON_VARIABLE} to a Python with tensorflow-federated" for n, d in settings}
    )
    rows = []
    for n, d in settings:
        ours, bits = gdpfed_round_s(n, d, repeats)
        theirs = peer[(n, d)]
        rows.append(
            {
                "clients": n,
                "d": d,
                "gdpfed_bits": bits,
                "gdpfed_round_s": round(ours, 4),
                "tff_round_s": round(theirs, 4) if isinstance(theirs, float) else theirs,
                "tff_over_gdpfed": round(theirs / ours, 2) if isinstance(theirs, float) else None,
            }
        )
    return rows
