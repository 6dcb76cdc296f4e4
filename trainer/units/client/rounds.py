"""One federated round with the plan's privacy mechanism (docs/trainer.md §Rounds).

1. The strategy samples each group's clients (Poisson, ``q_g``); each sampled client then
   drops out with the scenario's ``dropout_rate``: a ``late_dropout_fraction`` of those
   drop after sending their masked input (secure aggregation recovers their masks and
   their input *is* in the sum), the rest before masking (their input is not).
2. Every client that reaches the masking step trains locally (``strategy.client_update``),
   and the engine then clips its update to its group's ``clip_norm`` (less the rounding
   margin ``sqrt(d)/scale``), rounds it to the pool's fixed-point grid (randomised
   rounding: the encoded norm is still at most the clip norm),
   adds its noise share ``N(0, s_P^2)``, ``s_P = sigma_P C / sqrt(m_P)``
   (``PoolPlan.noise_share_std``), and hands the vector to the pool's secure-aggregation
   session (``trainer.secagg.secure_sum``, threshold ``m_P``; its graph, full or SecAgg+,
   from ``planner.secagg.secagg_graph``; its clients over the machine's cores; or
   ``trainer.secagg.exact_sum``, the same release without the cryptography).
3. A pool sum is released only with at least ``m_P`` survivors; otherwise the pool adds
   nothing this round and the abort is recorded.
4. ``strategy.aggregate`` (top-k per pool, fixed denominator K) and
   ``strategy.server_update`` produce the next global parameters.

Adaptive clipping (``strategy.adaptive_clip`` set; docs/trainer.md §Adaptive clipping):
the round clips at the controller's ``S^t`` with the update's noise share
``sigma_Delta S^t / sqrt(m_P)``, each client's vector carries one more coordinate, its
``b - 1/2`` plus a noise share ``sigma_b / sqrt(m_P)``; the engine strips the released
counts from the pool sums before ``aggregate`` and hands them to the controller.

Clipping, the grid, the noise share and the value bound are ``trainer/units/client/mechanism.py``'s
(``pool_mechanisms``, ``privatize``, ``NoiseBoundExceeded``), shared with the Flower
ClientApp.

The discrete mechanism (``secagg_mechanism="skellam"``; docs/secure-aggregation.md
§Discrete noise): in step 2 each noised pool's clients send their Skellam shares mod 2^b
(``trainer/units/client/discrete.py``), rotated with the round's public signs
(``PURPOSE_ROTATION``); the session sums residues and the engine decodes the sum. With
adaptive clipping each client clips at ``S^t``, multiplies by ``C / S^t`` (the block's grid
and bounds hold whatever ``S^t``) and appends its integer count ``m (2 b - 1)`` with its own
Skellam share; the engine multiplies the update back by ``S^t / C`` and hands the controller
the decoded count (docs/secure-aggregation.md §Discrete noise, "Adaptive clipping").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import get_args

import numpy as np
import torch

from accounting.errors import InvalidInputError
from planner.schema import Plan, RequestedSecagg
from planner.secagg import SecaggGraph, graph_and_reason, graph_label, planned_participants, secagg_graph
from trainer.choices import REQUESTED_MECHANISMS, SECAGG_EXECUTIONS, RequestedMechanism, SecAggExecution
from trainer.run.outcome import RoundOutcome
from trainer.secagg import SecAggResult, choose_params, exact_sum, secure_sum
from trainer.secagg import parallel as secagg_parallel
from trainer.secagg.encoding import word_dtype
from trainer.secagg.params import SecAggParams, residue_params
from trainer.secagg.prg import LATEST_PROTOCOL_VERSION
from trainer.strategies.base import (
    PURPOSE_CLIENT,
    PURPOSE_DROPOUT,
    PURPOSE_SECAGG,
    Population,
    RoundContext,
    Strategy,
)
from trainer.units.client.adaptive_clip import adaptive_controller
from trainer.units.client.discrete import DiscretePool, rotation_seed, run_discrete_pools, run_mechanism
from trainer.units.client.mechanism import PoolMechanism, pool_mechanisms, privatize, privatize_counted
from trainer.units.client.release import PoolResults, round_mechanisms, server_step, split_counts, too_few_sampled

# Called with (client id, group id, the client's encoded pre-noise update decoded to floats).
EncodedHook = Callable[[int, str, np.ndarray], None]


def pool_graph_kinds(plan: Plan, secagg_mode: RequestedSecagg) -> dict[str, RequestedSecagg]:
    """Pool id -> the graph kind its sessions use: with ``auto`` the choice the plan states
    for the pool at its expected size (re-derived, never read from the document), else the
    forced ``full``/``sparse`` (docs/secure-aggregation.md §Automatic mode)."""
    scenario = plan.scenario
    return {
        pool.id: (
            secagg_graph(planned_participants(pool.expected_clients), scenario.dropout_rate,
                         scenario.abort_probability).mode
            if secagg_mode == "auto"
            else secagg_mode
        )
        for pool in plan.pools
    }


def full_mode_reasons(plan: Plan, secagg_mode: RequestedSecagg) -> dict[str, str]:
    """Pool id -> why its sessions run full mode although ``secagg_mode`` asked for SecAgg+
    or weighed it (``planner.secagg.graph_and_reason`` at the pool's expected participants):
    no Harary graph meets the bounds, or under auto SecAgg+ would save too little. For the
    console; the graphs themselves come from ``pool_graph_kinds`` and ``session_graph``."""
    scenario = plan.scenario
    reasons = {}
    for pool in plan.pools:
        _, reason = graph_and_reason(planned_participants(pool.expected_clients), float(scenario.dropout_rate),
                                     scenario.abort_probability, secagg_mode)
        if reason is not None:
            reasons[pool.id] = reason
    return reasons


def session_graph(plan: Plan, kind: RequestedSecagg, participants: int) -> SecaggGraph:
    """The graph of one session of ``participants`` clients: (k, t) from Bell et al.'s bounds
    for the plan's dropout rate and abort probability (docs/secure-aggregation.md §SecAgg+ (sparse mode))."""
    return secagg_graph(participants, float(plan.scenario.dropout_rate), plan.scenario.abort_probability, kind)


class RoundEngine:
    """Runs rounds of ``strategy`` over ``population`` with the plan's mechanism."""

    def __init__(
        self,
        plan: Plan,
        strategy: Strategy,
        population: Population,
        dim: int,
        *,
        rounds: int,
        late_dropout_fraction: float = 0.0,
        secagg_mode: RequestedSecagg = "auto",
        secagg_execution: SecAggExecution = "protocol",
        secagg_workers: int | None = None,
        secagg_mechanism: RequestedMechanism = "plan",
        on_encoded: EncodedHook | None = None,
        keep_pool_sums: bool = False,
        skellam_spent: Mapping[str, float] | None = None,
    ) -> None:
        """``secagg_mode``: each pool's graph; ``auto`` keeps the one the plan states for the
        pool (re-derived, never read from the document), ``full``/``sparse`` force it; (k, t)
        are computed for each session's participants. ``secagg_workers``: the most processes
        a session's clients run in (``None``: every core); a session too small to pay for
        forking runs in one either way (``trainer.secagg.parallel.session_workers``).
        ``secagg_mechanism``: the noise the pools' sessions carry; ``plan`` (the default) is
        ``skellam`` where the plan's noised pools carry discrete blocks, else
        ``gaussian_continuous`` (``discrete.run_mechanism``); ``skellam`` runs each noised
        pool's stated block, re-derived and checked here (``discrete.discrete_pools``, with
        ``skellam_spent``, the full-run ledgers ``planner.verify`` composed for this very plan);
        ``on_encoded`` is called for the continuous path only."""
        # adaptive clipping is the strategy's choice (its controller holds S^t); the plan must state
        # the noise for it (docs/trainer.md §Adaptive clipping)
        self.adaptive = adaptive_controller(strategy) is not None
        # first: it refuses a plan of another privacy unit before anything reads client fields
        self.mechanisms = pool_mechanisms(plan, dim, rounds, adaptive=self.adaptive)
        if not 0 <= late_dropout_fraction <= 1:
            raise InvalidInputError("late_dropout_fraction", f"must be in [0, 1], got {late_dropout_fraction}")
        self.plan = plan
        self.strategy = strategy
        self.population = population
        self.dim = dim
        self.dropout_rate = float(plan.scenario.dropout_rate)
        self.late_dropout_fraction = late_dropout_fraction
        if secagg_mode not in get_args(RequestedSecagg):
            raise InvalidInputError("secagg", f"must be full, sparse or auto, got {secagg_mode!r}")
        if secagg_execution not in SECAGG_EXECUTIONS:
            raise InvalidInputError("secagg_execution", f"must be {' or '.join(SECAGG_EXECUTIONS)}, got {secagg_execution!r}")
        self.secagg_mode = secagg_mode
        self.secagg_execution = secagg_execution
        if secagg_workers is not None and (isinstance(secagg_workers, bool) or secagg_workers < 1):
            raise InvalidInputError("secagg_workers", f"must be a positive integer or auto, got {secagg_workers!r}")
        self.secagg_workers = secagg_workers
        if secagg_mechanism not in REQUESTED_MECHANISMS:
            raise InvalidInputError(
                "secagg_mechanism", f"must be {' or '.join(REQUESTED_MECHANISMS)}, got {secagg_mechanism!r}"
            )
        mechanism = run_mechanism(secagg_mechanism, plan)
        self.secagg_mechanism = mechanism
        # pool id -> its discrete mechanism (noised pools under skellam; none otherwise); under
        # adaptive clipping each block carries the count coordinate
        self.discrete: dict[str, DiscretePool] = run_discrete_pools(
            plan, dim, mechanism, adaptive=self.adaptive, skellam_spent=skellam_spent)
        self.on_encoded = on_encoded
        self.keep_pool_sums = keep_pool_sums
        self._pool_of_group = {g: m.pool_id for m in self.mechanisms for g in m.group_ids}
        self.pool_graphs = pool_graph_kinds(plan, secagg_mode)

    @property
    def secagg_processes(self) -> int | None:
        """The most processes a session of this engine may use (``None``: exact-sum, no protocol)."""
        if self.secagg_execution == "exact_sum":
            return None
        cores = secagg_parallel.available_workers()
        return cores if self.secagg_workers is None else min(cores, self.secagg_workers)

    def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]:
        """One round from ``global_params``; returns the next parameters and what happened."""
        timing: dict[str, float] = {}
        started = time.perf_counter()
        controller = adaptive_controller(self.strategy) if self.adaptive else None
        clip_norm, mechanisms = round_mechanisms(self.strategy, self.mechanisms, self.dim)
        selection = self.strategy.configure_round(ctx, self.population)
        sampled = {group.id: int(selection[group.id].size) for group in self.plan.groups}
        participants, early, late = self._dropouts(ctx, selection, mechanisms)
        trainees = [(c, g) for pool in participants.values() for c, g in pool if c not in early]
        timing["select"] = time.perf_counter() - started

        tick = time.perf_counter()
        rows, nonfinite = self._train(ctx, global_params, trainees)
        timing["train"] = time.perf_counter() - tick

        tick = time.perf_counter()
        row_of = {client: i for i, (client, _) in enumerate(trainees)}
        # the rotation's signs are public: drawn from the round's public seed, one set per pool
        signs = {pool_id: self.discrete[pool_id].signs(rotation_seed(ctx, m.index))
                 for m in mechanisms if (pool_id := m.pool_id) in self.discrete}
        vectors = {m.pool_id: self._privatize(ctx, m, participants[m.pool_id], early, rows, row_of, clip_norm,
                                              signs.get(m.pool_id))
                   for m in mechanisms}
        timing["privatize"] = time.perf_counter() - tick

        tick = time.perf_counter()
        results, graphs, keystream_bytes = self._secure_sums(ctx, mechanisms, vectors, early, late, signs, clip_norm)
        timing["secagg"] = time.perf_counter() - tick

        pool_sums = results.pool_sums
        counts: dict[str, float | None] = {}
        if clip_norm is not None:
            # the last coordinate of a released sum is the pool's noisy count; the update is the rest
            pool_sums, counts = split_counts(pool_sums, self.dim)

        tick = time.perf_counter()
        new_params = server_step(self.strategy, ctx, global_params, pool_sums, self.dim)
        fraction = None if controller is None else controller.update(counts)
        timing["aggregate"] = time.perf_counter() - tick

        outcome = RoundOutcome(
            global_round=ctx.global_round,
            sampled=sampled,
            survived=results.survived,
            aborted_pools=results.aborted,
            abort_reasons=results.reasons,
            dropped_before_masking=len(early),
            dropped_after_masking=len(late),
            timing=timing,
            pool_sums=pool_sums if self.keep_pool_sums else {},
            nonfinite_updates=nonfinite,
            secagg=graphs,
            keystream_bytes=keystream_bytes,
            clip_norm=clip_norm,
            unclipped_fraction=fraction,
        )
        return new_params, outcome

    def _dropouts(
        self, ctx: RoundContext, selection: dict[str, np.ndarray], mechanisms: list[PoolMechanism]
    ) -> tuple[dict[str, list[tuple[int, str]]], set[int], set[int]]:
        """Per pool its sampled (client, group) pairs; per group, who leaves before masking
        (``early``) and who after, input kept (``late``)."""
        drop_rng = ctx.rng(PURPOSE_DROPOUT)
        early: set[int] = set()
        late: set[int] = set()
        participants: dict[str, list[tuple[int, str]]] = {m.pool_id: [] for m in mechanisms}
        for group in self.plan.groups:
            clients = selection[group.id]
            dropped = drop_rng.random(clients.size) < self.dropout_rate
            after = drop_rng.random(clients.size) < self.late_dropout_fraction
            for client, gone, is_late in zip(clients.tolist(), dropped.tolist(), after.tolist()):
                if gone:
                    (late if is_late else early).add(client)
                participants[self._pool_of_group[group.id]].append((client, group.id))
        return participants, early, late

    def _train(self, ctx: RoundContext, global_params: torch.Tensor,
               trainees: list[tuple[int, str]]) -> tuple[np.ndarray, int]:
        """The trainees' updates (float64 rows, in ``trainees`` order) and how many are non-finite."""
        trainee_ids = np.array([c for c, _ in trainees], dtype=np.int64)
        updates = self.strategy.client_update(ctx, global_params, trainee_ids, [g for _, g in trainees])
        if updates.shape != (len(trainees), self.dim):
            raise ValueError(f"client_update returned shape {tuple(updates.shape)}, expected {(len(trainees), self.dim)}")
        rows = updates.detach().to("cpu", torch.float64).numpy()
        # clients whose local training diverged send zeros (trainer.units.client.mechanism.finite_update)
        nonfinite = int(np.count_nonzero(~np.isfinite(rows).all(axis=1))) if rows.size else 0
        return rows, nonfinite

    def _privatize(self, ctx: RoundContext, mechanism: PoolMechanism, participants: list[tuple[int, str]],
                   early: set[int], rows: np.ndarray, row_of: dict[int, int],
                   clip_norm: float | None, signs: np.ndarray | None = None) -> dict[int, np.ndarray]:
        """Client id -> the vector it hands the pool's secure aggregation (clipped, noised,
        encoded; with adaptive clipping one more coordinate, its count; under the discrete
        mechanism its Skellam share mod 2^b, rotated with ``signs``)."""
        discrete = self.discrete.get(mechanism.pool_id)
        if discrete is not None and signs is not None:
            return {
                client: discrete.absent() if client in early
                else discrete.share(rows[row_of[client]], group_id, signs, ctx.rng(PURPOSE_CLIENT, client), clip_norm)
                for client, group_id in participants
            }
        width = self.dim if clip_norm is None else self.dim + 1  # the count's coordinate
        encode = privatize if clip_norm is None else privatize_counted
        pool_vectors: dict[int, np.ndarray] = {}
        for client, group_id in participants:
            if client in early:
                # Never trained and never sent: the protocol only needs its id.
                pool_vectors[client] = np.zeros(width)
                continue
            vector, pre_noise = encode(
                rows[row_of[client]], mechanism.clip_norms[group_id], mechanism, ctx.rng(PURPOSE_CLIENT, client)
            )
            if self.on_encoded is not None:
                self.on_encoded(client, group_id, pre_noise)
            pool_vectors[client] = vector
        return pool_vectors

    def _secure_sums(self, ctx: RoundContext, mechanisms: list[PoolMechanism], vectors: dict[str, dict[int, np.ndarray]],
                     early: set[int], late: set[int],
                     signs: dict[str, np.ndarray] | None = None,
                     clip_norm: float | None = None) -> tuple[PoolResults, dict[str, str], int]:
        """Each pool's secure-aggregation session: what it released (a discrete pool's sum
        decoded, unrotated with its ``signs`` and rescaled; with adaptive clipping's
        ``clip_norm`` S^t, to S^t and with its count appended), the graph it ran and the mask
        keystream bytes all sessions expanded."""
        results = PoolResults()
        graphs: dict[str, str] = {}
        keystream_bytes = 0
        for mechanism in mechanisms:
            pool_vectors = vectors[mechanism.pool_id]
            if len(pool_vectors) < mechanism.threshold:
                results.abort(mechanism.pool_id, too_few_sampled(len(pool_vectors), mechanism))
                continue
            graph = session_graph(self.plan, self.pool_graphs[mechanism.pool_id], len(pool_vectors))
            graphs[mechanism.pool_id] = graph_label(graph.mode, graph.neighbours, graph.share_threshold)
            result = self._aggregate(mechanism, graph, pool_vectors, early, late, ctx)
            keystream_bytes += result.keystream_bytes
            discrete = self.discrete.get(mechanism.pool_id)
            if result.aborted:
                results.abort(mechanism.pool_id, result.reason or "aborted")
            elif discrete is not None and signs is not None and result.sum is not None:
                results.release(mechanism, discrete.decode(result.sum, signs[mechanism.pool_id], clip_norm),
                                len(result.survivors))
            else:
                results.release(mechanism, result.sum, len(result.survivors))
        return results, graphs, keystream_bytes

    def _aggregate(
        self,
        mechanism: PoolMechanism,
        graph: SecaggGraph,
        pool_vectors: dict[int, np.ndarray],
        early: set[int],
        late: set[int],
        ctx: RoundContext,
    ) -> SecAggResult:
        """One pool's session: the protocol (serial or over ``workers``) or its exact-sum simulation."""
        params = self._session_params(mechanism, graph, len(pool_vectors))
        seed = ctx.seed_for(PURPOSE_SECAGG, mechanism.index)
        before_masking = [c for c in pool_vectors if c in early]
        before_unmasking = [c for c in pool_vectors if c in late]
        if self.secagg_execution == "exact_sum":
            return exact_sum(pool_vectors, params, seed=seed, drop_before_masking=before_masking,
                             drop_before_unmasking=before_unmasking)
        degree = len(pool_vectors) - 1 if graph.neighbours is None else graph.neighbours
        length = len(next(iter(pool_vectors.values())))  # d, or d' for a discrete pool's residues
        workers = secagg_parallel.session_workers(len(pool_vectors), degree, length, word_dtype(params.modulus_bits).itemsize)
        if self.secagg_workers is not None:
            workers = min(workers, self.secagg_workers)
        return secure_sum(pool_vectors, params, seed=seed, drop_before_masking=before_masking,
                          drop_before_unmasking=before_unmasking, workers=workers)

    def _session_params(self, mechanism: PoolMechanism, graph: SecaggGraph, participants: int) -> SecAggParams:
        """The session's parameters (``session_params``)."""
        return session_params(mechanism, self.discrete.get(mechanism.pool_id), graph, participants)


def session_params(mechanism: PoolMechanism, discrete: DiscretePool | None, graph: SecaggGraph,
                   participants: int) -> SecAggParams:
    """One pool session's parameters: fixed point at the pool's grid and value bound, or, for
    a discrete pool, residues mod 2^b with the block's b (sized for its ``max_clients``).
    The simulator's parties and the Flower server (``trainer.flower.engine``) build them
    here, in the latest protocol version (AES-128-CTR masks; docs/secure-aggregation.md
    §Protocol versions)."""
    if discrete is None:
        return choose_params(
            participants,
            mechanism.threshold,
            mechanism.value_bound,
            scale=mechanism.scale,
            mode=graph.mode,
            neighbours=graph.neighbours,
            share_threshold=graph.share_threshold,
            protocol_version=LATEST_PROTOCOL_VERSION,
        )
    if participants > discrete.mechanism.max_clients:
        # the sampled clients of a pool are among its clients; the wrap bound covers them all
        raise RuntimeError(f"pool {mechanism.pool_id}: {participants} participants exceed the "
                           f"{discrete.mechanism.max_clients} the bit width covers")
    return residue_params(participants, mechanism.threshold, discrete.bits, mode=graph.mode,
                          neighbours=graph.neighbours, share_threshold=graph.share_threshold,
                          protocol_version=LATEST_PROTOCOL_VERSION)
