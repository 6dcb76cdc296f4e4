"""The ClientApp: a node's side of a plan round (docs/flower.md §2).

``build_client_app(bundle_dir)`` returns the ``flwr.clientapp.ClientApp`` a bundle's
``client_app.py`` assigns to ``app``. Per message (Flower runs each in a new process):

- ``HELLO``: the node's group, the fingerprint of its plan, the secure-aggregation protocol
  version it speaks (``messages.PROTOCOL_VERSION``) and the noise mechanism its run config
  names (``secagg-mechanism``, read as ``gdpfed train`` reads it).
- ``KEYS``: refuse a session of a pool the node's group is not in, of another plan, of
  another protocol version or mechanism, or whose threshold, grid scale or value bound
  (under skellam: bit width, scale, share variance, rotation seed) differ from what the
  node's own plan and run derive; then train locally (``trainer.flower.training``, the only
  step that imports torch), privatise with the node's own plan
  (``trainer.units.client.mechanism.privatize``: clip to ``C_g``, grid rounding, noise share
  ``N(0, s_P^2)``; under skellam ``trainer.units.client.discrete.DiscretePool.share``: clip,
  scale, rotate, conditional rounding, Skellam share, mod 2^b), and advertise fresh X25519
  keys.
- ``SHARES``, ``MASKED``, ``UNMASK``: ``trainer.secagg.Client`` restored from the node's
  ``Context.state``, one protocol round each, refusing any other session.
- ``PERSONAL``: the node's own model (a personal model kept in its ``Context.state``)
  scored on its own test rows (docs/flower.md §2, "Per-client state").

With adaptive clipping the ``KEYS`` session names the round's ``S^t``; the node clips at it
and derives both noise shares (update and count) from its own plan; under skellam it
multiplies the clipped update by ``C / S^t`` and appends its integer count with its own
Skellam share (``DiscretePool.share``; docs/flower.md §2 "The discrete mechanism").

Replies carry protocol messages only (no example count, no plaintext update), and the
personal scores ``PERSONAL`` asks for.
The noise comes from ``os.urandom`` (the server cannot know it) except on a node
configured ``gdpfed-simulation = true`` (``trainer.flower.settings``).

Start-up cost matters: each message is a new process. The module imports flwr, numpy and
``trainer.secagg``; ``HELLO`` and ``KEYS`` add the plan schema and the mechanism, and
only ``KEYS`` adds torch (local training).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from accounting.errors import InvalidInputError
from trainer.flower import messages
from trainer.flower.metric import register_metric_handlers
from trainer.flower.settings import NODE_GROUP, NodeSettings, run_mechanism, split_run_config, train_config
from trainer.flower.silo import register_silo_handlers
from trainer.run.directory import fingerprint
from trainer.secagg import Client, ProtocolError

if TYPE_CHECKING:
    from planner.schema import Plan
    from trainer.units.client.discrete import DiscretePool
    from trainer.units.client.mechanism import PoolMechanism

# When this module finished loading (the benchmark's split of a message's process time).
_LOADED_AT = time.time()
# A directory on the node where each message's process appends its timings (benchmark
# instrumentation, docs/benchmarks.md "Flower"); they stay on the node, never in a reply.
PROFILE_ENV = "GDPFED_FLOWER_PROFILE"


def _process_started_at() -> float | None:
    """Wall-clock start of this process (Linux /proc), or None where unavailable."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _profile(step: str, node: int, started: float, extra: dict[str, float]) -> None:
    directory = os.environ.get(PROFILE_ENV)
    if not directory:
        return
    record = {"step": step, "node": node, "pid": os.getpid(), "process_start": _process_started_at(),
              "module_loaded": _LOADED_AT, "handler_start": started, "handler_end": time.time(), **extra}
    with open(Path(directory) / f"node-{node}.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


@lru_cache(maxsize=8)
def _read_plan(path: str) -> tuple[Plan, dict[str, Any], str]:
    # start-up time: a node loads the trainer (torch) only when a message needs it
    from planner.units import load_plan

    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError("gdpfed-plan", f"cannot read the plan {path}: {exc}") from None
    plan = load_plan(document)
    return plan, document, plan_fingerprint(plan)


def plan_fingerprint(plan: Plan) -> str:
    """SHA-256 of the plan's canonical JSON: server and nodes must hold the same plan."""
    return fingerprint(plan.model_dump(mode="json"))


# (workspace settings, client index, group id, global round, global params) -> raw update Delta.
LocalUpdate = Callable[[Any, int, str, int, np.ndarray], np.ndarray]
# Called with (node id, pool id, the privatised vector handed to secure aggregation): tests.
Observer = Callable[[int, str, np.ndarray], None]


class NodeClient:
    """The protocol logic of one node, independent of how Flower delivers the messages.

    ``local_update`` replaces local training (tests: fixed updates) and ``observe`` sees
    each privatised vector before it is masked (tests: audits); a bundle uses neither.
    """

    def __init__(self, bundle_dir: Path, *, local_update: LocalUpdate | None = None,
                 observe: Observer | None = None) -> None:
        self.bundle_dir = bundle_dir
        self.local_update = local_update
        self.observe = observe
        self.timings: dict[str, float] = {}  # of the message being handled (benchmark profile)
        # (plan fingerprint, dim, mechanism, adaptive) -> the plan's discrete pools (checked once per process;
        # the derived blocks they are checked against are kept in the node's Context.state, discrete_pool)
        self._discrete: dict[tuple[str, int, str, bool], dict[str, DiscretePool]] = {}

    def own_plan(self, node: NodeSettings) -> tuple[Plan, dict[str, Any], str]:
        """The node's copy of the plan: its pinned ``gdpfed-plan`` file, else the bundle's."""
        return _read_plan(str(node.plan_path or self.bundle_dir / "plan.json"))

    def group_of(self, node: NodeSettings, plan: Plan, context: Context) -> str:
        if node.simulation and node.group is None:
            # Simulation only: deal the node's client index into a group as `gdpfed train` does.
            from trainer.data.groups import assign_groups

            seed = int(split_run_config(context.run_config)[1].get("seed", 0))
            labels = assign_groups([g.num_clients for g in plan.groups], plan.scenario.total_clients, seed)
            index = labels[node.require_partition()]
            if index < 0:
                raise InvalidInputError("partition-id", f"client {node.partition_id} is in no group of the plan")
            return plan.groups[index].id
        if node.group is None:
            raise InvalidInputError(NODE_GROUP, "the node config needs gdpfed-group (this node's privacy group)")
        if node.group not in {g.id for g in plan.groups}:
            raise InvalidInputError(NODE_GROUP, f"{node.group!r} is not a group of the plan")
        return node.group

    def hello(self, content: RecordDict, context: Context) -> RecordDict:
        node = NodeSettings.from_node_config(context.node_config)
        plan, _, plan_print = self.own_plan(node)
        return RecordDict(
            {
                messages.REPLY: ConfigRecord(
                    {
                        "group": self.group_of(node, plan, context),
                        "plan_fingerprint": plan_print,
                        "gdpfed_version": version("gdpfed"),
                        "flwr_version": version("flwr"),
                        "protocol_version": messages.PROTOCOL_VERSION,
                        "secagg_mechanism": run_mechanism(train_config(context.run_config), plan),
                    }
                )
            }
        )

    def keys(self, content: RecordDict, context: Context) -> RecordDict:
        node = NodeSettings.from_node_config(context.node_config)
        plan, document, plan_print = self.own_plan(node)
        session = messages.session_of(content)
        if session.plan_fingerprint != plan_print:
            raise ProtocolError("the session belongs to another plan than this node's copy")
        group_id = self.group_of(node, plan, context)
        group = plan.group(group_id)
        if group.pool != session.pool_id:
            raise ProtocolError(
                f"this node is in group {group_id} (pool {group.pool}) and refuses a session of pool {session.pool_id}"
            )
        index = session.index_of(context.node_id)
        self.check_round(plan, session, context)
        self.timings["round"] = session.global_round
        global_params = messages.global_params_of(content)
        dim = global_params.shape[0]
        mechanism = self.mechanism(plan, group.pool, dim, session.clip_norm)

        config = train_config(context.run_config)
        run = run_mechanism(config, plan)
        # the discrete block and rotation seed from this node's own plan and run, never the session's
        discrete = self.discrete_pool(plan, plan_print, group.pool, dim, run, adaptive=session.clip_norm is not None,
                                      state=context.state)
        rotation = self.rotation_seed(config, session, mechanism)
        self.check_params(session, mechanism, discrete, run, rotation)
        client_index = node.require_partition()
        training_started = time.time()
        if self.local_update is not None:
            update = self.local_update(config, client_index, group_id, session.global_round, global_params)
        else:
            # start-up time: a node loads the trainer (torch) only when a message needs it
            from trainer.flower.training import local_update, workspace

            space = workspace(document, config, node.device)
            self.timings["setup_s"] = time.time() - training_started  # torch, data, model (once per process)
            training_started = time.time()
            # the strategy's state of this client (a personal model) lives on the node, between rounds
            update, state = local_update(space, client_index, group_id, session.global_round, global_params,
                                         messages.client_state_of(context.state))
            if state:
                messages.record_client_state(context.state, state)
        self.timings["train_s"] = time.time() - training_started
        # start-up time: a node loads the trainer (torch) only when a message needs it
        from trainer.units.client.mechanism import privatize, privatize_counted

        rng = self.noise_rng(node, config, session, client_index)
        if discrete is not None:
            # the Skellam share mod 2^b, rotated with the round's public signs (this node's derivation)
            # with adaptive clipping at the session's S^t, the count coordinate appended (DiscretePool.share)
            vector = discrete.share(update, group_id, discrete.signs(rotation), rng, session.clip_norm)
        else:
            # adaptive clipping: the round's S^t, and the count b - 1/2 with its own noise share appended
            encode = privatize if session.clip_norm is None else privatize_counted
            vector, _ = encode(update, mechanism.clip_norms[group_id], mechanism, rng)
        if self.observe is not None:
            self.observe(context.node_id, session.pool_id, vector)
        client = Client(index, vector, session.params, session.setup, None)
        keys = client.advertise_keys()
        self.save(context, session, client)
        messages.record_joined_round(context.state, session.global_round)
        return messages.keys_reply(keys)

    def personal(self, content: RecordDict, context: Context) -> RecordDict:
        """This node's own model (its personal model; the received global model where it has
        none) scored on its own test rows: the loss sum, the correct count and the row count.

        These numbers leave the node in the clear, outside the plan's privacy guarantee, as
        Flower's federated evaluation does; a node configured ``gdpfed-personal-metrics =
        false`` refuses (docs/flower.md §2, "Per-client state").
        """
        node = NodeSettings.from_node_config(context.node_config)
        if not node.personal_metrics:
            raise ProtocolError("this node does not report its personal model's scores (gdpfed-personal-metrics = false)")
        plan, document, plan_print = self.own_plan(node)
        requested, global_round = messages.personal_request_of(content)
        if requested != plan_print:
            raise ProtocolError("the request belongs to another plan than this node's copy")
        self.timings["round"] = global_round
        # start-up time: a node loads the trainer (torch) only when a message needs it
        from trainer.flower.settings import train_config
        from trainer.flower.training import client_scores, workspace

        space = workspace(document, train_config(context.run_config), node.device)
        scores = client_scores(space, node.require_partition(), messages.global_params_of(content),
                               messages.client_state_of(context.state))
        return messages.personal_reply(scores)

    def shares(self, content: RecordDict, context: Context) -> RecordDict:
        session, client = self.load(content, context)
        shares = client.share_keys(messages.roster_of(content))
        self.save(context, session, client)
        return messages.shares_reply(shares)

    def masked(self, content: RecordDict, context: Context) -> RecordDict:
        session, client = self.load(content, context)
        masked = client.masked_input(messages.inbox_of(content))
        self.save(context, session, client)
        return messages.masked_reply(masked)

    def unmask(self, content: RecordDict, context: Context) -> RecordDict:
        session, client = self.load(content, context)
        shares = client.unmask(messages.survivors_of(content))
        # The session is over for this node: its secrets are no longer needed.
        for key in (messages.STATE, messages.STATE_INPUT):
            if key in context.state:
                del context.state[key]
        return messages.unmask_reply(shares)

    @staticmethod
    def check_round(plan: Plan, session: messages.Session, context: Context) -> None:
        """One session per round, rounds of the plan only, in increasing order.

        A second session in a round would release this node's update twice with
        independent noise shares (their average has less noise than the plan's), and a
        round beyond the plan's would spend privacy the plan does not allow. The node
        remembers the last round it joined in its ``Context.state`` for the run.
        """
        end = plan.start_round + plan.rounds
        if not plan.start_round <= session.global_round < end:
            raise ProtocolError(f"round {session.global_round} is outside the plan's rounds [{plan.start_round}, {end})")
        last = messages.last_joined_round(context.state)
        if last is not None and session.global_round <= last:
            raise ProtocolError(f"this node already took part in round {last}; it joins each round once, in order")

    @staticmethod
    def mechanism(plan: Plan, pool_id: str, dim: int, clip_norm: float | None = None) -> PoolMechanism:
        """The pool's mechanism from the node's own plan; with adaptive clipping's ``S^t``
        (``clip_norm``) the update's noise ``sigma_Delta S^t`` and the count's ``sigma_b``,
        both from the plan, so the server's ``S^t`` scales the noise with the clip and never
        lowers the noise multiplier (a plan without an ``adaptive_clip`` block is refused)."""
        # start-up time: a node loads the trainer (torch) only when a message needs it
        from trainer.units.client.mechanism import at_clip, pool_mechanisms

        # plan.rounds sizes the noise tail bound: server and nodes agree without the run's rounds.
        adaptive = clip_norm is not None
        mechanism = next(m for m in pool_mechanisms(plan, dim, plan.rounds, adaptive=adaptive) if m.pool_id == pool_id)
        return mechanism if clip_norm is None else at_clip(mechanism, clip_norm, dim)

    def discrete_pool(self, plan: Plan, plan_print: str, pool_id: str, dim: int, secagg_mechanism: str, *,
                      adaptive: bool, state: RecordDict) -> DiscretePool | None:
        """The pool's discrete mechanism under the node's run's ``secagg_mechanism``, from its own
        plan (the stated blocks compared with the re-derived ones, ``run_discrete_pools``, as the
        simulator's engine does); ``None`` for the continuous mechanism or a pool without noise.

        The re-derivation (``derived_blocks``, the planner's calibration) runs once per plan on
        this node, not once per ``KEYS`` message's process: its result is kept in the node's
        ``state`` (``Context.state``) under the fingerprint of the plan copy it was derived from
        (with the mechanism, the protocol version and the gdpfed version), and used only while
        the node's own copy has that fingerprint; a changed plan is derived again. The comparison
        with the stated blocks runs in every message; the check of a block an earlier calibration
        wrote at its own noise (its members' full-run Skellam ledger) runs once, its outcome kept
        with the derivation under the same key (docs/flower.md §2 "The discrete mechanism and the
        wire version")."""
        # start-up time: a node loads the planner's discrete derivation only when a message needs it
        from trainer.units.client.discrete import derived_blocks, run_discrete_pools

        key = (plan_print, dim, secagg_mechanism, adaptive)
        if key not in self._discrete:
            derived, checked = None, frozenset[str]()
            kept: dict[str, str | int] | None = None
            if secagg_mechanism == "skellam":  # the one mechanism with blocks to derive
                kept = {
                    "plan_fingerprint": plan_print, "secagg_mechanism": secagg_mechanism,
                    "protocol_version": messages.PROTOCOL_VERSION, "gdpfed_version": version("gdpfed"),
                }
                derived = messages.derived_blocks_of(state, kept)
                if derived is None:
                    derived = derived_blocks(plan)
                    messages.record_derived_blocks(state, kept, derived)
                else:
                    checked = messages.checked_blocks_of(state, kept)
            pools = run_discrete_pools(plan, dim, secagg_mechanism, adaptive=adaptive, derived=derived, checked=checked)
            # a block an earlier calibration wrote, accepted at its own noise: the outcome is kept with
            # the derivation, so its members' full-run ledger is not composed in every message
            own_noise = {pool.pool_id for pool in pools.values() if pool.own_noise}
            if kept is not None and derived is not None and not own_noise <= checked:
                messages.record_derived_blocks(state, kept, derived, checked=own_noise | checked)
            self._discrete[key] = pools
        return self._discrete[key].get(pool_id)

    @staticmethod
    def rotation_seed(config: Any, session: messages.Session, mechanism: PoolMechanism) -> int:
        """The round's public rotation seed of the pool, from the node's run seed and the round."""
        # start-up time: a node loads the trainer's round context only when a message needs it
        from trainer.strategies.base import RoundContext
        from trainer.units.client.discrete import rotation_seed

        return rotation_seed(RoundContext(0, session.global_round, config.seed), mechanism.index)

    @staticmethod
    def check_params(session: messages.Session, mechanism: PoolMechanism, discrete: DiscretePool | None = None,
                     secagg_mechanism: str = messages.DEFAULT_MECHANISM, rotation_seed: int | None = None) -> None:
        """The server's session must enforce this node's plan and run: the wire's protocol
        version, the run's noise mechanism, the pool's m_P, and its grid and value bound (the
        continuous mechanism) or its discrete block's bit width, scale and share variance and
        the round's rotation seed (skellam; docs/flower.md §2 "The discrete mechanism and the
        wire version"). Every difference is named in one ``ProtocolError``."""
        params = session.params
        problems = []
        if params.protocol_version != messages.PROTOCOL_VERSION:
            problems.append(f"protocol version {params.protocol_version} (this node speaks {messages.PROTOCOL_VERSION})")
        if session.mechanism != secagg_mechanism:
            problems.append(f"noise mechanism {session.mechanism} (this node's run config says {secagg_mechanism})")
        if problems:  # the rest would be compared with another mechanism's parameters
            raise ProtocolError(f"pool {session.pool_id}'s session has " + ", ".join(problems))
        if params.threshold != mechanism.threshold:
            problems.append(f"threshold {params.threshold} (the plan's m_P is {mechanism.threshold})")
        if discrete is None:
            if params.encoding != "fixed_point" or session.discrete is not None:
                problems.append("a discrete block (the node's plan and run give this pool the continuous mechanism)")
            if params.scale != mechanism.scale:
                problems.append(f"grid scale {params.scale:g} (the plan's is {mechanism.scale:g})")
            if params.value_bound != mechanism.value_bound:
                problems.append(f"value bound {params.value_bound:g} (the plan's is {mechanism.value_bound:g})")
        else:
            block = discrete.mechanism
            stated = session.discrete
            if params.encoding != "residues" or stated is None:
                problems.append("no discrete block (the node's plan states one for this pool under skellam)")
            if params.modulus_bits != block.bits:
                problems.append(f"bit width {params.modulus_bits} (the plan's is {block.bits})")
            if stated is not None:
                if stated.scale != block.scale:
                    problems.append(f"discrete scale {stated.scale!r} (the plan's is {block.scale!r})")
                if stated.share_variance != block.share_variance:
                    problems.append(f"share variance {stated.share_variance!r} (the plan's is {block.share_variance!r})")
                if stated.rotation_seed != rotation_seed:
                    problems.append(f"rotation seed {stated.rotation_seed} (this node derives {rotation_seed} from the "
                                    "run seed and the round)")
        if problems:
            raise ProtocolError(f"pool {session.pool_id}'s session has " + ", ".join(problems))

    @staticmethod
    def noise_rng(node: NodeSettings, config: Any, session: messages.Session, client: int) -> np.random.Generator:
        """The node's secret generator for rounding and noise; the run seed's only in simulation."""
        if node.simulation:
            # start-up time: a node loads the trainer (torch) only when a message needs it
            from trainer.strategies.base import PURPOSE_CLIENT, RoundContext

            return RoundContext(0, session.global_round, config.seed).rng(PURPOSE_CLIENT, client)
        return np.random.Generator(np.random.PCG64(int.from_bytes(os.urandom(32), "big")))

    @staticmethod
    def save(context: Context, session: messages.Session, client: Client) -> None:
        record, encoded = messages.state_to_records(session, client.state())
        context.state[messages.STATE] = record
        context.state[messages.STATE_INPUT] = encoded

    def load(self, content: RecordDict, context: Context) -> tuple[messages.Session, Client]:
        if messages.STATE not in context.state:
            raise ProtocolError("this node has not joined a session (no KEYS request reached it)")
        session, state = messages.state_from_records(
            context.state.config_records[messages.STATE], context.state.array_records[messages.STATE_INPUT]
        )
        messages.check_session_ref(content, session)
        self.timings["round"] = session.global_round
        return session, Client.restore(session.params, session.setup, state)


def build_client_app(bundle_dir: Path, node_client: NodeClient | None = None) -> ClientApp:
    """The ClientApp of the bundle in ``bundle_dir`` (its ``plan.json`` is the default plan copy)."""
    node_client = node_client or NodeClient(bundle_dir)
    app = ClientApp()

    def handler(step: Any) -> Any:
        def handle(message: Message, context: Context) -> Message:
            started = time.time()
            node_client.timings = {}
            reply = Message(step(message.content, context), reply_to=message)
            _profile(message.metadata.message_type, context.node_id, started, node_client.timings)
            return reply

        return handle

    app.query(messages.HELLO.split(".")[1])(handler(node_client.hello))
    app.train(messages.KEYS.split(".")[1])(handler(node_client.keys))
    app.train(messages.SHARES.split(".")[1])(handler(node_client.shares))
    app.train(messages.MASKED.split(".")[1])(handler(node_client.masked))
    app.train(messages.UNMASK.split(".")[1])(handler(node_client.unmask))
    # silo plans: one node per silo running its own DP-SGD (trainer.flower.silo)
    register_silo_handlers(app, bundle_dir, handler)
    # metric plans: a selected client's Laplace release (trainer.flower.metric)
    register_metric_handlers(app, bundle_dir, handler, node_client)
    app.evaluate(messages.PERSONAL.split(".")[1])(handler(node_client.personal))
    return app
