"""Plans under closed_form (checked or raw) and prv (docs/planning.md §8)."""

from __future__ import annotations

import numpy as np
import pytest

import accounting
from planner import make_plan
from planner.methods.search import closed_form_slopes
from planner.problem import build_problem
from planner.waterfill import waterfill_qp
from tests.planner.conftest import independent_epsilon, worked_scenario

cp = pytest.importorskip("cvxpy")


def test_closed_form_plan_is_the_exact_qp_optimum():
    scenario = worked_scenario(1, accountant="closed_form", keep_ratio=0.5)
    plan = make_plan(scenario, "gdpfed_plus")
    # the same QP solved by cvxpy: min sum a q + b q^2, sum N q = K, q >= 1/N, q <= 1
    problem = build_problem(scenario)
    slope = closed_form_slopes(problem)
    n = problem.num_clients
    a = 1.0 * (1 - 0.5) ** 2 * n / 30
    b = 1e5 * 0.5 * slope**2 / 900
    q = cp.Variable(3)
    cp.Problem(cp.Minimize(a @ q + cp.sum(cp.multiply(b, cp.square(q)))), [n @ q == 30, q >= 1 / n, q <= 1]).solve(
        solver=cp.CLARABEL
    )
    ours = np.array([g.sampling_rate for g in plan.groups])
    np.testing.assert_allclose(ours, q.value, rtol=1e-5)
    np.testing.assert_allclose(ours, waterfill_qp(a * 1, b, n, 30, 1 / n, np.ones(3)).x, rtol=1e-9)


def test_closed_form_sigma_replaced_where_rdp_refutes_it_unless_raw():
    # T = 1, q = 0.1: the paper's formula under-noises here (docs/accounting.md)
    base = dict(rounds=1, expected_clients=30, accountant="closed_form")
    checked = make_plan(worked_scenario(1, **base), "gdpfed")
    raw = make_plan(worked_scenario(1, raw_closed_form=True, **base), "gdpfed")
    assert any("replaced by the rdp sigma" in w for w in checked.warnings)
    assert all(g.sound for g in checked.groups)
    for g in checked.groups:
        assert independent_epsilon(g.phases, 1e-3) <= g.epsilon * 1.002
    unsound = [g for g in raw.groups if not g.sound]
    assert unsound and any("sound: false" in w for w in raw.warnings)
    for g in unsound:
        assert g.epsilon_spent > g.epsilon  # reported honestly, never clipped to the target


def test_prv_plan_meets_budgets_under_pld():
    dp_accounting = pytest.importorskip("dp_accounting")
    plan = make_plan(worked_scenario(10, accountant="prv", report_prv=True), "gdpfed")
    for g in plan.groups:
        assert g.epsilon_spent <= g.epsilon * (1 + 1e-9)
        assert g.epsilon_spent_prv_upper is not None
        # PRV plans are no looser than rdp ones
        assert g.noise_multiplier_required <= accounting.noise_multiplier(0.1, 100, g.epsilon, 1e-3).noise_multiplier
        pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        phase = g.phases[0]
        pld.compose(
            dp_accounting.PoissonSampledDpEvent(phase.sampling_rate, dp_accounting.GaussianDpEvent(phase.noise_multiplier)),
            phase.steps,
        )
        # PLD with a fine grid; slack for its own discretisation
        assert pld.get_epsilon(1e-3) <= g.epsilon * 1.01


def test_report_prv_bounds_match_epsilon_of_phases_and_share_one_deadline(monkeypatch):
    """report_prv computes all groups in one call; past its deadline the bounds are null with a warning."""
    from accounting.events import Phase
    from planner import calibration

    histories = [[Phase(sampling_rate=0.1, noise_multiplier=1.2, steps=50)],
                 [Phase(sampling_rate=0.2, noise_multiplier=0.9, steps=30)],
                 [Phase(sampling_rate=0.1, noise_multiplier=1.2, steps=50)]]
    uppers, reason = calibration.prv_uppers(histories, 1e-5)
    assert reason is None and uppers[0] == uppers[2]
    for history, upper in zip(histories, uppers):
        assert upper == pytest.approx(accounting.epsilon_of_phases(history, 1e-5, "prv").epsilon, rel=1e-9)
    monkeypatch.setattr(calibration, "PRV_REPORT_TIME_LIMIT_S", 1e-3)
    plan = make_plan(worked_scenario(10, accountant="rdp", report_prv=True), "gdpfed")
    assert all(g.epsilon_spent_prv_upper is None for g in plan.groups)
    assert any("report_prv" in w and "left null" in w for w in plan.warnings)


def test_a_closed_form_budget_whose_noise_leaves_float_range_is_refused_in_one_line(capsys, tmp_path):
    """An epsilon of 1e-300 under closed_form: the formula's sigma / q (about 1e301) squared is
    inf. Alone, the optimiser's rate was NaN and the plan was refused as `sampling_rate: Input
    should be less than or equal to 1`, a field the scenario does not have: it is infeasible,
    naming the group. Beside another group, the noise energy overflowed and `gdpfed plan`
    printed a traceback (exit 1); then, once a noise multiplier above 1e100 was refused
    (accounting/validation.py), it named `noise_multiplier`, the planner's own value: it is one
    line naming the group, exit 2."""
    import json

    from accounting.errors import InfeasibleError
    from app.cli import run
    from planner.schema import Scenario

    base = {"delta": 1e-5, "rounds": 10, "clip_norm": 1.0, "model_dim": 10, "expected_clients": 10,
            "accountant": "closed_form", "min_clients_per_pool": 1}
    tiny = {"id": "a", "epsilon": 1e-300, "num_clients": 100}
    with pytest.raises(InfeasibleError, match=r"group 'a' \(epsilon 1e-300.*out of floating-point range"):
        make_plan(Scenario.model_validate({**base, "groups": [tiny]}))
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({**base, "groups": [tiny, {"id": "b", "epsilon": 1.0, "num_clients": 100}]}))
    code = run(["plan", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    # the noise group 'a' needs is outside the accountants' noise-multiplier domain (1e100): named
    assert "group 'a' (epsilon 1e-300" in err and "out of floating-point range" in err, err
