"""Adaptive clipping in the round engine (docs/trainer.md §Adaptive clipping; design note (f))."""

from __future__ import annotations

import json
import math
from dataclasses import replace as dataclasses_replace

import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from planner.adaptive_clip import adaptive_pools, effective_noise_multiplier
from planner.schema import AdaptiveClip, Plan
from planner.verify import verify_executable
from tests.trainer.test_fedhdp import ROUNDS, config
from tests.trainer.test_strategies import Interrupt
from tests.trainer.trainer_plans import hand_plan, quiet_progress
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.runner import execute_run, prepare_run
from trainer.strategies import Population, RoundContext, Strategy
from trainer.units.client.adaptive_clip import AdaptiveClipping
from trainer.units.client.mechanism import at_clip, pool_mechanisms, privatize, privatize_counted
from trainer.units.client.rounds import RoundEngine


def run(plan, data, out, strategy="plan", options=None, resume=False, progress=None):
    """test_fedhdp's run with the exact-sum execution (the protocol's release, bit for bit, faster)."""
    cfg = config(strategy=strategy, strategy_options=options or {}, secagg_execution="exact_sum")
    prepared = prepare_run(plan, plan.model_dump(mode="json"), cfg, out, resume=resume, dataset=data)
    return prepared, execute_run(prepared, progress=progress or quiet_progress(ROUNDS))


def with_adaptive_clip(plan: Plan, **settings: float) -> Plan:
    """``plan`` with an ``adaptive_clip`` block and the pools' sigma_Delta and sigma_b it implies."""
    scenario = plan.scenario.model_copy(update={"adaptive_clip": AdaptiveClip(**settings)})
    pools = adaptive_pools(scenario, plan.pools, {g.id: g.clip_norm for g in plan.groups})
    return plan.model_copy(update={"scenario": scenario, "pools": pools})


@pytest.fixture(scope="module")
def plan():
    return hand_plan(
        [("private", 3.0, 36, 0.5), ("out", None, 4, 0.5)],
        [("P1", ["private"], 1.0, 2, 1.0), ("P2", ["out"], 0.0, 1, 1.0)],
        rounds=ROUNDS, model_dim=700, method="gdpfed",
    )


@pytest.fixture(scope="module")
def data():
    from trainer.data import load_dataset

    return load_dataset("digits", num_clients=40, partition="one_label", seed=0, client_test_fraction=0.25)


@pytest.fixture(scope="module")
def fixed_run(plan, data, tmp_path_factory):
    """The plan's run with fixed clipping: the reference the adaptive runs are compared with."""
    out = tmp_path_factory.mktemp("fixed") / "run"
    run(plan, data, out)
    return out


class FixedNorms(Strategy):
    """Every client, every round; client c's update has norm ``norms[c]``; the model never moves."""

    def __init__(self, plan: Plan, norms: np.ndarray, dim: int) -> None:
        self.plan = plan
        self.norms = norms
        self.dim = dim
        self.adaptive_clip = AdaptiveClipping.from_plan(plan)

    def configure_round(self, ctx, population):
        return {g: np.asarray(c) for g, c in population.group_clients.items()}

    def client_update(self, ctx, global_params, clients, groups):
        direction = torch.ones(len(clients), self.dim, dtype=torch.float64) / math.sqrt(self.dim)
        return direction * torch.as_tensor(self.norms[clients], dtype=torch.float64)[:, None]

    def aggregate(self, ctx, pool_sums, dim):
        return torch.zeros(dim, dtype=torch.float64)

    def server_update(self, ctx, global_params, update):
        return global_params


def test_without_noise_the_clip_converges_to_the_target_quantile() -> None:
    clients, dim, kappa = 60, 8, 0.3
    norms = np.random.default_rng(5).lognormal(0.0, 1.0, clients)
    plan = with_adaptive_clip(
        hand_plan([("all", None, clients, 1.0)], [("P1", ["all"], 0.0, 1, 1.0)], rounds=120, model_dim=dim,
                  method="nonprivate"),
        initial_clip_norm=20.0, target_quantile=kappa, learning_rate=0.2,
    )
    assert plan.pools[0].count_noise_std == 0.0  # a pool without noise counts without noise
    strategy = FixedNorms(plan, norms, dim)
    engine = RoundEngine(plan, strategy, Population({"all": np.arange(clients)}), dim, rounds=120,
                         secagg_execution="exact_sum")
    params = torch.zeros(dim, dtype=torch.float64)
    clips, fractions = [], []
    for t in range(120):
        params, outcome = engine.run(RoundContext(t, t, 0), params)
        clips.append(outcome.clip_norm)
        fractions.append(outcome.unclipped_fraction)
        # noiseless: the released share is the exact share of updates within the round's clip
        assert outcome.unclipped_fraction == pytest.approx(np.mean(norms <= outcome.clip_norm), abs=1e-12)
    assert clips[0] == 20.0
    final = strategy.adaptive_clip.clip_norm
    # at the fixed point the share of norms within S is kappa, to one client either side
    assert abs(np.mean(norms <= final) - kappa) <= 1.5 / clients
    assert np.quantile(norms, kappa - 2 / clients) <= final <= np.quantile(norms, kappa + 2 / clients)
    assert clips[1] == pytest.approx(20.0 * math.exp(-0.2 * (1.0 - kappa)))


def test_the_round_mechanism_scales_noise_with_the_clip(plan) -> None:
    adaptive = with_adaptive_clip(plan, count_noise_std=2.0)
    [private, _] = pool_mechanisms(adaptive, 700, ROUNDS, adaptive=True)
    sigma_delta = (1.0 - 0.25**2) ** -0.5  # z_eff = 1, sigma_b = 2
    assert private.update_noise_multiplier == pytest.approx(sigma_delta)
    assert effective_noise_multiplier(private.update_noise_multiplier, 2.0) == pytest.approx(1.0)
    round_mechanism = at_clip(private, 0.25, 700)
    assert round_mechanism.share_std == pytest.approx(sigma_delta * 0.25 / math.sqrt(2))
    assert round_mechanism.clip_norms == {"private": 0.25}
    assert round_mechanism.count_share_std == pytest.approx(2.0 / math.sqrt(2))
    rng = np.random.default_rng(3)
    long = rng.standard_normal(700)  # norm ~26: clipped
    vector, encoded = privatize_counted(long, 0.25, round_mechanism, np.random.default_rng(1))
    assert vector.shape == (701,) and np.linalg.norm(encoded) <= 0.25
    plain, _ = privatize(long, 0.25, round_mechanism, np.random.default_rng(1))
    assert np.array_equal(vector[:700], plain)  # the update part draws what fixed clipping draws
    counts = [privatize_counted(long * 1e-3, 0.25, round_mechanism, np.random.default_rng(s))[0][700] for s in range(4000)]
    # unclipped (norm 0.026): b - 1/2 = +1/2, with the count's share std sigma_b / sqrt(m_P)
    assert np.mean(counts) == pytest.approx(0.5, abs=0.1)
    assert np.std(counts) == pytest.approx(2.0 / math.sqrt(2), rel=0.05)
    assert all(float(c) * round_mechanism.scale == round(float(c) * round_mechanism.scale) for c in counts[:50])


def test_huge_count_noise_and_no_learning_rate_is_fixed_clipping_bit_for_bit(plan, data, fixed_run, tmp_path) -> None:
    # sigma_b -> infinity: sigma_Delta -> z_eff; eta_b = 0 keeps S = C: the run is fixed clipping's
    adaptive = with_adaptive_clip(plan, count_noise_std=1e8, learning_rate=0.0)
    assert adaptive.pools[0].update_noise_multiplier == adaptive.pools[0].noise_multiplier
    run(adaptive, data, tmp_path / "adaptive", "plan", {"adaptive_clip": True})
    a = load_checkpoint(fixed_run / "checkpoint.pt")
    b = load_checkpoint(tmp_path / "adaptive" / "checkpoint.pt")
    assert torch.equal(a["global_params"], b["global_params"])
    assert a["ledger"] == b["ledger"]
    assert [r.clip_norm for r in read_rounds(tmp_path / "adaptive" / "rounds.jsonl")] == [1.0] * ROUNDS
    assert all(r.clip_norm is None for r in read_rounds(fixed_run / "rounds.jsonl"))


def test_fixed_clipping_stays_the_default_and_ignores_the_block(plan, data, fixed_run, tmp_path) -> None:
    adaptive = with_adaptive_clip(plan, learning_rate=0.5)
    verify_executable(adaptive)
    prepared, _ = run(adaptive, data, tmp_path / "block", "fedhdp", {"personalize": False})
    assert prepared.strategy.adaptive_clip is None
    # the block was unused without a word (the documented fedhdp command leaves the option out)
    warning = ("the plan's adaptive_clip block is not used: this run clips at the plan's fixed C (the noise is the "
               "planned z_eff times C, as the ledger counts); turn it on with --strategy-option adaptive_clip=true")
    assert prepared.warnings.count(warning) == 1
    assert json.loads((tmp_path / "block" / "summary.json").read_text())["warnings"].count(warning) == 1
    assert not any("adaptive_clip" in w for w in json.loads((fixed_run / "summary.json").read_text())["warnings"])
    a = load_checkpoint(fixed_run / "checkpoint.pt")
    b = load_checkpoint(tmp_path / "block" / "checkpoint.pt")
    assert torch.equal(a["global_params"], b["global_params"]) and a["ledger"] == b["ledger"]


def test_adaptive_runs_log_the_clip_account_as_planned_and_resume_exactly(plan, data, fixed_run, tmp_path) -> None:
    adaptive = with_adaptive_clip(plan, initial_clip_norm=2.0, target_quantile=0.5, learning_rate=0.5)
    options = {"adaptive_clip": True, "ratios": {"P1": 0.5}}
    whole, _ = run(adaptive, data, tmp_path / "whole", "fedhdp", options)
    records = read_rounds(tmp_path / "whole" / "rounds.jsonl")
    clips = [r.clip_norm for r in records]
    assert clips[0] == 2.0 and len(set(clips)) == ROUNDS  # S^t moves every round
    for before, after, record in zip(clips, clips[1:], records):
        assert after == pytest.approx(before * math.exp(-0.5 * (record.unclipped_fraction - 0.5)), rel=1e-12)
    whole_state = load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    assert whole_state["ledger"] == load_checkpoint(fixed_run / "checkpoint.pt")["ledger"]  # z_eff: unchanged
    with pytest.raises(KeyboardInterrupt):
        run(adaptive, data, tmp_path / "split", "fedhdp", options, progress=Interrupt(2))
    resumed, _ = run(adaptive, data, tmp_path / "split", "fedhdp", options, resume=True)
    split = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert torch.equal(whole_state["global_params"], split["global_params"])
    assert resumed.strategy.adaptive_clip.clip_norm == whole.strategy.adaptive_clip.clip_norm
    assert [r.clip_norm for r in read_rounds(tmp_path / "split" / "rounds.jsonl")] == clips
    assert all(torch.equal(resumed.strategy.personal[c], whole.strategy.personal[c]) for c in whole.strategy.personal)


def test_the_unused_block_warning_names_the_way_to_turn_it_on(plan) -> None:
    from trainer.units.client.run import unused_adaptive_clip_warning

    adaptive = with_adaptive_clip(plan)
    fixed = type("Fixed", (), {"adaptive_clip": None})()
    running = type("Running", (), {"adaptive_clip": object()})()
    assert unused_adaptive_clip_warning(plan, fixed, "plan") is None  # no block: nothing to say
    assert unused_adaptive_clip_warning(adaptive, running, "plan") is None  # the block is used
    assert str(unused_adaptive_clip_warning(adaptive, fixed, "pfa")).endswith(
        "strategy pfa has none; plan and fedhdp run it with --strategy-option adaptive_clip=true")
    # fixed clipping adds z_eff C: each pool's noise_std is its noise_multiplier (z_eff, what
    # the ledger composes) times its clip norm, so the unused block spends nothing unaccounted
    for pool in adaptive.pools:
        clip = max(adaptive.group(g).clip_norm for g in pool.groups)
        assert pool.noise_std == pytest.approx(pool.noise_multiplier * clip)
        assert [m.share_std for m in pool_mechanisms(adaptive, 700, ROUNDS) if m.pool_id == pool.id] == [
            pytest.approx(pool.noise_std / math.sqrt(pool.secagg_threshold))]


def test_adaptive_clip_needs_the_plans_block(plan, data, tmp_path) -> None:
    # (it runs on Flower too: tests/trainer/flower/test_fedhdp.py)
    with pytest.raises(InvalidInputError) as caught:
        run(plan, data, tmp_path / "no_block", "fedhdp", {"adaptive_clip": True})
    assert caught.value.field == "strategy-option adaptive_clip" and "no adaptive_clip block" in caught.value.reason


def test_experiment_cells_recorded_before_the_option_keep_their_fingerprints() -> None:
    from trainer.experiments.config import MethodEntry, resolve_method

    # a recorded cell's fingerprint hashes its options: the new option at its default is left out
    assert resolve_method("gdpfed", {}).options == {}
    assert "adaptive_clip" not in resolve_method("fedhdp", {}).options
    chosen = resolve_method(MethodEntry(name="ac", plan="gdpfed", strategy="fedhdp", options={"adaptive_clip": True}), {})
    assert chosen.options["adaptive_clip"] is True


def adaptive_discrete_plan() -> Plan:
    """run_digests' client plan with an adaptive_clip block and the discrete blocks the planner
    states for it (planner/finalize.py: adaptive pools first, then the blocks)."""
    from planner.finalize import with_discrete
    from tests.trainer.run_digests import client_plan
    from tests.trainer.run_digests import with_adaptive_clip as adaptive

    plan = adaptive(client_plan(), learning_rate=0.5)
    stated = with_discrete(plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"report_discrete": True})}))
    assert all(pool.discrete is not None and pool.discrete.count_factor >= 1 for pool in stated.pools)
    return stated


def test_adaptive_clipping_runs_the_discrete_mechanism_and_the_ledger_counts_its_count(tmp_path) -> None:
    """The discrete mechanism (the default on a plan that states its blocks) runs adaptive
    clipping: the clip moves as the released noisy count says, and the ledger is one
    Poisson-subsampled Skellam event per round whose sensitivities include the count's +-m,
    recomputed here from the block's public parameters (docs/secure-aggregation.md §Discrete
    noise, "Adaptive clipping")."""
    from accounting import epsilon_of_events
    from accounting.events import PoissonSampledSkellam
    from planner.discrete import rounded_l1_bound, rounded_l2_bound
    from planner.report import discrete_lines
    from trainer.data import load_dataset
    from trainer.runner import TrainConfig

    plan = adaptive_discrete_plan()
    verify_executable(plan)
    assert any(f"p_loose: m = {plan.pool('p_loose').discrete.count_factor}," in line  # type: ignore[union-attr]
               for line in discrete_lines(plan))
    dataset = load_dataset("digits", num_clients=plan.scenario.total_clients, seed=0)
    config = TrainConfig.model_validate({"dataset": "digits", "model": "mlp", "model_options": {"hidden": [16]},
                                         "rounds": 3, "strategy_options": {"adaptive_clip": True},
                                         "secagg_execution": "exact_sum"})
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run", dataset=dataset)
    execute_run(prepared, progress=quiet_progress(3))
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["secagg_mechanism"] == "skellam"
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    clips = [r.clip_norm for r in records]
    assert clips[0] == plan.scenario.clip_norm and len(set(clips)) == 3  # S^t moves every round
    for before, after, record in zip(clips, clips[1:], records):
        assert record.unclipped_fraction is not None
        assert after == pytest.approx(before * math.exp(-0.5 * (record.unclipped_fraction - 0.5)), rel=1e-12)
    for group in plan.groups:
        block = plan.pool(group.pool).discrete
        assert block is not None
        d2 = rounded_l2_bound(group.clip_norm, block.scale, plan.scenario.model_dim)
        d1 = rounded_l1_bound(d2, plan.scenario.model_dim)
        m = block.count_factor
        event = PoissonSampledSkellam(sampling_rate=group.sampling_rate, variance=block.share_variance * (
            block.min_survivors - block.colluding_clients), l2_sensitivity=math.sqrt(d2 * d2 + m * m),
            l1_sensitivity=d1 + m, steps=3)
        delta = plan.scenario.delta - 3 * block.wrap_probability_per_round
        expected = epsilon_of_events([event], delta=delta, accountant=plan.scenario.accountant).epsilon
        assert written["epsilon_spent"][group.id] == pytest.approx(expected, rel=1e-12)
        # the count costs: the update alone would have been accounted lower
        alone = event.model_copy(update={"l2_sensitivity": d2, "l1_sensitivity": d1})
        assert epsilon_of_events([alone], delta=delta, accountant=plan.scenario.accountant).epsilon < expected


def test_the_discrete_count_coordinate_releases_the_count_with_its_planned_skellam_noise() -> None:
    """Clients of an adaptive plan's discrete pool, through share, the modular sum and decode:
    the update comes back at S^t (the grid is relative to the clip), and 2 m (count - true
    count) is Skellam of the survivors' summed share variance (exact pmf, chi-square), over a
    random number of survivors."""
    from tests.trainer.test_discrete_rounds import skellam_chi_square
    from trainer.secagg import discrete as dm
    from trainer.units.client.discrete import DiscretePool, discrete_pools

    plan = adaptive_discrete_plan()
    dim = plan.scenario.model_dim
    pool = discrete_pools(plan, dim)["p_loose"]
    group = plan.pool("p_loose").groups[0]
    m, bits, variance = pool.count_factor, pool.bits, pool.mechanism.share_variance
    assert pool.mechanism.count_noise_std == pytest.approx(math.sqrt(pool.mechanism.total_variance) / (2 * m))
    rng = np.random.default_rng(11)
    signs = dm.rotation_signs(7, dim)
    clip_t = 0.37 * pool.mechanism.clip_norm  # a round's S^t, below the block's C
    norms = np.array([0.1, 0.3, 0.36, 0.38, 0.5, 2.0, 0.2, 0.9]) * pool.mechanism.clip_norm
    updates = rng.standard_normal((norms.size, dim))
    updates *= (norms / np.linalg.norm(updates, axis=1))[:, None]
    true_count = float(np.sum(np.where(norms <= clip_t, 0.5, -0.5)))

    # without noise the release is the clipped sum at S^t (to the rounding) and the exact count
    quiet_params = {g: dataclasses_replace(p, share_variance=0.0) for g, p in pool.group_params.items()}
    quiet = DiscretePool(pool.pool_id, pool.mechanism, quiet_params)
    total = dm.modular_sum(np.stack([quiet.share(u, group, signs, rng, clip_t) for u in updates]), bits)
    released = quiet.decode(total, signs, clip_t)
    assert released.shape == (dim + 1,) and released[-1] == true_count
    clipped = dm.clip(updates, clip_t).sum(axis=0)
    scale, padded = pool.mechanism.scale, pool.mechanism.padded_dimension
    rounding = norms.size * math.sqrt(padded) / scale * clip_t / pool.mechanism.clip_norm
    assert np.linalg.norm(released[:-1] - clipped) <= rounding
    assert np.linalg.norm(released[:-1] - clipped) < 0.05 * np.linalg.norm(clipped)
    # a run without adaptive clipping still sends the count (accounted) and releases the update alone
    assert quiet.decode(total, signs).shape == (dim,)

    samples = []
    for _ in range(400):
        survivors = int(rng.integers(3, norms.size + 1))
        shares = np.stack([pool.share(u, group, signs, rng, clip_t) for u in updates[:survivors]])
        count = pool.decode(dm.modular_sum(shares, bits), signs, clip_t)[-1]
        noise = 2 * m * (count - float(np.sum(np.where(norms[:survivors] <= clip_t, 0.5, -0.5))))
        assert abs(noise - round(noise)) < 1e-9  # an integer: the count is exact but for its noise
        samples.append((np.array([int(round(noise))]), survivors * variance))
    assert skellam_chi_square(samples, bins=10) > 1e-3
    # the sampler at scale: the count coordinate's shares alone, summed over many rounds
    bulk = dm.modular_sum(dm.count_share(np.zeros((5, 20_000), dtype=bool), m, variance, bits, rng), bits)
    noise = 2 * m * (dm.count_decode(bulk, m, bits) + 2.5)
    assert skellam_chi_square([(np.rint(noise).astype(np.int64), 5 * variance)]) > 1e-3
    # halved noise is caught by the same test
    half = dm.modular_sum(dm.count_share(np.zeros((5, 20_000), dtype=bool), m, variance / 2, bits, rng), bits)
    noise = 2 * m * (dm.count_decode(half, m, bits) + 2.5)
    assert skellam_chi_square([(np.rint(noise).astype(np.int64), 5 * variance)]) < 1e-6
