"""Silo plans (``silo_sample``, MR-MTL and its baselines) on Flower: one node per silo (docs/flower.md §9).

The simulator's silo strategies (``trainer.units.silo.strategies``) run unchanged in the
ServerApp: each calls its DP-SGD engine for every silo's pass, and here that engine is
``RemoteSiloEngine``, which sends silo k's row (its start point, the prox anchor and
weight lambda, the pass) to silo k's node and takes the trained row back. The node runs
``trainer.units.silo.dpsgd.DpSgdEngine`` on its own examples only (``silos=[k]``), with
sigma_k, the clip norm c, q_k and its steps read from **its own copy of the plan**, so the
server chooses where a silo starts and the data-independent prox term, never the noise.
The server forms the mean and the anchors (the strategy's ``run_round``), keeps the
silos' models in the strategy's state (its checkpoint) and the per-silo ledger
(``trainer.units.silo.run.SiloTally``, through ``gdpfed train``'s run loop). The IFCA
warm start's private cluster selections run on the nodes too: the server sends the
candidate models, each node answers with its report-noisy-min choice under its own
selection budget.

Messages (``SILO_HELLO`` once per node; per round ``SILO_TRAIN`` per pass, ``SILO_SELECT``
in the plan's selection rounds). A node refuses another plan, a round outside the plan's,
and a pass or a selection it already ran (kept in its ``Context.state``): a repeated pass
would spend privacy the plan did not count. A silo that does not answer keeps its row
(its model does not move) and the round is counted for every silo (never optimistic).

Randomness: a node configured ``gdpfed-simulation = true`` draws its masks, noise and
selections from the run seed, as ``gdpfed train`` does for that silo; any other node
from ``os.urandom``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from accounting.errors import InvalidInputError
from trainer.flower import messages
from trainer.flower.roster import NodeRoster
from trainer.flower.settings import NODE_PARTITION, NodeSettings
from trainer.run.directory import fingerprint
from trainer.secagg import ProtocolError

if TYPE_CHECKING:
    import torch

    from planner.units.silo_sample import SiloSamplePlan
    from trainer.run.outcome import RoundOutcome
    from trainer.strategies.base import RoundContext
    from trainer.units.silo.dpsgd import SiloMechanism

SILO_HELLO = "query.gdpfed_silo_hello"
SILO_TRAIN = "train.gdpfed_silo_train"
SILO_SELECT = "train.gdpfed_silo_select"
NODE_SILO = "gdpfed-silo"  # node config: the silo this node is (an id of the plan's silos)

REQUEST = "gdpfed.silo"
ROWS = "gdpfed.silo_rows"
DONE = "gdpfed.silo_done"  # node state: the last (round, pass) trained and the last selection round

Log = Callable[[str], None]


# ----------------------------------------------------------------------------- node side


def _read_silo_plan(path: Path) -> tuple[SiloSamplePlan, str]:
    # start-up time: the plan schema only when a message needs it
    from planner.units import load_plan_document
    from planner.units.silo_sample import SiloSamplePlan

    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError("gdpfed-plan", f"cannot read the plan {path}: {exc}") from None
    plan = load_plan_document(document)
    if not isinstance(plan, SiloSamplePlan):
        raise ProtocolError(f"this node holds a {plan.privacy_unit} plan, not a silo plan")
    return plan, fingerprint(plan.model_dump(mode="json"))  # as trainer.flower.client_app.plan_fingerprint


def silo_index(plan: SiloSamplePlan, node: NodeSettings, node_config: Any) -> int:
    """The plan's index of the silo this node is: its ``gdpfed-silo`` id, or in simulation its ``partition-id``."""
    silo = node_config.get(NODE_SILO)
    ids = [s.id for s in plan.silos]
    if silo in (None, ""):
        if not node.simulation:
            raise InvalidInputError(NODE_SILO, "the node config needs gdpfed-silo (the plan's id of this node's silo)")
        index = node.require_partition()
        if index >= len(ids):
            raise InvalidInputError(NODE_PARTITION, f"{index} is not a silo of the plan's {len(ids)}")
        return index
    if str(silo) not in ids:
        raise InvalidInputError(NODE_SILO, f"{silo!r} is not a silo of the plan")
    return ids.index(str(silo))


@lru_cache(maxsize=4)
def _silo_workspace(config_json: str, sizes: tuple[int, ...], device: str) -> tuple[Any, Any, Any]:
    # start-up time: a node loads torch, its data and the model only for its first pass
    from trainer.data.silos import load_silo_data
    from trainer.device import choose_device
    from trainer.models import build_model
    from trainer.run.config import TrainConfig

    config = TrainConfig.model_validate_json(config_json)
    chosen = choose_device(device)
    data = load_silo_data(config.dataset, list(sizes), seed=config.seed)
    model = build_model(config.model, data.train, seed=config.seed, **config.model_options).to(chosen)
    return data, model, chosen


class SiloNode:
    """A silo node's side: hello, its DP-SGD passes and its private selections."""

    def __init__(self, bundle_dir: Path) -> None:
        self.bundle_dir = bundle_dir

    def own_plan(self, node: NodeSettings) -> tuple[SiloSamplePlan, str]:
        return _read_silo_plan(node.plan_path or self.bundle_dir / "plan.json")

    def hello(self, content: RecordDict, context: Context) -> RecordDict:
        node = NodeSettings.from_node_config(context.node_config)
        plan, plan_print = self.own_plan(node)
        silo = plan.silos[silo_index(plan, node, context.node_config)].id
        return RecordDict({messages.REPLY: ConfigRecord({"silo": silo, "plan_fingerprint": plan_print})})

    def _engine(self, context: Context, request: ConfigRecord) -> tuple[Any, RoundContext, Any]:
        """(this silo's one-row DpSgdEngine, the round's context, its device), after the checks."""
        # start-up time: a node loads the trainer (torch) only when a message needs it
        from planner.units import silo_sample
        from trainer.flower.settings import train_config
        from trainer.strategies.base import RoundContext
        from trainer.units.silo.dpsgd import DpSgdEngine, SiloMechanism

        node = NodeSettings.from_node_config(context.node_config)
        plan, plan_print = self.own_plan(node)
        if messages._str(request, "plan_fingerprint") != plan_print:
            raise ProtocolError("the request belongs to another plan than this node's copy")
        # the node's own plan is within every silo's budget; its stated figures are the ServerApp's
        # concern (gdpfed flower app warned about them), not composed again for every message
        silo_sample.verify(plan, understated=None)
        global_round = messages._int(request, "global_round")
        end = plan.start_round + plan.rounds
        if not plan.start_round <= global_round < end:
            raise ProtocolError(f"round {global_round} is outside the plan's rounds [{plan.start_round}, {end})")
        config = train_config(context.run_config)
        k = silo_index(plan, node, context.node_config)
        data, model, device = _silo_workspace(config.model_dump_json(), tuple(s.num_samples for s in plan.silos), node.device)
        inside = config.strategy_options.get("prox_inside_clip", False)
        # the silo's rows of the run's silo dataset: its partition-id, by default its index in the plan
        engine = DpSgdEngine(model, data.train, [k if node.partition_id is None else node.partition_id],
                             SiloMechanism.from_plan(plan), lr=config.lr, prox_inside_clip=bool(inside), silos=[k],
                             secret=not node.simulation)
        ctx = RoundContext(round_index=global_round - plan.start_round, global_round=global_round, seed=config.seed)
        return engine, ctx, device

    @staticmethod
    def _done(context: Context) -> ConfigRecord:
        return context.state.config_records.get(DONE) or ConfigRecord({"round": -1, "pass": -1, "selected": -1})

    def train(self, content: RecordDict, context: Context) -> RecordDict:
        import torch

        request = content.config_records[REQUEST]
        engine, ctx, device = self._engine(context, request)
        pass_index = messages._int(request, "pass_index")
        done = self._done(context)
        last = (messages._int(done, "round"), messages._int(done, "pass"))
        if (ctx.global_round, pass_index) <= last:
            raise ProtocolError(
                f"this silo already ran pass {last[1]} of round {last[0]}; each pass runs once, in order"
            )
        rows = content.array_records[ROWS]
        start = torch.from_numpy(np.array(rows["start"].numpy())).to(device)[None]
        anchor = torch.from_numpy(np.array(rows["anchor"].numpy())).to(device)[None] if "anchor" in rows else None
        prox = messages._float(request, "prox")
        trained = engine.train(ctx, start, anchor=anchor, prox=prox, pass_index=pass_index)
        context.state[DONE] = ConfigRecord({"round": ctx.global_round, "pass": pass_index,
                                            "selected": messages._int(done, "selected")})
        return RecordDict({ROWS: ArrayRecord({"trained": Array(np.ascontiguousarray(trained[0].detach().cpu().numpy()))})})

    def select(self, content: RecordDict, context: Context) -> RecordDict:
        import torch

        request = content.config_records[REQUEST]
        engine, ctx, device = self._engine(context, request)
        done = self._done(context)
        selected = messages._int(done, "selected")
        if ctx.global_round <= selected:
            raise ProtocolError(f"this silo already selected a cluster in round {selected}")
        candidates = torch.from_numpy(np.array(content.array_records[ROWS]["candidates"].numpy()))
        candidates = candidates.to(device)
        chosen = engine.select_clusters(ctx, candidates[:1], candidates, ctx.round_index)
        context.state[DONE] = ConfigRecord({"round": messages._int(done, "round"), "pass": messages._int(done, "pass"),
                                            "selected": ctx.global_round})
        return RecordDict({messages.REPLY: ConfigRecord({"cluster": int(chosen[0])})})


def register_silo_handlers(app: Any, bundle_dir: Path, handler: Callable[[Callable[..., RecordDict]], Any]) -> None:
    """Add the silo messages to the bundle's ClientApp (``trainer.flower.client_app.build_client_app``)."""
    node = SiloNode(bundle_dir)
    app.query(SILO_HELLO.split(".")[1])(handler(node.hello))
    app.train(SILO_TRAIN.split(".")[1])(handler(node.train))
    app.train(SILO_SELECT.split(".")[1])(handler(node.select))


# ----------------------------------------------------------------------------- server side


@dataclass
class SiloMembership(NodeRoster["SiloSamplePlan"]):
    """Which node is which silo: learnt with ``SILO_HELLO`` (the first node to claim a silo holds it; ``NodeRoster``)."""

    nodes: dict[str, int] = field(default_factory=dict)  # silo id -> node id

    hello: ClassVar[str] = SILO_HELLO

    def met(self) -> set[int]:
        return set(self.nodes.values())

    def admit(self, node: int, record: ConfigRecord) -> str | None:
        silo = str(record["silo"])
        if silo not in {s.id for s in self.plan.silos}:
            return f"declares silo {silo!r}, not in the plan"
        if silo in self.nodes:
            return f"declares silo {silo!r}, which node {self.nodes[silo]} is"
        self.nodes[silo] = node
        return None

    def joined_line(self) -> str:
        return f"{len(self.nodes)} of {len(self.plan.silos)} silo(s) joined: " + ", ".join(sorted(self.nodes))


class RemoteSiloEngine:
    """``DpSgdEngine``'s interface for the silo strategies, each silo's pass and selection run by its node.

    ``mechanism`` is the server's copy of the plan's (public: sizes, selection rounds,
    clusters); the nodes use their own. ``missing[round]``: the silos that did not answer
    in that round (their rows were returned unchanged).
    """

    def __init__(self, grid: Grid, membership: SiloMembership, mechanism: SiloMechanism, *, timeout: float,
                 log: Log = print, gradient_path: str | None = None) -> None:
        self.gradient_path = gradient_path  # the nodes' (they build the server's model and engine)
        self.grid = grid
        self.membership = membership
        self.mechanism = mechanism
        self.timeout = timeout
        self.log = log
        self.missing: dict[int, set[str]] = {}
        self._spent: set[tuple[int, int]] = set()
        self._selected: set[int] = set()
        self._choices = np.zeros(self.num_silos, dtype=np.int64)

    @property
    def num_silos(self) -> int:
        return len(self.mechanism.sampling_rates)

    def _exchange(self, ctx: RoundContext, kind: str, requests: dict[int, RecordDict]) -> dict[int, RecordDict]:
        """Send silo k's request to its node; the answered contents by silo index."""
        self.membership.refresh()
        ids = [s.id for s in self.membership.plan.silos]
        route: dict[int, int] = {}
        batch = []
        for k, content in requests.items():
            node = self.membership.nodes.get(ids[k])
            if node is None:
                continue
            route[node] = k
            batch.append(Message(content, node, kind, ttl=self.timeout, group_id=str(ctx.global_round)))
        answered: dict[int, RecordDict] = {}
        for reply in self.grid.send_and_receive(batch, timeout=self.timeout) if batch else []:
            node = int(reply.metadata.src_node_id)
            if node not in route or route[node] in answered:
                continue
            if reply.has_error():
                self.log(f"round {ctx.global_round}: silo {ids[route[node]]} (node {node}) failed at {kind}: "
                         f"{reply.error.reason}")
                continue
            answered[route[node]] = reply.content
        lost = {ids[k] for k in requests if k not in answered}
        if lost:
            self.missing.setdefault(ctx.global_round, set()).update(lost)
            self.log(f"round {ctx.global_round}: silo(s) {', '.join(sorted(lost))} did not answer {kind}; "
                     "their models stay as they were")
        return answered

    def _request(self, ctx: RoundContext, **fields: Any) -> ConfigRecord:
        return ConfigRecord({"plan_fingerprint": self.membership.plan_fingerprint, "global_round": ctx.global_round,
                             **fields})

    def train(self, ctx: RoundContext, start: torch.Tensor, *, anchor: torch.Tensor | None = None,
              prox: float = 0.0, pass_index: int = 0) -> torch.Tensor:
        """Pass ``pass_index`` of every silo's DP-SGD, each on its node (``DpSgdEngine.train``'s contract)."""
        import torch

        if not 0 <= pass_index < self.mechanism.passes:
            raise InvalidInputError("pass_index", f"the plan runs {self.mechanism.passes} DP-SGD pass(es) per round, got pass {pass_index}")
        if prox < 0:
            raise InvalidInputError("prox", f"must be non-negative, got {prox}")
        if start.shape[0] != self.num_silos:
            raise ValueError(f"start has {start.shape[0]} rows for {self.num_silos} silos")
        if (ctx.global_round, pass_index) in self._spent:
            raise RuntimeError(f"DP-SGD pass {pass_index} ran twice in round {ctx.global_round}: that would spend more than the plan")
        self._spent.add((ctx.global_round, pass_index))
        centre = None if anchor is None else anchor.detach().expand_as(start)
        requests = {}
        for k in range(self.num_silos):
            rows = {"start": Array(np.ascontiguousarray(start[k].detach().cpu().numpy()))}
            if centre is not None:
                rows["anchor"] = Array(np.ascontiguousarray(centre[k].cpu().numpy()))
            requests[k] = RecordDict({REQUEST: self._request(ctx, pass_index=pass_index, prox=float(prox)),
                                      ROWS: ArrayRecord(rows)})
        trained = start.detach().clone()
        for k, content in self._exchange(ctx, SILO_TRAIN, requests).items():
            row = np.asarray(content.array_records[ROWS]["trained"].numpy())
            if row.shape != (start.shape[1],):
                self.log(f"round {ctx.global_round}: silo {k} answered a model of shape {row.shape}; ignored")
                continue
            trained[k] = torch.from_numpy(row).to(trained.device, trained.dtype)
        return trained

    def select_clusters(self, ctx: RoundContext, start: torch.Tensor, candidates: torch.Tensor, in_round: int) -> np.ndarray:
        """Each silo's private cluster choice, made on its node (``DpSgdEngine.select_clusters``' contract);
        a silo that does not answer keeps its last choice."""
        if in_round >= self.mechanism.selection_rounds:
            raise RuntimeError(f"the plan accounts for cluster selection in its first {self.mechanism.selection_rounds} rounds only")
        if ctx.global_round in self._selected:
            raise RuntimeError(f"cluster selection ran twice in round {ctx.global_round}")
        self._selected.add(ctx.global_round)
        shared = ArrayRecord({"candidates": Array(np.ascontiguousarray(candidates.detach().cpu().numpy()))})
        requests = {k: RecordDict({REQUEST: self._request(ctx), ROWS: shared}) for k in range(self.num_silos)}
        for k, content in self._exchange(ctx, SILO_SELECT, requests).items():
            choice = content.config_records[messages.REPLY]["cluster"]
            if isinstance(choice, int) and not isinstance(choice, bool) and 0 <= choice < candidates.shape[0]:
                self._choices[k] = choice
        return self._choices.copy()

    def state_dict(self) -> dict[str, Any]:
        return {}


def silo_round_engine(strategy: Any, dim: int, remote: RemoteSiloEngine) -> Any:
    """The simulator's ``SiloRoundEngine`` whose outcome says how many silos answered."""
    # start-up time: the silo run imports torch
    from trainer.units.silo.run import SiloRoundEngine

    class FlowerSiloRoundEngine(SiloRoundEngine):
        def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]:
            new_global, outcome = super().run(ctx, global_params)
            outcome.survived = {"silos": remote.num_silos - len(remote.missing.get(ctx.global_round, ()))}
            outcome.dropped_before_masking = remote.num_silos - outcome.survived["silos"]
            return new_global, outcome

    return FlowerSiloRoundEngine(strategy, dim)


def prepare_flower_silo_run(grid: Grid, plan: SiloSamplePlan, plan_document: dict[str, Any], config: Any, out: Path,
                            options: Any, *, dataset: Any = None, log: Log = print) -> tuple[Any, SiloMembership]:
    """``gdpfed train``'s preparation of the silo plan (``trainer.units.silo.run.prepare_silo_run``,
    through ``prepare_run``) with each silo's DP-SGD on its node; the membership to wait for."""
    # start-up time: the ServerApp loads the trainer (torch) only when a run starts
    from trainer.flower.engine import refuse_successor_plan
    from trainer.runner import prepare_run

    membership = SiloMembership(grid, plan, fingerprint(plan.model_dump(mode="json")), timeout=options.step_timeout, log=log)
    remotes: list[RemoteSiloEngine] = []

    def remote(local: Any) -> RemoteSiloEngine:
        # the server's DpSgdEngine checked the data and model; the nodes run the passes
        remotes.append(RemoteSiloEngine(grid, membership, local.mechanism, timeout=options.step_timeout, log=log,
                                        gradient_path=local.gradient_path))
        return remotes[-1]

    prepared = prepare_run(plan, plan_document, config, out, resume=options.resume, device=options.device,
                           dataset=dataset, silo_engine=remote)
    prepared.engine = silo_round_engine(prepared.strategy, prepared.engine.dim, remotes[-1])

    def engine_factory(for_plan: Any, for_strategy: Any, _population: Any, dim: int, _config: Any,
                       _rounds: int, *, verified: Any = None) -> Any:
        # a re-plan stops the run: the silos' nodes run their passes with the old plan's sigma_k
        # while the successor's ledger would count the new one
        refuse_successor_plan(plan, for_plan)
        return silo_round_engine(for_strategy, dim, remotes[-1])

    prepared.engine_factory = engine_factory
    return prepared, membership
