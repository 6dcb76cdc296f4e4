"""``python -m tests.app.killed_trainer ARGS...``: ``gdpfed ARGS...`` with test hooks at fixed points.

The real-process resume tests (``tests/app/test_attached_resume.py``) need a ``gdpfed train``
that dies by ``kill -9`` at an exact point of a round, not wherever a timer lands. This
wrapper runs the real command line (``app.cli.main``) with the points below instrumented;
``$GDPFED_TEST_HOOKS`` (JSON) maps a point to the actions to take there, in order:

points
    ``claimed:N``       the service acknowledged the claim of global round N (on the plan
                        the run is on; a claim answered ``superseded`` is not one)
    ``checkpoint:N``    the checkpoint whose next round is N is about to be written (round
                        N-1 ran, was logged and its completion sent)
    ``checkpointed:N``  that checkpoint is on disk

actions
    ``"kill"``          SIGKILL this process (what ``kill -9`` does)
    ``"down"``          SIGKILL the service (``$GDPFED_TEST_SERVER_PID``): a crash of the service
    ``{"patch": PATH, "epsilon": E}``
                        the operator's budget change: ``PATCH $GDPFED_TEST_URL PATH`` with
                        ``{"epsilon": E}`` and the run's key; anything but 200 stops the process
    ``{"replan": PLAN_ID, "changes": CHANGES}``
                        the operator's budget change of a plan without a population (a silo or
                        metric plan): ``POST /v1/plans/LEAF/replan`` with ``{"changes": CHANGES}``,
                        LEAF the newest plan of PLAN_ID's re-plan lineage (its ``superseded_by``
                        followed); anything but 201 stops the process
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import httpx


def act(action: Any) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "down":
        os.kill(int(os.environ["GDPFED_TEST_SERVER_PID"]), signal.SIGKILL)
    elif isinstance(action, dict) and "patch" in action:
        response = httpx.patch(
            os.environ["GDPFED_TEST_URL"] + action["patch"], json={"epsilon": action["epsilon"]},
            headers={"Authorization": f"Bearer {os.environ['GDPFED_API_KEY']}"}, timeout=60,
        )
        if response.status_code != 200:
            sys.stderr.write(f"killed_trainer: the budget change failed: HTTP {response.status_code} {response.text}\n")
            os._exit(99)
    elif isinstance(action, dict) and "replan" in action:
        url, headers = os.environ["GDPFED_TEST_URL"], {"Authorization": f"Bearer {os.environ['GDPFED_API_KEY']}"}
        leaf = action["replan"]
        while (child := httpx.get(f"{url}/v1/plans/{leaf}/ledger", headers=headers, timeout=60).json()["superseded_by"]):
            leaf = child
        response = httpx.post(f"{url}/v1/plans/{leaf}/replan", json={"changes": action["changes"]}, headers=headers,
                              timeout=60)
        if response.status_code != 201:
            sys.stderr.write(f"killed_trainer: the re-plan failed: HTTP {response.status_code} {response.text}\n")
            os._exit(99)
    else:
        raise ValueError(f"unknown action {action!r}")


def install(hooks: dict[str, list[Any]]) -> None:
    import trainer.runner as runner
    from trainer.run.reporting import RoundReporter

    def fire(point: str) -> None:
        for action in hooks.get(point, []):
            act(action)

    claim = RoundReporter.claim

    def claimed(self: RoundReporter, round_index: int) -> Any:
        successor = claim(self, round_index)
        if successor is None:
            fire(f"claimed:{round_index}")
        return successor

    save = runner.save_checkpoint

    def checkpoint(path: Any, state: dict[str, Any]) -> None:
        fire(f"checkpoint:{state['next_round']}")
        save(path, state)
        fire(f"checkpointed:{state['next_round']}")

    RoundReporter.claim = claimed  # type: ignore[method-assign]
    runner.save_checkpoint = checkpoint


if __name__ == "__main__":
    install(json.loads(os.environ.get("GDPFED_TEST_HOOKS", "{}")))
    from app.cli import main

    main(sys.argv[1:])
