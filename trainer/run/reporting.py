"""A trainer attached to the gdpfed service: claim each round, then report it (docs/ledger.md §6).

``gdpfed train --plan-id ID --report-to URL`` keeps the service's privacy ledger exact:

1. **Preflight** (before round 0 and on ``--resume``): the URL answers, the key is valid
   with the operator role, the plan exists. Any failure is an ``InvalidInputError``
   (exit 2, one line, nothing written).
2. **Claim** round ``t`` (``status: "started"``) before running it. The service counts a
   claimed round from then on, so a crash mid-round cannot hide privacy spent. A 409
   ``superseded`` names the successor plan (an operator changed a budget): the runner
   switches to it (``trainer.runner``) and claims ``t`` there. A claim that cannot be
   delivered after the retries stops the run (``ReportingStoppedError``, exit 3): running
   a round the service does not know about could put it in the wrong plan's ledger.
3. **Complete** round ``t`` (``status: "completed"``, aborted pools and metrics) after it
   ran. A completion that fails (network, 5xx) is queued, retried after the next round and
   at the end, and kept in the checkpoint; the claim already counts the round.
4. Any other refusal (4xx besides 408/429) stops the run after its checkpoint, exit 3.

The key is sent as ``Authorization: Bearer KEY`` and never written anywhere. The bodies
sent and read are the service's own models (``planner.service_api``: ``RoundReport``,
``LedgerOut``, ``KeyIdentity``, ``ErrorBody``), the classes its OpenAPI document declares
(docs/service.md §Clients).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pydantic

from accounting.errors import GdpfedError, InvalidInputError
from planner.loading import parse_json, read_text
from planner.service_api import ErrorBody, KeyIdentity, LedgerOut, LedgerRounds, RoundReport
from planner.units import load_plan_document, parse_ledger
from trainer.run.directory import RunDirectory, atomic_write_json, fingerprint

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class ReportingStoppedError(GdpfedError):
    """The service refused a round, or could not be reached to claim one: exit code 3.

    The run's checkpoint is written first, so ``gdpfed train --out DIR --resume`` continues
    (and delivers what is pending) once the cause is fixed: the service back, a refusal
    answered. A re-plan the run cannot follow (it changes the groups or their client counts)
    is not such a cause: its message names the new job that takes the re-plan instead
    (docs/ledger.md §6).
    """

    code = "reporting_stopped"
    exit_code = 3


class ReportsUndeliveredError(GdpfedError):
    """Training finished but some round reports were not delivered: exit code 3."""

    code = "reports_undelivered"
    exit_code = 3


@dataclass(frozen=True)
class Superseded:
    """The service's 409: the plan was re-planned as ``plan_id`` from ``start_round``."""

    plan_id: str
    start_round: int


class ServiceLink:
    """HTTP calls to the gdpfed service with retries (``attempts`` tries, exponential backoff)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout_s: float = 10.0,
        attempts: int = 4,
        backoff_s: float = 0.5,
        log: Callable[[str], None] = lambda _text: None,
        client: httpx.Client | None = None,
        patience_s: float = 120.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.patience_s = patience_s
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.log = log
        self._client = client or httpx.Client(timeout=timeout_s)
        self._owns_client = client is None
        self._headers = {"Authorization": f"Bearer {api_key}"}

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, quiet: bool = False
    ) -> httpx.Response | str:
        """The response (any status but a retryable one), or the last failure's reason.

        A 503 with ``Retry-After`` (the service holds new rounds while it re-plans, docs/
        ledger.md §4) is waited out for up to ``patience_s`` without using up an attempt.

        Each wait is said through ``log`` before it starts (``gdpfed train``: one line on
        stderr), so a run held by the service is not silent: the first wait on a 503 with
        ``Retry-After`` (how long it may last), and each retry after a failure (the attempt
        it is and of how many). What is retried, and when, is as before (docs/trainer.md §CLI).
        ``quiet`` says nothing: the preflight's requests, whose failure is the command's one
        line (exit 2, nothing written) before any round runs.
        """
        reason = ""
        attempt = 0
        waited = 0.0
        while attempt < self.attempts:
            try:
                response = self._client.request(method, self.url + path, json=body, headers=self._headers)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if response.status_code not in RETRYABLE_STATUS:
                    return response
                reason = f"HTTP {response.status_code}"
                retry_after = _retry_after(response)
                if response.status_code == 503 and retry_after is not None and waited < self.patience_s:
                    if waited == 0 and not quiet:
                        self.log(f"{method} {path}: the service at {self.url} holds requests (HTTP 503, "
                                 f"Retry-After {retry_after:g} s); waiting up to {self.patience_s:g} s for it")
                    time.sleep(retry_after)
                    waited += retry_after
                    continue
            attempt += 1
            if attempt < self.attempts:
                delay = self.backoff_s * (2 ** (attempt - 1))
                if not quiet:
                    self.log(f"{method} {path} to {self.url} failed ({reason}); retrying in {delay:g} s "
                             f"(attempt {attempt + 1} of {self.attempts})")
                time.sleep(delay)
        return reason

    def preflight(self, plan_id: str) -> LedgerOut | LedgerRounds:
        """Check URL, key, role and plan; the plan's ledger (``GET /v1/plans/{id}/ledger``), read
        as its unit's model (``planner.units.parse_ledger``: a silo or metric plan's ledger has
        no client groups, docs/service.md §Clients)."""
        # quiet: a failure here is the command's one line (exit 2), retries unsaid
        health = self.request("GET", "/healthz", quiet=True)
        if isinstance(health, str) or health.status_code >= 400:
            why = health if isinstance(health, str) else f"HTTP {health.status_code}"
            raise InvalidInputError("report-to", f"cannot reach the gdpfed service at {self.url} ({why})")
        # planners may read ledgers (docs/service.md §Auth): ask the service for the key's role
        whoami = self.request("GET", "/v1/keys/me", quiet=True)
        if isinstance(whoami, str):
            raise InvalidInputError("report-to", f"cannot reach the gdpfed service at {self.url} ({whoami})")
        if whoami.status_code == 401:
            raise InvalidInputError("api-key", f"the service at {self.url} does not accept this API key")
        if whoami.status_code == 403 or (
            whoami.status_code < 400 and KeyIdentity.model_validate(whoami.json()).role != "operator"
        ):
            raise InvalidInputError("api-key", "the key lacks the operator role, which reporting rounds needs")
        ledger = self.request("GET", f"/v1/plans/{plan_id}/ledger", quiet=True)
        if isinstance(ledger, str):
            raise InvalidInputError("report-to", f"cannot reach the gdpfed service at {self.url} ({ledger})")
        if ledger.status_code == 404:
            raise InvalidInputError("plan-id", f"the service has no plan {plan_id!r}")
        if ledger.status_code >= 400:
            raise InvalidInputError("report-to", f"the service answered HTTP {ledger.status_code}: {_message(ledger)}")
        parsed = parse_ledger(ledger.json())
        if not isinstance(parsed, LedgerOut | LedgerRounds):  # every unit's ledger is one of the two
            raise InvalidInputError("report-to", f"the service answered a ledger of no known unit for plan {plan_id}")
        return parsed

    def fetch_plan(self, plan_id: str) -> dict[str, Any]:
        """The service's plan document (``GET /v1/plans/{id}``), provenance fields included."""
        response = self.request("GET", f"/v1/plans/{plan_id}")
        if isinstance(response, str):
            raise ReportingStoppedError(f"cannot fetch plan {plan_id} from {self.url} ({response})")
        if response.status_code >= 400:
            raise ReportingStoppedError(f"fetching plan {plan_id}: HTTP {response.status_code}: {_message(response)}")
        return dict(response.json())

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(max(float(response.headers["Retry-After"]), 0.05), 10.0)
    except (KeyError, ValueError):
        return None


def _error(response: httpx.Response) -> ErrorBody | None:
    """The service's error body (``ErrorBody``), or None when the answer is not one (a proxy's page)."""
    try:
        return ErrorBody.model_validate_json(response.content)
    except pydantic.ValidationError:
        return None


def _message(response: httpx.Response) -> str:
    error = _error(response)
    return error.message if error is not None else response.text[:200]


def fetch_service_plan(
    link: ServiceLink, plan_id: str, given: tuple[Any, dict[str, Any]] | None
) -> tuple[Any, dict[str, Any]]:
    """The service's plan ``plan_id`` for a new run; a given plan must be that plan (same content fingerprint).

    Refuses (``InvalidInputError``) a plan that was re-planned or whose ledger already
    counts rounds (another run trained on it).
    """
    ledger = link.preflight(plan_id)
    if ledger.superseded_by:
        raise InvalidInputError(
            "plan-id", f"plan {plan_id} was re-planned as {ledger.superseded_by}; train that plan instead"
        )
    if ledger.rounds_counted > 0:
        # --resume continues that run only up to the --rounds it started with (a resumed run
        # keeps its settings); the plan's other rounds are trained as a re-plan, whose own
        # ledger counts nothing yet (docs/ledger.md §6)
        raise InvalidInputError(
            "plan-id",
            f"the service's ledger already counts {ledger.rounds_counted} round(s) of plan {plan_id}: another "
            "run trained on it. Continue that run with --out ITS_DIR --resume (up to the --rounds it started "
            f"with); to train the plan's remaining rounds, re-plan them (an operator's POST /v1/plans/{plan_id}"
            "/replan, or a change to its population) and start a job on the re-plan: gdpfed train --plan-id "
            "NEW_ID --out NEW_DIR",
        )
    document = link.fetch_plan(plan_id)
    plan = load_plan_document(document)  # any privacy unit: prepare_run dispatches on it
    if given is not None and fingerprint(given[0].model_dump(mode="json")) != fingerprint(plan.model_dump(mode="json")):
        raise InvalidInputError("plan", f"is not the service's plan {plan_id} (their content differs)")
    return plan, document


def _stored_reporting(out: Path) -> dict[str, Any]:
    """The run directory's ``reporting.json`` (URL, first plan id, run identity); {} without one."""
    stored = RunDirectory(out).reporting
    if not stored.is_file():
        return {}
    data = parse_json(read_text(stored, "resume"), stored, "resume")
    return data if isinstance(data, dict) else {}


def write_reporting(out: Path, reporter: RoundReporter) -> None:
    """Record where ``reporter`` reports and its run identity in ``reporting.json`` before its
    first claim; a resumed directory written before the identity was kept gains this run's, so
    its next resume states the same one. The URL and first plan id already there stay."""
    stored = _stored_reporting(out)
    if stored and stored.get("run_id") == reporter.run_id:
        return
    atomic_write_json(RunDirectory(out).reporting,
                      {"url": reporter.link.url, "plan_id": reporter.plan_id, **stored, "run_id": reporter.run_id})


def run_identity(out: Path, resume: bool) -> str:
    """The reporting run's identity (``RoundReport.run_id``, docs/ledger.md §4): the one its run
    directory's ``reporting.json`` holds when it resumes, else a new random one (a new run, or a
    directory written before the field). Every claim and completion states it, so the service
    tells the run's own retries and resumes from a second run of the same plan."""
    run_id = _stored_reporting(out).get("run_id") if resume else None
    return run_id if isinstance(run_id, str) and run_id else uuid.uuid4().hex


class RoundReporter:
    """Claims and completes rounds of the current plan; queues completions it could not deliver."""

    def __init__(self, link: ServiceLink, plan_id: str, secagg_mechanism: str | None = None,
                 run_id: str | None = None) -> None:
        self.link = link
        self.plan_id = plan_id
        # the run's identity (:func:`run_identity`), stated by every claim and completion; None
        # states none (the service takes that only while the plan is bound to no run)
        self.run_id = run_id
        # what every claim and completion states (``RoundReport.secagg_mechanism``): the run's
        # noise mechanism, which the service's ledger counts; None for units without one
        # (the run loop sets it from the unit: ``TrainingUnit.reported_mechanism``)
        self.secagg_mechanism = secagg_mechanism
        self.pending: list[dict[str, Any]] = []  # {"plan_id", "body"}
        self.delivered = 0

    def claim(self, round_index: int) -> Superseded | None:
        """Claim ``round_index`` on the current plan; the successor when it was re-planned."""
        claim = RoundReport.model_validate(
            {"round_index": round_index, "status": "started", "secagg_mechanism": self.secagg_mechanism,
             "run_id": self.run_id}
        )
        response = self.link.request("POST", f"/v1/plans/{self.plan_id}/rounds", claim.model_dump(mode="json"))
        if isinstance(response, str):
            raise ReportingStoppedError(
                f"cannot claim round {round_index} of plan {self.plan_id} at {self.link.url} ({response}); "
                "the round was not run. Rerun with --resume once the service is reachable"
            )
        if response.status_code == 409:
            error = _error(response)
            if (error is not None and error.code == "superseded" and error.superseded_by is not None
                    and error.start_round is not None):
                return Superseded(error.superseded_by, error.start_round)
        if response.status_code >= 400:
            raise ReportingStoppedError(
                f"the service refused round {round_index} of plan {self.plan_id} "
                f"(HTTP {response.status_code}: {_message(response)})"
            )
        return None

    def complete(self, round_index: int, aborted_pools: list[str], metrics: dict[str, Any],
                 participants: dict[str, list[int]] | None = None) -> None:
        """Queue this round's completion and deliver everything queued, oldest first.

        ``participants`` (metric runs: group id -> the clients that released) go with the
        completion: the round's clients are selected when it runs, after its claim, and the
        service counts a claimed round as one release of every client until they arrive
        (docs/ledger.md §8)."""
        report = RoundReport.model_validate({
            "round_index": round_index, "status": "completed", "aborted_pools": list(aborted_pools),
            "metrics": metrics, "participants": participants, "secagg_mechanism": self.secagg_mechanism,
            "run_id": self.run_id,
        })
        self.pending.append({"plan_id": self.plan_id, "body": report.model_dump(mode="json")})
        self.flush()

    def flush(self) -> None:
        """Deliver queued completions in order; stop at the first one that still fails."""
        while self.pending:
            item = self.pending[0]
            round_index = item["body"]["round_index"]
            response = self.link.request("POST", f"/v1/plans/{item['plan_id']}/rounds", item["body"])
            if isinstance(response, str):
                self.link.log(
                    f"report of round {round_index} failed ({response}); {len(self.pending)} report(s) "
                    "queued, retrying after the next round"
                )
                return
            if response.status_code >= 400:
                raise ReportingStoppedError(
                    f"the service refused the report of round {round_index} of plan {item['plan_id']} "
                    f"(HTTP {response.status_code}: {_message(response)})"
                )
            self.pending.pop(0)
            self.delivered += 1

    def state_dict(self) -> dict[str, Any]:
        return {"plan_id": self.plan_id, "pending": [dict(item) for item in self.pending]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The checkpoint's reporting state. A queued report that states no ``run_id`` (queued by
        a trainer from before the run identity) states this run's: it is this directory's
        report, and the service refuses an id-less report once this run's first claim has bound
        the plan (docs/ledger.md §4), which stopped every resume before it was delivered."""
        self.plan_id = str(state.get("plan_id", self.plan_id))
        self.pending = [
            {**item, "body": {**item["body"], "run_id": self.run_id}}
            if self.run_id is not None and isinstance(item.get("body"), dict) and item["body"].get("run_id") is None
            else dict(item)
            for item in state.get("pending", [])
        ]

    def close(self) -> None:
        self.link.close()
