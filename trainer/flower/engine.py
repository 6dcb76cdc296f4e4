"""The server's side of one plan round on a Flower ``Grid`` (docs/flower.md §2).

``FlowerRoundEngine`` has the simulator's ``RoundEngine`` interface (``run(ctx, params)
-> (next params, RoundOutcome)``), so ``trainer.runner.execute_run`` drives it with
the same ledger, log, checkpoints, evaluation and service reports as ``gdpfed train``.
One round:

1. **Membership** (``Membership``): nodes the Grid lists that the server has not met are
   asked ``HELLO``; a node answering with another plan's fingerprint or an unknown group
   is left out. The population of group g is its known, listed nodes, by node id.
2. **Sampling**: ``strategy.configure_round`` over that population, Poisson with ``q_g``
   from a generator seeded by ``(seed, round, group)``, as in the simulator.
3. **Secure aggregation**, one ``trainer.secagg`` session per pool with ``m_P`` sampled
   nodes or more, fresh session ids and server randomness (``os.urandom``), the four
   protocol steps of all pools in one ``send_and_receive`` each (four round trips a
   round whatever the number of pools). A node that does not answer a step in time, or
   answers with an error, has dropped out; a pool with fewer than ``m_P`` sampled nodes
   or survivors releases nothing (``aborted_pools``, with the reason).
4. ``strategy.aggregate`` (top-k per pool, fixed denominator K) and
   ``strategy.server_update`` on the released pool sums only.

The run's noise mechanism is its configuration's ``secagg_mechanism``, read as
``gdpfed train`` reads it. Under ``skellam`` each noised pool's session is one of residues
mod the block's 2^b (``trainer.units.client.rounds.session_params``) stating the block and
the round's public rotation seed; each node computes its Skellam share from its own copy
of the plan and refuses a session that states another block, and the server decodes,
unrotates and rescales the sum (``trainer.units.client.discrete.DiscretePool.decode``; with
adaptive clipping the update back to ``S^t`` and the decoded count appended, for the controller).
Sessions speak ``messages.PROTOCOL_VERSION``; a node that answers ``HELLO`` with another
version or mechanism is left out (docs/flower.md §2 "The discrete mechanism and the wire version").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from planner.schema import Plan, RequestedSecagg
from planner.secagg import graph_label
from trainer.engines.evaluate import ClientScores
from trainer.flower import messages
from trainer.flower.roster import NodeRoster, nodes_per_group
from trainer.flower.settings import run_mechanism
from trainer.run.outcome import RoundOutcome
from trainer.run.reporting import ReportingStoppedError
from trainer.secagg import ProtocolError, Server, new_session
from trainer.secagg.errors import SessionAborted
from trainer.secagg.messages import AdvertisedKeys, EncryptedShare
from trainer.strategies.base import Population, RoundContext, Strategy
from trainer.units.client.adaptive_clip import adaptive_controller
from trainer.units.client.discrete import DiscretePool, rotation_seed, run_discrete_pools
from trainer.units.client.mechanism import PoolMechanism, pool_mechanisms
from trainer.units.client.release import PoolResults, round_mechanisms, server_step, split_counts, too_few_sampled
from trainer.units.client.rounds import pool_graph_kinds, session_graph, session_params

Log = Callable[[str], None]


@dataclass
class Membership(NodeRoster[Plan]):
    """Which node is in which group: learnt with ``HELLO``, refreshed when new nodes appear (``NodeRoster``)."""

    groups: dict[int, str] = field(default_factory=dict)
    # the run's noise mechanism: a node that runs another is left out
    mechanism: str = messages.DEFAULT_MECHANISM

    hello: ClassVar[str] = messages.HELLO

    def met(self) -> set[int]:
        return set(self.groups)

    def admit(self, node: int, record: ConfigRecord) -> str | None:
        version = messages.protocol_version_of(record)
        if version != messages.PROTOCOL_VERSION:
            return messages.version_refusal(version)
        mechanism = messages.mechanism_of(record)
        if mechanism != self.mechanism:
            return (f"runs the noise mechanism {mechanism}, this run {self.mechanism}: every node must run the run's "
                    "(its run config's secagg-mechanism)")
        group = str(record["group"])
        if group not in {g.id for g in self.plan.groups}:
            return f"declares group {group!r}, not in the plan"
        self.groups[node] = group
        return None

    def joined_line(self) -> str:
        return nodes_per_group(self.groups, (g.id for g in self.plan.groups))

    def population(self) -> Population:
        return Population(
            {
                g.id: np.array(sorted(n for n, group in self.groups.items() if group == g.id and n in self.online),
                               dtype=np.uint64)
                for g in self.plan.groups
            }
        )


@dataclass
class _PoolSession:
    mechanism: PoolMechanism
    session: messages.Session
    server: Server
    discrete: DiscretePool | None = None
    roster: dict[int, AdvertisedKeys] = field(default_factory=dict)
    inboxes: dict[int, list[EncryptedShare]] = field(default_factory=dict)
    survivors: tuple[int, ...] = ()
    total: np.ndarray | None = None
    reason: str | None = None

    @property
    def live(self) -> bool:
        return self.reason is None


@dataclass
class ClientFailure:
    """A node that did not answer a protocol step (timeout or an error it replied with)."""

    global_round: int
    node_id: int
    step: str
    reason: str


def _collect_keys(s: _PoolSession, answered: dict[int, RecordDict]) -> None:
    s.roster = s.server.collect_keys(messages.keys_from_reply(c, u) for u, c in answered.items())


def _route_shares(s: _PoolSession, answered: dict[int, RecordDict]) -> None:
    s.inboxes = s.server.route_shares([m for u, c in answered.items() for m in messages.shares_from_reply(c, u)])


def _collect_masked(s: _PoolSession, answered: dict[int, RecordDict]) -> None:
    s.survivors = s.server.collect_masked_inputs(messages.masked_from_reply(c, u) for u, c in answered.items())


def _unmask(s: _PoolSession, answered: dict[int, RecordDict]) -> None:
    s.total = s.server.unmask(messages.unmask_from_reply(c, u) for u, c in answered.items())


class FlowerRoundEngine:
    """Runs rounds of ``strategy`` over the nodes of ``grid`` with the plan's mechanism."""

    def __init__(
        self,
        grid: Grid,
        membership: Membership,
        plan: Plan,
        strategy: Strategy,
        dim: int,
        *,
        secagg_mode: RequestedSecagg = "auto",
        secagg_mechanism: str = messages.DEFAULT_MECHANISM,
        step_timeout: float = 600.0,
        log: Log = print,
        skellam_spent: Mapping[str, float] | None = None,
    ) -> None:
        """``secagg_mechanism``: the noise the pools' sessions carry, checked as the simulator's
        round engine checks it (``run_discrete_pools``: skellam runs each noised pool's stated
        block, re-derived; under adaptive clipping with its count coordinate), with
        ``skellam_spent``, the full-run ledgers ``planner.verify`` composed for this very plan
        (the ServerApp's preparation hands them over, as ``gdpfed train``'s; docs/ledger.md §5)."""
        self.grid = grid
        self.membership = membership
        self.plan = plan
        self.strategy = strategy
        self.dim = dim
        self.secagg_mode: RequestedSecagg = secagg_mode
        self.pool_graphs = pool_graph_kinds(plan, secagg_mode)
        self.step_timeout = step_timeout
        self.log = log
        # adaptive clipping is the strategy's choice (its controller holds S^t, on this host)
        self.adaptive = getattr(strategy, "adaptive_clip", None) is not None
        # plan.rounds sizes the noise tail bound, as on the nodes (client_app.NodeClient.mechanism).
        self.mechanisms = pool_mechanisms(plan, dim, plan.rounds, adaptive=self.adaptive)
        # pool id -> its discrete mechanism (noised pools under skellam; none otherwise); under
        # adaptive clipping each block carries the count coordinate
        self.discrete = run_discrete_pools(plan, dim, secagg_mechanism, adaptive=self.adaptive,
                                           skellam_spent=skellam_spent)
        self.secagg_mechanism = secagg_mechanism
        # per-client models live on the nodes: the strategy's evaluation asks them for their scores
        strategy.remote_scores = self.node_scores
        self._round = plan.start_round
        self.failures: list[ClientFailure] = []
        # pool id -> (participants, survivors U3) of the last round, as node ids (audits, logs).
        self.last_sessions: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.received: list[Message] = []  # every reply, for audits (tests)
        self.keep_received = False

    def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]:
        timing: dict[str, float] = {}
        started = time.perf_counter()
        self._round = ctx.global_round
        controller = adaptive_controller(self.strategy) if self.adaptive else None
        clip_norm, mechanisms = round_mechanisms(self.strategy, self.mechanisms, self.dim)
        self.membership.refresh()
        selection = self.strategy.configure_round(ctx, self.membership.population())
        sampled = {group.id: int(selection[group.id].size) for group in self.plan.groups}
        sessions, reasons, graphs = self._open_sessions(ctx, selection, mechanisms, clip_norm)
        timing["select"] = time.perf_counter() - started

        params_np = global_params.detach().to("cpu").numpy()
        steps: list[tuple[str, str, Callable[[_PoolSession], dict[int, Any]], Callable[[_PoolSession], Sized],
                          Callable[[_PoolSession, dict[int, RecordDict]], None]]] = [
            # KEYS: every participant trains, privatises and advertises its keys.
            ("keys", messages.KEYS,
             lambda s: dict.fromkeys(range(len(s.session.participants)), messages.keys_request(s.session, params_np)),
             lambda s: s.session.participants, _collect_keys),
            # SHARES: U1 gets the roster and answers with its encrypted shares.
            ("shares", messages.SHARES, lambda s: dict.fromkeys(s.roster, messages.shares_request(s.session, s.roster)),
             lambda s: s.roster, _route_shares),
            # MASKED: U2 gets its ciphertexts and answers with y_u.
            ("masked", messages.MASKED,
             lambda s: {u: messages.masked_request(s.session, box) for u, box in s.inboxes.items()},
             lambda s: s.inboxes, _collect_masked),
            # UNMASK: U3 gets the survivors and answers with one share per group member.
            ("unmask", messages.UNMASK, lambda s: dict.fromkeys(s.survivors, messages.unmask_request(s.session, s.survivors)),
             lambda s: s.survivors, _unmask),
        ]
        dropped: dict[str, int] = {}
        for name, kind, requests, expected, apply in steps:
            tick = time.perf_counter()
            dropped[name] = self._protocol_step(ctx, kind, sessions, requests, expected, apply)
            timing[name] = time.perf_counter() - tick

        tick = time.perf_counter()
        results = PoolResults()
        for mechanism in mechanisms:
            done = sessions.get(mechanism.pool_id)
            reason = reasons.get(mechanism.pool_id) if done is None else done.reason
            if done is None or done.total is None:
                results.abort(mechanism.pool_id, reason or "aborted")
            elif done.discrete is not None and done.session.discrete is not None:
                # the residue sum mod 2^b, decoded, unrotated with the round's public signs, rescaled
                # (with adaptive clipping: the update to S^t, the count appended, as RoundEngine decodes)
                signs = done.discrete.signs(done.session.discrete.rotation_seed)
                results.release(mechanism, done.discrete.decode(done.total, signs, clip_norm), len(done.survivors))
            else:
                results.release(mechanism, done.total, len(done.survivors))
        pool_sums = results.pool_sums
        counts: dict[str, float | None] = {}
        if clip_norm is not None:
            # the last coordinate of a released sum is the pool's noisy count; the update is the rest
            pool_sums, counts = split_counts(pool_sums, self.dim)
        new_params = server_step(self.strategy, ctx, global_params, pool_sums, self.dim)
        fraction = None if controller is None else controller.update(counts)
        timing["aggregate"] = time.perf_counter() - tick

        self.last_sessions = {
            p: (s.session.participants, tuple(s.session.participants[u] for u in s.survivors))
            for p, s in sessions.items()
        }
        outcome = RoundOutcome(
            global_round=ctx.global_round,
            sampled=sampled,
            survived=results.survived,
            aborted_pools=results.aborted,
            abort_reasons=results.reasons,
            dropped_before_masking=dropped["keys"] + dropped["shares"] + dropped["masked"],
            dropped_after_masking=dropped["unmask"],
            timing=timing,
            pool_sums=pool_sums,
            secagg=graphs,
            clip_norm=clip_norm,
            unclipped_fraction=fraction,
        )
        return new_params, outcome

    def node_scores(self, nodes: Sequence[int], global_params: torch.Tensor, _dataset: Any) -> ClientScores:
        """Each node's own model (its personal model, or ``global_params``) scored on its own
        test rows, asked with ``PERSONAL`` (``Strategy.remote_scores``); a node that does not
        answer, answers with an error or holds no test rows counts 0 rows (left out of the means)."""
        order = [int(node) for node in nodes]
        request = messages.personal_request(self.membership.plan_fingerprint, self._round,
                                            global_params.detach().to("cpu").numpy())
        outgoing = [Message(request, node, messages.PERSONAL, ttl=self.step_timeout, group_id=str(self._round))
                    for node in order]
        scores: dict[int, tuple[float, int, int]] = {}
        for reply in self.grid.send_and_receive(outgoing, timeout=self.step_timeout) if outgoing else []:
            node = int(reply.metadata.src_node_id)
            if node not in order or node in scores:
                continue
            if reply.has_error():
                self.log(f"round {self._round}: node {node} gave no personal scores: {reply.error.reason}")
                continue
            try:
                answer = messages.personal_from_reply(reply.content)
            except (ProtocolError, KeyError) as exc:
                self.log(f"round {self._round}: node {node}'s personal scores refused: {exc}")
                continue
            if answer is not None:
                scores[node] = answer
        rows = [scores.get(node, (0.0, 0, 0)) for node in order]
        return ClientScores(torch.tensor([r[0] for r in rows], dtype=torch.float64),
                            torch.tensor([r[1] for r in rows], dtype=torch.int64),
                            torch.tensor([r[2] for r in rows], dtype=torch.int64))

    def _open_sessions(self, ctx: RoundContext, selection: dict[str, np.ndarray], mechanisms: list[PoolMechanism],
                       clip_norm: float | None) -> tuple[dict[str, _PoolSession], dict[str, str], dict[str, str]]:
        """A secure-aggregation session per pool with at least ``m_P`` (and one) nodes sampled;
        the other pools' abort reasons; each session's graph label. With adaptive clipping the
        session names the round's ``S^t`` (``clip_norm``), and ``mechanisms`` are at it."""
        sessions: dict[str, _PoolSession] = {}
        reasons: dict[str, str] = {}
        graphs: dict[str, str] = {}
        for mechanism in mechanisms:
            nodes = sorted(int(node) for g in mechanism.group_ids for node in selection[g].tolist())
            if len(nodes) < max(mechanism.threshold, 1):
                reasons[mechanism.pool_id] = too_few_sampled(len(nodes), mechanism)
                continue
            graph = session_graph(self.plan, self.pool_graphs[mechanism.pool_id], len(nodes))
            graphs[mechanism.pool_id] = graph_label(graph.mode, graph.neighbours, graph.share_threshold)
            discrete = self.discrete.get(mechanism.pool_id)
            # the simulator's session parameters, in the version the Flower wire states
            params = session_params(mechanism, discrete, graph, len(nodes))
            setup = new_session(range(len(nodes)), params, None)
            stated = None if discrete is None else messages.DiscreteSession(
                discrete.mechanism.scale, discrete.mechanism.share_variance, rotation_seed(ctx, mechanism.index))
            session = messages.Session(
                pool_id=mechanism.pool_id, global_round=ctx.global_round,
                plan_fingerprint=self.membership.plan_fingerprint, session_id=setup.session_id,
                participants=tuple(nodes), params=params, graph=dict(setup.graph), clip_norm=clip_norm,
                mechanism="skellam" if self.secagg_mechanism == "skellam" else "gaussian_continuous", discrete=stated,
            )
            sessions[mechanism.pool_id] = _PoolSession(mechanism, session, Server(params, setup), discrete)
        return sessions, reasons, graphs

    def _protocol_step(self, ctx: RoundContext, kind: str, sessions: dict[str, _PoolSession],
                       requests: Callable[[_PoolSession], dict[int, Any]], expected: Callable[[_PoolSession], Sized],
                       apply: Callable[[_PoolSession, dict[int, RecordDict]], None]) -> int:
        """One step of the protocol for every live session: send each addressee its request,
        hand the replies to the session's server (``apply``); returns how many addressees
        (``expected``) did not answer."""
        live = {p: s for p, s in sessions.items() if s.live}
        replies = self._exchange(ctx, kind, sessions, {pool: requests(s) for pool, s in live.items()})
        missing = 0
        for pool, s in live.items():
            answered = replies[pool]
            missing += len(expected(s)) - len(answered)

            def step(s: _PoolSession = s, answered: dict[int, RecordDict] = answered) -> None:
                apply(s, answered)
            self._step(s, step)
        return missing

    @staticmethod
    def _step(session: _PoolSession, action: Callable[[], None]) -> None:
        """Run one server step of a pool's session; an abort or a protocol violation ends it, releasing nothing."""
        try:
            action()
        except SessionAborted as abort:
            session.reason = abort.reason
        except ProtocolError as exc:
            session.reason = f"protocol violation: {exc}"

    def _exchange(
        self, ctx: RoundContext, step: str, sessions: dict[str, _PoolSession],
        outgoing: dict[str, dict[int, RecordDict]],
    ) -> dict[str, dict[int, RecordDict]]:
        """Send every pool's step-``step`` requests in one round trip; the replies by pool and client index.

        ``outgoing[pool][index]`` is the request to participant ``index`` of the pool's session.
        """
        route: dict[int, tuple[str, int]] = {}
        batch: list[Message] = []
        group_id = str(ctx.global_round)
        for pool, requests in outgoing.items():
            participants = sessions[pool].session.participants
            for index, content in requests.items():
                node = participants[index]
                route[node] = (pool, index)
                batch.append(Message(content, node, step, ttl=self.step_timeout, group_id=group_id))
        replies: dict[str, dict[int, RecordDict]] = {pool: {} for pool in outgoing}
        if not batch:
            return replies
        answered: set[int] = set()
        for reply in self.grid.send_and_receive(batch, timeout=self.step_timeout):
            node = int(reply.metadata.src_node_id)
            if node not in route or node in answered:
                continue
            answered.add(node)
            if self.keep_received:
                self.received.append(reply)
            if reply.has_error():
                self._failed(ctx, node, step, f"error: {reply.error.reason}")
                continue
            pool, index = route[node]
            replies[pool][index] = reply.content
        for node in sorted(set(route) - answered):
            self._failed(ctx, node, step, f"no reply within {self.step_timeout:g} s")
        return replies

    def _failed(self, ctx: RoundContext, node: int, step: str, reason: str) -> None:
        self.failures.append(ClientFailure(ctx.global_round, node, step, reason))
        self.log(f"round {ctx.global_round}: node {node} dropped out at {step}: {reason}")


def refuse_successor_plan(plan: Any, for_plan: Any) -> None:
    """Stop the run (``ReportingStoppedError``) when a round engine is asked for ``for_plan``,
    a plan other than the run's ``plan``: the service re-planned (``trainer.run.replan.switch_plan``).
    The nodes hold ``plan`` in their app bundle and would refuse another plan's rounds, and the
    server cannot hand them another (a node's noise must come from its own copy); the
    simulator's engine would train on the server's copy of the nodes' data. Every unit's
    Flower run asks this (docs/flower.md §8)."""
    if for_plan is not plan:
        raise ReportingStoppedError(
            "the service re-planned this plan; the nodes carry the old plan in their app bundle: build a "
            "bundle for the new plan (gdpfed flower app --plan NEW.json ...) and start it with flwr run"
        )


@dataclass
class FlowerEngineFactory:
    """``prepare_run``'s engine factory for one plan on one grid (``trainer.runner.EngineFactory``).

    A successor plan (the service re-planned) is refused with ``ReportingStoppedError``:
    the nodes hold the run's plan in their bundle and would refuse its sessions, and the
    server cannot hand them another plan (a node's noise must come from its own copy).
    """

    grid: Grid
    membership: Membership
    plan: Plan
    secagg_mode: RequestedSecagg = "auto"
    step_timeout: float = 600.0
    log: Log = print
    hook: Callable[[FlowerRoundEngine], None] | None = None

    def __call__(self, for_plan: Plan, strategy: Strategy, _population: Population, dim: int, config: Any,
                 _rounds: int, *, verified: Mapping[str, float] | None = None) -> FlowerRoundEngine:
        refuse_successor_plan(self.plan, for_plan)
        # the mechanism from the run's configuration, as the simulator's build_engine reads it (and the nodes);
        # verified: the full-run Skellam ledgers the run's verification composed for the plan (docs/ledger.md §5)
        engine = FlowerRoundEngine(self.grid, self.membership, for_plan, strategy, dim, secagg_mode=self.secagg_mode,
                                   secagg_mechanism=run_mechanism(config, for_plan), step_timeout=self.step_timeout,
                                   log=self.log, skellam_spent=verified)
        if self.hook is not None:
            self.hook(engine)
        return engine
