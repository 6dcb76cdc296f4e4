"""``gdpfed plan``: text, --json, --out, replan, sweep with a PNG, one-line errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import run
from planner import load_plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scenario.json"


def test_plan_text_lists_groups_pools_and_terms(capsys):
    assert run(["plan", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "strict" in out and "P1" in out and "noise energy" in out and "m_P" in out


def test_plan_json_has_schema_version_and_round_trips(capsys, tmp_path):
    out_file = tmp_path / "plan.json"
    assert run(["plan", str(EXAMPLE), "--json", "--out", str(out_file), "--method", "dp_fedavg"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["schema_version"], data["privacy_unit"], data["method"]) == (2, "client", "dp_fedavg")
    plan = load_plan(data)
    assert load_plan(plan.model_dump(mode="json")) == plan
    assert load_plan(json.loads(out_file.read_text())) == plan


def test_compare_prints_the_comparison_table(capsys):
    assert run(["plan", str(EXAMPLE), "--method", "compare"]) == 0
    out = capsys.readouterr().out
    for method in ("dp_fedavg", "gdpfed_minus", "idp_sample", "pooled_plus"):
        assert method in out


def test_accountant_override(capsys):
    assert run(["plan", str(EXAMPLE), "--accountant", "closed_form", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accountant"] == "closed_form"


def test_yaml_scenario(capsys):
    assert run(["plan", str(ROOT / "examples" / "scenario.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["delta"] == 1e-5


def test_replan_through_the_cli(capsys, tmp_path):
    parent = tmp_path / "parent.json"
    assert run(["plan", str(EXAMPLE), "--out", str(parent)]) == 0
    capsys.readouterr()
    assert run(
        ["plan", "replan", str(parent), "--rounds-done", "40", "--changes", str(ROOT / "examples" / "changes.json"),
         "--parent-plan-id", "p1", "--json"]
    ) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["start_round"] == 40 and data["parent_plan_id"] == "p1"
    assert [g["id"] for g in data["groups"]][-1] == "late"


def test_replan_changes_naming_a_group_twice_are_refused(capsys, tmp_path):
    """A changes file that names a group twice was re-planned with the last entry's epsilon
    (0.9 here, the first's 0.8 silently dropped), as a duplicated key would be; silo and
    metric changes refused it already. Exit 2, one line naming changes.groups and the id."""
    parent = tmp_path / "parent.json"
    assert run(["plan", str(EXAMPLE), "--out", str(parent)]) == 0
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({"groups": [{"id": "strict", "epsilon": 0.8}, {"id": "strict", "epsilon": 0.9}]}))
    err = one_line_error(capsys, ["plan", "replan", str(parent), "--rounds-done", "40", "--changes", str(twice)])
    assert err.startswith("gdpfed plan: error: changes.groups: ") and "'strict'" in err, err


def test_replan_changes_rounds_past_the_bound_names_changes_rounds(capsys, tmp_path):
    """A new total of 10^12 rounds was refused by the re-planned scenario's check, naming
    ``rounds`` (``scenario.rounds`` over HTTP), a field of the stored plan, not the one given."""
    parent = tmp_path / "parent.json"
    assert run(["plan", str(EXAMPLE), "--out", str(parent)]) == 0
    many = tmp_path / "many.json"
    many.write_text(json.dumps({"rounds": 10**12}))
    err = one_line_error(capsys, ["plan", "replan", str(parent), "--rounds-done", "40", "--changes", str(many)])
    assert err.startswith("gdpfed plan: error: changes.rounds: "), err


def test_replan_of_a_silo_plan_through_the_cli(capsys, tmp_path):
    """``gdpfed plan replan`` takes every unit's plans (it read client plans only and refused
    a silo plan naming privacy_unit): a silo's epsilon raised, another's lowered, refused
    below what the silo spent, naming the changes' field."""
    parent = tmp_path / "silos-plan.json"
    assert run(["plan", str(ROOT / "examples" / "silos.json"), "--out", str(parent)]) == 0
    capsys.readouterr()
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps({"silos": [{"id": "bank-c", "epsilon": 6.0}, {"id": "hospital-a", "epsilon": 0.8}]}))
    argv = ["plan", "replan", str(parent), "--rounds-done", "10", "--changes", str(changes), "--parent-plan-id", "p1"]
    assert run([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["privacy_unit"], data["start_round"], data["rounds"], data["parent_plan_id"]) == ("silo_sample", 10, 40, "p1")
    epsilons = {silo["id"]: silo["epsilon"] for silo in data["silos"]}
    assert epsilons == {"hospital-a": 0.8, "hospital-b": 1.0, "bank-c": 6.0}
    assert all(silo["spent_phases"] for silo in data["silos"])  # the 10 rounds run, carried
    assert run(argv) == 0
    assert "privacy: silo-specific sample-level" in capsys.readouterr().out
    changes.write_text(json.dumps({"silos": [{"id": "hospital-b", "epsilon": 0.01}]}))
    err = one_line_error(capsys, argv)
    assert "changes.silos.0.epsilon" in err and "already spent" in err
    changes.write_text(json.dumps({"silos": [{"id": "hospital-b", "epsilonn": 2.0}]}))
    assert "changes.silos.0.epsilonn" in one_line_error(capsys, argv)


def test_replan_of_a_metric_plan_through_the_cli(capsys, tmp_path):
    """A metric group's leakage budget changed from the command line moves its participation
    cap; without a run's participations every client counts as released in every round
    done (within the cap), so a budget below 3 releases' leakage after 3 rounds is refused."""
    parent = tmp_path / "metric-plan.json"
    assert run(["plan", str(ROOT / "examples" / "metric.json"), "--out", str(parent)]) == 0
    capsys.readouterr()
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps({"groups": [{"id": "relaxed", "leakage_budget": 3.2}]}))
    argv = ["plan", "replan", str(parent), "--rounds-done", "3", "--changes", str(changes)]
    assert run([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["privacy_unit"], data["start_round"], data["rounds"]) == ("metric_local", 3, 97)
    relaxed = {group["id"]: group for group in data["groups"]}["relaxed"]
    assert (relaxed["leakage_budget"], relaxed["max_participations"], relaxed["noise_multiplier"]) == (3.2, 8, 5.0)
    assert run(argv) == 0
    text = capsys.readouterr().out
    assert "not an epsilon" in text and "group relaxed: nu = 5, leakage per participation 0.4, cap 8" in text
    changes.write_text(json.dumps({"groups": [{"id": "relaxed", "leakage_budget": 1.0}]}))
    err = one_line_error(capsys, argv)
    assert "changes.groups.0.leakage_budget" in err and "already leaked 1.2" in err


def test_sweep_writes_a_png(capsys, tmp_path):
    png = tmp_path / "rates.png"
    assert run(["plan", "sweep", str(EXAMPLE), "--group", "strict", "--epsilons", "0.5,1,4", "--plot", str(png)]) == 0
    assert "q[strict]" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run(["plan", "sweep", str(EXAMPLE), "--group", "strict", "--epsilons", "1,2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["epsilons"] == [1.0, 2.0] and set(data["sampling_rates"]) == {"strict", "medium", "relaxed"}


def one_line_error(capsys, argv) -> str:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_bad_inputs_exit_two_with_one_line(capsys, tmp_path):
    assert "scenario" in one_line_error(capsys, ["plan", str(tmp_path / "missing.json")])
    bad = tmp_path / "bad.json"
    bad.write_text('{"groups": [{"id": "a", "epsilon": -1, "num_clients": 3}], "delta": 0.001, "rounds": 5, '
                   '"model_dim": 10, "expected_clients": 1}')
    assert "groups.0.epsilon" in one_line_error(capsys, ["plan", str(bad)])
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "epsilom": 1}))
    assert "epsilom" in one_line_error(capsys, ["plan", str(typo)])
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not valid JSON" in one_line_error(capsys, ["plan", str(broken)])
    assert "--rounds-done" in one_line_error(capsys, ["plan", "replan", str(EXAMPLE), "--changes", "x.json"])
    assert "--epsilons" in one_line_error(
        capsys, ["plan", "sweep", str(EXAMPLE), "--group", "strict", "--epsilons", "1,x"]
    )
    assert "group" in one_line_error(capsys, ["plan", "sweep", str(EXAMPLE), "--group", "nope", "--epsilons", "1"])
    assert "--group" in one_line_error(capsys, ["plan", str(EXAMPLE), "--group", "strict"])
    infeasible = tmp_path / "inf.json"
    infeasible.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "expected_clients": 1000}))
    assert "exceeds" in one_line_error(capsys, ["plan", str(infeasible)])
    assert "schema_version" in one_line_error(
        capsys, ["plan", "replan", str(EXAMPLE), "--rounds-done", "1", "--changes", str(EXAMPLE)]
    )


@pytest.mark.parametrize(
    ("example", "epsilon", "code", "lines"),
    [
        ("scenario.json", 1e-300, 2, 1),  # refused: its noise is out of range; the only line
        ("scenario.json", 1e-100, 0, 0),  # planned; the fractional orders' z0^2 overflows (tail 0)
        ("fedhdp.json", 1e-300, 2, 1),  # the pools' QP meets inf * 0 before the refusal
    ],
)
def test_extreme_closed_form_epsilon_prints_no_numpy_warnings(tmp_path, example, epsilon, code, lines):
    """numpy's RuntimeWarnings (inf/nan on purpose at extreme inputs) went to stderr before the
    error line; a subprocess, since pytest records warnings instead of printing them."""
    scenario = tmp_path / "extreme.json"
    document = json.loads((EXAMPLE.parent / example).read_text())
    document["groups"][0]["epsilon"] = epsilon
    scenario.write_text(json.dumps({**document, "accountant": "closed_form"}))
    completed = subprocess.run(
        [sys.executable, "-m", "app.cli", "plan", str(scenario)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == code, completed.stderr
    assert len(completed.stderr.splitlines()) == lines, completed.stderr
    assert "Warning" not in completed.stderr


def test_unknown_method_is_a_usage_error(capsys):
    """The planner's registry checks the name and lists the known ones (exit 2, one line)."""
    err = one_line_error(capsys, ["plan", str(EXAMPLE), "--method", "magic"])
    assert "method" in err and "'magic'" in err and "gdpfed_plus" in err and "compare" in err
    err = one_line_error(capsys, ["plan", "sweep", str(EXAMPLE), "--group", "strict", "--epsilons", "1",
                                  "--method", "magic"])
    assert "method" in err and "'magic'" in err


def test_adaptive_clip_plan_text_shows_each_pools_update_and_count_noise(capsys, tmp_path):
    """docs/planning.md §15: sigma_Delta and sigma_b per pool; the noise std is the first
    round's, sigma_Delta S^0 with S^0 = initial_clip_norm (not clip_norm 1.0)."""
    import math
    import re

    scenario = tmp_path / "adaptive.json"
    block = {"initial_clip_norm": 0.5, "count_noise_std": 4.0}
    scenario.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "adaptive_clip": block}))
    assert run(["plan", str(scenario), "--json"]) == 0
    plan = load_plan(json.loads(capsys.readouterr().out))
    assert run(["plan", str(scenario)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("pool "))
    header = re.split(r"\s{2,}", lines[start])
    assert header[2:6] == ["sigma", "sigma_Delta", "sigma_b", "noise std (S^0)"]
    end = lines.index("", start)  # the pool table ends at the blank line (the discrete blocks' table follows)
    rows = {cells[0]: dict(zip(header, cells)) for cells in (re.split(r"\s{2,}", line) for line in lines[start + 2:end])
            if cells[0] in {p.id for p in plan.pools}}
    assert len(rows) == len(plan.pools) == 3
    for pool in plan.pools:
        row = rows[pool.id]
        assert pool.update_noise_multiplier is not None and pool.count_noise_std == 4.0
        assert math.isclose(float(row["sigma_Delta"]), pool.update_noise_multiplier, rel_tol=1e-3)
        assert float(row["sigma_b"]) == 4.0
        assert math.isclose(float(row["noise std (S^0)"]), pool.update_noise_multiplier * 0.5, rel_tol=1e-3)
        assert math.isclose(float(row["share std"]),
                            pool.update_noise_multiplier * 0.5 / math.sqrt(pool.secagg_threshold), rel_tol=1e-3)
    assert any(line.startswith("adaptive clipping: S^0 = 0.5") for line in lines)


def test_plan_text_says_why_a_large_pool_stays_full(capsys, tmp_path):
    """A pool auto keeps full although SecAgg+ exists shows why; the JSON is unchanged."""
    scenario = tmp_path / "dropouts.json"
    scenario.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "groups": [
        {"id": "a", "epsilon": 8.0, "num_clients": 3000}], "expected_clients": 280, "dropout_rate": 0.05, "rounds": 10}))
    assert run(["plan", str(scenario), "--method", "gdpfed_plus"]) == 0
    text = capsys.readouterr().out
    assert "full (SecAgg+ k=70 saves < 4x)" in text
    assert run(["plan", str(scenario), "--method", "gdpfed_plus", "--json"]) == 0
    pool = json.loads(capsys.readouterr().out)["pools"][0]
    assert pool["secagg_mode"] == "full" and pool["secagg_neighbours"] is None


def test_a_scenario_without_model_dim_says_where_it_comes_from(capsys, tmp_path):
    """A metric (or client) scenario without ``model_dim``: ``gdpfed plan`` has no model to
    count, so the one line names the field, what it is and that ``gdpfed train --scenario``
    sets it from the model (pydantic alone said ``model_dim: Field required``)."""
    for example in ("metric.json", "scenario.json"):
        scenario = json.loads((ROOT / "examples" / example).read_text())
        del scenario["model_dim"]
        path = tmp_path / example
        path.write_text(json.dumps(scenario))
        assert run(["plan", str(path)]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"gdpfed plan: error: scenario: {path}: model_dim: missing: the parameter count"), line
        assert "gdpfed train --scenario set it from the model" in line


def test_replan_takes_the_mechanism_the_run_executed(capsys, tmp_path):
    """``gdpfed plan replan --secagg-mechanism skellam`` checks a lowered budget against the Skellam
    events the run spent (issue 27): one between them and the plan's larger Gaussian record is
    accepted; without the option (the mechanism unknown) the larger record refuses it, exit 2
    naming the field. The option is refused on a plan whose unit runs no secure-aggregation noise."""
    from planner import ledger as plan_ledger
    from tests.planner.test_replan import planned_skellam_parent

    parent = planned_skellam_parent()
    strict = parent.group("strict")
    gaussian = plan_ledger.epsilon_spent(parent, strict, 2)
    skellam = plan_ledger.epsilon_spent(parent, strict, 2, mechanism="skellam")
    assert gaussian is not None and skellam is not None
    between = (gaussian + skellam) / 2
    path = tmp_path / "plan.json"
    path.write_text(parent.model_dump_json())
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps({"groups": [{"id": "strict", "epsilon": between}]}))
    argv = ["plan", "replan", str(path), "--rounds-done", "2", "--changes", str(changes)]
    err = one_line_error(capsys, argv)
    assert "changes.groups.0.epsilon" in err and "already spent" in err
    assert run([*argv, "--secagg-mechanism", "skellam", "--json"]) == 0
    child = load_plan(json.loads(capsys.readouterr().out))
    assert child.group("strict").epsilon == between
    silo = tmp_path / "silos-plan.json"
    assert run(["plan", str(ROOT / "examples" / "silos.json"), "--out", str(silo)]) == 0
    capsys.readouterr()
    changes.write_text(json.dumps({"silos": []}))
    err = one_line_error(capsys, ["plan", "replan", str(silo), "--rounds-done", "1", "--changes", str(changes),
                                  "--secagg-mechanism", "skellam"])
    assert err.startswith("gdpfed plan: error: --secagg-mechanism") and "silo_sample" in err


def test_replan_of_a_prv_or_closed_form_plan_through_the_cli(capsys, tmp_path):
    """``gdpfed plan replan`` of a prv plan failed on every call (exit 2: 'accountant prv does not support
    poisson_sampled_skellam events'): its spent Skellam events were priced with prv, not with the blocks'
    accountant (rdp) its ledger uses. Both a prv and a closed_form plan re-plan with no changes (exit 0)."""
    from tests.trainer.test_reporting import SCENARIO

    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({**SCENARIO, "rounds": 4}))
    changes = tmp_path / "changes.json"
    changes.write_text("{}")
    for accountant in ("prv", "closed_form"):
        parent = tmp_path / f"{accountant}.json"
        assert run(["plan", str(scenario), "--accountant", accountant, "--out", str(parent)]) == 0
        capsys.readouterr()
        assert run(["plan", "replan", str(parent), "--rounds-done", "2", "--changes", str(changes), "--json"]) == 0, (
            capsys.readouterr().err)
        child = load_plan(json.loads(capsys.readouterr().out))
        assert child.accountant == accountant and child.start_round == 2
        assert all(g.status == "active" and g.spent_discrete for g in child.groups)


def test_client_plan_text_names_its_notion_and_mechanism(capsys, tmp_path):
    """A client plan's header named neither its privacy notion nor the mechanism its 'eps spent' is of
    (a silo plan prints 'privacy: ...'): it prints a privacy line, skellam (exact, its threat model) or
    gaussian_continuous (approximate)."""
    assert run(["plan", str(EXAMPLE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(
        "privacy: client-level (epsilon, delta)-DP per group; secagg_mechanism=skellam (exact; threat model: "
        "honest-but-curious server, 0 colluding client(s)"), lines[:2]
    continuous = tmp_path / "continuous.json"
    continuous.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "secagg_mechanism": "gaussian_continuous"}))
    assert run(["plan", str(continuous)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "privacy: client-level (epsilon, delta)-DP per group; secagg_mechanism=gaussian_continuous (approximate)")


def test_plan_verify_names_the_mechanism_and_the_accountants_it_checked_with(capsys, tmp_path):
    """``gdpfed plan verify`` said only 'verified (client plan)': it names the mechanism the figures are of
    and the accountant(s) it recomputed them with, in text and --json (a prv skellam plan's Skellam-priced
    groups are checked with rdp, the blocks' accountant)."""
    written = tmp_path / "plan.json"
    assert run(["plan", str(EXAMPLE), "--out", str(written)]) == 0
    capsys.readouterr()
    assert run(["plan", "verify", str(written)]) == 0
    assert "verified (client plan, mechanism skellam, checked with pld)" in capsys.readouterr().out
    assert run(["plan", "verify", str(written), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "plan": str(written), "privacy_unit": "client", "mechanism": "skellam", "accountants": ["pld"], "verified": True}
    from tests.trainer.test_reporting import SCENARIO

    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({**SCENARIO, "rounds": 4, "accountant": "prv"}))
    assert run(["plan", str(scenario), "--out", str(written)]) == 0
    capsys.readouterr()
    assert run(["plan", "verify", str(written)]) == 0
    assert "verified (client plan, mechanism skellam, checked with rdp)" in capsys.readouterr().out


def test_compare_rows_say_which_mechanism_their_figures_are_of(capsys):
    """Each comparison row's epsilon_spent is of a mechanism: the recommended row's the plan's (skellam),
    the others their design's Gaussian verification (nonprivate has none); the row says so (``mechanism``)
    in JSON and the table."""
    assert run(["plan", str(EXAMPLE), "--method", "compare", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["comparison"]
    assert [row["mechanism"] for row in rows if row["recommended"]] == ["skellam"]
    assert {row["mechanism"] for row in rows if not row["recommended"] and row["feasible"] and row["private"]} == {
        "gaussian_continuous"}
    assert [row["mechanism"] for row in rows if not row["private"]] == [None]  # nonprivate: no figures
    assert run(["plan", str(EXAMPLE), "--method", "compare"]) == 0
    text = capsys.readouterr().out.split("comparison (one row per method; * = recommended):\n")[1]
    table = text.split("\n\n")[0].splitlines()
    assert table[0].split()[:3] == ["method", "acct", "mechanism"]
    recommended = [line.split() for line in table[2:] if " * " in line]
    others = [line.split() for line in table[2:]
              if " * " not in line and "infeasible" not in line and not line.startswith("nonprivate")]
    assert [row[3] for row in recommended] == ["skellam"] and others
    assert all(row[2] == "gaussian_continuous" for row in others)


@pytest.mark.parametrize("argv", [["--epsilons=-1,2"], ["--epsilons", "-1,2"], ["--epsilons", "-1"],
                                  ["--epsilons", "2,-0.5"], ["--epsilons=0,2"], ["--epsilons", "-1e-3,2"]])
def test_sweep_refuses_a_negative_epsilon_naming_the_option(capsys, argv):
    """``--epsilons -1,2`` was read by argparse as an option (``-1,2`` starts with a dash and is
    not one number), so the user got argparse's 'expected one argument'; ``--epsilons=-1,2``
    reached the sweep and was named ``epsilons[0]``. Both now name the option and the value,
    before the scenario is read (the group is never looked up)."""
    err = one_line_error(capsys, ["plan", "sweep", str(EXAMPLE), "--group", "nope", *argv])
    assert err.startswith("gdpfed plan: error: --epsilons: ") and "must be a positive finite number" in err


def test_sweep_reads_a_list_starting_with_a_dash_as_the_value(capsys):
    """A list beginning with a negative number is the value of ``--epsilons``, and the options
    after it still parse as options."""
    err = one_line_error(capsys, ["plan", "sweep", str(EXAMPLE), "--epsilons", "-1,2", "--group", "strict", "--json"])
    assert err == "gdpfed plan: error: --epsilons: must be a positive finite number, got '-1'\n"
