"""A Flower deployment on loopback: one SuperLink, N SuperNodes, ``flwr run`` (docs/flower.md §3).

``LocalFederation`` starts real ``flower-superlink`` and ``flower-supernode`` processes
bound to 127.0.0.1 (nothing listens on another interface), writes the ``flwr`` connection
to a private ``FLWR_HOME``, runs a bundle with ``flwr run --stream`` and stops every
process it started, by process group, when it is closed. It is what ``gdpfed flower
local``, the slow end-to-end test and the benchmark use; a real deployment runs the same
commands on its own hosts (docs/flower.md §3 lists them).

Environment of every process: the Python environment's ``bin`` first on ``PATH`` (the
SuperLink starts ``flower-superexec`` from ``PATH``), ``FLWR_TELEMETRY_ENABLED=0``,
``FLWR_DISABLE_UPDATE_CHECK=1``, ``FLWR_HOME`` inside the work directory, and no
dependency installation at run time (``--disable-runtime-dependency-installation``).
``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` (default here 0.2 s; Flower's is 1 s) is how often
the SuperLink's SuperExec looks for a ServerApp to start.

The SuperNodes run with ``--isolation process``: one ``trainer.flower.superexec`` process
serves all of them and keeps at most ``max_processes`` ClientApp processes alive at once
(default: twice the CPU count), instead of one Flower SuperExec per SuperNode starting a process
for every message at once. On a loaded host the unbounded starts overran Flower's 30 s
window for a claimed task to start running, and the tasks were restarted over and over
(docs/flower.md §3).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from accounting.errors import GdpfedError, InvalidInputError

CONNECTION = "gdpfed-local"
DEFAULT_POLL_INTERVAL_S = 0.2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# What signals_deferred holds back: the stop signals and Ctrl-C (KeyboardInterrupt).
DEFERRED_SIGNALS = (*STOP_SIGNALS, signal.SIGINT)


class Terminated(GdpfedError):
    """The command was sent SIGTERM or SIGHUP; it exits ``128 + signal`` (143 for SIGTERM), the shell's convention."""

    def __init__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name}; every process it started was stopped")
        self.exit_code = 128 + signum


@contextmanager
def terminate_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into ``Terminated`` while the block runs, so the ``with
    LocalFederation`` inside it unwinds and stops its processes (docs/flower.md §3).

    The processes run in their own sessions, so a signal sent to gdpfed (``timeout``,
    ``docker stop``, systemd) never reaches them: without this the interpreter would die on
    the default action and leave them running. Only the first signal raises; later ones are
    ignored so they cannot cut the cleanup short. The previous handlers come back on exit.
    Outside the main thread (where Python allows no handler) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handle(signum: int, _frame: object) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated(signum)

    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        # a signal that arrives during the cleanup is ignored (raised is set by then or set now)
        raised = True
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_deferred(signums: tuple[int, ...] = DEFERRED_SIGNALS) -> Iterator[None]:
    """Hold ``signums`` back while the block runs, then deliver them: their handlers
    (``terminate_on_signals``' ``Terminated``, Python's ``KeyboardInterrupt``) run after it.

    ``LocalFederation`` starts each process and records it for ``stop()`` in such a block: a
    handler that raised between ``subprocess.Popen`` starting the child (Popen still runs
    Python code after the fork) and the list holding it would leave that child running in
    its own session, out of reach of the cleanup. The handlers are swapped for one that
    records the signal, rather than the signals blocked with ``pthread_sigmask`` around
    ``Popen``, because a child inherits a blocked mask through exec and would then ignore
    ``stop()``'s SIGTERM; the mask is blocked only while the handlers are swapped, so no
    handler runs half-way through the swap. Python runs handlers in the main thread only:
    elsewhere nothing can interrupt the block and it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def record(signum: int, _frame: object) -> None:
        caught.append(signum)

    with _masked(signums):
        previous = {signum: signal.signal(signum, record) for signum in signums}
    try:
        yield
    finally:
        with _masked(signums):
            for signum, handler in previous.items():
                if handler is not None:  # None: a handler not installed from Python; leave it
                    signal.signal(signum, handler)
        for signum in dict.fromkeys(caught):  # each once, in the order they came
            signal.raise_signal(signum)


@contextmanager
def _masked(signums: tuple[int, ...]) -> Iterator[None]:
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flower_environment(flwr_home: Path, *, poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
                       extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for Flower's processes: telemetry off, private FLWR_HOME, this Python's bin on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env.update(
        {
            "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
            "FLWR_HOME": str(flwr_home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(poll_interval_s),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def node_config_text(config: dict[str, str | int | bool]) -> str:
    """``--node-config`` syntax: space-separated ``key=value``, strings quoted."""
    parts = []
    for key, value in config.items():
        if isinstance(value, bool):
            parts.append(f"{key}={'true' if value else 'false'}")
        elif isinstance(value, int):
            parts.append(f"{key}={value}")
        else:
            parts.append(f'{key}="{value}"')
    return " ".join(parts)


@dataclass
class LocalFederation:
    """SuperLink + SuperNodes on 127.0.0.1 (``node_configs``: one ``--node-config`` map per node)."""

    work: Path
    node_configs: list[dict[str, str | int | bool]]
    port: int = 0
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    max_processes: int = 0  # ClientApp processes alive at once; 0: trainer.flower.superexec's default
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)
    # trainer.flower.keeper: stops the groups if this process dies without stop() (kill -9)
    _keeper: subprocess.Popen[bytes] | None = None
    _keeper_pipe: IO[str] | None = None

    def __post_init__(self) -> None:
        # Every process runs with its cwd in ``work``: a relative ``work`` would put FLWR_HOME
        # (and the connection file flwr run reads) at work/work/flwr-home for them.
        self.work = Path(self.work).resolve()

    @property
    def flwr_home(self) -> Path:
        return self.work / "flwr-home"

    @property
    def env(self) -> dict[str, str]:
        return flower_environment(self.flwr_home, poll_interval_s=self.poll_interval_s, extra=self.extra_env)

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the SuperLink and the SuperNodes; return once the SuperLink answers on its port."""
        self.work.mkdir(parents=True, exist_ok=True)
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        (self.flwr_home / "config.toml").write_text(
            f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n', encoding="utf-8"
        )
        self._start_keeper()
        self._spawn("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(self.port),
                                  "--disable-runtime-dependency-installation"])
        self._wait_port(self.port, timeout_s)
        runtime_ports = []
        for index, config in enumerate(self.node_configs):
            runtime_ports.append(free_port())
            self._spawn(f"supernode-{index}", [
                "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}", "--isolation", "process",
                "--host", "127.0.0.1", "--port", str(runtime_ports[-1]), "--node-config", node_config_text(config),
            ])
        command = [sys.executable, "-m", "trainer.flower.superexec", "--insecure",
                   "--poll-interval", str(self.poll_interval_s)]
        if self.max_processes:
            command += ["--max-processes", str(self.max_processes)]
        for port in runtime_ports:
            command += ["--runtime-api-address", f"127.0.0.1:{port}"]
        self._spawn("superexec", command)

    def run(self, app_dir: Path, run_config: dict[str, str] | None = None, timeout_s: float = 3600.0) -> int:
        """``flwr run APP gdpfed-local --stream``; its exit code (output in ``work/flwr-run.log``).
        Started as the other processes are, so ``stop()`` ends it too if the run is cut short."""
        command = ["flwr", "run", str(Path(app_dir).resolve()), CONNECTION, "--stream"]
        for key, value in (run_config or {}).items():
            command += ["--run-config", f"{key}={value}"]
        process = self._spawn("flwr-run", command)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise GdpfedError(f"flwr run did not finish within {timeout_s:g} s (see {self.work})") from None

    def stop(self) -> None:
        """Stop every process this federation started (and their children), SuperNodes first."""
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 20
        for process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for log in self._logs:
            log.close()
        self.processes.clear()
        self._logs.clear()
        self._tell_keeper("done")  # every group has ended: nothing is left for it to stop
        if self._keeper is not None and self._keeper_pipe is not None:
            self._keeper_pipe.close()
            try:
                self._keeper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._keeper.kill()
                self._keeper.wait()
        self._keeper, self._keeper_pipe = None, None

    def __enter__(self) -> LocalFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        log = (self.work / f"{name}.log").open("ab")
        self._logs.append(log)
        # A new session makes the process the leader of its own group: stop() ends it and the
        # processes it started (SuperExec, ServerApp, ClientApps) by that group id. A signal
        # waits until the process is in the list stop() walks (signals_deferred).
        with signals_deferred():
            self.processes.append(subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                   cwd=self.work, start_new_session=True))
            self._tell_keeper(f"+{self.processes[-1].pid}")  # its group id: it leads a new session
        return self.processes[-1]

    def _start_keeper(self) -> None:
        """Start ``trainer.flower.keeper``, which stops every group this federation started if
        this process dies without ``stop()`` (a kill -9 runs none; docs/architecture.md §Processes).
        The pipe's write end is this process's alone (not inheritable; Popen closes the rest),
        so the keeper reads end-of-file exactly when this process is gone or says it is done."""
        if self._keeper is not None:
            return
        read, write = os.pipe()
        try:
            with signals_deferred():
                self._keeper = subprocess.Popen([sys.executable, "-m", "trainer.flower.keeper"], stdin=read,
                                                env=self.env, cwd=self.work, start_new_session=True)
                self._keeper_pipe = os.fdopen(write, "w", buffering=1)
        except BaseException:
            if self._keeper_pipe is None:
                os.close(write)
            raise
        finally:
            os.close(read)

    def _tell_keeper(self, line: str) -> None:
        if self._keeper_pipe is None:
            return
        try:
            self._keeper_pipe.write(line + "\n")
        except (BrokenPipeError, ValueError):  # a keeper that died cannot help; stop() still can
            pass

    def _wait_port(self, port: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.processes[0].poll() is not None:
                raise InvalidInputError("port", f"flower-superlink exited (see {self.work / 'superlink.log'})")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise GdpfedError(f"flower-superlink did not listen on 127.0.0.1:{port} within {timeout_s:g} s")
