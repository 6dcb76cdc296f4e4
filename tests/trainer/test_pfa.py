"""PFA: the strict pool's released sum is projected onto the principal subspace of the
public pool's recent released sums; a no-op when it already lies there."""

from __future__ import annotations

import pytest
import torch

from accounting.errors import InvalidInputError
from tests.trainer.trainer_plans import hand_plan
from trainer.strategies.base import RoundContext
from trainer.units.client.strategies.pfa import PFAStrategy, principal_subspace, project, public_and_strict_pools
from trainer.units.client.strategies.plan import PlanStrategy

DIM = 40


def three_pool_plan():
    return hand_plan(
        [("strict", 1.0, 20, 0.5), ("medium", 2.0, 20, 0.5), ("loose", 4.0, 20, 0.5)],
        [("P1", ["strict"], 2.0, 1, 1.0), ("P2", ["medium"], 1.5, 1, 1.0), ("P3", ["loose"], 1.0, 1, 1.0)],
        model_dim=DIM,
        method="gdpfed",
    )


def strategy(plan, **options):
    return PFAStrategy(plan, None, None, engine="batched", local=None, device=torch.device("cpu"), **options)


def low_rank_history(rank: int, rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` vectors in a random ``rank``-dimensional subspace, and an orthonormal basis of it."""
    g = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(DIM, rank, generator=g, dtype=torch.float64))
    coefficients = torch.randn(rows, rank, generator=g, dtype=torch.float64)
    return coefficients @ basis.T, basis.T


def test_subspace_of_low_rank_history_is_its_span():
    history, basis = low_rank_history(rank=3, rows=6, seed=0)
    found = principal_subspace(history, rank=5)
    assert found.shape == (3, DIM)  # zero singular values are dropped
    # same subspace: the projectors agree
    assert torch.allclose(found.T @ found, basis.T @ basis, atol=1e-10)


def test_projection_is_orthogonal_projection_onto_the_subspace():
    history, basis = low_rank_history(rank=2, rows=5, seed=1)
    x = torch.randn(DIM, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    projected = project(x, principal_subspace(history, rank=2))
    # least-squares reference: B (B^T B)^-1 B^T x with B the basis columns
    reference = basis.T @ torch.linalg.lstsq(basis.T, x.unsqueeze(1)).solution.squeeze(1)
    assert torch.allclose(projected, reference, atol=1e-10)
    assert abs(float((x - projected) @ basis[0])) < 1e-10
    assert float(projected.norm()) < float(x.norm())


def test_rank_keeps_the_top_directions():
    g = torch.Generator().manual_seed(3)
    strong, weak = torch.zeros(DIM, dtype=torch.float64), torch.zeros(DIM, dtype=torch.float64)
    strong[0], weak[1] = 1.0, 1.0
    history = torch.stack([10 * strong + 0.1 * weak * float(torch.randn(1, generator=g)) for _ in range(4)])
    basis = principal_subspace(history, rank=1)
    assert basis.shape == (1, DIM)
    assert abs(float(basis[0, 0])) > 0.999


def round_ctx(t: int) -> RoundContext:
    return RoundContext(round_index=t, global_round=t, seed=0)


def test_aggregate_is_a_no_op_when_strict_sum_lies_in_public_subspace():
    plan = three_pool_plan()
    pfa, plain = strategy(plan, rank=3, history=4), PlanStrategy(plan, None, None, engine="batched", local=None, device=torch.device("cpu"))
    history, basis = low_rank_history(rank=3, rows=4, seed=4)
    medium = torch.randn(DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    for t in range(3):  # warm the history with three public sums
        pfa.aggregate(round_ctx(t), {"P1": None, "P2": None, "P3": history[t]}, DIM)
    strict = basis.T @ torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    sums = {"P1": strict, "P2": medium, "P3": history[3]}
    assert torch.allclose(pfa.aggregate(round_ctx(3), sums, DIM), plain.aggregate(round_ctx(3), sums, DIM), atol=1e-12)


def test_aggregate_removes_the_strict_component_outside_the_subspace():
    plan = three_pool_plan()
    pfa = strategy(plan, rank=2, history=2)
    public, basis = low_rank_history(rank=2, rows=2, seed=6)
    orthogonal = torch.randn(DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    orthogonal -= basis.T @ (basis @ orthogonal)
    in_span = basis.T @ torch.tensor([1.0, 2.0], dtype=torch.float64)
    pfa.aggregate(round_ctx(0), {"P1": None, "P2": None, "P3": public[0]}, DIM)
    out = pfa.aggregate(round_ctx(1), {"P1": in_span + orthogonal, "P2": None, "P3": public[1]}, DIM)
    expected = (in_span + public[1]) / plan.scenario.participation
    assert torch.allclose(out, expected, atol=1e-12)


def test_history_keeps_the_last_rounds_and_survives_a_checkpoint():
    plan = three_pool_plan()
    pfa = strategy(plan, rank=2, history=2)
    vectors = [torch.full((DIM,), float(i), dtype=torch.float64) for i in range(1, 4)]
    for t, v in enumerate(vectors):
        pfa.aggregate(round_ctx(t), {"P1": None, "P2": None, "P3": v}, DIM)
    state = pfa.state_dict()
    assert torch.equal(state["public_history"], torch.stack(vectors[1:]))
    restored = strategy(plan, rank=2, history=2)
    restored.load_state_dict(state)
    x = torch.arange(DIM, dtype=torch.float64)
    sums = {"P1": x, "P2": None, "P3": vectors[2]}
    assert torch.equal(pfa.aggregate(round_ctx(3), sums, DIM), restored.aggregate(round_ctx(3), sums, DIM))


def test_public_and_strict_pools_and_refusal_for_one_pool():
    assert public_and_strict_pools(three_pool_plan()) == ("P3", "P1")
    one_pool = hand_plan(
        [("strict", 1.0, 20, 0.5), ("loose", 4.0, 20, 0.5)], [("P1", ["strict", "loose"], 2.0, 1, 1.0)], model_dim=DIM
    )
    with pytest.raises(InvalidInputError):
        strategy(one_pool)
