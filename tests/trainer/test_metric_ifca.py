"""The metric mechanism and metric_ifca (docs/metric-privacy.md §5-§6).

k-means, the engine's guards (no secure aggregation, no Gaussian code; the client-level
engine refuses metric plans), the participation cap at selection, the engine-drawn
Laplace noise, resume, and the paper's synthetic task end to end.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from app import cli as app_cli
from planner.units.metric_local import MetricScenario, plan_metric, spent_metric
from trainer.data.metric_synthetic import TRUE_PARAMETERS, load_metric_synthetic
from trainer.engines import LocalTrainingConfig
from trainer.models import build_model
from trainer.strategies.base import PURPOSE_LAPLACE, Population, RoundContext
from trainer.units.metric.mechanism import next_public_radius, sanitize
from trainer.units.metric.rounds import MetricRoundEngine
from trainer.units.metric.strategies.metric_ifca import MetricIFCAStrategy, kmeans_from
from trainer.units.metric.tally import MetricTally

LOCAL = LocalTrainingConfig(local_steps=1, batch_size=10, lr=0.1)  # the paper's E = 1, s = 0.1, B = 10


def metric_plan(k: int = 2, nu: float = 5.0, clients: int = 100, per_round: int = 7, rounds: int = 100,
                radius: float | None = 0.05, budget: float | None = None, min_radius: float | None = None):
    group: dict[str, object] = {"id": "all", "num_clients": clients, "noise_multiplier": nu}
    if budget is not None:
        group["leakage_budget"] = budget
    rule = "own_update" if radius is None else "previous_round" if min_radius is not None else "public"
    return plan_metric(MetricScenario.model_validate({
        "groups": [group], "rounds": rounds, "model_dim": 2, "clients_per_round": per_round, "hypotheses": k,
        "radius_rule": rule, "radius": radius, "min_radius": min_radius,
    }))


def setup(plan, seed: int = 0, clients: int = 100):
    dataset = load_metric_synthetic(num_clients=clients, seed=seed)
    model = build_model("mlp", dataset, seed=0, hidden=[], bias=False)
    strategy = MetricIFCAStrategy(plan, model, dataset, engine="batched", local=LOCAL, device=torch.device("cpu"),
                                  init_seed=seed)
    ledger = MetricTally(plan)
    engine = MetricRoundEngine(plan, strategy, Population({"all": np.arange(clients)}), plan.scenario.hypotheses * 2, ledger)
    return strategy, ledger, engine


def run_rounds(engine, ledger, params, rounds: range, seed: int = 0):
    for index in rounds:
        params, _ = engine.run(RoundContext(index, index, seed), params)
        ledger.record_round()
    return params


def test_kmeans_recovers_separated_clusters_keeps_empty_ones_and_is_deterministic() -> None:
    rng = np.random.default_rng(0)
    truth = np.array([[10.0, 0.0], [-10.0, 0.0]])
    points = torch.from_numpy(np.concatenate([truth[0] + rng.normal(size=(20, 2)), truth[1] + rng.normal(size=(30, 2))]))
    init = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [0.0, 500.0]], dtype=torch.float64)
    centers, assignment = kmeans_from(points, init)
    np.testing.assert_allclose(centers[0], points[:20].mean(0))
    np.testing.assert_allclose(centers[1], points[20:].mean(0))
    assert torch.equal(centers[2], init[2])  # empty: kept
    assert assignment.tolist() == [0] * 20 + [1] * 30
    again, _ = kmeans_from(points, init)
    assert torch.equal(centers, again)
    # initialised at the given centres: the same points from swapped centres swap the labels
    swapped, _ = kmeans_from(points, init[[1, 0, 2]])
    assert torch.equal(swapped[0], centers[1]) and torch.equal(swapped[1], centers[0])
    # no points: every centre kept
    assert torch.equal(kmeans_from(points[:0], init)[0], init)


def test_the_engine_draws_the_laplace_noise_and_never_touches_secure_aggregation(monkeypatch) -> None:
    import trainer.units.client.mechanism
    import trainer.units.client.noise
    import trainer.units.client.rounds

    def forbidden(*args, **kwargs):
        raise AssertionError("the metric mechanism called client-level code")

    for module, name in ((trainer.units.client.rounds, "secure_sum"), (trainer.units.client.rounds, "privatize"), (trainer.units.client.rounds, "pool_mechanisms"),
                         (trainer.units.client.mechanism, "privatize"), (trainer.units.client.noise, "draw_noise_share")):
        monkeypatch.setattr(module, name, forbidden)
    plan = metric_plan(radius=None)  # own_update: the radius is each client's update norm
    strategy, ledger, engine = setup(plan)
    params = strategy.initial_params()
    ctx = RoundContext(0, 0, 0)
    seen: dict[str, torch.Tensor] = {}
    aggregate = strategy.aggregate_released

    def spy(ctx, global_params, released):
        seen["released"] = released.clone()
        return aggregate(ctx, global_params, released)

    strategy.aggregate_released = spy
    engine.run(ctx, params)
    chosen = np.concatenate(list(strategy.configure_round(ctx, Population({"all": np.arange(100)})).values()))
    release = strategy.client_release(ctx, params, chosen, ["all"] * chosen.size)
    for row, client in enumerate(chosen.tolist()):
        expected = sanitize(release.trained[row].numpy(), release.base[row].numpy(), 5.0, ctx.rng(PURPOSE_LAPLACE, client),
                            radius_rule="own_update")
        np.testing.assert_allclose(seen["released"][row].numpy(), expected.released, rtol=1e-6)
        assert np.linalg.norm(expected.released - release.trained[row].numpy()) > 0
    assert ledger.participations == {int(c): 1 for c in chosen}


def test_the_client_level_engine_refuses_metric_plans_and_the_metric_engine_client_plans() -> None:
    from trainer.units.client.rounds import RoundEngine

    plan = metric_plan()
    strategy, ledger, _ = setup(plan)
    with pytest.raises(InvalidInputError) as exc:
        RoundEngine(plan, strategy, Population({"all": np.arange(100)}), 4, rounds=10)
    assert exc.value.field == "privacy_unit" and "metric_local" in str(exc.value)
    client_plan = json.loads((Path(__file__).resolve().parents[1] / "planner" / "data" / "plan_v1.json").read_text())
    from planner.units import load_plan

    with pytest.raises(InvalidInputError, match="metric_local plans only"):
        MetricRoundEngine(load_plan(client_plan), strategy, Population({}), 4, ledger)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="pool sums"):
        strategy.aggregate(RoundContext(0, 0, 0), {}, 4)


def test_the_cap_stops_each_client_exactly_at_floor_l_nu_over_n() -> None:
    # every client is sampled every round (U = N); budget 1.0 with n / nu = 0.4: cap 2
    plan = metric_plan(clients=10, per_round=10, rounds=5, budget=1.0)
    assert plan.group("all").max_participations == 2
    strategy, ledger, engine = setup(plan, clients=10)
    params = strategy.initial_params()
    sampled = []
    for index in range(5):
        params, outcome = engine.run(RoundContext(index, index, 0), params)
        ledger.record_round()
        sampled.append(outcome.sampled["all"])
    assert sampled == [10, 10, 0, 0, 0]
    assert set(ledger.participations.values()) == {2}
    assert ledger.spent() == {"all": pytest.approx(0.8)} == spent_metric(plan, 5)
    assert ledger.summary()["leakage_max"] == pytest.approx(0.8)
    with pytest.raises(RuntimeError, match="cap"):
        ledger.record_participations([(0, "all")])


def test_a_resumed_run_continues_exactly() -> None:
    plan = metric_plan(rounds=6)
    strategy, ledger, engine = setup(plan)
    straight = run_rounds(engine, ledger, strategy.initial_params(), range(6))
    strategy, ledger, engine = setup(plan)
    half = run_rounds(engine, ledger, strategy.initial_params(), range(3))
    state = json.loads(json.dumps(ledger.state_dict()))
    strategy, ledger, engine = setup(plan)
    ledger.load_state_dict(state)
    assert torch.equal(run_rounds(engine, ledger, half.clone(), range(3, 6)), straight)


def test_the_previous_round_radius_comes_from_released_models_and_resumes_exactly(monkeypatch) -> None:
    """Round 0 noises at the configured radius; each next radius is next_public_radius of
    what the round released and broadcast (public data only); the ledger adds r / r_t per
    release for the leakage within the reference radius; a resumed run continues exactly."""
    plan = metric_plan(rounds=6, min_radius=0.01)
    strategy, ledger, engine = setup(plan)
    seen: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    aggregate = strategy.aggregate_released

    def record(ctx, global_params, released):
        seen.append((global_params.clone(), released.clone(), float(engine.radius)))
        return aggregate(ctx, global_params, released)

    monkeypatch.setattr(strategy, "aggregate_released", record)
    params = strategy.initial_params()
    radii = []
    for index in range(3):
        params, _ = engine.run(RoundContext(index, index, 0), params)
        ledger.record_round()
        radii.append(engine.radius)
    assert seen[0][2] == 0.05  # round 0: the configured radius
    for (broadcast, released, used), after in zip(seen, radii):
        expected = next_public_radius(released.numpy(), broadcast.reshape(2, 2).double().numpy(), np.full(7, 5.0), used, 0.01, 0.05)
        assert after == expected and 0.01 <= after <= 0.05
    expected_scale: dict[int, float] = {}
    for (_, _, used), round_clients in zip(seen, _clients_per_round(plan, 3)):
        for client in round_clients:
            expected_scale[client] = expected_scale.get(client, 0.0) + 0.05 / used
    assert ledger.reference_releases == pytest.approx(expected_scale)
    summary = ledger.summary()
    assert summary["leakage_at_radius_max"] >= summary["leakage_max"]  # r_t <= r: never below n / nu per release
    # resume: the radius and the ledger come back from the checkpointed states
    straight_strategy, straight_ledger, straight_engine = setup(plan)
    straight = run_rounds(straight_engine, straight_ledger, straight_strategy.initial_params(), range(6))
    strategy, ledger, engine = setup(plan)
    half = run_rounds(engine, ledger, strategy.initial_params(), range(3))
    ledger_state, mechanism_state = json.loads(json.dumps(ledger.state_dict())), json.loads(json.dumps(engine.state_dict()))
    strategy, ledger, engine = setup(plan)
    ledger.load_state_dict(ledger_state)
    engine.load_state_dict(mechanism_state)
    assert torch.equal(run_rounds(engine, ledger, half.clone(), range(3, 6)), straight)
    assert ledger.summary() == straight_ledger.summary()


def _clients_per_round(plan, rounds: int) -> list[list[int]]:
    """The clients each round selects (the strategy's draw, replayed without the cap)."""
    strategy, _, _ = setup(plan)
    population = Population({"all": np.arange(100)})
    return [sorted(int(c) for c in strategy.configure_round(RoundContext(i, i, 0), population)["all"]) for i in range(rounds)]


def nearest_errors(params: torch.Tensor, k: int) -> list[float]:
    """For each true parameter, the distance to the closest hypothesis."""
    hypotheses = params.reshape(k, 2).double()
    return [float(torch.linalg.norm(hypotheses - torch.tensor(t, dtype=torch.float64), dim=1).min()) for t in TRUE_PARAMETERS]


def test_synthetic_end_to_end_two_hypotheses_find_both_populations_one_ends_between() -> None:
    """The paper's synthetic setting: k = 2, nu = 5 (0.4 leakage per participation), U = 7,
    s = 0.1, B = 10, E = 1; public radius 0.05. Both hypotheses end within 0.5 of the true
    parameters; k = 1 (FedAvg with metric privacy) is far from both; nu = 0 is IFCA."""
    plan = metric_plan(k=2)
    strategy, ledger, engine = setup(plan)
    params = run_rounds(engine, ledger, strategy.initial_params(), range(100))
    assert max(nearest_errors(params, 2)) < 0.5
    assert ledger.summary()["leakage_max"] == pytest.approx(0.4 * max(ledger.participations.values()))
    metrics = strategy.evaluate(RoundContext(99, 99, 0), params, strategy.dataset)
    assert metrics is not None and metrics["hypothesis_0_clients"] == metrics["hypothesis_1_clients"] == 50

    plan = metric_plan(k=1)
    strategy, ledger, engine = setup(plan)
    single = run_rounds(engine, ledger, strategy.initial_params(), range(100))
    assert min(nearest_errors(single, 1)) > 2.0

    plan = metric_plan(k=2, nu=0.0, radius=None, rounds=60)
    strategy, ledger, engine = setup(plan)
    exact = run_rounds(engine, ledger, strategy.initial_params(), range(60))
    assert max(nearest_errors(exact, 2)) < 0.2
    assert ledger.spent() == {"all": None}  # no noise, no guarantee


def test_gdpfed_train_runs_a_metric_plan_and_labels_leakage_apart(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    plan = metric_plan(rounds=4, budget=1.0)
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    argv = ["train", "--plan", str(path), "--dataset", "metric_synthetic", "--partition", "natural", "--model", "mlp",
            "--model-option", "hidden=[]", "--model-option", "bias=false", "--local-steps", "1", "--batch-size", "10",
            "--lr", "0.1", "--rounds", "4", "--out", str(tmp_path / "run"), "--json"]
    code = app_cli.run(argv)
    err = capsys.readouterr().err
    assert code == 2 and "strategy" in err and "metric_local" in err  # the default strategy runs client plans
    code = app_cli.run([*argv, "--strategy", "metric_ifca"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["privacy_unit"] == "metric_local" and summary["epsilon_spent"] == {}
    assert 0 < summary["final_metrics"]["metric_leakage_max"] <= 1.0
    rounds = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 4 and all(r["epsilon_spent"] == {} and "metric_leakage_max" in r["metrics"] for r in rounds)
    # a model whose size is not the plan's model_dim is refused: the leakage n / nu would be wrong
    code = app_cli.run([*argv[:-3], "--strategy", "metric_ifca", "--model-option", "hidden=[4]", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "model_dim" in err


def test_a_metric_run_is_labelled_with_the_metric_notion_everywhere(capsys, tmp_path, monkeypatch) -> None:
    """Summary, every rounds.jsonl line, the privacy plot's title and the console carry the
    metric unit's notion (from the unit, as silo runs do), never a client-level label."""
    from planner.units.metric_local import NOTION
    from trainer.run import plots

    titles: dict[str, str] = {}
    real_save = plots.save_png

    def save(figure, path):
        titles[Path(path).name] = " ".join(figure.axes[0].get_title().split())  # wrapped lines joined
        real_save(figure, path)

    monkeypatch.setattr(plots, "save_png", save)
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    plan = metric_plan(rounds=3, budget=1.0)
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    run = tmp_path / "run"
    argv = ["train", "--plan", str(path), "--dataset", "metric_synthetic", "--partition", "natural", "--model", "mlp",
            "--model-option", "hidden=[]", "--model-option", "bias=false", "--local-steps", "1", "--batch-size", "10",
            "--lr", "0.1", "--rounds", "3", "--strategy", "metric_ifca", "--out", str(run)]
    assert app_cli.run(argv) == 0
    console = capsys.readouterr().out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["privacy_unit"] == "metric_local" and summary["notion"] == NOTION
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 3 and all(r["privacy_unit"] == "metric_local" for r in rounds)
    assert NOTION in titles["privacy.png"] and (run / "privacy.png").exists()
    assert "metric leakage" in titles["privacy.png"].lower() or "leakage" in titles["privacy.png"]
    # the console names the notion and the leakage spent, median and max over clients, never an epsilon
    leak = summary["final_metrics"]
    assert f"privacy: {NOTION}" in console
    assert f"metric leakage per client: median {leak['metric_leakage_median']:.4g}, max {leak['metric_leakage_max']:.4g}" in console
    everything = console + json.dumps(summary) + (run / "rounds.jsonl").read_text() + " ".join(titles.values())
    assert "client-level" not in everything and "epsilon spent" not in everything


METRIC_CLI = ["--dataset", "metric_synthetic", "--partition", "natural", "--model", "mlp", "--model-option", "hidden=[]",
              "--model-option", "bias=false", "--local-steps", "1", "--batch-size", "10", "--lr", "0.1",
              "--strategy", "metric_ifca"]


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--secagg", "full"], "--secagg"),
        (["--secagg-execution", "exact_sum"], "--secagg-execution"),
        (["--late-dropout-fraction", "0.1"], "--late-dropout-fraction"),
        (["--opt-out-assignment", "skewed"], "--opt-out-assignment"),
        (["--skewed-label", "3"], "--skewed-label"),
        (["--secagg-workers", "2"], "--secagg-workers"),
    ],
)
def test_a_metric_run_refuses_the_secure_aggregation_options_it_would_ignore(tmp_path, capsys, extra, flag) -> None:
    """As a silo run does (its TrainingUnit's unused_options): exit 2, one line naming the option."""
    path = tmp_path / "plan.json"
    path.write_text(metric_plan(rounds=2, budget=1.0).model_dump_json())
    code = app_cli.run(["train", "--plan", str(path), *METRIC_CLI, *extra, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"{flag.lstrip('-')}: metric_local runs do not use {flag}: " in lines[0], err
    assert not (tmp_path / "run").exists()


def test_a_metric_run_records_no_secure_aggregation(tmp_path, capsys) -> None:
    """summary.json's secagg_execution is null (none ran), config.json leaves the options out,
    the console says nothing of secure aggregation, and the run resumes from that config."""
    path = tmp_path / "plan.json"
    path.write_text(metric_plan(rounds=2, budget=1.0).model_dump_json())
    run = tmp_path / "run"
    code = app_cli.run(["train", "--plan", str(path), *METRIC_CLI, "--rounds", "2", "--out", str(run)])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["secagg_execution"] is None and summary["secagg_graphs"] == {}
    assert "secure aggregation" not in out.out
    stored = json.loads((run / "config.json").read_text())
    assert not {"secagg_execution", "secagg_mode", "late_dropout_fraction", "opt_out_assignment", "skewed_label",
                 "secagg_workers"} & set(stored)
    assert summary["secagg_workers"] is None
    assert stored["local_steps"] == 1 and stored["strategy"] == "metric_ifca"
    code = app_cli.run(["train", "--out", str(run), "--resume", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["secagg_execution"] is None
