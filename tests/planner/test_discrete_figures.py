"""A skellam plan states the figures of the mechanism it runs (docs/ledger.md §3, "What a plan
states"; docs/secure-aggregation.md §Discrete noise): each group of a pool with a discrete
block states its full-run ledger on skellam, never the continuous Gaussian's figure at its
sigma (which a skellam run's ledger exceeded by up to 1e-7 relative), and the verifier refuses
a plan file that states less (docs/ledger.md §5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accounting.errors import InvalidInputError
from planner import ledger as plan_ledger
from planner import load_scenario, make_plan
from planner.plan import PLAN_METHODS
from planner.replan import replan
from planner.schema import Plan
from planner.verify import verify_executable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str, **update: object) -> dict[str, object]:
    return {**json.loads((EXAMPLES / name).read_text()), **update}


def assert_states_its_ledger(plan: Plan) -> None:
    """Every group's ``epsilon_spent`` is the full-run ledger of the plan's mechanism (rel 1e-12)
    and within its budget; its rdp and tight figures are the ledger's figures too."""
    mechanism = plan.scenario.mechanism
    ledger = plan_ledger.spent_by_group(plan, plan.rounds, mechanism=mechanism)
    figures = plan_ledger.figures_by_group(plan, plan.rounds, mechanism=mechanism)
    stated = [g for g in plan.groups if g.epsilon_spent is not None]
    assert stated, plan.groups
    for group in stated:
        spent = ledger[group.id]
        assert spent is not None, group.id
        assert group.epsilon_spent == pytest.approx(spent, rel=1e-12, abs=0.0), (plan.method, group.id)
        assert group.epsilon is not None and spent <= group.epsilon * (1 + 1e-9), group.id
        both = figures[group.id]
        assert both is not None
        for name, value in (("epsilon_rdp", both.rdp), ("epsilon_tight", both.tight)):
            if getattr(group, name) is not None:
                assert getattr(group, name) == pytest.approx(value, rel=1e-12, abs=0.0), (plan.method, group.id, name)
    verify_executable(plan)


@pytest.mark.parametrize("method", [m for m in PLAN_METHODS if m != "nonprivate"] + ["compare"])
def test_every_method_states_the_skellam_ledger_of_its_run(method: str) -> None:
    plan = make_plan(load_scenario(example("scenario.json")), method)  # type: ignore[arg-type]
    assert any(pool.discrete is not None for pool in plan.pools)
    assert_states_its_ledger(plan)
    if method == "compare":
        row = next(r for r in plan.comparison or [] if r.recommended)
        assert row.epsilon_spent == {g.id: g.epsilon_spent for g in plan.groups}


@pytest.mark.parametrize("name", ["synthetic-3000.json", "fedhdp.json"])
def test_the_examples_state_the_skellam_ledger_of_their_run(name: str) -> None:
    plan = make_plan(load_scenario(example(name)))
    assert any(pool.discrete is not None for pool in plan.pools)
    if name == "fedhdp.json":  # adaptive clipping: the count coordinate is in the events
        assert all(p.discrete.count_factor > 0 for p in plan.pools if p.discrete is not None)
    assert_states_its_ledger(plan)


@pytest.mark.parametrize("accountant", ["rdp", "prv", "closed_form"])
def test_every_accountant_states_the_ledger_of_its_blocks(accountant: str) -> None:
    """prv cannot account the Skellam event: a prv plan's Skellam rounds are priced by rdp, the
    accountant its blocks are calibrated by, in the plan and in the ledger alike."""
    plan = make_plan(load_scenario(example("scenario.json", accountant=accountant)))
    assert all(p.discrete is not None and p.discrete.accountant == "rdp" for p in plan.pools if p.noise_multiplier > 0)
    assert_states_its_ledger(plan)
    assert all(g.epsilon_spent_prv_upper is None for g in plan.groups)
    for group in plan.groups:  # the continuous path keeps the plan's own accountant
        assert plan_ledger.history_accountant(plan, group, "skellam") == "rdp"
        assert plan_ledger.history_accountant(plan, group, "gaussian_continuous") == accountant


def test_a_replan_of_a_skellam_run_states_the_ledger_of_its_spent_and_new_skellam_events() -> None:
    parent = make_plan(load_scenario(example("scenario.json")))
    child = replan(parent, 20, json.loads((EXAMPLES / "changes.json").read_text()), parent_plan_id="parent")
    assert any(g.spent_discrete for g in child.groups)
    assert_states_its_ledger(child)


def test_a_continuous_plan_states_the_gaussian_verification_unchanged() -> None:
    base = example("scenario.json")
    plain = make_plan(load_scenario({**base, "secagg_mechanism": "gaussian_continuous"}))
    default = make_plan(load_scenario(base))
    assert all(pool.discrete is None for pool in plain.pools)
    assert_states_its_ledger(plain)
    # the same design: only the figures of the groups differ, by the mechanisms' difference
    for ours, theirs in zip(default.groups, plain.groups, strict=True):
        assert ours.effective_noise_multiplier == theirs.effective_noise_multiplier
        assert ours.epsilon_spent != theirs.epsilon_spent
        assert ours.epsilon_spent == pytest.approx(theirs.epsilon_spent, rel=1e-3)


def test_verify_refuses_a_skellam_plan_stating_less_than_its_blocks_spend(tmp_path: Path) -> None:
    """A plan file whose group figure is edited down by 1e-8 relative (beyond the verifier's
    VERIFY_SLACK) is refused, naming the group and the field: the verifier recomputes the
    figure from the blocks' events."""
    plan = make_plan(load_scenario(example("scenario.json")))
    verify_executable(Plan.model_validate_json(plan.model_dump_json()))  # the file as written passes
    for field in ("epsilon_spent", "epsilon_tight"):
        group = plan.groups[1]
        value = getattr(group, field)
        edited = plan.model_copy(update={"groups": [
            g.model_copy(update={field: value * (1 - 1e-8)}) if g.id == group.id else g for g in plan.groups
        ]})
        reread = Plan.model_validate_json(edited.model_dump_json())
        with pytest.raises(InvalidInputError) as refused:
            verify_executable(reread)
        assert refused.value.field == f"groups.{group.id}.{field}"
        assert "below epsilon" in refused.value.message
    # stating more is not optimistic: allowed
    upper = plan.model_copy(update={"groups": [
        g.model_copy(update={"epsilon_spent": g.epsilon_spent * (1 + 1e-9)}) if g.epsilon_spent else g
        for g in plan.groups
    ]})
    verify_executable(upper)


def test_gdpfed_plan_verify_refuses_a_plan_file_stating_less_than_its_blocks_spend(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``gdpfed plan verify PLAN.json``: exit 0 on the file ``gdpfed plan --out`` wrote; exit 2
    with one line naming the file, the group and the field once a group's epsilon_spent is
    edited down by 1e-8 relative (beyond the verifier's VERIFY_SLACK)."""
    from app.cli import run

    written = tmp_path / "plan.json"
    assert run(["plan", str(EXAMPLES / "scenario.json"), "--out", str(written)]) == 0
    capsys.readouterr()
    assert run(["plan", "verify", str(written), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "plan": str(written), "privacy_unit": "client", "mechanism": "skellam", "accountants": ["pld"], "verified": True}
    document = json.loads(written.read_text())
    group = document["groups"][2]
    group["epsilon_spent"] *= 1 - 1e-8
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(document))
    assert run(["plan", "verify", str(edited)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert f"{edited}: groups.{group['id']}.epsilon_spent: states " in captured.err
    assert run(["plan", "verify", str(written), "--method", "dp_fedavg"]) == 2
    assert "--method" in capsys.readouterr().err


def test_a_raw_closed_form_group_marked_unsound_keeps_its_larger_verified_figure() -> None:
    """sound: false (the raw closed-form sigma that rdp refutes) stays, and the group keeps its
    verified figure, above its budget and so above its block's Skellam figure: never optimistic;
    the verifier refuses the plan."""
    from tests.planner.test_accountants import worked_scenario

    scenario = worked_scenario(1, raw_closed_form=True, rounds=1, expected_clients=30, accountant="closed_form")
    raw = make_plan(scenario.model_copy(update={"secagg_mechanism": "skellam"}), "gdpfed")
    assert all(pool.discrete is not None for pool in raw.pools)
    ledger = plan_ledger.spent_by_group(raw, raw.rounds, mechanism="skellam")
    unsound = [g for g in raw.groups if not g.sound]
    assert unsound
    for group in unsound:
        assert group.epsilon is not None and group.epsilon_spent is not None
        assert group.epsilon_spent > group.epsilon >= ledger[group.id]  # type: ignore[operator]
    with pytest.raises(InvalidInputError) as refused:
        verify_executable(raw)
    assert "sound: false" in refused.value.message
