"""Reporting completed rounds to the gdpfed service (``--report-to URL --api-key KEY``).

After each round the trainer POSTs ``{"round_index", "aborted_pools", "metrics"}`` to
``URL/v1/plans/{plan_id}/rounds`` with ``Authorization: Bearer KEY``. The service keys
rounds by ``(plan_id, round_index)`` and treats a repeat as a no-op, so re-posting is
always safe. A report that fails (network error, timeout, 5xx after a few tries) stays
queued and is retried after the next round; it never stops training. The queue is part
of the checkpoint, so a resumed run still delivers rounds its predecessor could not.
A 4xx other than 408/429 is the service refusing the report (wrong key, unknown plan):
retrying cannot help, so it is logged and dropped.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import httpx

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class RoundReporter:
    """Posts round reports for one plan, queueing the ones that could not be delivered."""

    def __init__(
        self,
        url: str,
        api_key: str,
        plan_id: str,
        *,
        timeout_s: float = 10.0,
        attempts: int = 3,
        backoff_s: float = 0.5,
        log: Callable[[str], None] = lambda _text: None,
        client: httpx.Client | None = None,
    ) -> None:
        self.endpoint = f"{url.rstrip('/')}/v1/plans/{plan_id}/rounds"
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.log = log
        self._client = client or httpx.Client(timeout=timeout_s)
        self._owns_client = client is None
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self.pending: list[dict[str, Any]] = []
        self.delivered = 0

    def report(self, round_index: int, aborted_pools: list[str], metrics: dict[str, Any]) -> None:
        """Queue this round's report and try to deliver everything queued, oldest first."""
        self.pending.append(
            {"round_index": round_index, "aborted_pools": list(aborted_pools), "metrics": metrics}
        )
        self.flush()

    def flush(self) -> None:
        """Deliver queued reports in order; stop at the first one that still fails."""
        while self.pending:
            body = self.pending[0]
            outcome = self._post(body)
            if outcome == "retry":
                self.log(
                    f"report of round {body['round_index']} to {self.endpoint} failed; "
                    f"{len(self.pending)} report(s) queued, retrying after the next round"
                )
                return
            self.pending.pop(0)
            if outcome == "ok":
                self.delivered += 1

    def _post(self, body: dict[str, Any]) -> str:
        for attempt in range(self.attempts):
            try:
                response = self._client.post(self.endpoint, json=body, headers=self._headers)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    return "ok"
                if response.status_code not in RETRYABLE_STATUS:
                    self.log(
                        f"the service refused the report of round {body['round_index']} "
                        f"(HTTP {response.status_code}: {response.text[:200]}); not retrying"
                    )
                    return "refused"
                reason = f"HTTP {response.status_code}"
            if attempt + 1 < self.attempts:
                time.sleep(self.backoff_s * (2**attempt))
        self.log(f"report of round {body['round_index']}: {reason}")
        return "retry"

    def state_dict(self) -> dict[str, Any]:
        return {"pending": [dict(item) for item in self.pending]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = [dict(item) for item in state.get("pending", [])]

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
