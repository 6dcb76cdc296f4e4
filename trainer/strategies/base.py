"""The strategy seam: what a federated algorithm decides, and what it may not touch.

(docs/trainer.md §Strategies.) One round, as the round engine (``trainer/units/client/rounds.py``)
runs it::

    selection = strategy.configure_round(ctx, population)        # who is sampled
    updates   = strategy.client_update(ctx, global_params, ...)  # local objective, client state
    -- engine: clip to C_g, add noise share, fixed-point encode, secure aggregation per pool --
    combined  = strategy.aggregate(ctx, pool_sums)               # per-pool weights, combination
    new       = strategy.server_update(ctx, global_params, combined)

The privacy mechanism (clipping, noise shares, secure aggregation, the ``m_P``
threshold) sits *between* ``client_update`` and ``aggregate`` and belongs to the engine,
so no strategy can weaken it: a strategy sees individual clients only before they are
clipped and noised, and the server side sees only released pool sums.

How the roadmap's methods fit this seam (none of them is built here):

- per-client persistent state (Ditto, MR-MTL personal models): ``client_update`` reads
  and writes ``self``-held per-client tensors; they never leave the client, and
  ``state_dict`` checkpoints them (tests/trainer/test_strategies.py has a toy one);
- several global models (clustered methods): the flat "global parameter" vector is the
  concatenation of the cluster models; a client's update is non-zero only in its
  cluster's block, so one secure-aggregation session per pool still hides membership;
- per-pool aggregation weights (FedHDP's r): ``aggregate`` weights each pool sum;
- sample-level DP-SGD inside a client (cross-silo, MR-MTL) and local metric privacy:
  other privacy units, whose plans carry the mechanism's numbers and whose trainer
  mechanism, not the strategy, draws the noise (docs/architecture.md §Privacy units); a
  strategy declares the unit it runs on (``StrategySpec.privacy_unit``);
- its own evaluation (personal models, per-group accuracy): ``evaluate``;
- opt-out groups: pools with ``noise_multiplier`` 0 are handled by the engine (no noise,
  still secure aggregation); a strategy needs nothing special.

A strategy's selection must stay Poisson with the plan's ``q_g`` for the privacy ledger
(``trainer/units/client/tally.py``) to be right; one that changes selection changes the mechanism
and must be accounted for differently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from accounting.errors import InvalidInputError, validation_error_location, validation_error_message
from accounting.validation import InputModel
from planner.schema import Plan, PlanDocument

if TYPE_CHECKING:
    from trainer.engines.evaluate import ClientScores

# Purposes of the per-round random generators (arbitrary, fixed, distinct constants).
PURPOSE_SAMPLING = 1
PURPOSE_DROPOUT = 2
PURPOSE_CLIENT = 3
PURPOSE_SECAGG = 4
# Reserved here, once, for the mechanisms the next strategies bring (design notes §1
# "A4"): per-example DP-SGD noise and Poisson masks, the Laplace (metric-privacy) draw,
# k-means tie-breaking. A fixed number per purpose keeps every draw a function of
# (seed, round, purpose, keys), so a resumed run draws what an uninterrupted one would.
PURPOSE_DPSGD = 7
PURPOSE_LAPLACE = 8
PURPOSE_KMEANS = 9
# The discrete mechanism's public rotation signs of a pool's round (docs/secure-aggregation.md §Discrete noise).
PURPOSE_ROTATION = 10


@dataclass(frozen=True)
class Population:
    """Which clients of the dataset belong to which plan group (``group id -> indices``)."""

    group_clients: Mapping[str, np.ndarray]

    def clients(self, group_id: str) -> np.ndarray:
        return self.group_clients[group_id]


@dataclass(frozen=True)
class RoundContext:
    """Where a round is: its index within the plan, its global index and the run seed.

    Every random draw of the round comes from ``rng(purpose, *keys)``, a generator seeded
    by ``(seed, global_round, purpose, *keys)``: the round index is the whole RNG state,
    so a resumed run draws exactly what an uninterrupted one would.
    """

    round_index: int
    global_round: int
    seed: int

    def seed_for(self, purpose: int, *keys: int) -> int:
        """A non-negative 64-bit integer seed for ``(seed, global_round, purpose, *keys)``."""
        sequence = np.random.SeedSequence([self.seed, self.global_round, purpose, *keys])
        return int(sequence.generate_state(1, dtype=np.uint64)[0])

    def rng(self, purpose: int, *keys: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.global_round, purpose, *keys])


def poisson_sample(rng: np.random.Generator, clients: np.ndarray, sampling_rate: float) -> np.ndarray:
    """Each client independently with probability ``sampling_rate`` (Poisson sampling)."""
    if sampling_rate <= 0 or clients.size == 0:
        return clients[:0]
    return clients[rng.random(clients.size) < sampling_rate]


class Strategy(ABC):
    """A federated algorithm as four decisions plus its checkpointable state."""

    plan: Plan

    @abstractmethod
    def configure_round(self, ctx: RoundContext, population: Population) -> dict[str, np.ndarray]:
        """The clients sampled this round, per group id (dataset client indices)."""

    @abstractmethod
    def client_update(
        self,
        ctx: RoundContext,
        global_params: torch.Tensor,
        clients: np.ndarray,
        groups: list[str],
    ) -> torch.Tensor:
        """The raw update ``Delta_i`` of each client (row ``i`` for ``clients[i]`` of group
        ``groups[i]``), shape ``[n, d]``. The engine clips and noises these rows."""

    @abstractmethod
    def aggregate(
        self, ctx: RoundContext, pool_sums: Mapping[str, torch.Tensor | None], dim: int
    ) -> torch.Tensor:
        """Combine the released pool sums (float64 ``[dim]``; ``None`` = the pool aborted)
        into one ``[dim]`` update."""

    @abstractmethod
    def server_update(self, ctx: RoundContext, global_params: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        """The next global parameters."""

    def evaluate(self, ctx: RoundContext, global_params: torch.Tensor, dataset: Any) -> dict[str, float] | None:
        """Numbers of the strategy's own evaluation (personal models, per-group accuracy,
        ...) on rounds the run evaluates, merged into ``rounds.jsonl`` (``metrics``) and
        ``summary.json`` (``final_metrics``); ``None`` (the default): nothing beyond the
        run's evaluation of ``global_params`` on the test set."""
        return None

    def run_warnings(self, dataset: Any) -> list[str]:
        """What the run should warn about before round 0, given its data: a report the
        strategy cannot give with this data, say (``FedHDPStrategy`` without per-client test
        rows). Printed and kept in ``summary.json``'s ``warnings``; none by default."""
        return []

    # Where clients run apart from the server (Flower nodes), the executor sets this to score
    # the clients' own models where they live (docs/flower.md §2, "Per-client state"); None:
    # the strategy scores them itself (``score_clients``).
    remote_scores: Callable[[Sequence[int], torch.Tensor, Any], ClientScores] | None = None

    def client_state(self, client: int) -> dict[str, torch.Tensor]:
        """What the strategy keeps for ``client`` between rounds (a personal model, ...).

        Where every client runs in its own process (a Flower node), the client keeps it
        itself, in its persistent state, and hands it back with ``load_client_state``
        before the strategy trains or scores it (docs/flower.md §2, "Per-client state").
        Nothing by default."""
        return {}

    def load_client_state(self, client: int, state: Mapping[str, torch.Tensor]) -> None:
        """Make ``state`` (``client_state``'s, or empty: none yet) ``client``'s state."""
        if state:
            raise ValueError(f"{type(self).__name__} keeps no per-client state but was handed {sorted(state)}")

    def score_clients(self, clients: Sequence[int], global_params: torch.Tensor, dataset: Any) -> ClientScores | None:
        """Each of ``clients``' own model (a personal model, the global one where it has none)
        on its own test rows; ``None`` (the default): the strategy has no per-client models."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Checkpointable state (tensors and plain values only); stateless by default."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        if state:
            raise ValueError(f"{type(self).__name__} is stateless but the checkpoint holds {sorted(state)}")


@dataclass(frozen=True)
class ClientRelease:
    """What local-release clients hand the engine: each client's trained model and the
    point it started from (rows ``[m, n]``, ``n`` one model's size). The engine computes
    the update ``trained - base`` for the radius rule and releases ``trained + noise``
    (docs/metric-privacy.md §5)."""

    trained: torch.Tensor
    base: torch.Tensor


class LocalReleaseStrategy(Strategy):
    """A strategy whose clients release individual noised models (the ``metric_local``
    unit's mechanism, ``trainer/units/metric/rounds.py``), not pool sums.

    ``client_release`` trains; the engine noises each row (the strategy never draws the
    noise); ``aggregate_released`` sees only released rows and returns the next
    parameters. The sum-based steps of ``Strategy`` do not exist on this path and refuse
    to run, so the client-level engine can never drive such a strategy.
    """

    @abstractmethod
    def initial_params(self) -> torch.Tensor:
        """The run's first parameter vector (e.g. k hypotheses, concatenated)."""

    @abstractmethod
    def client_release(
        self, ctx: RoundContext, global_params: torch.Tensor, clients: np.ndarray, groups: list[str]
    ) -> ClientRelease:
        """Each client's trained model and its start point, rows in ``clients`` order."""

    @abstractmethod
    def aggregate_released(
        self, ctx: RoundContext, global_params: torch.Tensor, released: torch.Tensor
    ) -> torch.Tensor:
        """The next parameters from the released rows (float64 ``[m, n]``)."""

    def _no_pool_sums(self) -> InvalidInputError:
        return InvalidInputError(
            "strategy",
            f"{type(self).__name__} releases individual noised models (local metric privacy); "
            "it never runs under the client-level mechanism's pool sums",
        )

    def client_update(self, ctx: RoundContext, global_params: torch.Tensor, clients: np.ndarray, groups: list[str]) -> torch.Tensor:
        raise self._no_pool_sums()

    def aggregate(self, ctx: RoundContext, pool_sums: Mapping[str, torch.Tensor | None], dim: int) -> torch.Tensor:
        raise self._no_pool_sums()

    def server_update(self, ctx: RoundContext, global_params: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        raise self._no_pool_sums()


class NoOptions(InputModel):
    """The options model of a strategy without options: any option is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class StrategySpec:
    """One entry of the strategy registry (``trainer.units.strategies.STRATEGIES``).

    ``strategy(plan, model, dataset, *, engine, local, device, server_lr,
    server_momentum, **options)`` builds it; ``options`` is the pydantic model of those
    extra keywords (``extra="forbid"``, so a misspelt option is an error). It runs on
    plans of ``privacy_unit`` whose method is in ``plan_methods`` (``None``: any method
    of that unit), on data of a task in ``tasks`` (``trainer.data.dataset.Task``: its
    loss and its evaluation assume it); an experiment that names only the strategy plans
    with ``default_plan_method``.
    """

    name: str
    summary: str
    strategy: type[Strategy]
    options: type[BaseModel] = NoOptions
    privacy_unit: str = "client"
    plan_methods: tuple[str, ...] | None = None
    default_plan_method: str = "gdpfed_plus"
    # keeps per-client state between rounds (personal models, ``Strategy.client_state``): on
    # Flower each node keeps its own client's in its persistent state (docs/flower.md §2)
    keeps_client_state: bool = False
    # the data it trains on: cross-entropy training and evaluation (argmax accuracy) need
    # integer labels, so a regression dataset under a classification strategy would train a
    # round and then fail in evaluation (docs/trainer.md §Strategies)
    tasks: tuple[str, ...] = ("classification", "next_char")

    def parse_options(self, values: Mapping[str, Any]) -> BaseModel:
        """``values`` validated by the options model; an error names the option.

        A boolean option (``adaptive_clip``, ``personalize``) is a JSON ``true``/``false``
        only: pydantic's lax mode would read ``1``, ``"yes"`` or ``"on"`` as true and turn
        a mechanism on that the user never asked for.
        """
        for key, value in values.items():
            field = self.options.model_fields.get(key)
            if field is not None and field.annotation is bool and not isinstance(value, bool):
                raise InvalidInputError(
                    f"strategy-option {key}", f"must be true or false, got {value!r} (strategy {self.name})"
                )
        try:
            return self.options.model_validate(dict(values))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            key = ".".join(validation_error_location(first.get("loc", ()))) or "options"
            raise InvalidInputError(f"strategy-option {key}", f"{validation_error_message(first)} (strategy {self.name})") from None

    def build(self, plan: PlanDocument, options: BaseModel, **common: Any) -> Strategy:
        """The strategy for ``plan`` with validated ``options`` and the run's ``common``
        arguments (``trainer.units.strategies.build_checked`` checks the plan and the
        data first)."""
        extra = {name: getattr(options, name) for name in type(options).model_fields}
        return self.strategy(plan, **common, **extra)  # type: ignore[call-arg]
