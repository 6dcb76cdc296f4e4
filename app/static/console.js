// gdpfed operator console (docs/service.md §Console).
// Draws what the service computes: every privacy figure comes from the service's ledger
// through /v1/console/* and is only formatted here, never computed.
"use strict";

const state = { key: null, role: null, population: null, plan: null, charts: {} };
const $ = (id) => document.getElementById(id);

function fmt(value) {
  if (value === null || value === undefined) return "-";
  if (typeof value !== "number") return String(value);
  if (value === 0) return "0";
  return Math.abs(value) >= 1e5 || Math.abs(value) < 1e-3 ? value.toExponential(3) : value.toPrecision(4);
}

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${state.key}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({ code: "error", message: response.statusText }));
  if (!response.ok) {
    const error = new Error(data.message || response.statusText);
    error.status = response.status;
    error.code = data.code;
    throw error;
  }
  return data;
}

function say(text, kind) {
  const message = $("message");
  message.textContent = text;
  message.className = kind || "";
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

// The body of table `tableId`, emptied for new rows.
function emptyBody(tableId) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren();
  return body;
}

// Every table's row builder: appends to `body` a row of `cells` (each a text, or
// [text, className]) with the `data` attributes, the row's class and its click handler;
// returns the row's cells.
function addRow(body, cells, { data = {}, className, onClick } = {}) {
  const row = document.createElement("tr");
  if (className) row.className = className;
  Object.assign(row.dataset, data);
  const tds = cells.map((c) => (Array.isArray(c) ? cell(row, c[0], c[1]) : cell(row, c)));
  if (onClick) row.addEventListener("click", onClick);
  body.appendChild(row);
  return tds;
}

// The budget-change form of a table's "change" cell: a number and a button that submits it.
function budgetForm(td, label, buttonText, onSubmit, name) {
  const form = document.createElement("form");
  const input = document.createElement("input");
  input.type = "number";
  input.step = "any";
  input.min = "0";
  input.size = 8;
  if (name) input.name = name;
  input.setAttribute("aria-label", label);
  const button = document.createElement("button");
  button.type = "submit";
  button.textContent = buttonText;
  form.append(input, button);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    onSubmit(Number(input.value));
  });
  td.appendChild(form);
}

// The global rounds a plan covers, first .. last.
function roundsSpan(plan) {
  return `${plan.start_round} .. ${plan.start_round + plan.rounds - 1}`;
}

async function login(event) {
  event.preventDefault();
  state.key = $("api-key").value.trim();
  try {
    const me = await api("GET", "/v1/keys/me");
    state.role = me.role;
    sessionStorage.setItem("gdpfed-key", state.key);
    $("whoami").textContent = `${me.name} (${me.role}${me.role === "planner" ? ": read only" : ""})`;
    document.body.classList.toggle("read-only", me.role !== "operator");
    $("login-section").hidden = true;
    $("main").hidden = false;
    $("logout").hidden = false;
    $("login-error").textContent = "";
    await loadPlans();
    await loadPopulations();
  } catch (error) {
    $("login-error").textContent = `${error.message}`;
    state.key = null;
  }
}

function logout() {
  sessionStorage.removeItem("gdpfed-key");
  window.location.reload();
}

async function loadPopulations() {
  const page = await api("GET", "/v1/populations?limit=200");
  const body = emptyBody("populations");
  for (const population of page.items) {
    addRow(body, [population.name, String(population.scenario.groups.length), population.method,
                  population.active_plan_id || "none"],
           { data: { id: population.id }, className: "selectable", onClick: () => showPopulation(population.id) });
  }
  if (page.items.length && !state.population) await showPopulation(page.items[0].id);
}

async function loadPlans() {
  const page = await api("GET", "/v1/plans?limit=50");
  const body = emptyBody("plans");
  for (const plan of page.items) {
    addRow(body, [plan.id, [plan.label, "label"], plan.method, roundsSpan(plan), plan.parent_plan_id || "-"],
           { data: { id: plan.id }, className: "selectable", onClick: () => showPlan(plan.id) });
  }
}

// A plan of any privacy unit: its ledger's figures under its unit's label (the service's
// /v1/console/plans view), with the unit's own words for the budget (epsilon or leakage).
async function showPlan(id) {
  state.plan = id;
  for (const row of $("plans").querySelectorAll("tbody tr")) row.classList.toggle("selected", row.dataset.id === id);
  const view = await api("GET", `/v1/console/plans/${id}`);
  $("plan").hidden = false;
  $("plan-title").textContent = `Plan ${view.plan_id} (${view.label})`;
  $("plan-unit").textContent = `Privacy figures: ${view.unit}; ${view.rounds_counted} round(s) counted by the service's ledger.`;
  showMechanism("plan-mechanism", view.mechanism);
  $("plan-entity").textContent = view.entities.replace(/s$/, "");  // silos -> silo, groups -> group
  $("plan-budget").textContent = `${view.figure} budget`;
  $("plan-spent").textContent = `${view.figure} spent`;
  $("plan-remaining").textContent = `${view.figure} remaining`;
  const body = emptyBody("plan-rows");
  const superseded = view.lineage.some((plan) => plan.id === view.plan_id && plan.superseded_by);
  for (const entity of view.rows) {
    const change = addRow(body, [entity.id, [fmt(entity.budget), "budget"], [fmt(entity.spent), "spent"],
                                 [fmt(entity.remaining), "remaining"], ["", "change"]],
                          { data: { entity: entity.id } })[4];
    if (!superseded) {
      budgetForm(change, `new ${view.figure} budget of ${entity.id}`, "Re-plan",
                 (budget) => replanPlan(view, entity.id, budget));
    }
  }
  renderLineage(view, "plan-lineage");
}

async function replanPlan(view, entityId, budget) {
  const message = $("plan-message");
  const changes = { [view.entities]: [{ id: entityId, [view.budget_field]: budget }] };
  try {
    const child = await api("POST", `/v1/plans/${view.plan_id}/replan`, { changes });
    await loadPlans();
    await showPlan(child.id);
    $("plan-message").textContent = `Re-planned: ${child.id} takes the rounds from ${child.start_round} on.`;
    $("plan-message").className = "ok";
  } catch (error) {
    message.textContent = `Refused (${error.status} ${error.code}): ${error.message}`;
    message.className = "error";
  }
}

// The noise mechanism the figures count (the continuous one labelled approximate) and the
// discrete one's threat model, in the service's words; hidden while no round was reported.
function showMechanism(elementId, text) {
  $(elementId).hidden = !text;
  $(elementId).textContent = text ? `Figures count the ${text}.` : "";
}

async function showPopulation(id) {
  state.population = id;
  for (const row of $("populations").querySelectorAll("tbody tr")) {
    row.classList.toggle("selected", row.dataset.id === id);
  }
  const view = await api("GET", `/v1/console/populations/${id}`);
  $("population").hidden = false;
  $("population-title").textContent = `${view.population.name} (${view.population.method}, version ${view.population.version})`;
  $("unit").textContent = view.unit
    ? `Privacy figures: ${view.unit}; ${view.rounds_counted} round(s) counted by the service's ledger.`
    : "No active plan yet: nothing has been spent.";
  $("plan-now").hidden = Boolean(view.population.active_plan_id);
  showMechanism("mechanism", view.mechanism);
  renderGroups(view);
  renderSpent(view);
  renderLineage(view);
}

function renderGroups(view) {
  const body = emptyBody("groups");
  for (const group of view.groups) {
    const [, , , spent, , , , change] = addRow(body, [
      group.id, String(group.num_clients), [group.epsilon === null ? "opted out" : fmt(group.epsilon), "budget"],
      [group.opted_out ? "no DP" : fmt(group.epsilon_spent), "spent"], [fmt(group.epsilon_remaining), "remaining"],
      fmt(group.sampling_rate), group.pool || "-", ["", "change"],
    ], { data: { group: group.id } });
    if (group.epsilon_rdp !== null && group.epsilon_rdp !== undefined) {
      // the ledger row's two figures beside its figure of record (docs/ledger.md §3)
      spent.title = `rdp ${fmt(group.epsilon_rdp)}, tight (pld) ${fmt(group.epsilon_tight)}`;
    }
    budgetForm(change, `new budget of ${group.id}`, "Change", (epsilon) => changeBudget(group.id, epsilon), "epsilon");
  }
}

async function changeBudget(groupId, epsilon) {
  say(`Changing ${groupId}'s budget to ${epsilon}...`);
  try {
    const result = await api("PATCH", `/v1/populations/${state.population}/groups/${groupId}`, { epsilon });
    const plan = result.plan ? ` Re-planned: the new active plan is ${result.plan.id}.` : "";
    await showPopulation(state.population);
    say(`Budget of ${groupId} changed to ${epsilon}.${plan}`, "ok");
  } catch (error) {
    // the service's own explanation, e.g. a budget below what the ledger says was spent
    say(`Refused (${error.status} ${error.code}): ${error.message}`, "error");
  }
}

async function planNow() {
  try {
    const plan = await api("POST", `/v1/populations/${state.population}/plans`);
    await showPopulation(state.population);
    say(`Planned: the active plan is ${plan.id}.`, "ok");
    await loadPopulations();
  } catch (error) {
    say(`Refused (${error.status} ${error.code}): ${error.message}`, "error");
  }
}

const COLOURS = ["#1f5fbf", "#d9661f", "#2e8b3c", "#a23bb0", "#b8860b", "#c0392b", "#008b8b", "#555"];

function chart(id, config) {
  if (state.charts[id]) state.charts[id].destroy();
  config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
  state.charts[id] = new Chart($(id), config);
}

function renderSpent(view) {
  if (!view.series) {
    if (state.charts["spent-chart"]) state.charts["spent-chart"].destroy();
    return;
  }
  const datasets = [];
  Object.keys(view.series.epsilon_spent).forEach((group, i) => {
    const colour = COLOURS[i % COLOURS.length];
    datasets.push({ label: `${group} spent`, data: view.series.epsilon_spent[group], borderColor: colour,
                    backgroundColor: colour, pointRadius: 2 });
    datasets.push({ label: `${group} budget`, data: view.series.budget[group], borderColor: colour,
                    borderDash: [6, 4], pointRadius: 0, stepped: true });
  });
  chart("spent-chart", {
    type: "line",
    data: { labels: view.series.rounds, datasets },
    options: { scales: { x: { title: { display: true, text: "rounds done" } },
                         y: { title: { display: true, text: view.unit }, beginAtZero: true } } },
  });
}

function renderLineage(view, tableId = "lineage") {
  const body = emptyBody(tableId);
  for (const plan of view.lineage.slice().reverse()) {
    addRow(body, [
      plan.id + (plan.active ? " (active)" : ""), plan.parent_plan_id || "-", plan.superseded_by || "-",
      plan.accountant ? `${plan.method} / ${plan.accountant}` : plan.method, roundsSpan(plan),
      String(plan.rounds_counted), new Date(plan.created_at).toISOString().replace("T", " ").slice(0, 19),
      plan.created_by || "-",
    ], { className: plan.active ? "active-plan" : undefined });
  }
}

async function compare() {
  $("recommendation").textContent = "Planning every method...";
  try {
    const result = await api("POST", `/v1/console/populations/${state.population}/comparison`);
    const rows = result.comparison.filter((row) => row.feasible);
    const rec = result.recommendation;
    $("recommendation").textContent = rec ? `Recommended: ${rec.method}. ${rec.reason}.` : "No feasible private method.";
    chart("noise-chart", {
      type: "bar",
      data: { labels: rows.map((r) => r.method + (r.recommended ? " *" : "")),
              datasets: [{ label: "noise energy (objective term)", data: rows.map((r) => r.noise_energy),
                           backgroundColor: rows.map((r) => (r.recommended ? "#2e8b3c" : "#1f5fbf")) }] },
      options: { plugins: { title: { display: true, text: "Noise per method (lower is better)" } } },
    });
    const groups = Object.keys(rows[0] ? rows[0].sampling_rates : {});
    chart("rates-chart", {
      type: "bar",
      data: { labels: rows.map((r) => r.method),
              datasets: groups.map((g, i) => ({ label: `q(${g})`, data: rows.map((r) => r.sampling_rates[g]),
                                                backgroundColor: COLOURS[i % COLOURS.length] })) },
      options: { plugins: { title: { display: true, text: "Sampling rate per group" } } },
    });
  } catch (error) {
    $("recommendation").textContent = `Refused (${error.status} ${error.code}): ${error.message}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("compare").addEventListener("click", compare);
  $("plan-now").addEventListener("click", planNow);
  const saved = sessionStorage.getItem("gdpfed-key");
  if (saved) {
    $("api-key").value = saved;
    $("login-button").click();
  }
});
