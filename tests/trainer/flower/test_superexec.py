"""The host's SuperExec (docs/flower.md §3): Flower's ClientApp command line, and no claim beyond the process bound."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from trainer.flower.superexec import BoundedSubprocessExecutor, main


def _spec(**changes: Any) -> Any:
    from flwr.supercore.constant import TaskType
    from flwr.supercore.superexec.executor.types import ExecutionSpec

    fields: dict[str, Any] = {
        "task_type": TaskType.CLIENT_APP, "runtime_api_address": "127.0.0.1:9101", "token": "t0k3n",
        "insecure": True, "root_certificates_path": None, "runtime_dependency_install": False,
        "parent_pid": 4242, "suppress_output": False, "task_id": 7,
    }
    fields.update(changes)
    return ExecutionSpec(**fields)


class _Recorder:
    popen = subprocess.Popen

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str], **_: Any) -> subprocess.Popen[bytes]:
        self.calls.append(list(args))
        return self.popen([sys.executable, "-c", "pass"])


@pytest.mark.parametrize("changes", [{}, {"insecure": False, "root_certificates_path": "/ca.pem"},
                                     {"runtime_dependency_install": True, "parent_pid": None}])
def test_launches_the_command_flowers_subprocess_executor_launches(monkeypatch: pytest.MonkeyPatch,
                                                                    changes: dict[str, Any]) -> None:
    from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor

    recorder = _Recorder()
    monkeypatch.setattr(subprocess, "Popen", recorder)
    assert SubprocessExecutor().launch(_spec(**changes)).status == "accepted"
    executor = BoundedSubprocessExecutor(2)
    assert executor.launch(_spec(**changes)).status == "accepted"
    flowers, ours = recorder.calls
    assert ours == flowers and ours[:2] == ["flwr-clientapp", "--runtime-api-address"]
    executor.close()


def test_claims_nothing_while_the_bound_is_reached_and_again_once_a_process_ends() -> None:
    executor = BoundedSubprocessExecutor(2)
    types = {"flwr-clientapp"}
    assert executor.get_eligible_capacity(types) == (types, set())
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    executor.children.extend(sleepers)
    try:
        assert executor.get_eligible_capacity(types) == (set(), set())  # AcquireTask then claims no task
        sleepers[0].kill()
        sleepers[0].wait()
        assert executor.get_eligible_capacity(types) == (types, set())
        assert executor.alive() == 1
    finally:
        executor.close()
        for sleeper in sleepers:
            sleeper.wait()
    assert executor.alive() == 0


def test_a_bound_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BoundedSubprocessExecutor(0)
    with pytest.raises(SystemExit) as stopped:
        main(["--runtime-api-address", "127.0.0.1:1", "--max-processes", "0"])
    assert stopped.value.code == 2
    assert "--max-processes must be at least 1" in capsys.readouterr().err
