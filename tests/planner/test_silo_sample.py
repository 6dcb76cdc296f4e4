"""The silo_sample unit: per-silo calibration, the ledger, the verifier (docs/mrmtl.md §2)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from accounting.errors import InvalidInputError
from accounting.events.zcdp import ZeroConcentratedDp
from planner.units import UNITS, load_plan, load_plan_document, make_plan, spent
from planner.units.silo_sample import NOTION, SiloSamplePlan, SiloScenario, silo_history, verify
from tests.planner.conftest import ORDERS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "silos.json"


def silo_plan(data: SiloScenario, method: str) -> SiloSamplePlan:
    plan = make_plan(data, method)
    assert isinstance(plan, SiloSamplePlan)
    return plan


def scenario(**overrides: Any) -> SiloScenario:
    data: dict[str, Any] = {
        "silos": [{"id": "a", "num_samples": 400, "epsilon": 1.0}, {"id": "b", "num_samples": 100, "epsilon": 1.0},
                  {"id": "c", "num_samples": 400, "epsilon": 4.0}],
        "delta": 1e-5, "rounds": 20, "batch_size": 16, "clip_norm": 1.0,
    }
    data.update(overrides)
    return SiloScenario.model_validate(data)


def dp_accounting_epsilon(events: list[Any], delta: float, accountant: str = "rdp") -> float:
    """Google dp-accounting on the same events (an independent implementation): its RDP
    accountant, or for a pld plan whose events pld represents (no zCDP selection; pld
    answers those with rdp, docs/accounting.md §13.4) its pessimistic PLD on a 1e-4 grid."""
    dp_accounting = pytest.importorskip("dp_accounting")
    logging.getLogger("absl").setLevel(logging.ERROR)
    if accountant == "pld" and all(event.kind != "zcdp" for event in events):
        from tests.planner.conftest import independent_epsilon

        return independent_epsilon(events, delta, "pld")
    accountant = dp_accounting.rdp.RdpAccountant(ORDERS)
    for event in events:
        if event.kind == "zcdp":
            accountant.compose(dp_accounting.ZCDpEvent(event.rho), event.steps)
        else:
            accountant.compose(dp_accounting.PoissonSampledDpEvent(
                event.sampling_rate, dp_accounting.GaussianDpEvent(event.noise_multiplier)), event.steps)
    return float(accountant.get_epsilon(delta))


def test_the_unit_is_registered_with_its_label() -> None:
    unit = UNITS["silo_sample"]
    assert unit.notion == NOTION and "sample-level" in NOTION
    assert unit.methods == ("mrmtl", "local", "fedavg", "finetune", "ditto", "ifca_mrmtl")


@pytest.mark.parametrize("method", ["mrmtl", "ditto", "ifca_mrmtl", "finetune"])
def test_every_silo_ends_within_its_budget_by_the_ledger_and_by_dp_accounting(method: str) -> None:
    rng = np.random.default_rng(hash(method) % 1000)
    silos = [{"id": f"s{i}", "num_samples": int(rng.integers(50, 2000)), "epsilon": float(rng.choice([0.5, 1, 2, 4]))}
             for i in range(5)]
    plan = make_plan(scenario(silos=silos, rounds=int(rng.integers(5, 40))), method)
    assert isinstance(plan, SiloSamplePlan)
    final = spent(plan, plan.rounds)
    for silo in plan.silos:
        assert final[silo.id] == pytest.approx(silo.epsilon_planned)
        assert (final[silo.id] or 0.0) <= silo.epsilon * (1 + 1e-9)
        assert (final[silo.id] or 0.0) >= 0.97 * silo.epsilon  # calibrated, not over-noised
        independent = dp_accounting_epsilon(silo_history(plan, silo, plan.rounds), plan.scenario.delta, plan.accountant)
        # dp-accounting's PLD is itself an upper bound on a 1e-4 grid: within 2e-3 (tests/planner/test_methods.py)
        assert independent <= silo.epsilon * (1 + (2e-3 if plan.accountant == "pld" else 1e-6))
        assert independent == pytest.approx(final[silo.id], rel=5e-3 if plan.accountant == "pld" else 1e-3)
    # the ledger grows with the rounds run
    half = spent(plan, plan.rounds // 2)
    assert all((half[s.id] or 0.0) < (final[s.id] or 0.0) for s in plan.silos)
    assert all(v == 0.0 for v in spent(plan, 0).values())


def test_heterogeneous_silos_get_their_own_noise() -> None:
    plan = silo_plan(scenario(), "mrmtl")
    a, b, c = plan.silos
    assert b.sampling_rate > a.sampling_rate and b.noise_multiplier > a.noise_multiplier  # smaller n_k
    assert c.noise_multiplier < a.noise_multiplier  # larger eps_k
    assert a.steps_per_round == 25 and b.steps_per_round == 7  # ceil(n_k / B), one epoch


def test_ditto_needs_more_noise_than_mrmtl_at_equal_epsilon() -> None:
    mrmtl, ditto = silo_plan(scenario(), "mrmtl"), silo_plan(scenario(), "ditto")
    for m, d in zip(mrmtl.silos, ditto.silos):
        assert d.steps_per_round == 2 * m.steps_per_round
        assert d.noise_multiplier > m.noise_multiplier


def test_ifca_selection_is_accounted_and_raises_sigma() -> None:
    mrmtl, ifca = silo_plan(scenario(), "mrmtl"), silo_plan(scenario(), "ifca_mrmtl")
    for m, i in zip(mrmtl.silos, ifca.silos):
        assert i.selection_rounds == 2 and i.selection_epsilon == pytest.approx(0.03 * i.epsilon)
        assert i.noise_multiplier > m.noise_multiplier
        events = silo_history(ifca, i, ifca.rounds)
        assert [e.kind for e in events] == ["poisson_sampled_gaussian", "zcdp"]
        selection = events[1]
        assert isinstance(selection, ZeroConcentratedDp)
        assert selection.steps == 2 and selection.rho == pytest.approx((i.selection_epsilon or 0.0) ** 2 / 8)


def test_verify_refuses_a_tampered_plan() -> None:
    document = silo_plan(scenario(), "mrmtl").model_dump(mode="json")
    for path, value, field in (
        (("silos", 0, "noise_multiplier"), 0.5, "silos.a.noise_multiplier"),
        (("silos", 1, "steps_per_round"), 3, "silos.b.steps_per_round"),
        (("silos", 2, "sampling_rate"), 0.01, "silos.c.sampling_rate"),
        (("overhead",), 2, "overhead"),
    ):
        tampered = json.loads(json.dumps(document))
        target = tampered
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(InvalidInputError) as info:
            verify(load_plan_document(tampered))  # type: ignore[arg-type]
        assert info.value.field == field


@pytest.mark.parametrize("name", ["epsilon_planned", "epsilon_rdp", "epsilon_tight"])
def test_verify_refuses_a_stated_figure_below_the_ledger_and_a_run_warns(name: str) -> None:
    """docs/mrmtl.md §2, as a client plan's step 6 (docs/ledger.md §5): a silo's stated figure
    below its recomputation is optimistic; the plan checker refuses it, a run reports it."""
    plan = silo_plan(scenario(), "mrmtl")
    document = plan.model_dump(mode="json")
    stated = document["silos"][1][name]
    document["silos"][1][name] = stated * (1 - 1e-8)
    tampered = load_plan_document(document)
    assert isinstance(tampered, SiloSamplePlan)
    with pytest.raises(InvalidInputError) as info:
        verify(tampered)
    assert info.value.field == f"silos.b.{name}" and "below epsilon" in info.value.reason
    found = verify(tampered, understated="report")
    assert [(item.field, item.executed) for item in found] == [(f"silos.b.{name}", stated)]
    assert verify(plan) == [] and verify(plan, understated="report") == []  # as planned: nothing below
    # a figure left out claims nothing (a plan written before the figures existed)
    document["silos"][1][name] = None if name != "epsilon_planned" else stated
    assert verify(load_plan_document(document)) == []  # type: ignore[arg-type]


def test_client_level_readers_refuse_a_silo_plan() -> None:
    document = silo_plan(scenario(), "mrmtl").model_dump(mode="json")
    assert isinstance(load_plan_document(document), SiloSamplePlan)
    with pytest.raises(InvalidInputError) as info:
        load_plan(document)
    assert info.value.field == "privacy_unit" and "silo_sample" in info.value.message


def test_scenario_errors_name_the_field() -> None:
    with pytest.raises(ValidationError, match="batch_size 16 exceeds silo b's 10") as too_big:
        scenario(silos=[{"id": "a", "num_samples": 100, "epsilon": 1}, {"id": "b", "num_samples": 10, "epsilon": 1}])
    assert [error["loc"] for error in too_big.value.errors()] == [("batch_size",)]  # not the whole input
    with pytest.raises(ValidationError, match="appears twice"):
        scenario(silos=[{"id": "a", "num_samples": 100, "epsilon": 1}] * 2)
    for given, missing in (("data_variance", "task_variance"), ("task_variance", "data_variance")):
        with pytest.raises(ValidationError, match="together") as alone:
            scenario(**{given: 0.1})
        assert [error["loc"] for error in alone.value.errors()] == [(missing,)]  # not the whole input
    with pytest.raises(InvalidInputError, match="silo_sample plans take one of"):
        silo_plan(scenario(), "gdpfed_plus")


def test_advisory_lambda_star() -> None:
    plan = silo_plan(scenario(data_variance=0.16, task_variance=0.0064), "mrmtl")
    assert plan.advice is not None
    # tighter budgets and smaller silos want more pull towards the mean
    stars = {s.id: s.lambda_star for s in plan.silos if s.lambda_star is not None}
    assert stars["b"] > stars["a"] > stars["c"]
    assert silo_plan(scenario(), "mrmtl").advice is None


def test_cli_plans_a_silo_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import run

    assert run(["plan", str(EXAMPLE), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["privacy_unit"] == "silo_sample" and document["notion"] == NOTION
    assert [s["id"] for s in document["silos"]] == ["hospital-a", "hospital-b", "bank-c"]
    assert all(s["epsilon_planned"] <= s["epsilon"] for s in document["silos"])
    assert run(["plan", str(EXAMPLE), "--method", "ditto"]) == 0
    assert "sample-level" in capsys.readouterr().out


def test_readme_silo_example_is_what_the_commands_print(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's silo console block, command by command: its output lines (``...`` marks
    an elision) appear in the command's real output, in order; the text plan appears whole."""
    import shlex

    from app.cli import run

    repo = EXAMPLE.parents[1]
    blocks = (repo / "README.md").read_text().split("```console\n")[1:]
    # the block that shows the plans (the next one trains: tests/foundation/test_documented_examples.py)
    [block] = [b.split("```")[0] for b in blocks if b.startswith("$ gdpfed plan examples/silos.json\n")]
    commands: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((shlex.split(line[2:])[1:], []))
        else:
            commands[-1][1].append(line.rstrip())
    assert [argv for argv, _ in commands] == [["plan", "examples/silos.json"], ["plan", "examples/silos.json", "--json"]]
    monkeypatch.chdir(repo)
    for argv, shown in commands:
        assert run(argv) == 0
        printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
        if all(line.strip() != "..." for line in shown):
            assert printed == shown
            continue
        position = 0
        for line in (line for line in shown if line.strip() != "..."):
            assert line in printed[position:], f"README line not in `gdpfed {' '.join(argv)}`'s output (in order): {line!r}"
            position = printed.index(line, position) + 1


@pytest.mark.parametrize("method", ["mrmtl", "ifca_mrmtl"])
def test_a_silo_replan_keeps_the_history_and_meets_the_new_budgets(method: str) -> None:
    """A budget change re-plans every silo for the remaining rounds (docs/mrmtl.md §6): the
    child carries what each silo spent (its DP-SGD steps and selections so far), its final
    epsilon by Google's dp-accounting on the whole history is within the new budget, and it
    is read back and verified like any plan; a budget below what was spent is refused."""
    from accounting.errors import BudgetConflictError
    from planner.units.silo_sample import replan, silo_epsilon_spent

    parent = silo_plan(scenario(rounds=10, warm_start_fraction=0.3), method)
    with pytest.raises(BudgetConflictError) as refused:
        replan(parent, 4, {"silos": [{"id": "c", "epsilon": 0.5 * silo_epsilon_spent(parent, parent.silo("c"), 4)}]})
    assert refused.value.field == "changes.silos.0.epsilon"
    with pytest.raises(InvalidInputError) as unknown:
        replan(parent, 4, {"silos": [{"id": "z", "epsilon": 2.0}]})
    assert unknown.value.field == "changes.silos.0.id"
    child = replan(parent, 4, {"silos": [{"id": "a", "epsilon": 2.0}, {"id": "c", "epsilon": 3.0}]}, None, "parent-id")
    assert (child.start_round, child.rounds, child.parent_plan_id) == (4, 6, "parent-id")
    assert [s.epsilon for s in child.silos] == [2.0, 1.0, 3.0]
    for before, after in zip(parent.silos, child.silos):
        assert after.spent_events() == silo_history(parent, before, 4)
        assert after.selection_rounds == max(0, before.selection_rounds - 4)
        # by the plan's own accountant (pld by default: rdp over-states it); dp-accounting's PLD is
        # itself an upper bound on a 1e-4 grid, hence 2e-3 for pld (as above)
        independent = dp_accounting_epsilon(silo_history(child, after, 6), 1e-5, child.accountant)
        assert independent <= after.epsilon * (1 + (2e-3 if child.accountant == "pld" else 1e-6))
        # what the child says was spent before it is what the parent spent in its 4 rounds
        assert silo_epsilon_spent(child, after, 0) == pytest.approx(silo_epsilon_spent(parent, before, 4), rel=1e-12)
    again = load_plan_document(child.model_dump(mode="json"))
    verify(again)  # type: ignore[arg-type]
    # a history is only a re-plan's: the verifier refuses it at round 0, and a later start without a parent
    forged = child.model_copy(update={"start_round": 0, "rounds": 10})
    with pytest.raises(InvalidInputError) as at_zero:
        verify(forged)
    assert at_zero.value.field == "start_round"
    with pytest.raises(InvalidInputError) as orphan:
        verify(child.model_copy(update={"parent_plan_id": None}))
    assert orphan.value.field == "parent_plan_id"
    # a plan from round 0 writes no history (its document is as before re-plans existed)
    assert "spent_phases" not in parent.model_dump(mode="json")["silos"][0]


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_the_service_ledger_rows_state_both_figures_like_the_run_summary(accountant: str) -> None:
    """docs/ledger.md §3: every ledger row states epsilon_rdp and epsilon_tight beside its
    figure of record; a silo's ledger row says what the trainer's summary says for it."""
    from planner.ledger import epsilon_figures
    from planner.units.silo_sample import ledger_rows

    plan = silo_plan(scenario(accountant=accountant), "ifca_mrmtl")  # a zCDP selection in the history too
    for rounds in (0, plan.rounds // 2, plan.rounds):
        rows = ledger_rows(plan, rounds, {})["silos"]
        expected = epsilon_figures([silo_history(plan, s, rounds) for s in plan.silos], plan.scenario.delta)
        for row, both in zip(rows, expected, strict=True):
            assert row.epsilon_rdp == pytest.approx(both.rdp) and row.epsilon_tight == pytest.approx(both.tight)
            # the figure of record is one of the two, never recomputed differently
            assert row.epsilon_spent == pytest.approx(row.epsilon_tight if accountant == "pld" else row.epsilon_rdp)
            assert row.model_dump()["epsilon_rdp"] == row.epsilon_rdp


def test_a_sampling_rate_below_the_accountants_precision_is_refused_naming_batch_size() -> None:
    """A silo of 1e9 examples at batch 1 (q = 1e-9) was planned with sigma 0.41 and an epsilon
    of 0 for 1e14 DP-SGD steps: the RDP curve loses precision at such rates. Refused instead."""
    huge = [{"id": "big", "num_samples": 1_000_000_000, "epsilon": 1.0}]
    with pytest.raises(ValidationError, match="below 1e-06") as refused:
        scenario(silos=huge, batch_size=1)
    assert [error["loc"] for error in refused.value.errors()] == [("batch_size",)]
    plan = silo_plan(scenario(silos=[{"id": "ok", "num_samples": 1_000_000, "epsilon": 1.0}], batch_size=1, rounds=2),
                     "mrmtl")
    assert plan.silos[0].sampling_rate == 1e-6 and plan.silos[0].epsilon_planned > 0.5
