"""TFF's DistributedDpSumFactory (distributed Skellam), one aggregation round of n clients at dimension d.

Run by ``gdpfed bench discrete`` under the interpreter named by ``GDPFED_TFF_PYTHON`` (an
environment with tensorflow-federated; it cannot share gdpfed's: TFF pins numpy 1.x and
TensorFlow 2.14). Imports nothing from gdpfed. Reads a JSON list of settings on argv[1]
(``clients``, ``dimension``, ``bits``, ``noise_multiplier``, ``repeats``) and prints one JSON
line per setting: the median seconds of ``process.next`` after one warm-up call.

TFF's test execution context runs the secure modular sum as a plain modular sum (no
cryptography), so a round here is the factory's published pipeline: client side clip (L2),
scale, randomised Hadamard rotation, conditional randomised rounding, Skellam noise share,
modular clip; server side the modular sum, unrotation and rescaling.
"""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import distributed_dp


def one_setting(clients: int, dimension: int, bits: int, noise_multiplier: float, repeats: int) -> dict:
    factory = distributed_dp.DistributedDpSumFactory(
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=clients,
        bits=bits,
        l2_clip=1.0,
        modclip_prob=1e-6,
        beta=float(np.exp(-0.5)),
        mechanism="distributed_skellam",
        rotation_type="hd",
        auto_l2_clip=False,
    )
    process = factory.create(tff.TensorType(np.float32, [dimension]))
    rng = np.random.default_rng(0)
    updates = [(rng.normal(size=dimension) / np.sqrt(dimension)).astype(np.float32) for _ in range(clients)]
    output = process.next(process.initialize(), updates)  # warm-up: traces and compiles the computation
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        output = process.next(output.state, updates)
        seconds.append(time.perf_counter() - start)
    return {"clients": clients, "dimension": dimension, "round_s": statistics.median(seconds), "tff": tff.__version__}


def main() -> None:
    tff.backends.test.set_sync_test_cpp_execution_context()
    for setting in json.loads(sys.argv[1]):
        print(json.dumps(one_setting(**setting)), flush=True)


if __name__ == "__main__":
    main()
