"""The operator console end to end: a real server, Debian's headless Chromium (issue 15).

Log in with a key, see the groups' budgets and the ledger's spending, change a budget below
what was spent and read the service's refusal, change it for real (a re-plan appears in the
lineage), draw the method comparison, and take a screenshot that must not be blank. A
planner key sees the same page without the controls that change anything.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import OPERATOR_TOKEN, SMALL_SCENARIO, auth
from tests.app.test_e2e import serve

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or DRIVER is None:
        # .ci/run installs them: under CI a missing browser is a failure, not a skip
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver; "
                    ".ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,2000", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any, timeout: float = 90) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition)


def _text(driver: Any, element_id: str) -> str:
    return str(driver.find_element("id", element_id).text)


def _log_in(driver: Any, base_url: str, token: str) -> None:
    driver.get(f"{base_url}/console")
    driver.find_element("id", "api-key").send_keys(token)
    driver.find_element("id", "login-button").click()
    _wait(driver, lambda d: len(d.find_elements("css selector", "#groups tbody tr")) == 3)


def _group_cell(driver: Any, group: str, column: str) -> str:
    return str(driver.find_element("css selector", f'#groups tr[data-group="{group}"] td.{column}').text)


def _painted_pixels(driver: Any, canvas_id: str) -> int:
    return int(driver.execute_script(
        "const c = document.getElementById(arguments[0]);"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "let n = 0; for (let i = 3; i < d.length; i += 4) { if (d[i] > 0) n++; } return n;", canvas_id))


def _not_blank(png: bytes) -> tuple[int, float]:
    """(distinct colours, fraction of pixels that are not the page's white) of a screenshot."""
    import matplotlib.image
    import numpy as np

    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")[:, :, :3]
    quantised = np.round(pixels * 255).astype(np.uint8).reshape(-1, 3)
    colours = len(np.unique(quantised, axis=0))
    inked = float(np.mean(np.any(quantised < 245, axis=1)))
    return colours, inked


def test_console_end_to_end(browser: Any, tmp_path: Path) -> None:
    with serve(f"sqlite:///{tmp_path / 'gdpfed.db'}", initial_api_key=OPERATOR_TOKEN) as server:
        api = httpx.Client(base_url=server.base_url, headers=auth(OPERATOR_TOKEN), timeout=120)
        population_id = api.post("/v1/populations", json={"name": "hospitals", "scenario": SMALL_SCENARIO}).json()["id"]
        plan_id = api.post(f"/v1/populations/{population_id}/plans").json()["id"]
        for index in range(10):
            assert api.post(f"/v1/plans/{plan_id}/rounds", json={"round_index": index}).status_code == 201
        planner_token = api.post("/v1/keys", json={"name": "viewer", "role": "planner"}).json()["token"]
        ledger = {g["id"]: g for g in api.get(f"/v1/plans/{plan_id}/ledger").json()["groups"]}
        strict_spent = ledger["strict"]["epsilon_spent"]

        _log_in(browser, server.base_url, OPERATOR_TOKEN)
        assert "operator" in _text(browser, "whoami")
        # the figures are the ledger's, labelled with their unit
        assert float(_group_cell(browser, "strict", "spent")) == pytest.approx(strict_spent, rel=1e-3)
        assert float(_group_cell(browser, "strict", "remaining")) == pytest.approx(
            ledger["strict"]["epsilon_remaining"], rel=1e-3)
        unit = _text(browser, "unit")
        assert "client-level" in unit and "delta=0.001" in unit and "accountant pld" in unit and "10 round(s)" in unit
        # rounds reported without a mechanism are the continuous one's, labelled approximate
        assert "continuous Gaussian (approximate" in _text(browser, "mechanism")
        _wait(browser, lambda d: _painted_pixels(d, "spent-chart") > 500)

        # below what was spent: the service's own refusal appears on the page
        refused = api.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": strict_spent / 2})
        assert refused.status_code == 409
        form = browser.find_element("css selector", '#groups tr[data-group="strict"] input')
        form.send_keys(f"{strict_spent / 2:.6f}")
        browser.find_element("css selector", '#groups tr[data-group="strict"] button').click()
        _wait(browser, lambda d: "Refused" in _text(d, "message"))
        message = _text(browser, "message")
        assert "409 budget_conflict" in message and "spent" in message
        assert refused.json()["message"].split(" 0.")[0] in message  # the service's explanation, verbatim

        # a real change re-plans: the lineage gains the child, the budget cell the new value
        form = browser.find_element("css selector", '#groups tr[data-group="strict"] input')
        form.clear()
        form.send_keys("1.5")
        browser.find_element("css selector", '#groups tr[data-group="strict"] button').click()
        _wait(browser, lambda d: "Re-planned" in _text(d, "message"))
        assert _group_cell(browser, "strict", "budget") == "1.500"
        rows = browser.find_elements("css selector", "#lineage tbody tr")
        assert len(rows) == 2 and "(active)" in rows[0].text and plan_id in rows[0].text  # child names its parent
        # what each table's rows carry besides their text (app/static/console.js addRow)
        assert [r.get_attribute("class") for r in rows] == ["active-plan", ""]
        assert rows[1].find_elements("css selector", "td")[4].text == "0 .. 49"  # the parent's 50 rounds
        spent_cell = browser.find_element("css selector", '#groups tr[data-group="strict"] td.spent')
        assert (spent_cell.get_attribute("title") or "").startswith("rdp ")
        assert browser.find_element("css selector", '#groups tr[data-group="strict"] input').get_attribute("name") == "epsilon"
        assert browser.find_element("css selector", f'#populations tbody tr.selectable[data-id="{population_id}"]')

        # the comparison, drawn from the service's rows
        browser.find_element("id", "compare").click()
        _wait(browser, lambda d: _text(d, "recommendation").startswith("Recommended:"), timeout=180)
        assert _painted_pixels(browser, "noise-chart") > 500 and _painted_pixels(browser, "rates-chart") > 500
        assert "lowest objective" in _text(browser, "recommendation")

        png = browser.get_screenshot_as_png()
        shots = Path(os.environ.get("GDPFED_CONSOLE_SCREENSHOTS", str(tmp_path)))
        shots.mkdir(parents=True, exist_ok=True)
        (shots / "console-operator.png").write_bytes(png)
        colours, inked = _not_blank(png)
        assert colours > 50 and inked > 0.05, (colours, inked)

        # a planner key sees the same figures and no control that changes anything
        browser.delete_all_cookies()
        browser.execute_script("sessionStorage.clear();")
        _log_in(browser, server.base_url, planner_token)
        assert "read only" in _text(browser, "whoami")
        assert float(_group_cell(browser, "strict", "budget")) == pytest.approx(1.5)
        assert not any(e.is_displayed() for e in browser.find_elements("css selector", ".change"))
        (shots / "console-planner.png").write_bytes(browser.get_screenshot_as_png())
        api.close()


def _replanned_at_40(api: Any) -> tuple[str, str]:
    """A population whose strict group's budget is raised from 1 to 3 after 40 rounds (the re-plan
    starts at round 40), and 7 rounds of the re-plan: 47 rounds, more than the chart's evenly
    spaced points, none of which falls on 40. Returns (population id, re-plan id)."""
    population_id = api.post("/v1/populations", json={"name": "replanned", "scenario": SMALL_SCENARIO}).json()["id"]
    plan_id = api.post(f"/v1/populations/{population_id}/plans").json()["id"]
    for index in range(40):
        assert api.post(f"/v1/plans/{plan_id}/rounds", json={"round_index": index}).status_code == 201
    child = api.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": 3.0}).json()["plan"]
    assert child["start_round"] == 40
    for index in range(40, 47):
        assert api.post(f"/v1/plans/{child['id']}/rounds", json={"round_index": index}).status_code == 201
    return population_id, child["id"]


def test_the_budget_series_steps_at_the_round_a_re_plan_took_effect(client: Any) -> None:
    """docs/service.md §Console: the series the page draws (``GET /v1/console/populations/{id}``)
    has a point at every re-plan's start round, where the budget is the re-plan's: the dashed step
    is drawn at round 40, after the old budget at every point before. Before, the points were only
    evenly spaced (..., 38, 39, 41, ...): the budget stayed at the original value across round 40
    and stepped at 41."""
    population_id, _ = _replanned_at_40(client)
    series = client.get(f"/v1/console/populations/{population_id}").json()["series"]
    rounds, budget = series["rounds"], series["budget"]["strict"]
    assert 40 in rounds and rounds == sorted(set(rounds)) and rounds[-1] == 47, rounds
    assert [b for r, b in zip(rounds, budget) if r < 40] == [1.0] * rounds.index(40)
    assert [b for r, b in zip(rounds, budget) if r >= 40] == [3.0] * (len(rounds) - rounds.index(40))
    assert budget.count(None) == 0 and len(series["epsilon_spent"]["strict"]) == len(rounds)
    assert series["budget"]["medium"] == [2.0] * len(rounds)


def test_console_draws_the_budget_step_at_the_re_plans_start_round(browser: Any, tmp_path: Path) -> None:
    """The page's chart (Chart.js, a stepped dashed line per group's budget) steps the strict group's
    budget from 1 to 3 at the x label 40, the start round the lineage shows for the re-plan."""
    with serve(f"sqlite:///{tmp_path / 'gdpfed.db'}", initial_api_key=OPERATOR_TOKEN) as server:
        api = httpx.Client(base_url=server.base_url, headers=auth(OPERATOR_TOKEN), timeout=120)
        population_id, child_id = _replanned_at_40(api)
        _log_in(browser, server.base_url, OPERATOR_TOKEN)
        browser.find_element("css selector", f'#populations tbody tr.selectable[data-id="{population_id}"]').click()
        _wait(browser, lambda d: child_id in _text(d, "lineage"))
        _wait(browser, lambda d: _painted_pixels(d, "spent-chart") > 500)
        drawn = browser.execute_script(
            "const chart = Chart.getChart(document.getElementById('spent-chart'));"
            "const budget = chart.data.datasets.find((d) => d.label === 'strict budget');"
            "return {labels: chart.data.labels, budget: budget.data, stepped: budget.stepped};")
        step = next(i for i, value in enumerate(drawn["budget"]) if value == 3.0)
        assert drawn["labels"][step] == 40 and drawn["budget"][step - 1] == 1.0, drawn
        # Chart.js's stepped: true (step-before) holds the previous value up to a point's x: the
        # line is at 1 up to label 40 and at 3 from it on
        assert drawn["stepped"] is True
        api.close()


def _plan_cell(driver: Any, entity: str, column: str) -> str:
    return str(driver.find_element("css selector", f'#plan-rows tr[data-entity="{entity}"] td.{column}').text)


def test_console_shows_silo_and_metric_plans_under_their_labels(browser: Any, tmp_path: Path) -> None:
    """Issue 29: a silo plan's figures appear as "silo sample-level" epsilons, a metric plan's
    as leakage (never epsilon), each from the service's ledger; a silo budget is changed from
    the page (refused below spent, then re-planned, the lineage gaining the child)."""
    from tests.app.test_unit_ledgers import METRIC_SCENARIO, SILO_SCENARIO

    with serve(f"sqlite:///{tmp_path / 'gdpfed.db'}", initial_api_key=OPERATOR_TOKEN) as server:
        api = httpx.Client(base_url=server.base_url, headers=auth(OPERATOR_TOKEN), timeout=120)
        silo = api.post("/v1/plans", json={"scenario": SILO_SCENARIO}).json()
        for index in range(3):
            assert api.post(f"/v1/plans/{silo['id']}/rounds", json={"round_index": index}).status_code == 201
        metric = api.post("/v1/plans", json={"scenario": METRIC_SCENARIO}).json()
        for index, who in enumerate(({"g": [0, 1], "h": [5]}, {"g": [0]})):
            report = {"round_index": index, "participants": who}
            assert api.post(f"/v1/plans/{metric['id']}/rounds", json=report).status_code == 201
        silo_ledger = {s["id"]: s for s in api.get(f"/v1/plans/{silo['id']}/ledger").json()["silos"]}
        metric_ledger = {g["id"]: g for g in api.get(f"/v1/plans/{metric['id']}/ledger").json()["groups"]}

        browser.get(f"{server.base_url}/console")
        browser.find_element("id", "api-key").send_keys(OPERATOR_TOKEN)
        browser.find_element("id", "login-button").click()
        _wait(browser, lambda d: len(d.find_elements("css selector", "#plans tbody tr")) == 2)
        labels = [e.text for e in browser.find_elements("css selector", "#plans tbody td.label")]
        assert labels == ["leakage (metric d-privacy)", "silo sample-level"]

        browser.find_element("css selector", f'#plans tr[data-id="{silo["id"]}"]').click()
        _wait(browser, lambda d: "silo sample-level" in _text(d, "plan-unit"))
        assert "delta=1e-05" in _text(browser, "plan-unit") and "3 round(s)" in _text(browser, "plan-unit")
        assert _text(browser, "plan-spent") == "epsilon spent"
        assert float(_plan_cell(browser, "a", "spent")) == pytest.approx(silo_ledger["a"]["epsilon_spent"], rel=1e-3)
        form = browser.find_element("css selector", '#plan-rows tr[data-entity="a"] input')
        form.send_keys(f"{silo_ledger['a']['epsilon_spent'] / 2:.6f}")
        browser.find_element("css selector", '#plan-rows tr[data-entity="a"] button').click()
        _wait(browser, lambda d: "Refused" in _text(d, "plan-message"))
        assert "409 budget_conflict" in _text(browser, "plan-message")
        form = browser.find_element("css selector", '#plan-rows tr[data-entity="a"] input')
        form.clear()
        form.send_keys("1.5")
        browser.find_element("css selector", '#plan-rows tr[data-entity="a"] button').click()
        _wait(browser, lambda d: "Re-planned" in _text(d, "plan-message"))
        assert _plan_cell(browser, "a", "budget") == "1.500"
        rows = browser.find_elements("css selector", "#plan-lineage tbody tr")
        assert len(rows) == 2 and "(active)" in rows[0].text and silo["id"] in rows[0].text

        browser.find_element("css selector", f'#plans tr[data-id="{metric["id"]}"]').click()
        _wait(browser, lambda d: "leakage (metric d-privacy)" in _text(d, "plan-unit"))
        assert "epsilon" not in _text(browser, "plan-unit").replace("not an epsilon", "")
        assert [_text(browser, f"plan-{c}") for c in ("budget", "spent", "remaining")] == [
            "leakage budget", "leakage spent", "leakage remaining"]
        assert float(_plan_cell(browser, "g", "spent")) == pytest.approx(metric_ledger["g"]["leakage_spent"], rel=1e-3)
        assert float(_plan_cell(browser, "h", "spent")) == pytest.approx(metric_ledger["h"]["leakage_spent"], rel=1e-3)
        shots = Path(os.environ.get("GDPFED_CONSOLE_SCREENSHOTS", str(tmp_path)))
        shots.mkdir(parents=True, exist_ok=True)
        (shots / "console-metric-plan.png").write_bytes(browser.get_screenshot_as_png())
        api.close()


def test_console_labels_a_skellam_runs_figures_with_the_mechanism_and_threat_model(browser: Any, tmp_path: Path) -> None:
    """Issue 27: a run reported on the distributed Skellam mechanism; the population's and the
    plan's views state the mechanism (exact) and the discrete blocks' threat model, and their
    figures are the ledger's Skellam figures."""
    scenario = {**SMALL_SCENARIO, "report_discrete": True}
    with serve(f"sqlite:///{tmp_path / 'gdpfed.db'}", initial_api_key=OPERATOR_TOKEN) as server:
        api = httpx.Client(base_url=server.base_url, headers=auth(OPERATOR_TOKEN), timeout=120)
        population_id = api.post("/v1/populations", json={"name": "discrete", "scenario": scenario}).json()["id"]
        plan = api.post(f"/v1/populations/{population_id}/plans").json()
        other = api.post("/v1/plans", json={"scenario": scenario}).json()
        for plan_id in (plan["id"], other["id"]):
            for index in range(3):
                report = {"round_index": index, "secagg_mechanism": "skellam"}
                assert api.post(f"/v1/plans/{plan_id}/rounds", json=report).status_code == 201
        ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
        threat = {pool["discrete"]["threat_model"] for pool in plan["pools"] if pool["discrete"]}
        assert ledger["secagg_mechanism"] == "skellam" and threat

        _log_in(browser, server.base_url, OPERATOR_TOKEN)
        mechanism = _text(browser, "mechanism")
        assert "distributed Skellam (exact" in mechanism and "approximate" not in mechanism
        assert all(line in mechanism for line in threat) and "honest survivors" in mechanism
        strict = {g["id"]: g for g in ledger["groups"]}["strict"]
        assert float(_group_cell(browser, "strict", "spent")) == pytest.approx(strict["epsilon_spent"], rel=1e-3)
        assert "client-level" in _text(browser, "unit")

        browser.find_element("css selector", f'#plans tr[data-id="{other["id"]}"]').click()
        _wait(browser, lambda d: "distributed Skellam (exact" in _text(d, "plan-mechanism"))
        assert "threat model" in _text(browser, "plan-mechanism") and "client-level" in _text(browser, "plan-unit")
        api.close()
