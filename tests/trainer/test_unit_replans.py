"""Silo and metric runs that follow the service's re-plan mid-run (issue 29; docs/ledger.md
§6-§8, docs/mrmtl.md §6, docs/metric-privacy.md §4). The service is the real app in process
(its ASGI transport), as in ``tests/trainer/test_reporting.py``; the real-server versions
are ``tests/app/test_attached_units.py`` and ``tests/app/test_attached_resume.py``.

A run interrupted after following a re-plan and resumed ends exactly as an uninterrupted
run with the same change (parameters, log, ledger); a silo method's schedule (FedAvg for
the first part of the run, cluster selections in the first rounds) counts the run's
rounds, which a re-plan does not restart.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from app.main import create_app
from app.settings import Settings
from planner.units import load_plan_document
from tests.app.test_attached_units import CAPPED_SCENARIO
from tests.trainer.test_reporting import TOKEN, BetweenRounds
from tests.trainer.trainer_plans import comparable, quiet_progress
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.run.reporting import RoundReporter, ServiceLink
from trainer.run.summary import RunSummary
from trainer.runner import TrainConfig, execute_run, prepare_run

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

SILO = {
    "privacy_unit": "silo_sample",
    "silos": [{"id": f"s{k}", "num_samples": 30, "epsilon": 2.0 + k} for k in range(4)],
    "delta": 1e-5, "rounds": 4, "batch_size": 10, "clip_norm": 1.0, "clusters": 2, "warm_start_fraction": 0.5,
}
SILO_CONFIG = {"dataset": "rotated_digits", "model": "mlp", "model_options": {"hidden": []}, "lr": 0.1,
               "eval_every": 2}
METRIC_CONFIG = {"dataset": "metric_synthetic", "partition": "natural", "model": "mlp",
                 "model_options": {"hidden": [], "bias": False}, "local_steps": 1, "batch_size": 10, "lr": 0.1,
                 "strategy": "metric_ifca"}
# (scenario, method, config, the budget change after round 0)
UNITS: dict[str, tuple[dict[str, Any], str | None, dict[str, Any], dict[str, Any]]] = {
    "silo": (SILO, "mrmtl", {**SILO_CONFIG, "strategy_options": {"prox": 0.5}},
             {"silos": [{"id": "s0", "epsilon": 1.5}, {"id": "s3", "epsilon": 8.0}]}),
    "metric": (CAPPED_SCENARIO, None, METRIC_CONFIG, {"groups": [{"id": "all", "leakage_budget": 1.2}]}),
}


@pytest.fixture
def client(tmp_path: Path) -> Any:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", initial_api_key=TOKEN)
    with TestClient(create_app(settings, announce_key=False), headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def _reporter(client: Any, plan_id: str) -> RoundReporter:
    return RoundReporter(ServiceLink("http://testserver", TOKEN, client=client, backoff_s=0.0), plan_id)


def _plan(client: Any, scenario: dict[str, Any], method: str | None) -> dict[str, Any]:
    created = client.post("/v1/plans", json={"scenario": scenario, **({"method": method} if method else {})})
    assert created.status_code == 201, created.text
    return dict(created.json())


def _replan(client: Any, plan: dict[str, Any], changes: dict[str, Any]) -> Any:
    def change() -> None:
        response = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": changes})
        assert response.status_code == 201, response.text
    return change


def _dataset(unit: str, plan: Any) -> Any:
    if unit != "silo":
        return None
    from trainer.data.silos import load_silo_data

    return load_silo_data("rotated_digits", [s.num_samples for s in plan.silos], seed=0, test_samples=10)


def _run(client: Any, unit: str, document: dict[str, Any], out: Path, progress: Any, *,
         resume: bool = False) -> RunSummary:
    scenario, _, options, _ = UNITS[unit]
    plan = load_plan_document(document)
    config = TrainConfig.model_validate({**options, "rounds": scenario["rounds"]})
    prepared = prepare_run(plan, document, config, out, resume=resume, dataset=_dataset(unit, plan))
    return execute_run(prepared, reporter=_reporter(client, document["id"]), plan_id=document["id"], progress=progress)


def _figures(client: Any, summary: RunSummary) -> tuple[dict[str, Any], dict[str, Any]]:
    """The service's ledger of the plan the run ended on and the run's summary, per silo or
    (the metric plan's one group) its leakage and releases."""
    ledger = client.get(f"/v1/plans/{summary.plan_id}/ledger").json()
    assert ledger["rounds_counted"] == ledger["rounds_reported"]
    if summary.privacy_unit == "silo_sample":
        return {s["id"]: s["epsilon_spent"] for s in ledger["silos"]}, dict(summary.epsilon_spent)
    (group,) = ledger["groups"]
    assert ledger["rounds_without_participants"] == 0
    final = summary.final_metrics
    return ({"max": group["leakage_spent"], "median": group["leakage_median"], "releases": group["participations_max"]},
            {"max": final["metric_leakage_max"], "median": final["metric_leakage_median"],
             "releases": final["metric_participations_max"]})


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_a_resumed_run_that_followed_a_replan_ends_as_an_uninterrupted_one(client: Any, tmp_path: Path,
                                                                          unit: str) -> None:
    """The budget change after round 0 (the re-plan from round 1) is followed; one run is
    interrupted after round 2 and resumed (on the re-plan, from its checkpoint), the other
    is not. Both end with the same parameters, log and figures, and the service's ledger
    equals summary.json: nothing of the first plan's round counted twice, nothing lost."""
    scenario, method, _, changes = UNITS[unit]
    rounds = scenario["rounds"]
    whole = _plan(client, scenario, method)
    expected = _run(client, unit, whole, tmp_path / "whole", BetweenRounds(rounds, {0: _replan(client, whole, changes)}))
    assert expected.complete and expected.superseded_plans == [whole["id"]]

    document = _plan(client, scenario, method)

    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(client, unit, document, tmp_path / "run",
             BetweenRounds(rounds, {0: _replan(client, document, changes), 2: interrupt}))
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["next_round"] == 3 and state["current_plan"]["start_round"] == 1

    summary = _run(client, unit, document, tmp_path / "run", quiet_progress(rounds), resume=True)
    assert summary.complete and summary.rounds_run == rounds and summary.reports_pending == 0
    assert summary.superseded_plans == [document["id"]] and summary.plan_id != document["id"]
    assert torch.equal(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["global_params"])
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    assert [r.round for r in records] == list(range(rounds))
    assert comparable(records) == comparable(read_rounds(tmp_path / "whole" / "rounds.jsonl"))
    assert summary.epsilon_spent == expected.epsilon_spent and summary.final_metrics == expected.final_metrics
    service, run = _figures(client, summary)
    assert service == pytest.approx(run, rel=1e-12)


@pytest.mark.parametrize(("method", "options"), [("finetune", {"finetune_fraction": 0.5}),
                                                 ("ifca_mrmtl", {"prox": 0.5})])
def test_a_silo_methods_schedule_counts_the_runs_rounds_across_a_replan(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, options: dict[str, Any]) -> None:
    """4 rounds, the re-plan from round 1. finetune runs FedAvg in the run's first half
    (rounds 0 and 1), ifca_mrmtl selects clusters (privately, accounted) in the run's first
    half and trains within clusters there (``fedavg_fraction`` defaults to the selection
    rounds), then MR-MTL: a schedule counted within the re-plan would have run FedAvg in
    round 2 as well. The service's ledger, the selections included, equals summary.json."""
    from trainer.units.silo.dpsgd import DpSgdEngine
    from trainer.units.silo.strategies import Finetune

    federated: list[int] = []
    selected: list[int] = []
    train, select, mean = DpSgdEngine.train, DpSgdEngine.select_clusters, Finetune.mean
    now: list[int] = []

    def recorded_train(self: DpSgdEngine, ctx: Any, start: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        now[:] = [ctx.global_round]
        if method == "ifca_mrmtl" and not kwargs.get("prox"):  # training within clusters: no prox term
            federated.append(ctx.global_round)
        return train(self, ctx, start, **kwargs)

    def recorded_mean(self: Finetune, models: torch.Tensor) -> torch.Tensor:
        federated.append(now[0])  # finetune averages the silos' models in its FedAvg rounds only
        return mean(self, models)

    def recorded_select(self: DpSgdEngine, ctx: Any, *args: Any) -> Any:
        selected.append(ctx.global_round)
        return select(self, ctx, *args)

    monkeypatch.setattr(DpSgdEngine, "train", recorded_train)
    monkeypatch.setattr(DpSgdEngine, "select_clusters", recorded_select)
    monkeypatch.setattr(Finetune, "mean", recorded_mean)
    document = _plan(client, SILO, method)
    plan = load_plan_document(document)
    config = TrainConfig.model_validate({**SILO_CONFIG, "rounds": 4, "strategy_options": options})
    prepared = prepare_run(plan, document, config, tmp_path / "run", dataset=_dataset("silo", plan))
    summary = execute_run(prepared, reporter=_reporter(client, document["id"]), plan_id=document["id"],
                          progress=BetweenRounds(4, {0: _replan(client, document, UNITS["silo"][3])}))
    assert summary.complete and summary.superseded_plans == [document["id"]]
    assert federated == [0, 1]
    assert selected == ([0, 1] if method == "ifca_mrmtl" else [])
    service, run = _figures(client, summary)
    assert service == pytest.approx(run, rel=1e-12)


def test_a_new_run_on_a_metric_re_plan_is_refused(tmp_path: Path) -> None:
    """A metric re-plan's caps count the releases of the run before it, which the plan does
    not carry: a new run on it would start every client at zero and let them release past
    their leakage budget (reviewer F1), so it is refused naming the plan."""
    from accounting.errors import InvalidInputError
    from planner.units import load_scenario_document, make_plan
    from planner.units.metric_local import replan_metric

    scenario, _, options, _ = UNITS["metric"]
    parent = make_plan(load_scenario_document(scenario))
    child = replan_metric(parent, 2, {}, parent_plan_id="parent-plan")
    assert child.start_round == 2
    config = TrainConfig.model_validate({**options, "rounds": child.rounds})
    with pytest.raises(InvalidInputError) as caught:
        prepare_run(child, child.model_dump(mode="json"), config, tmp_path / "fresh")
    assert caught.value.field == "plan" and "re-plan" in caught.value.reason
