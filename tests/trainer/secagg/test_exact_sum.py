"""exact_sum and parallel clients release exactly what the serial protocol releases, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from accounting.errors import InvalidInputError
from planner.schema import SecaggMode
from trainer.secagg import SecAggResult, choose_params, exact_sum, secure_sum
from trainer.secagg.parallel import fork_available
from trainer.secagg.protocol import new_session


def _same(a: SecAggResult, b: SecAggResult) -> None:
    assert (a.aborted, a.survivors, a.dropped, a.reason) == (b.aborted, b.survivors, b.dropped, b.reason)
    if a.sum is None:
        assert b.sum is None
    else:
        assert b.sum is not None and a.sum.dtype == b.sum.dtype
        assert a.sum.tobytes() == b.sum.tobytes()  # bit-identical, signed zeros included


def _vectors(ids: list[int], dimension: int, rng: np.random.Generator, grid: float | None) -> dict[int, np.ndarray]:
    vectors = {u: rng.uniform(-1, 1, dimension) for u in ids}
    if grid is not None:  # on the fixed-point grid, as the round engine's vectors are
        vectors = {u: np.round(v * grid) / grid for u, v in vectors.items()}
    return vectors


def _cases() -> list[tuple]:
    """Random sessions (full and SecAgg+) with random dropouts, plus one of each abort kind."""
    rng = np.random.default_rng(2024)
    cases = []
    for index in range(24):
        n = int(rng.integers(2, 40))
        threshold = int(rng.integers(1, n + 1))
        mode = "sparse" if index % 2 else "full"
        ids = sorted(int(u) for u in rng.choice(10_000, size=n, replace=False))
        drops = rng.random(n)
        early = [u for u, r in zip(ids, drops) if r < 0.15]
        late = [u for u, r in zip(ids, drops) if 0.15 <= r < 0.25]
        cases.append((f"random-{index}-{mode}", ids, threshold, mode, early, late, index % 3 == 0))
    ids = list(range(12))
    cases += [
        ("too-few-masked", ids, 6, "full", ids[:7], [], False),
        ("too-few-responders", list(range(10)), 6, "full", [0, 1], [2, 3, 4], False),
        ("group-short-of-shares", ids, 6, "sparse", ids[:6], [], False),
        ("all-survive", list(range(30)), 30, "sparse", [], [], True),
        ("one-client", [5], 1, "full", [], [], False),
    ]
    return cases


@pytest.mark.parametrize(("name", "ids", "threshold", "mode", "early", "late", "grid"), _cases())
def test_exact_sum_is_the_protocol_bit_for_bit(name, ids, threshold, mode, early, late, grid) -> None:
    rng = np.random.default_rng(len(name))
    params = choose_params(len(ids), threshold, 1.0, mode=mode, dropout_fraction=0.25 if mode == "sparse" else 0.0)
    vectors = _vectors(ids, 37, rng, params.scale if grid else None)
    for seed in (0, 9):
        protocol = secure_sum(vectors, params, seed=seed, drop_before_masking=early, drop_before_unmasking=late)
        _same(protocol, exact_sum(vectors, params, seed=seed, drop_before_masking=early, drop_before_unmasking=late))


def test_the_cases_cover_every_outcome() -> None:
    """Guard: the cases above release sums and hit each abort the server can decide."""
    reasons = set()
    for _name, ids, threshold, mode, early, late, _ in _cases():
        params = choose_params(len(ids), threshold, 1.0, mode=mode, dropout_fraction=0.25 if mode == "sparse" else 0.0)
        result = exact_sum({u: np.zeros(3) for u in ids}, params, seed=0, drop_before_masking=early,
                           drop_before_unmasking=late)
        reason = result.reason or ""
        kinds = {"sent masked inputs": "masked", "answered the unmasking": "responders", "needed to unmask": "shares"}
        reasons.add("released" if not result.aborted else next(v for k, v in kinds.items() if k in reason))
    assert reasons == {"released", "masked", "responders", "shares"}


def test_exact_sum_aborts_on_a_disconnected_ring_like_the_protocol() -> None:
    params = choose_params(10, 2, 1.0, mode="sparse", neighbours=2)
    vectors = {u: np.full(4, 0.25) for u in range(10)}
    graph = new_session(list(vectors), params, seed=3).graph
    ring = [0]
    while len(ring) < 10:
        ring.append(next(v for v in graph[ring[-1]] if v not in ring))
    drops = [ring[0], ring[5]]
    protocol = secure_sum(vectors, params, seed=3, drop_before_masking=drops)
    assert protocol.aborted and "disconnected" in (protocol.reason or "")
    _same(protocol, exact_sum(vectors, params, seed=3, drop_before_masking=drops))


def test_exact_sum_refuses_what_the_protocol_refuses() -> None:
    params = choose_params(3, 2, 1.0)
    good = {0: np.zeros(4), 1: np.zeros(4), 2: np.zeros(4)}
    for run in (secure_sum, exact_sum):
        with pytest.raises(InvalidInputError) as info:
            run({**good, 1: np.full(4, 1.5)}, params, seed=0)
        assert info.value.field == "vectors[1]"
        with pytest.raises(InvalidInputError, match="twice"):
            run(good, params, seed=0, drop_before_masking=[0], drop_before_unmasking=[0])


@pytest.mark.skipif(not fork_available(), reason="parallel clients need fork (Linux)")
@pytest.mark.parametrize("mode", ["full", "sparse"])
def test_parallel_clients_give_the_serial_result(mode: SecaggMode) -> None:
    rng = np.random.default_rng(5)
    ids = sorted(int(u) for u in rng.choice(1000, size=30, replace=False))
    params = choose_params(30, 12, 1.0, mode=mode, dropout_fraction=0.25 if mode == "sparse" else 0.0)
    vectors = _vectors(ids, 101, rng, None)
    early, late = ids[3:6], ids[10:12]
    serial = secure_sum(vectors, params, seed=4, drop_before_masking=early, drop_before_unmasking=late)
    assert not serial.aborted
    for workers in (2, 3):
        parallel = secure_sum(vectors, params, seed=4, drop_before_masking=early, drop_before_unmasking=late,
                              workers=workers)
        _same(serial, parallel)
        assert parallel.keystream_bytes == serial.keystream_bytes > 0
    # An abort and an invalid vector surface from the workers exactly as from the serial path.
    early = ids[:20]
    _same(secure_sum(vectors, params, seed=4, drop_before_masking=early),
          secure_sum(vectors, params, seed=4, drop_before_masking=early, workers=2))
    # The driver hosts the first slice itself (ids[2]), a child the second (ids[17]).
    for bad in (ids[2], ids[17]):
        with pytest.raises(InvalidInputError) as info:
            secure_sum({**vectors, bad: np.full(101, np.nan)}, params, seed=4, workers=2)
        assert info.value.field == f"vectors[{bad}]"
