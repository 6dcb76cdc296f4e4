"""Silo runs (docs/mrmtl.md §4-§6): MR-MTL's fixed point on quadratic silos, the ledger
within every silo's budget, resume equals an uninterrupted run, and the client-level and
silo mechanisms refuse each other's plans."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from planner import mean_estimation as toy
from planner.units import make_plan
from planner.units.silo_sample import SiloSamplePlan, SiloScenario
from tests.trainer.test_run import final_state
from tests.trainer.trainer_plans import comparable, hand_plan, interrupt_after, quiet_progress
from trainer.data.silos import mean_estimation
from trainer.run.metrics import read_rounds
from trainer.run.prepared import RunOptions
from trainer.runner import TrainConfig, execute_run, prepare_run
from trainer.units.client.run import prepare_client_run
from trainer.units.client.unit import UNIT as CLIENT
from trainer.units.silo.run import prepare_silo_run
from trainer.units.silo.unit import UNIT as SILO


def plan_for(sizes: list[int], *, method: str = "mrmtl", rounds: int = 4, epsilon: float = 2.0, batch: int = 8,
             clip: float = 1.0, steps: int | None = None) -> SiloSamplePlan:
    scenario = SiloScenario.model_validate({
        "silos": [{"id": f"s{k}", "num_samples": n, "epsilon": epsilon} for k, n in enumerate(sizes)],
        "delta": 1e-5, "rounds": rounds, "batch_size": batch, "clip_norm": clip, "steps_per_round": steps,
    })
    plan = make_plan(scenario, method)
    assert isinstance(plan, SiloSamplePlan)
    return plan


def config(rounds: int, **overrides: object) -> TrainConfig:
    base: dict[str, object] = dict(dataset="mean_estimation", model="mean", rounds=rounds, lr=0.1, eval_every=2)
    base.update(overrides)
    return TrainConfig.model_validate(base)


@pytest.mark.parametrize("prox", [0.0, 2.0])
def test_mrmtl_reaches_lemma_6_1_on_quadratic_silos(tmp_path, prox: float) -> None:
    """Loss (w - x)^2 / 2 per example, no clipping (points within c), negligible noise:
    the personal models settle at alpha m_k + (1 - alpha) m_{-k} (lambda = 0: m_k)."""
    sizes = [40, 40, 40, 40]
    rounds = 50
    plan = plan_for(sizes, rounds=rounds, epsilon=5000.0, batch=40, clip=10.0, steps=1)
    data = mean_estimation(sizes, seed=1, task_std=1.0, data_std=0.3)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config(rounds, lr=0.3, eval_every=rounds,
                           strategy_options={"prox": prox}), tmp_path / "run", dataset=data)
    execute_run(prepared, progress=quiet_progress(rounds))
    personal = prepared.strategy.personal[:, 0].double().numpy()  # type: ignore[attr-defined]
    means = np.array([float(data.train.client_data(k)[1].mean()) for k in range(4)])
    others = (means.sum() - means) / 3
    expected = toy.mrmtl_estimate(means, others, 4, prox)  # type: ignore[arg-type]
    # Poisson batches (q = 1 here, every example every step) and sigma ~ 1e-3 leave ~1e-3 jitter
    assert np.allclose(personal, expected, atol=0.02), (personal, expected)
    if prox > 0:
        assert not np.allclose(personal, means, atol=0.05)


def run(plan: SiloSamplePlan, data, out, *, resume: bool = False, progress=None, cfg: TrainConfig | None = None):
    prepared = prepare_run(plan, plan.model_dump(mode="json"), cfg or config(plan.rounds, strategy_options={"prox": 0.5}),
                           out, resume=resume, dataset=data)
    return execute_run(prepared, progress=progress or quiet_progress(plan.rounds))


@pytest.mark.parametrize("method", ["mrmtl", "ditto", "ifca_mrmtl", "finetune"])
def test_resume_equals_an_uninterrupted_run_and_the_ledger_stays_within_budget(tmp_path, method: str) -> None:
    if method == "ifca_mrmtl":
        from trainer.data.silos import load_silo_data

        sizes = [30, 30, 30, 30]
        plan = plan_for(sizes, method=method, rounds=4, batch=10)
        data = load_silo_data("rotated_digits", sizes, seed=0, test_samples=10)
        cfg = TrainConfig(dataset="rotated_digits", model="mlp", model_options={"hidden": []}, rounds=4, lr=0.1,
                          eval_every=2, strategy_options={"prox": 0.5})
    else:
        sizes = [30, 50, 20]
        plan = plan_for(sizes, method=method, rounds=4)
        data = mean_estimation(sizes, seed=0)
        cfg = config(4, strategy_options={} if method == "finetune" else {"prox": 0.5})
    whole = run(plan, data, tmp_path / "whole", cfg=cfg)
    with pytest.raises(KeyboardInterrupt):
        run(plan, data, tmp_path / "split", progress=interrupt_after(4, 2), cfg=cfg)
    resumed = run(plan, data, tmp_path / "split", resume=True, cfg=cfg)
    a, b = final_state(tmp_path / "whole"), final_state(tmp_path / "split")
    assert torch.equal(a["global_params"], b["global_params"])
    for key, value in a["strategy"].items():
        assert torch.equal(value, b["strategy"][key]), key
    assert a["ledger"] == b["ledger"]
    assert comparable(read_rounds(tmp_path / "whole" / "rounds.jsonl")) == comparable(
        read_rounds(tmp_path / "split" / "rounds.jsonl"))
    assert resumed.epsilon_spent == whole.epsilon_spent
    # labelled sample-level, per silo, within each silo's budget
    assert whole.privacy_unit == "silo_sample" and "sample-level" in whole.notion
    assert set(whole.epsilon_spent) == {s.id for s in plan.silos}
    for silo in plan.silos:
        spent = whole.epsilon_spent[silo.id]
        assert spent is not None and 0.9 * silo.epsilon < spent <= silo.epsilon * (1 + 1e-9)
    assert all(r.privacy_unit == "silo_sample" for r in read_rounds(tmp_path / "whole" / "rounds.jsonl"))


def test_the_mechanisms_refuse_each_others_plans(tmp_path) -> None:
    silo = plan_for([30, 30])
    client = hand_plan([("a", 1.0, 4, 0.5)], [("p", ["a"], 1.0, 1, 1.0)], rounds=2)
    with pytest.raises(InvalidInputError) as info:
        prepare_client_run(CLIENT, silo, silo.model_dump(mode="json"), config(2), tmp_path / "a", RunOptions())
    assert info.value.field == "privacy_unit" and "silo_sample" in info.value.message
    with pytest.raises(InvalidInputError) as info:
        prepare_silo_run(SILO, client, client.model_dump(mode="json"), config(2), tmp_path / "b", RunOptions())
    assert info.value.field == "privacy_unit" and "client" in info.value.message
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_more_rounds_than_planned_and_wrong_options_are_refused(tmp_path) -> None:
    plan = plan_for([30, 30], rounds=2)
    data = mean_estimation([30, 30], seed=0)
    with pytest.raises(InvalidInputError, match="exceeds the plan"):
        prepare_run(plan, plan.model_dump(mode="json"), config(3), tmp_path / "a", dataset=data)
    with pytest.raises(InvalidInputError, match="takes no option 'lam'"):
        prepare_run(plan, plan.model_dump(mode="json"), config(2, strategy_options={"lam": 1}), tmp_path / "b",
                    dataset=data)


def test_silo_run_plots_carry_the_per_silo_chance_line(tmp_path, monkeypatch) -> None:
    """docs/trainer.md §Plots: a silo run's accuracy and loss plots get the chance line, each
    silo's best constant predictor on its own test split weighted by its examples (each
    silo's model is evaluated on its split); regression silos have none."""
    import trainer.run.steps as steps
    from trainer.data.silos import rotated_digits
    from trainer.run.plots import ChanceLevel, chance_level, chance_level_by_part

    drawn: dict[str, object] = {}
    real_plot_run = steps.plot_run

    def spy(*args, **kwargs):
        drawn["chance"] = kwargs.get("chance")
        return real_plot_run(*args, **kwargs)

    monkeypatch.setattr(steps, "plot_run", spy)
    sizes = [30, 30, 30]
    data = rotated_digits(sizes, seed=0, test_samples=12)
    plan = plan_for(sizes, rounds=1, batch=10, epsilon=4.0)
    run(plan, data, tmp_path / "digits", cfg=config(1, dataset="rotated_digits", model="mlp", model_options={"hidden": []}, eval_every=1))
    parts = [data.test_of(k)[1].numpy() for k in range(3)]
    expected_accuracy = sum(np.bincount(y).max() for y in parts) / sum(len(y) for y in parts)
    chance = drawn["chance"]
    assert isinstance(chance, ChanceLevel) and chance == chance_level_by_part(parts, "classification", part="silo")
    assert chance.accuracy_label == "each silo's most frequent label, weighted by examples"  # the legend's words
    assert chance.accuracy == pytest.approx(expected_accuracy)
    per_silo = [chance_level(y, "classification") for y in parts]
    assert all(level is not None for level in per_silo)  # classification labels: a level each
    assert chance.loss == pytest.approx(sum(len(y) * level.loss for y, level in zip(parts, per_silo) if level) / 36)
    # per silo, never below the pooled labels' level (a silo may learn its own frequencies)
    pooled = chance_level(np.concatenate(parts), "classification")
    assert pooled is not None and chance.accuracy >= pooled.accuracy - 1e-12
    assert (tmp_path / "digits" / "accuracy.png").is_file()
    run(plan_for([20, 20], rounds=1), mean_estimation([20, 20], seed=0), tmp_path / "mean", cfg=config(1, eval_every=1))
    assert drawn["chance"] is None


@pytest.fixture
def silo_plan_file(tmp_path):
    path = tmp_path / "silo-plan.json"
    path.write_text(plan_for([30, 30, 30], rounds=2, batch=10).model_dump_json())
    return path


SILO_CLI = ["--dataset", "mean_estimation", "--model", "mean", "--lr", "0.1"]


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--secagg", "full"], "--secagg"),
        (["--secagg-execution", "exact_sum"], "--secagg-execution"),
        (["--secagg-workers", "2"], "--secagg-workers"),
        (["--late-dropout-fraction", "0.1"], "--late-dropout-fraction"),
        (["--local-steps", "2"], "--local-steps"),
        (["--server-lr", "0.5"], "--server-lr"),
        (["--server-momentum", "0.5"], "--server-momentum"),
        (["--batch-size", "8"], "--batch-size"),
        (["--momentum", "0.5"], "--momentum"),
        (["--engine", "loop"], "--engine"),
        (["--partition", "dirichlet"], "--partition"),
        (["--alpha", "0.3"], "--alpha"),
        (["--dataset-option", "client_test_fraction=0.2"], "--dataset-option"),
        (["--opt-out-assignment", "skewed"], "--opt-out-assignment"),
        (["--skewed-label", "3"], "--skewed-label"),
    ],
)
def test_a_silo_run_refuses_client_level_options_it_would_ignore(tmp_path, capsys, silo_plan_file, extra, flag) -> None:
    from app import cli as app_cli

    code = app_cli.run(["train", "--plan", str(silo_plan_file), *SILO_CLI, *extra, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"{flag.lstrip('-')}: silo_sample runs do not use {flag}" in lines[0], err
    assert not (tmp_path / "run").exists()


def test_a_silo_run_records_no_secure_aggregation_and_its_gradient_path(tmp_path, capsys, silo_plan_file) -> None:
    import json

    from app import cli as app_cli

    code = app_cli.run(["train", "--plan", str(silo_plan_file), *SILO_CLI, "--out", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["secagg_execution"] is None and summary["secagg_graphs"] == {}
    assert summary["gradient_path"] in ("ghost", "torch.func")
    assert f"DP-SGD per-example gradients: {summary['gradient_path']}" in out.out
    assert "secure aggregation" not in out.out
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert not {"secagg_execution", "secagg_mode", "late_dropout_fraction", "local_steps", "server_lr"} & set(stored)
    assert stored["lr"] == 0.1 and stored["dataset"] == "mean_estimation"
    # the run resumes from that configuration (a finished run: nothing left to do, no error)
    code = app_cli.run(["train", "--out", str(tmp_path / "run"), "--resume", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["gradient_path"] == summary["gradient_path"]


def test_a_silo_plan_stating_less_than_its_ledger_runs_with_one_warning(tmp_path, capsys) -> None:
    """docs/ledger.md §5 for silo plans: the plan checker refuses a stated figure below its
    recomputation (tests/planner/test_silo_sample.py); a run goes on with one warning naming the
    silo and the figure its ledger counts, which is what its summary states."""
    import json

    from app import cli as app_cli

    document = plan_for([30, 30, 30], rounds=2, batch=10).model_dump(mode="json")
    counted = document["silos"][1]["epsilon_planned"]
    document["silos"][1]["epsilon_planned"] = counted / 2
    path = tmp_path / "understated.json"
    path.write_text(json.dumps(document))
    assert app_cli.run(["plan", "verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert "silos.s1.epsilon_planned: states" in err and len(err.strip().splitlines()) == 1
    code = app_cli.run(["train", "--plan", str(path), *SILO_CLI, "--out", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert code == 0, out.err
    warned = [line for line in (out.out + out.err).splitlines() if "below what its dpsgd_silo run spends" in line]
    # one warning (printed as the run starts and again under its summary, as every run warning)
    assert len(set(warned)) == 1 and f"s1: states {counted / 2:.10g}, the ledger counts {counted:.10g}" in warned[0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epsilon_spent"]["s1"] == pytest.approx(counted, rel=1e-12)
