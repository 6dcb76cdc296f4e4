"""What differs per privacy unit on Flower, in one record per training mechanism (docs/flower.md §2 "Other units").

A ``FlowerUnit`` holds what ``gdpfed flower`` and the ServerApp ask of a plan's unit: the
run's preparation on the Grid (``prepare``, in ``trainer.flower.server_app``), the
strategy check of ``gdpfed flower app`` (``check_strategy``), the nodes a local or
loopback deployment starts (``simulation_nodes``) and the check of their count
(``check_node_count``). ``trainer.flower.server_app.FLOWER_MECHANISMS`` keys the records
by the unit's mechanism (``trainer.units.registry.unit_for(plan).mechanism``), so no caller
compares a plan's ``privacy_unit``: a new unit on Flower is one record (issue 28's rule,
``tests/foundation/test_unit_names.py``).

This module imports neither flwr nor torch: the per-unit checks run before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accounting.errors import InvalidInputError
from trainer.choices import silo_dataset_key, unknown_silo_dataset

NodeConfig = dict[str, str | int | bool]


@dataclass(frozen=True)
class FlowerUnit:
    """One training mechanism on Flower (docs/flower.md §2, §3, §9, §10)."""

    # (grid, plan, plan_document, config, out, options, *, dataset, log, engine_hook)
    # -> (prepared run, membership to wait for)
    prepare: Callable[..., tuple[Any, Any]]
    # (plan, config): refuse a strategy or strategy option (a client plan: a noise mechanism)
    # the plan's unit does not run
    check_strategy: Callable[[Any, Any], None]
    # (plan, count, seed): node configs of a local or loopback deployment
    simulation_nodes: Callable[[Any, int | None, int], list[NodeConfig]]
    # (plan, count, seed): refuse a --nodes that trains nothing; a warning line or None
    check_node_count: Callable[[Any, int | None, int], str | None]


def check_registered_strategy(plan: Any, config: Any) -> None:
    """A client or metric plan's strategy from the strategy registry (which knows each
    strategy's unit), with options it takes."""
    # start-up time: the strategy registry imports the units' strategies (torch)
    from trainer.units.strategies import registered_strategy

    registered_strategy(config, plan)  # refuse an unknown strategy, a bad option or another unit now


def check_client_settings(plan: Any, config: Any) -> None:
    """A client plan's strategy (``check_registered_strategy``) and noise mechanism: under
    skellam the plan's discrete blocks, checked as the run will check them
    (``trainer.units.client.discrete.run_discrete_pools``, at the plan's ``model_dim``; the
    run checks the model's again), so ``gdpfed flower app`` refuses a plan planned without
    ``report_discrete: true`` (or, with adaptive clipping, without the ``adaptive_clip`` block
    that gives the blocks their count coordinate) before it writes the bundle (docs/flower.md §2)."""
    check_registered_strategy(plan, config)
    # start-up time: the discrete derivation imports the planner's calibration and numpy
    from trainer.flower.settings import run_mechanism
    from trainer.units.client.discrete import run_discrete_pools

    adaptive = bool(config.strategy_options.get("adaptive_clip"))
    run_discrete_pools(plan, plan.scenario.model_dim, run_mechanism(config, plan), adaptive=adaptive)


def check_silo_strategy(plan: Any, config: Any) -> None:
    """A silo plan runs its own method's strategy (as ``gdpfed train``), with options it takes,
    on one of the silo datasets (a fixed list, unlike a client plan's, which may be a path on
    the ServerApp's host)."""
    if silo_dataset_key(config.dataset) is None:
        raise InvalidInputError("dataset", unknown_silo_dataset(config.dataset))
    # start-up time: the silo strategies import torch
    from trainer.units.silo.strategies import STRATEGIES

    if config.strategy not in ("plan", plan.method):
        raise InvalidInputError(
            "strategy", f"a silo plan runs its own method's strategy ({plan.method}); --strategy {config.strategy} would "
            "run DP-SGD passes the plan did not count"
        )
    takes = (*STRATEGIES[plan.method].option_names, "prox_inside_clip")
    unknown = sorted(set(config.strategy_options) - set(takes))
    if unknown:
        raise InvalidInputError(
            "strategy-option", f"{plan.method} takes no option {unknown[0]!r} (it takes: {', '.join(takes)})"
        )


def client_nodes(plan: Any, count: int | None, seed: int) -> list[NodeConfig]:
    """Node configs for ``count`` nodes (default the plan's population) of a plan with client
    groups (client and metric plans): node i is client i of the dataset, in the group
    ``gdpfed train`` deals it into, with real (secret) noise."""
    # start-up time: the group dealing imports numpy only when nodes are dealt
    from trainer.data.groups import assign_groups

    total = plan.scenario.total_clients
    count = total if count is None else count
    if not 1 <= count <= total:
        raise InvalidInputError("nodes", f"must be in [1, {total}] (the plan's population), got {count}")
    labels = assign_groups([g.num_clients for g in plan.groups], total, seed)
    nodes: list[NodeConfig] = []
    for client in range(total):
        if labels[client] >= 0 and len(nodes) < count:
            nodes.append({"gdpfed-group": plan.groups[labels[client]].id, "partition-id": client})
    return nodes


def silo_nodes(plan: Any, count: int | None, seed: int) -> list[NodeConfig]:
    """One node per silo: node k is silo k and holds the dataset's silo k (``count`` of them,
    default every silo)."""
    silos = len(plan.silos)
    count = silos if count is None else count
    if not 1 <= count <= silos:
        raise InvalidInputError("nodes", f"must be in [1, {silos}] (one node per silo of the plan), got {count}")
    return [{"gdpfed-silo": silo.id, "partition-id": k} for k, silo in enumerate(plan.silos[:count])]


def nodes_for_thresholds(plan: Any, seed: int) -> dict[str, int]:
    """Per pool that samples anyone: the smallest ``--nodes`` whose nodes (dealt as
    ``client_nodes`` deals them, in client order) put ``m_P`` of them in the pool's
    groups. With fewer the pool can never gather ``m_P`` sampled nodes, so it aborts every
    round (docs/flower.md §2 step 3)."""
    # start-up time: the group dealing imports numpy only when nodes are dealt
    from trainer.data.groups import assign_groups

    total = plan.scenario.total_clients
    labels = assign_groups([g.num_clients for g in plan.groups], total, seed)
    pool_of = {group.id: group.pool for group in plan.groups}
    needed: dict[str, int] = {}
    seen: dict[str, int] = {}
    dealt = 0
    live = {pool.id: pool.secagg_threshold for pool in plan.pools if pool.expected_clients > 0}
    for label in labels:
        if label < 0:
            continue
        dealt += 1
        pool = pool_of[plan.groups[label].id]
        seen[pool] = seen.get(pool, 0) + 1
        if pool in live and pool not in needed and seen[pool] >= live[pool]:
            needed[pool] = dealt
    return needed


def check_client_node_count(plan: Any, count: int | None, seed: int) -> str | None:
    """Refuse ``--nodes`` below what any pool needs to reach its threshold (every round
    would abort: ``InvalidInputError("nodes")``); a warning line when only some pools are
    short (their groups' nodes train in no round); ``None`` when every pool can release
    (docs/flower.md §3)."""
    needed = nodes_for_thresholds(plan, seed)
    if count is None or not needed or count >= max(needed.values()):
        return None
    short = sorted((pool for pool, n in needed.items() if count < n), key=lambda pool: needed[pool])
    detail = ", ".join(f"{pool} needs {needed[pool]} nodes" for pool in short)
    if len(short) == len(needed):
        raise InvalidInputError(
            "nodes",
            f"--nodes {count} gives no pool its secure-aggregation threshold m_P ({detail}), so every round "
            f"would abort and nothing would train: with --nodes {min(needed.values())} or more a pool can release, "
            "but with exactly m_P of its nodes present only in rounds that sample all of them; "
            f"{max(needed.values())} for every pool (default: the plan's population, {plan.scenario.total_clients})",
        )
    return (
        f"warning: with --nodes {count} pool(s) {', '.join(short)} can never reach m_P ({detail}) and abort "
        f"every round, so their groups' nodes train in none; with --nodes {max(needed.values())} every pool "
        "can release, but only in rounds that sample at least m_P of its nodes"
    )


def check_silo_node_count(plan: Any, count: int | None, seed: int) -> str | None:
    """A warning when some silos have no node (their models never train); else ``None``."""
    if count is None or count >= len(plan.silos):
        return None
    return (f"warning: with --nodes {count} silo(s) {', '.join(s.id for s in plan.silos[count:])} have no node; "
            "their models never train (the ledger counts every round for every silo)")


def check_metric_node_count(plan: Any, count: int | None, seed: int) -> str | None:
    """``None``: a metric plan has no pools and no secure-aggregation threshold to reach."""
    return None
