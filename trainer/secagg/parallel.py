"""The simulated clients of a session, spread over worker processes (``docs/secure-aggregation.md`` §Parallel).

A session's client work (encoding, key agreement, Shamir shares, sealed shares, masks,
unmasking shares) is independent per client, so ``ForkedClients`` spreads it over
``workers`` processes, each owning a contiguous slice of the sorted client ids: the
driver (``protocol.run_session``, also the network and the server) hosts the first slice
itself and forks ``workers - 1`` children for the rest. Each protocol round, the driver
sends the children their requests, runs its own slice meanwhile, then gathers the
children's answers: no core idles while the driver waits, one fork fewer, and a slice
of messages that never crosses a pipe. The protocol code is the same ``Client`` class
as in the serial path, on the same inputs and secrets, so a session's result is
bit-identical (tested).

Why processes and fork: ``cryptography``'s X25519 and ChaCha20 calls hold the GIL, so
threads do not run them in parallel. A forked child inherits the session's vectors,
parameters and setup without pickling, and writes each masked input straight into one
shared anonymous memory map that the server reads, so no d-length vector crosses a pipe;
only keys, ciphertexts and shares do. Children run numpy and ``cryptography`` only (no
torch, no BLAS thread pool), which keeps fork safe in a multi-threaded parent. Where fork
is unavailable (not Linux) sessions run serially.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from accounting.errors import InvalidInputError
from accounting.processes import die_with_parent
from trainer.secagg.client import Client
from trainer.secagg.encoding import word_dtype
from trainer.secagg.errors import ProtocolError
from trainer.secagg.messages import AdvertisedKeys, EncryptedShare, MaskedInput, SessionSetup, UnmaskingShares
from trainer.secagg.params import SecAggParams

# Run a session in parallel when its serial client work is at least about this long
# (docs/benchmarks.md §Issue 17: rounds at 300 and 1,000 clients; forking and joining costs ~0.05 s).
PARALLEL_MIN_SECONDS = 0.25
# Rough single-core costs for that estimate: ChaCha20 keystream and one X25519 agreement + HKDF.
_KEYSTREAM_BYTES_PER_SECOND = 2e9
_AGREEMENT_SECONDS = 60e-6


def available_workers() -> int:
    """The cores this process may run on (1 where worker processes cannot be forked)."""
    if not fork_available():
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def fork_available() -> bool:
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def session_workers(num_clients: int, degree: int, dimension: int, word_bytes: int) -> int:
    """Workers for a session: all available cores when its client work is worth forking for, else 1.

    The serial estimate: each client expands degree + 1 masks of ``dimension`` words and
    makes 2 degree key agreements (per neighbour a channel key, used for sealing and
    opening, and a mask key).
    """
    keystream = num_clients * (degree + 1) * dimension * word_bytes / _KEYSTREAM_BYTES_PER_SECOND
    agreements = num_clients * degree * 2 * _AGREEMENT_SECONDS
    if keystream + agreements < PARALLEL_MIN_SECONDS:
        return 1
    return min(available_workers(), num_clients)


class ForkedClients:
    """The clients ``ids`` of one session over ``workers`` processes (this one and forked children)."""

    def __init__(
        self,
        vectors: Mapping[int, np.ndarray],
        ids: Sequence[int],
        params: SecAggParams,
        setup: SessionSetup,
        seed: int,
        workers: int,
    ) -> None:
        dimension = len(vectors[ids[0]])
        self._dtype = word_dtype(params.modulus_bits)
        self._buffer = mmap.mmap(-1, max(1, len(ids) * dimension * self._dtype.itemsize))
        self._masked = np.frombuffer(self._buffer, dtype=self._dtype, count=len(ids) * dimension).reshape(
            len(ids), dimension
        )
        self._row = {u: row for row, u in enumerate(ids)}
        chunks = [[int(u) for u in chunk] for chunk in np.array_split(np.asarray(ids), max(1, workers)) if len(chunk)]
        # Host 0 is this process; host h >= 1 is child h - 1.
        self._host_of = {u: index for index, chunk in enumerate(chunks) for u in chunk}
        self._local_ids = chunks[0]
        self._local: dict[int, Client] = {}
        self._connections: list[Connection] = []
        self._processes: list[Any] = []
        context = multiprocessing.get_context("fork")
        driver = os.getpid()
        try:
            for chunk in chunks[1:]:  # forked before this process builds its own clients
                parent, child = context.Pipe()
                # The child inherits this process's end of its own pipe and of every earlier
                # child's: it closes them, so each pipe's far end lives in the driver alone
                # and a worker reading it sees EOF when the driver dies (docs/secure-aggregation.md §Parallel).
                inherited = [*self._connections, parent]
                process = context.Process(
                    target=_host,
                    args=(child, chunk, vectors, params, setup, seed, self._masked, self._row, driver, inherited),
                    daemon=True,
                )
                with warnings.catch_warnings():
                    # Python >= 3.12 warns on fork in a multi-threaded process (torch's pools).
                    # The children never touch those threads' state: numpy and cryptography only.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    process.start()
                child.close()
                self._connections.append(parent)
                self._processes.append(process)
            for u in self._local_ids:  # in order: the first bad vector raises, as in the serial path
                self._local[u] = Client(u, vectors[u], params, setup, seed)
            self._keys: list[AdvertisedKeys] = [self._local[u].advertise_keys() for u in self._local_ids]
            self._keys += self._gather()
        except BaseException:
            self.close()
            raise

    def advertise_keys(self) -> list[AdvertisedKeys]:
        return self._keys

    def share_keys(self, roster: Mapping[int, AdvertisedKeys]) -> list[EncryptedShare]:
        for connection in self._connections:
            connection.send(("share_keys", dict(roster)))
        local = [m for u in self._local_ids if u in roster for m in self._local[u].share_keys(roster)]
        return local + self._gather()

    def masked_input(self, inboxes: Mapping[int, Sequence[EncryptedShare]]) -> list[MaskedInput]:
        per_host: list[dict[int, Sequence[EncryptedShare]]] = [{} for _ in range(len(self._connections) + 1)]
        for u, inbox in inboxes.items():
            per_host[self._host_of[u]][u] = inbox
        for connection, host_inboxes in zip(self._connections, per_host[1:]):
            connection.send(("masked_input", host_inboxes))
        for u, inbox in per_host[0].items():
            self._local[u].masked_input(inbox, out=self._masked[self._row[u]])
        messages = []
        for u in [*per_host[0], *self._gather()]:
            row = self._masked[self._row[u]]
            row.setflags(write=False)
            messages.append(MaskedInput(sender=u, masked=row))
        return messages

    def unmask(self, survivors: Sequence[int], responders: Sequence[int]) -> list[UnmaskingShares]:
        per_host: list[list[int]] = [[] for _ in range(len(self._connections) + 1)]
        for u in responders:
            per_host[self._host_of[u]].append(u)
        for connection, ids in zip(self._connections, per_host[1:]):
            connection.send(("unmask", (tuple(survivors), ids)))
        local = [self._local[u].unmask(survivors) for u in per_host[0]]
        return local + self._gather()

    def close(self) -> None:
        self._local = {}
        for connection in self._connections:
            try:
                connection.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            connection.close()
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():  # pragma: no cover - a stuck child
                process.kill()
                process.join()
        self._connections, self._processes = [], []

    def _gather(self) -> list[Any]:
        """Every child's answer, concatenated in host order; the first child's error is raised."""
        answers = []
        for connection in self._connections:
            try:
                answers.append(connection.recv())
            except EOFError:
                answers.append(("error", "other", "a secure-aggregation worker process died"))
        results: list[Any] = []
        for answer in answers:
            if answer[0] == "error":
                _raise(answer[1], answer[2])
            results.extend(answer[1])
        return results


def _raise(kind: str, payload: Any) -> None:
    if kind == "invalid":
        raise InvalidInputError(*payload)
    if kind == "protocol":
        raise ProtocolError(payload)
    raise RuntimeError(f"secure-aggregation worker failed: {payload}")


def _host(
    connection: Connection,
    ids: list[int],
    vectors: Mapping[int, np.ndarray],
    params: SecAggParams,
    setup: SessionSetup,
    seed: int,
    masked: np.ndarray,
    row: Mapping[int, int],
    driver: int,
    inherited: Sequence[Connection],
) -> None:
    """A worker: build its clients, then answer the driver's requests until ``close``.

    It ends with the driver however the driver ends (a kill -9 included): the kernel kills
    it when the driver dies (``die_with_parent``), and failing that its pipe reads EOF, as
    no other process holds the driver's end (``inherited`` are closed here).
    """
    die_with_parent(driver)
    for end in inherited:
        end.close()
    clients: dict[int, Client] = {}

    def answer(work: Any) -> None:
        try:
            connection.send(("ok", work()))
        except InvalidInputError as exc:
            connection.send(("error", "invalid", (exc.field, exc.reason)))
        except ProtocolError as exc:
            connection.send(("error", "protocol", str(exc)))
        except Exception as exc:
            connection.send(("error", "other", repr(exc)))

    def start() -> list[AdvertisedKeys]:
        for u in ids:  # in order: the first bad vector raises, as in the serial path
            clients[u] = Client(u, vectors[u], params, setup, seed)
        return [clients[u].advertise_keys() for u in ids]

    answer(start)
    while True:
        try:
            command, payload = connection.recv()
        except EOFError:  # the driver is gone: nobody is left to answer
            break
        if command == "close":
            break
        if command == "share_keys":
            answer(lambda roster=payload: [m for u in ids if u in roster for m in clients[u].share_keys(roster)])
        elif command == "masked_input":

            def mask(inboxes: dict[int, Any] = payload) -> list[int]:
                for u, inbox in inboxes.items():
                    clients[u].masked_input(inbox, out=masked[row[u]])
                return list(inboxes)

            answer(mask)
        elif command == "unmask":
            survivors, responders = payload
            answer(lambda s=survivors, r=responders: [clients[u].unmask(s) for u in r])
    connection.close()
