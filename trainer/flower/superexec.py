"""One SuperExec for every SuperNode on a host, with a bound on ClientApp processes (docs/flower.md §3).

Why: Flower 1.41 gives a claimed task ``HEARTBEAT_DEFAULT_INTERVAL`` = 30 s (a constant,
``flwr/common/constant.py``) to go from *starting* to *running*: a SuperExec claims the
task (``AcquireTask``), starts a ``flwr-clientapp`` process, and the token expires unless
that process has imported flwr and called the Runtime API within 30 s
(``flwr/supercore/corestate/in_memory_corestate.py``, ``claim_task``/``activate_task``).
An expired starting task goes back to *pending* and is claimed again, so a second
process starts while the first one is still loading, and the first one then fails with
"Runtime task-token authentication failed". Flower's own SuperExec (one per SuperNode,
``flwr/supercore/superexec/run_superexec.py``) starts a process for every task it claims,
with no capacity gate (``SubprocessExecutor.get_eligible_capacity``): N SuperNodes on one
host start up to N processes at once, and on a loaded host the starts slow down past the
30 s window, the restarts add more processes, and the run stops making progress.

This SuperExec serves the Runtime APIs of several SuperNodes (started with
``--isolation process``) from one process, and claims a task only while fewer than
``max_processes`` ClientApp processes it started are alive: a claimed task's process starts
at once, on a host that is not oversubscribed by this federation, and the claim never
waits for capacity. The ClientApp processes themselves are Flower's (``flwr-clientapp``,
started as Flower's ``SubprocessExecutor`` starts them); nothing of the protocol changes.
It also replaces N polling SuperExec processes with one.

Run: ``python -m trainer.flower.superexec --runtime-api-address 127.0.0.1:P1 ...
--max-processes K --insecure`` (``trainer.flower.local.LocalFederation`` does).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

DEFAULT_POLL_INTERVAL_S = 0.2


def default_max_processes() -> int:
    """ClientApp processes alive at once on this host: two per CPU (a process also waits on the network)."""
    return 2 * (os.cpu_count() or 1)


class BoundedSubprocessExecutor:
    """Flower's ``SubprocessExecutor`` with a capacity gate: at most ``max_processes`` alive at once.

    Implements ``flwr.supercore.superexec.executor.types.Executor``; one instance is shared by
    every SuperNode this SuperExec serves, so the bound is per host.
    """

    def __init__(self, max_processes: int) -> None:
        if max_processes < 1:
            raise ValueError("max_processes must be at least 1")
        self.max_processes = max_processes
        self.children: list[subprocess.Popen[bytes]] = []
        self.launched = 0

    def alive(self) -> int:
        self.children = [child for child in self.children if child.poll() is None]
        return len(self.children)

    def has_capacity(self) -> bool:
        return self.alive() < self.max_processes

    def get_eligible_capacity(self, supported_task_types: set[Any], **_: Any) -> tuple[set[Any], set[str]]:
        return (set(supported_task_types) if self.has_capacity() else set()), set()

    def wait_for_capacity(self, *_: Any, **__: Any) -> None:
        while not self.has_capacity():
            time.sleep(0.05)

    def launch(self, spec: Any) -> Any:
        from flwr.supercore.constant import TASK_TYPE_TO_APPIO_API_ADDRESS_ARG, TASK_TYPE_TO_COMMAND
        from flwr.supercore.superexec.executor.types import LaunchResult

        args = [TASK_TYPE_TO_COMMAND[spec.task_type], TASK_TYPE_TO_APPIO_API_ADDRESS_ARG[spec.task_type],
                spec.runtime_api_address, "--token", spec.token]
        if spec.insecure:
            args.append("--insecure")
        elif spec.root_certificates_path is not None:
            args += ["--root-certificates", spec.root_certificates_path]
        if spec.parent_pid is not None:
            args += ["--parent-pid", str(spec.parent_pid)]
        if spec.runtime_dependency_install:
            args.append("--allow-runtime-dependency-installation")
        output = subprocess.DEVNULL if spec.suppress_output else None
        try:
            self.children.append(subprocess.Popen(args, stdout=output, stderr=output))
        except OSError as exc:
            return LaunchResult.failed(f"cannot start {args[0]}: {exc}")
        self.launched += 1
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        self.alive()

    def close(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.terminate()


def serve(runtime_api_addresses: Sequence[str], *, max_processes: int, insecure: bool,
          root_certificates_path: str | None = None, poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
    """Poll every SuperNode's Runtime API in turn; claim a task only while a process slot is free."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supercore.superexec.plugin import AutoExecPlugin
    from flwr.supercore.tls import validate_and_resolve_root_certificates

    executor = BoundedSubprocessExecutor(max_processes)
    nodes = []
    for address in runtime_api_addresses:
        client = RuntimeHttpClient.from_server_address(
            server_address=address, insecure=insecure,
            root_certificates=validate_and_resolve_root_certificates(root_certificates_path, insecure),
            interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
            retry_invoker=None,  # Flower's retries back off without bound: one SuperNode down would stall the rest
        )
        plugin = AutoExecPlugin(runtime_api_address=address, insecure=insecure,
                                root_certificates_path=root_certificates_path, executor=executor)
        nodes.append((address, client, plugin))
    failing: set[str] = set()

    def stop(*_: object) -> None:
        executor.close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    start = 0
    while True:
        # Rotate the first node polled, so no SuperNode is always served last when slots are scarce.
        for offset in range(len(nodes)):
            if not executor.has_capacity():
                break
            address, client, plugin = nodes[(start + offset) % len(nodes)]
            try:
                response = client.AcquireTask(AcquireTaskRequest(supported_task_types=set(plugin.supported_task_types),
                                                                 agentapp_fab_hashes=set()))
            except Exception as exc:  # a SuperNode not up yet, or gone at shutdown: try it again next poll
                if address not in failing:
                    print(f"gdpfed superexec: {address}: {exc} (retrying every poll)", file=sys.stderr, flush=True)
                    failing.add(address)
                continue
            failing.discard(address)
            if response.HasField("task") and response.token:
                result = plugin.launch_task(token=response.token, task=response.task)
                if result.status != "accepted":
                    print(f"gdpfed superexec: task {response.task.task_id}: {result.status} {result.message}",
                          file=sys.stderr, flush=True)
        start += 1
        time.sleep(poll_interval_s)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainer.flower.superexec", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime-api-address", action="append", required=True,
                        help="a SuperNode's Runtime API host:port (repeat for each SuperNode)")
    parser.add_argument("--max-processes", type=int, default=default_max_processes(),
                        help="ClientApp processes alive at once (default: twice the CPU count)")
    parser.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL_S,
                        help="seconds between polls of the SuperNodes")
    parser.add_argument("--insecure", action="store_true", help="plain HTTP to the Runtime APIs (loopback only)")
    parser.add_argument("--root-certificates", default=None, help="CA bundle for the Runtime APIs' TLS")
    args = parser.parse_args(argv)
    if args.max_processes < 1:
        parser.error("--max-processes must be at least 1")
    serve(args.runtime_api_address, max_processes=args.max_processes, insecure=args.insecure,
          root_certificates_path=args.root_certificates, poll_interval_s=args.poll_interval)


if __name__ == "__main__":
    main()
