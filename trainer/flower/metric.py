"""Metric plans (``metric_local``, IFCA with local Laplace releases) on Flower (docs/flower.md §10).

The simulator's metric round (``trainer.units.metric.rounds.MetricRoundEngine``) runs in
the ServerApp: it selects among the clients still under their participation cap, keeps
the leakage ledger (``MetricTally``: metric leakage, never an epsilon), updates the
public radius of the ``previous_round`` rule and runs the strategy's k-means on the
released models. Only its ``release`` step moves to the nodes (``FlowerMetricRoundEngine``):
each selected client's node gets the k hypotheses (and the round's radius), trains with
the strategy's ``client_release`` on its own data, and releases its model plus Laplace
noise in R^n (``trainer.units.metric.mechanism.sanitize``) with the ``nu`` of its group and
the radius rule of **its own copy of the plan**. Nothing else leaves the node: not its
chosen hypothesis, not its update, not its noise.

A node refuses another plan, a round outside the plan's or one it already released in,
a ``previous_round`` radius outside the plan's ``[min_radius, radius]``, and a release
past its group's participation cap (counted in its ``Context.state``). A selected client
that does not answer releases nothing; the ledger counts it all the same (never
optimistic). Noise: ``os.urandom``, or on a ``gdpfed-simulation`` node the run seed's
generator ``(seed, round, PURPOSE_LAPLACE, client)``, as ``gdpfed train``.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from accounting.errors import InvalidInputError
from trainer.flower import messages
from trainer.flower.roster import NodeRoster, nodes_per_group
from trainer.flower.settings import NodeSettings
from trainer.run.directory import fingerprint
from trainer.secagg import ProtocolError

if TYPE_CHECKING:
    import torch

    from trainer.strategies.base import Population, RoundContext

METRIC_HELLO = "query.gdpfed_metric_hello"
METRIC_RELEASE = "train.gdpfed_metric_release"
REQUEST = "gdpfed.metric"
ARRAYS = "gdpfed.metric_arrays"
RELEASES = "gdpfed.metric_releases"  # node state: the last round released in and how many releases

Log = Any


def _plan_of(document: dict[str, Any]) -> Any:
    # start-up time: the plan schema only when a message needs it
    from planner.units import load_plan_document
    from planner.units.metric_local import MetricPlan

    plan = load_plan_document(document)
    if not isinstance(plan, MetricPlan):
        raise ProtocolError(f"this node holds a {plan.privacy_unit} plan, not a metric_local plan")
    return plan


class MetricNode:
    """A metric plan's node: hello (its group and client), and its Laplace release."""

    def __init__(self, bundle_dir: Path, node_client: Any) -> None:
        self.bundle_dir = bundle_dir
        self.node_client = node_client  # trainer.flower.client_app.NodeClient: the group of a node

    def own_plan(self, node: NodeSettings) -> tuple[Any, dict[str, Any], str]:
        import json

        path = node.plan_path or self.bundle_dir / "plan.json"
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInputError("gdpfed-plan", f"cannot read the plan {path}: {exc}") from None
        plan = _plan_of(document)
        return plan, document, fingerprint(plan.model_dump(mode="json"))

    def hello(self, content: RecordDict, context: Context) -> RecordDict:
        node = NodeSettings.from_node_config(context.node_config)
        plan, _, plan_print = self.own_plan(node)
        return RecordDict({messages.REPLY: ConfigRecord({
            "group": self.node_client.group_of(node, plan, context), "client": node.require_partition(),
            "plan_fingerprint": plan_print,
        })})

    def release(self, content: RecordDict, context: Context) -> RecordDict:
        # start-up time: a node loads the trainer (torch) only when a message needs it
        import torch

        from trainer.flower.settings import train_config
        from trainer.flower.training import workspace
        from trainer.strategies.base import PURPOSE_LAPLACE, RoundContext
        from trainer.units.metric.mechanism import sanitize

        node = NodeSettings.from_node_config(context.node_config)
        plan, document, plan_print = self.own_plan(node)
        request = content.config_records[REQUEST]
        if messages._str(request, "plan_fingerprint") != plan_print:
            raise ProtocolError("the request belongs to another plan than this node's copy")
        global_round = messages._int(request, "global_round")
        end = plan.start_round + plan.rounds
        if not plan.start_round <= global_round < end:
            raise ProtocolError(f"round {global_round} is outside the plan's rounds [{plan.start_round}, {end})")
        group_id = self.node_client.group_of(node, plan, context)
        group = next(g for g in plan.groups if g.id == group_id)
        done = context.state.config_records.get(RELEASES) or ConfigRecord({"round": -1, "count": 0})
        last, count = messages._int(done, "round"), messages._int(done, "count")
        if global_round <= last:
            raise ProtocolError(f"this client already released in round {last}; it releases once a round, in order")
        if group.max_participations is not None and count >= group.max_participations:
            raise ProtocolError(f"this client has released {count} times, its group's cap of {group.max_participations}")
        scenario = plan.scenario
        radius: float | None = None
        if scenario.radius_rule == "public":
            radius = float(scenario.radius)  # the plan's, whatever the server says
        elif scenario.radius_rule == "previous_round":
            radius = messages._float(request, "radius")
            if not (math.isfinite(radius) and scenario.min_radius <= radius <= scenario.radius):
                raise ProtocolError(
                    f"radius {radius:g} is outside the plan's [{scenario.min_radius:g}, {scenario.radius:g}]"
                )

        config = train_config(context.run_config)
        client = node.require_partition()
        space = workspace(document, config, node.device)
        params = np.asarray(content.array_records[ARRAYS]["params"].numpy())
        if params.shape != (plan.scenario.model_dim * int(plan.scenario.hypotheses),):
            raise ProtocolError(f"the server sent {params.shape[0]} parameters, the plan's hypotheses have "
                                f"{plan.scenario.model_dim * int(plan.scenario.hypotheses)}")
        ctx = RoundContext(round_index=global_round - plan.start_round, global_round=global_round, seed=config.seed)
        strategy: Any = space.strategy  # a LocalReleaseStrategy (the registry's, for this metric plan)
        out = strategy.client_release(ctx, torch.from_numpy(params.copy()).to(space.device),
                                            np.array([client], dtype=np.int64), [group_id])
        trained = out.trained.detach().to("cpu", torch.float64).numpy()[0]
        base = out.base.detach().to("cpu", torch.float64).numpy()[0]
        rng = (ctx.rng(PURPOSE_LAPLACE, client) if node.simulation
               else np.random.default_rng(int.from_bytes(os.urandom(32), "big")))
        own = scenario.radius_rule == "own_update"
        released = sanitize(trained, base, group.noise_multiplier, rng, radius_rule="own_update" if own else "public",
                            public_radius=radius).released
        context.state[RELEASES] = ConfigRecord({"round": global_round, "count": count + 1})
        return RecordDict({
            messages.REPLY: ConfigRecord({"nonfinite": int(not np.isfinite(trained).all())}),
            ARRAYS: ArrayRecord({"released": Array(np.ascontiguousarray(released))}),
        })


def register_metric_handlers(app: Any, bundle_dir: Path, handler: Any, node_client: Any) -> None:
    """Add the metric messages to the bundle's ClientApp (``trainer.flower.client_app.build_client_app``)."""
    node = MetricNode(bundle_dir, node_client)
    app.query(METRIC_HELLO.split(".")[1])(handler(node.hello))
    app.train(METRIC_RELEASE.split(".")[1])(handler(node.release))


@dataclass
class MetricMembership(NodeRoster[Any]):
    """Which node is which client (its ``partition-id``) of which group, learnt with ``METRIC_HELLO`` (``NodeRoster``)."""

    clients: dict[int, tuple[int, str]] = field(default_factory=dict)  # client -> (node, group)

    hello: ClassVar[str] = METRIC_HELLO

    def met(self) -> set[int]:
        return {node for node, _ in self.clients.values()}

    def admit(self, node: int, record: ConfigRecord) -> str | None:
        group, client = str(record["group"]), record["client"]
        if group not in {g.id for g in self.plan.groups}:
            return f"declares group {group!r}, not in the plan"
        if not isinstance(client, int) or not 0 <= client < self.plan.scenario.total_clients:
            return f"declares client {client!r}, not one of the plan's population"
        if client in self.clients:
            return f"declares client {client}, which node {self.clients[client][0]} is"
        self.clients[client] = (node, group)
        return None

    @property
    def groups(self) -> dict[int, str]:
        """Node -> group of the nodes met."""
        return {node: group for node, group in self.clients.values()}

    def joined_line(self) -> str:
        return nodes_per_group(self.groups, (g.id for g in self.plan.groups))

    def population(self) -> Population:
        # start-up time: the strategies' base imports torch
        from trainer.strategies.base import Population

        return Population({
            g.id: np.array(sorted(c for c, (n, group) in self.clients.items() if group == g.id and n in self.online),
                           dtype=np.int64)
            for g in self.plan.groups
        })


def flower_metric_engine(prepared_engine: Any, grid: Grid, membership: MetricMembership, *, timeout: float,
                         log: Any = print) -> Any:
    """The metric round engine of a prepared run whose releases happen on the nodes."""
    # start-up time: the metric engine imports torch
    from trainer.units.metric.rounds import MetricRoundEngine

    class FlowerMetricRoundEngine(MetricRoundEngine):
        def run(self, ctx: RoundContext, global_params: torch.Tensor) -> Any:
            membership.refresh()
            self.population = membership.population()  # the clients met and online, by group
            return super().run(ctx, global_params)

        def release(self, ctx: RoundContext, global_params: torch.Tensor, chosen: list[tuple[int, str]],
                    timing: dict[str, float]) -> tuple[list[tuple[int, str]], list[np.ndarray], int]:
            tick = time.perf_counter()
            fields: dict[str, Any] = {"plan_fingerprint": membership.plan_fingerprint, "global_round": ctx.global_round}
            if self.radius is not None:
                fields["radius"] = float(self.radius)
            arrays = ArrayRecord({"params": Array(np.ascontiguousarray(global_params.detach().cpu().numpy()))})
            route: dict[int, int] = {}
            batch: list[Message] = []
            for client, _ in chosen:
                node = membership.clients[client][0]
                route[node] = client
                batch.append(Message(RecordDict({REQUEST: ConfigRecord(fields), ARRAYS: arrays}), node, METRIC_RELEASE,
                                     ttl=timeout, group_id=str(ctx.global_round)))
            got: dict[int, tuple[np.ndarray, int]] = {}
            for reply in grid.send_and_receive(batch, timeout=timeout) if batch else []:
                node = int(reply.metadata.src_node_id)
                if node not in route or route[node] in got:
                    continue
                client = route[node]
                if reply.has_error():
                    log(f"round {ctx.global_round}: client {client} (node {node}) released nothing: {reply.error.reason}")
                    continue
                row = np.asarray(reply.content.array_records[ARRAYS]["released"].numpy(), dtype=np.float64)
                if row.shape != (self.model_dim,):
                    log(f"round {ctx.global_round}: client {client} released {row.shape}; ignored")
                    continue
                got[client] = (row, messages._int(reply.content.config_records[messages.REPLY], "nonfinite"))
            answered = [(c, g) for c, g in chosen if c in got]
            if len(answered) < len(chosen):
                log(f"round {ctx.global_round}: {len(chosen) - len(answered)} selected client(s) released nothing; "
                    "the ledger counts them")
            timing["train"] = time.perf_counter() - tick
            return answered, [got[c][0] for c, _ in answered], sum(got[c][1] for c, _ in answered)

    engine = FlowerMetricRoundEngine(prepared_engine.plan, prepared_engine.strategy, membership.population(),
                                     prepared_engine.dim, prepared_engine.tally)
    engine.radius = prepared_engine.radius
    return engine


def prepare_flower_metric_run(grid: Grid, plan: Any, plan_document: dict[str, Any], config: Any, out: Path,
                              options: Any, *, dataset: Any = None, log: Any = print) -> tuple[Any, MetricMembership]:
    """``gdpfed train``'s preparation of the metric plan with each release on its node; the membership."""
    # start-up time: the ServerApp loads the trainer (torch) only when a run starts
    from trainer.flower.engine import refuse_successor_plan
    from trainer.run.prepared import as_engine_factory
    from trainer.runner import prepare_run

    membership = MetricMembership(grid, plan, fingerprint(plan.model_dump(mode="json")), timeout=options.step_timeout,
                                  log=log)
    prepared = prepare_run(plan, plan_document, config, out, resume=options.resume, device=options.device,
                           dataset=dataset)
    prepared.engine = flower_metric_engine(prepared.engine, grid, membership, timeout=options.step_timeout, log=log)
    assert prepared.engine_factory is not None  # the metric unit's prepare_run sets it (trainer.units.metric.run)
    local_factory = as_engine_factory(prepared.engine_factory)

    def engine_factory(for_plan: Any, for_strategy: Any, population: Any, dim: int, run_config: Any,
                       rounds: int, *, verified: Any = None) -> Any:
        # a re-plan stops the run: the simulator's engine would release from the server's copy
        # of the clients' data, not on their nodes
        refuse_successor_plan(plan, for_plan)
        return flower_metric_engine(local_factory(for_plan, for_strategy, population, dim, run_config, rounds,
                                                  verified=verified), grid, membership, timeout=options.step_timeout,
                                    log=log)

    prepared.engine_factory = engine_factory
    return prepared, membership
