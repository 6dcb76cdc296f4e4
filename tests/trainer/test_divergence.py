"""Divergence is handled, not crashed into (docs/trainer.md §Divergence).

Settings made to diverge: a client learning rate of 1e30 (local training overflows to
NaN: those clients send zeros, the run goes on) and a server learning rate of 1e20 (the
global model's logits overflow: the run stops after that round, accounted, with exit 4).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from app import cli as app_cli
from tests.trainer.trainer_plans import hand_plan, quiet_progress
from trainer.data import load_dataset
from trainer.run.checkpoint import load_checkpoint
from trainer.run.divergence import EXIT_DIVERGED, divergence_hint, learnability_message
from trainer.run.metrics import read_rounds
from trainer.runner import TrainConfig, execute_run, prepare_run
from trainer.strategies.base import RoundContext
from trainer.units.client.mechanism import pool_mechanisms, privatize
from trainer.units.client.tally import ClientTally

ROUNDS = 4


@pytest.fixture(scope="module")
def plan():
    return hand_plan(
        [("a", 2.0, 12, 0.5), ("b", 4.0, 12, 0.5)],
        [("pa", ["a"], 0.8, 2, 1.0), ("pb", ["b"], 0.6, 2, 0.5)],
        rounds=ROUNDS,
        model_dim=1210,
    )


@pytest.fixture(scope="module")
def digits(plan):
    return load_dataset("digits", num_clients=plan.scenario.total_clients, seed=0)


def config(**overrides):
    base = dict(dataset="digits", model="mlp", model_options={"hidden": [16]}, rounds=ROUNDS, local_steps=2,
                batch_size=8, lr=0.1)
    base.update(overrides)
    return TrainConfig(**base)


def run(plan, digits, out, cfg, resume=False):
    prepared = prepare_run(plan, plan.model_dump(mode="json"), cfg, out, dataset=digits, resume=resume)
    return execute_run(prepared, progress=quiet_progress(ROUNDS))


def test_a_non_finite_update_is_sent_as_zeros_with_its_noise_share(plan):
    mechanism = pool_mechanisms(plan, 1210, ROUNDS)[0]
    update = np.full(1210, np.nan)
    update[3] = np.inf
    vector, pre_noise = privatize(update, 1.0, mechanism, np.random.default_rng(0))
    assert np.all(pre_noise == 0)  # the client's own decision: nothing of the NaN reaches the sum
    assert np.all(np.isfinite(vector)) and np.std(vector) > 0  # the noise share is still sent


def test_clients_whose_training_overflows_send_zeros_and_the_run_goes_on(plan, digits, tmp_path):
    summary = run(plan, digits, tmp_path / "run", config(lr=1e30, rounds=1))
    assert summary.complete and summary.diverged is None
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    for record in records:
        trained = sum(record.sampled.values()) - record.dropped_before_masking
        assert record.nonfinite_updates == trained > 0
        assert record.loss is not None and np.isfinite(record.loss)


def test_a_diverging_run_stops_after_the_round_with_its_privacy_recorded(plan, digits, tmp_path):
    # eval_every 2: round 0's parameters (about 1e19) are finite but not evaluated; round 1's
    # test loss overflows, so the run stops after round 1 and keeps round 0's parameters
    out = tmp_path / "run"
    cfg = config(server_lr=1e20, eval_every=2)
    summary = run(plan, digits, out, cfg)
    assert not summary.complete and summary.rounds_run == 2
    assert summary.diverged is not None and summary.diverged.round == 1 and summary.diverged.kept_round == 1
    assert "test loss" in summary.diverged.reason
    for words in ("--server-lr (now 1e+20)", "clip_norm", "1,210-parameter model", "noise-to-signal ratio"):
        assert words in summary.diverged.hint

    records = read_rounds(out / "rounds.jsonl")
    assert [r.round for r in records] == [0, 1] and [r.diverged for r in records] == [False, True]
    # the two rounds happened: both are in the ledger, the log and the summary
    ledger = ClientTally(plan)
    ledger.record_round()
    ledger.record_round()
    assert summary.epsilon_spent == pytest.approx(ledger.final_spent())
    assert records[-1].epsilon_spent == pytest.approx(ledger.spent())
    state = load_checkpoint(out / "checkpoint.pt")
    assert state["next_round"] == 2 and state["ledger"]["rounds_run"] == 2 and state["diverged"]["round"] == 1
    # the checkpoint keeps the last finite parameters: those after round 0
    fresh = prepare_run(plan, plan.model_dump(mode="json"), cfg, tmp_path / "unused", dataset=digits)
    after_round_0, _ = fresh.engine.run(RoundContext(round_index=0, global_round=0, seed=cfg.seed), fresh.initial_params)
    kept = state["global_params"]
    assert torch.isfinite(kept).all() and kept.abs().max() > 1e15  # round 0's (huge but finite) parameters
    assert torch.equal(kept, after_round_0.cpu())
    assert json.loads((out / "summary.json").read_text())["diverged"]["round"] == 1

    # resuming a diverged run trains no further and changes nothing
    again = run(plan, digits, out, cfg, resume=True)
    assert again.diverged == summary.diverged and again.rounds_run == 2
    assert [r.model_dump() for r in read_rounds(out / "rounds.jsonl")] == [r.model_dump() for r in records]


def test_cli_exit_code_is_documented_and_distinct(capsys, tmp_path, plan, monkeypatch):
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.model_dump(mode="json")))
    out = tmp_path / "run"
    code = app_cli.run(["train", "--plan", str(path), "--dataset", "digits", "--model", "mlp", "--model-option",
                        "hidden=[16]", "--local-steps", "1", "--server-lr", "1e20", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == EXIT_DIVERGED == 4
    assert "Traceback" not in captured.err
    error = [line for line in captured.err.splitlines() if "error" in line]
    assert len(error) == 1 and "diverged at round 0" in error[0] and "--server-lr" in error[0]
    assert "DIVERGED at round 0" in captured.out and "hint:" in captured.out
    assert "round 0 [1/4]" in captured.err and "DIVERGED" in captured.err


@pytest.mark.parametrize("dim", [1210, 5000])
def test_the_learnability_line_counts_a_skellam_blocks_noise(dim):
    # a plan stating Skellam blocks runs them (--secagg-mechanism plan): the start-of-run ratio and
    # the divergence hint's noise are the blocks' (docs/planning.md §13), here larger than the
    # continuous std of the strict pool, written from the blocks' figures: each of the pool's
    # E[survivors] = I_P t adds a share of variance share_variance on the grid of step gamma
    from tests.trainer.run_digests import discrete_client_plan

    plan = discrete_client_plan()
    energy = 0.0
    for pool in plan.pools:
        block = pool.discrete
        variance = max(1.0, pool.expected_noise_inflation) * block.min_survivors * block.share_variance * block.gamma**2
        energy += pool.keep_ratio * variance
    signal = sum(g.sampling_rate * g.num_clients * g.clip_norm for g in plan.groups)
    ratio = math.sqrt(dim * energy) / signal
    assert plan.pools[0].discrete.equivalent_noise_multiplier * plan.pools[0].discrete.clip_norm > plan.pools[0].noise_std
    line, unlikely = learnability_message(plan, dim)
    assert unlikely and line.startswith(f"plan noise-to-signal ratio {ratio:.3g} for")
    hint = divergence_hint(plan, config(), dim, 0)
    assert f"{ratio:.3g} for this {dim:,}-parameter model" in hint
    assert f"x {math.sqrt(dim * energy) / plan.scenario.participation:.3g} in noise alone" in hint
