"""docs/planning.md 'Why pools matter', computed by the planner (nothing stored).

3 groups x 100 clients, eps 1, 2, 4, delta 1e-3, T 100, K 30, C 1, d 1e5, keep 1, rdp.
"""

from __future__ import annotations

import pytest

from planner import make_plan
from tests.planner.conftest import worked_scenario

EXPECTED = {
    1: {"dp_fedavg": 1070, "gdpfed": 1614, "gdpfed_minus": 830, "idp_sample": 320, "pooled_plus": 320},
    10: {"dp_fedavg": 1070, "gdpfed": 1614, "gdpfed_minus": 1614, "idp_sample": 320, "pooled_plus": 320},
}


@pytest.mark.parametrize("minimum", [1, 10])
def test_noise_energies_reproduce_within_two_percent(minimum):
    plan = make_plan(worked_scenario(minimum), "compare")
    energies = {row.method: row.noise_energy for row in plan.comparison}
    for method, expected in EXPECTED[minimum].items():
        assert energies[method] == pytest.approx(expected, rel=0.02), method
    # keep ratio 1: gdpfed_plus is gdpfed_minus
    assert energies["gdpfed_plus"] == pytest.approx(energies["gdpfed_minus"], rel=1e-9)


def test_strict_group_expects_under_two_clients_with_minimum_one():
    plan = make_plan(worked_scenario(1), "gdpfed_minus")
    strict = plan.group("g1")
    assert strict.expected_clients >= 1.0 and strict.expected_clients < 2.0
    # with minimum 10 every pool needs 10 of the 30 clients: nothing can move
    pinned = make_plan(worked_scenario(10), "gdpfed_minus")
    assert [g.expected_clients for g in pinned.groups] == pytest.approx([10, 10, 10], rel=1e-9)


def test_shared_pool_equalises_the_members_noise():
    plan = make_plan(worked_scenario(10), "pooled_plus")
    assert len(plan.pools) == 1
    required = [g.noise_multiplier_required for g in plan.groups]
    # the exact 1-D search leaves every member needing (nearly) the shared sigma
    assert max(required) / min(required) < 1.002
    assert plan.pools[0].noise_multiplier == pytest.approx(max(required), rel=1e-12)


def test_the_docs_worked_example_block_is_what_its_command_prints(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/planning.md §12's console block, run: its output is what the page shows (the page
    showed an rdp plan under a command that, since pld became the default, prints a pld one)."""
    import shlex
    from pathlib import Path

    from app.cli import run

    repo = Path(__file__).resolve().parents[2]
    page = (repo / "docs" / "planning.md").read_text()
    section = page.split("## 12. Worked example")[1]
    block = section.split("```console\n")[1].split("```")[0]
    command, *shown = block.splitlines()
    assert command.startswith("$ gdpfed plan examples/scenario.json")
    monkeypatch.chdir(repo)
    assert run(shlex.split(command[2:])[1:]) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert printed == [line.rstrip() for line in shown]


def test_the_docs_sweep_block_is_what_its_command_prints(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/planning.md §12's sweep, run: the page showed rdp's noise energies (884 ... 367.2)
    under a command that, since pld became the default, prints pld's (705.5 ... 302.9), and the
    printed table did not say which accountant its energies are."""
    import shlex
    from pathlib import Path

    from app.cli import run

    repo = Path(__file__).resolve().parents[2]
    page = (repo / "docs" / "planning.md").read_text()
    section = page.split("## 12. Worked example")[1].split("## 13.")[0]
    block = next(b for b in section.split("```console\n")[1:] if b.startswith("$ gdpfed plan sweep "))
    command, *shown = block.split("```")[0].splitlines()
    monkeypatch.chdir(repo)
    assert run(shlex.split(command[2:])[1:]) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert printed == [line.rstrip() for line in shown]
    assert "accountant rdp" in printed[0]
