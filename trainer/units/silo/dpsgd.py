"""DP-SGD for all silos at once: the ``silo_sample`` unit's mechanism (docs/mrmtl.md §4).

Every silo k runs, per step s (all silos in one batched computation, ``torch.func``):

    S_k   = Poisson sample of the silo's examples, each with probability q_k
    g_i   = grad loss(w_k; x_i)                      per example (vmap over silos x examples)
    g~_k  = (sum_{i in S_k} g_i min(1, c / ||g_i||) + N(0, sigma_k^2 c^2 I)) / (q_k n_k)
    w_k  <- w_k - lr (g~_k + lambda (w_k - a_k))     (the prox term outside the clip)

``sigma_k``, ``c``, ``q_k`` and each silo's steps per pass are read from the plan by the
engine, never chosen by a strategy: a strategy only says where each silo starts, which
anchor ``a_k`` and weight ``lambda`` the data-independent prox term uses, and which of
the plan's passes it runs (``pass_index``; each at most once per round, so no strategy
can spend more than the plan). The denominator is the expected batch ``q_k n_k`` (= B),
fixed, so the sampled set's size is never released. Poisson sampling is real: each
step's sample is a Bernoulli(q_k) mask over the silo's examples, gathered into a padded
batch as large as the largest sample of the round (each step computes only up to its own
largest sample), so no sampled example is ever dropped.
``prox_inside_clip`` differentiates ``loss + lambda/2 ||w - a||^2`` per example and clips
that instead (the reference code's choice; docs/mrmtl.md §4).

The private cluster selection of ``ifca_mrmtl`` is the engine's too
(``select_clusters``): report-noisy-min of each candidate's training error rate with
Gumbel noise of scale ``2 (1 / n_k) / epsilon_sel`` (the exponential mechanism), once
per round in the plan's selection rounds.

Randomness: masks from ``ctx.rng(PURPOSE_DPSGD, MASKS, pass, silo)``, noise from a torch
generator seeded by ``ctx.seed_for(PURPOSE_DPSGD, NOISE, pass)`` drawing ``[K, d]`` per
step in order, selections from ``ctx.rng(PURPOSE_DPSGD, SELECTION, silo)``: a function of
the round, so a resumed run draws what an uninterrupted one would.

An engine may train only some of the plan's silos (``silos``: a Flower node trains its
own silo, docs/flower.md §9): its rows draw the masks, noise rows and selections the
whole plan's engine draws for those silos, so a node reproduces its row of
``gdpfed train`` exactly; ``secret`` draws them from ``os.urandom`` instead (a deployed
silo, whose server knows the run seed: which examples a step sampled and the noise must
stay the silo's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.engines.params import param_shapes, unflatten_params
from trainer.strategies.base import PURPOSE_DPSGD, RoundContext
from trainer.units.silo.ghost import chain_layers, ghost_clipped_sum, has_hooks

# Sub-keys of PURPOSE_DPSGD.
MASKS, NOISE, SELECTION = 1, 2, 3


@dataclass(frozen=True)
class SiloMechanism:
    """What the engine runs for each silo, read from a ``silo_sample`` plan (docs/mrmtl.md §2)."""

    sampling_rates: tuple[float, ...]
    noise_multipliers: tuple[float, ...]
    clip_norm: float
    steps_per_pass: tuple[int, ...]
    passes: int
    num_samples: tuple[int, ...]
    selection_epsilons: tuple[float | None, ...] = ()
    selection_rounds: int = 0
    clusters: int = 1
    # the plan's first global round: selection rounds count from it (a re-plan's from its own start)
    start_round: int = 0

    @classmethod
    def from_plan(cls, plan: Any) -> SiloMechanism:
        """The mechanism of a ``planner.units.silo_sample.SiloSamplePlan`` (verified by the caller)."""
        return cls(
            sampling_rates=tuple(s.sampling_rate for s in plan.silos),
            noise_multipliers=tuple(s.noise_multiplier for s in plan.silos),
            clip_norm=float(plan.scenario.clip_norm),
            steps_per_pass=tuple(s.steps_per_round // plan.overhead for s in plan.silos),
            passes=int(plan.overhead),
            num_samples=tuple(s.num_samples for s in plan.silos),
            selection_epsilons=tuple(s.selection_epsilon for s in plan.silos),
            selection_rounds=max((s.selection_rounds for s in plan.silos), default=0),
            clusters=int(plan.scenario.clusters),
            start_round=int(plan.start_round),
        )

    def only(self, silos: Sequence[int]) -> SiloMechanism:
        """The mechanism of the plan's silos ``silos`` (their indices, in that order)."""
        def pick(values: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(values[k] for k in silos) if values else values

        return SiloMechanism(
            sampling_rates=pick(self.sampling_rates), noise_multipliers=pick(self.noise_multipliers),
            clip_norm=self.clip_norm, steps_per_pass=pick(self.steps_per_pass), passes=self.passes,
            num_samples=pick(self.num_samples), selection_epsilons=pick(self.selection_epsilons),
            selection_rounds=self.selection_rounds, clusters=self.clusters,
        )


def poisson_masks(rng: np.random.Generator, num_examples: int, sampling_rate: float, steps: int) -> np.ndarray:
    """``[steps, num_examples]`` booleans, each example in each step with probability q."""
    return rng.random((steps, num_examples)) < sampling_rate


def check_model(model: nn.Module) -> None:
    """DP-SGD needs each example's gradient to depend on that example only: no batch norm."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise InvalidInputError(
                "model", f"{type(model).__name__} has batch normalisation, which mixes examples; "
                "per-example DP-SGD needs a model without it (mlp, cnn, lstm)"
            )


def example_loss(model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                 task: str) -> torch.Tensor:
    """One example's loss: cross-entropy, or ``(f(x) - y)^2 / 2`` for regression."""
    output = functional_call(model, params, (x[None],))
    if task == "regression":
        return 0.5 * (output.reshape(-1) - y.reshape(-1)).pow(2).sum()
    return F.cross_entropy(output, y[None])


def per_example_gradients(model: nn.Module, shapes: dict[str, torch.Size], task: str = "classification") -> Any:
    """``(W [K, d], x [K, P, ...], y [K, P], anchor [K, d], prox_inside) -> {name: [K, P, *shape]}``.

    ``vmap`` over silos of ``vmap`` over examples of ``grad`` of one example's loss
    (with ``lambda/2 ||w - a||^2`` added when the prox term goes inside the clip).
    The gradient is taken with respect to the named parameter tensors and stays split
    by parameter (``clipped_sum`` reduces it without concatenating): differentiating
    through views of one flat vector would materialise a zero ``[K, P, d]`` tensor per
    parameter tensor in the backward pass, and concatenating copies ``[K, P, d]`` once
    more (together 90% of a 55k-parameter MLP's time; ``gdpfed bench dpsgd``).
    """

    def loss_one(named: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return example_loss(model, named, x, y, task)

    def loss_one_prox(named: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                      anchor: dict[str, torch.Tensor], prox: torch.Tensor) -> torch.Tensor:
        distance = sum((named[name] - anchor[name]).pow(2).sum() for name in named)
        return example_loss(model, named, x, y, task) + 0.5 * prox * distance

    plain = vmap(vmap(grad(loss_one), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
    with_prox = vmap(vmap(grad(loss_one_prox), in_dims=(None, 0, 0, None, None)), in_dims=(0, 0, 0, 0, None))

    def gradients(weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor, anchor: torch.Tensor,
                  prox_inside: float) -> dict[str, torch.Tensor]:
        named = unflatten_params(weights, shapes)
        if prox_inside:
            prox = torch.tensor(prox_inside, dtype=weights.dtype, device=weights.device)
            return dict(with_prox(named, x, y, unflatten_params(anchor, shapes), prox))
        return dict(plain(named, x, y))

    return gradients


def clipped_sum(per_example: Mapping[str, torch.Tensor], valid: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """``sum_i valid_i g_i min(1, c / ||g_i||)`` over examples: ``{name: [K, P, ...]} -> [K, d]``
    (``||g_i||`` over all of example i's parameters; the result in ``named_parameters`` order)."""
    tensors = list(per_example.values())
    lead = tensors[0].shape[:2]
    # one norm per parameter tensor, then over tensors (no [K, P, d]-sized temporary)
    norms = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(t.reshape(*lead, -1), dim=-1) for t in tensors]), dim=0)
    factors = torch.clamp(clip_norm / (norms + 1e-12), max=1.0) * valid.to(tensors[0].dtype)
    return torch.cat([torch.einsum("kp,kpd->kd", factors, t.reshape(*lead, -1)) for t in tensors], dim=-1)


@dataclass
class DpSgdEngine:
    """DP-SGD over a plan's silos (row k of every matrix is the plan's silo k, or silo
    ``silos[k]`` where ``silos`` names the silos this engine trains; ``mechanism`` is the
    whole plan's and is narrowed to them). ``secret``: masks, noise and selections from
    ``os.urandom``, not the run seed (module docstring)."""

    model: nn.Module
    dataset: FederatedDataset
    silo_clients: Sequence[int]
    mechanism: SiloMechanism
    lr: float
    prox_inside_clip: bool = False
    max_examples: int | None = None  # per-example gradients computed this many per silo at a time
    ghost_clipping: bool = True  # the fast path for chains of layers (docs/mrmtl.md §4.1); False: torch.func always
    silos: Sequence[int] | None = None  # the plan's silos this engine trains (default: all, in order)
    secret: bool = False
    _spent: set[tuple[int, int]] = field(default_factory=set, repr=False)
    _selected: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        check_model(self.model)
        self._plan_silos = len(self.mechanism.sampling_rates)
        self._keys = tuple(range(self._plan_silos)) if self.silos is None else tuple(int(k) for k in self.silos)
        if self.silos is not None:
            if not set(self._keys) <= set(range(self._plan_silos)) or len(set(self._keys)) != len(self._keys):
                raise InvalidInputError("silos", f"silos {list(self._keys)} are not distinct silos of the plan's {self._plan_silos}")
            self.mechanism = self.mechanism.only(self._keys)
        if len(self.silo_clients) != len(self.mechanism.sampling_rates):
            raise InvalidInputError("silos", f"the plan has {len(self.mechanism.sampling_rates)} silos, the data {len(self.silo_clients)}")
        for k, client in enumerate(self.silo_clients):
            have = int(self.dataset.client_indices[client].numel())
            if have != self.mechanism.num_samples[k]:
                raise InvalidInputError(
                    f"silos.{k}.num_samples",
                    f"the plan was made for {self.mechanism.num_samples[k]} examples, the silo's data has {have} "
                    "(q_k = B / n_k would be wrong)",
                )
        self._shapes = param_shapes(self.model)
        self._gradients = per_example_gradients(self.model, self._shapes, self.dataset.task)
        supported = self.ghost_clipping and not self.prox_inside_clip and self.dataset.task in ("classification", "regression")
        self._chain = chain_layers(self.model, self._shapes, self.dataset.input_shape) if supported else None

    @property
    def gradient_path(self) -> str:
        """``"ghost"`` where the clipped sums come from ``trainer.units.silo.ghost`` (a chain of
        supported layers without hooks, prox outside the clip), else ``"torch.func"``
        (per-example gradients)."""
        return "torch.func" if self._chain is None or has_hooks(self.model) else "ghost"

    @property
    def num_silos(self) -> int:
        return len(self.silo_clients)

    def _rng(self, ctx: RoundContext, *keys: int) -> np.random.Generator:
        if self.secret:
            return np.random.default_rng(int.from_bytes(os.urandom(32), "big"))
        return ctx.rng(PURPOSE_DPSGD, *keys)

    def _claim(self, key: tuple[int, int], what: str) -> None:
        if key in self._spent:
            raise RuntimeError(f"{what} ran twice in round {key[0]}: that would spend more than the plan")
        self._spent.add(key)

    def sample(self, ctx: RoundContext, pass_index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pass's Poisson samples as a padded batch: rows ``[K, S, P]``, valid ``[K, S, P]``
        and active ``[K, S]`` (silo k takes ``steps_per_pass[k]`` steps). P is the largest
        sample of the pass, so every sampled example is in the batch."""
        mech = self.mechanism
        steps = max(mech.steps_per_pass)
        chosen: list[list[np.ndarray]] = []
        for k in range(self.num_silos):
            rng = self._rng(ctx, MASKS, pass_index, self._keys[k])
            masks = poisson_masks(rng, mech.num_samples[k], mech.sampling_rates[k], mech.steps_per_pass[k])
            chosen.append([np.flatnonzero(m) for m in masks])
        pad = max([1, *(len(c) for per in chosen for c in per)])
        rows = torch.zeros(self.num_silos, steps, pad, dtype=torch.long)
        valid = torch.zeros(self.num_silos, steps, pad, dtype=torch.bool)
        active = torch.zeros(self.num_silos, steps, dtype=torch.bool)
        for k, client in enumerate(self.silo_clients):
            # filled in numpy, one copy per silo (per-step tensor indexing was half of a
            # 40-silo pass of the linear model)
            indices = self.dataset.client_indices[client].cpu().numpy()
            taken = len(chosen[k])
            block = np.full((taken, pad), indices[0], dtype=np.int64)  # padding repeats the silo's first row
            flags = np.zeros((taken, pad), dtype=bool)
            for s, positions in enumerate(chosen[k]):
                block[s, : len(positions)] = indices[positions]
                flags[s, : len(positions)] = True
            rows[k, :taken] = torch.from_numpy(block)
            valid[k, :taken] = torch.from_numpy(flags)
            active[k, :taken] = True
        return rows, valid, active

    def noisy_gradient(self, weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor, valid: torch.Tensor,
                       anchor: torch.Tensor, prox: float, noise: torch.Tensor, *,
                       noise_is_scratch: bool = False) -> torch.Tensor:
        """``g~_k = (clipped sum + sigma_k c noise_k) / (q_k n_k)`` for all silos, ``[K, d]``.

        Computed in place on the clipped sums (and on ``noise`` when the caller says it is
        scratch): on ``[K, d]`` every out-of-place temporary is a fresh allocation, and those
        took about as long as the clipped sums themselves for 40 silos of the 200-200 MLP."""
        mech = self.mechanism
        inside = prox if self.prox_inside_clip else 0.0
        chunk = x.shape[1] if self.max_examples is None else self.max_examples
        total: torch.Tensor | None = None
        for start in range(0, x.shape[1], chunk):
            part = slice(start, start + chunk)
            if not bool(valid[:, part].any()):
                continue
            # a hook registered after construction sends the step to torch.func too
            if self._chain is not None and not inside and not has_hooks(self.model):
                summed = ghost_clipped_sum(self._chain, weights, x[:, part], y[:, part], valid[:, part],
                                           mech.clip_norm, self.dataset.task)
            else:
                per_example = self._gradients(weights, x[:, part], y[:, part], anchor, inside)
                summed = clipped_sum(per_example, valid[:, part], mech.clip_norm)
            total = summed if total is None else total.add_(summed)
        if total is None:
            total = torch.zeros_like(weights)
        scale = torch.tensor(mech.noise_multipliers, dtype=weights.dtype, device=weights.device) * mech.clip_norm
        expected = torch.tensor(
            [q * n for q, n in zip(mech.sampling_rates, mech.num_samples)], dtype=weights.dtype, device=weights.device
        )
        scaled_noise = noise.mul_(scale[:, None]) if noise_is_scratch else noise * scale[:, None]
        return total.add_(scaled_noise).div_(expected[:, None])

    def train(self, ctx: RoundContext, start: torch.Tensor, *, anchor: torch.Tensor | None = None,
              prox: float = 0.0, pass_index: int = 0) -> torch.Tensor:
        """Run pass ``pass_index`` of this round's DP-SGD from ``start`` ``[K, d]``; return the
        silos' new parameters ``[K, d]``. ``anchor`` ``[K, d]`` or ``[d]`` (default: ``start``)
        is the prox term's centre, ``prox`` its weight lambda."""
        mech = self.mechanism
        if not 0 <= pass_index < mech.passes:
            raise InvalidInputError("pass_index", f"the plan runs {mech.passes} DP-SGD pass(es) per round, got pass {pass_index}")
        if prox < 0:
            raise InvalidInputError("prox", f"must be non-negative, got {prox}")
        if start.shape[0] != self.num_silos:
            raise ValueError(f"start has {start.shape[0]} rows for {self.num_silos} silos")
        self._claim((ctx.global_round, pass_index), f"DP-SGD pass {pass_index}")
        weights = start.detach().clone()
        centre = start.detach().clone() if anchor is None else anchor.detach().expand_as(weights).clone()
        rows, valid, active = self.sample(ctx, pass_index)
        device, dtype = weights.device, weights.dtype
        generator = torch.Generator(device=device)
        secret_seed = int.from_bytes(os.urandom(8), "big") >> 1
        generator.manual_seed(secret_seed if self.secret else ctx.seed_for(PURPOSE_DPSGD, NOISE, pass_index))
        # the whole plan's [K, d] draw per step, this engine's rows taken from it (a node
        # training one silo draws what gdpfed train draws for it); a secret draw only its own
        shape = weights.shape if self.secret or self.silos is None else (self._plan_silos, weights.shape[1])
        for step in range(rows.shape[1]):
            noise = torch.randn(shape, generator=generator, device=device, dtype=dtype)
            if shape != weights.shape:
                noise = noise[list(self._keys)]
            live = active[:, step].to(device)
            if not bool(live.any()):
                continue
            # this step's largest sample (samples are left-packed in the pass's padded batch,
            # so the columns cut are padding only): less padding computed, nothing dropped
            width = max(1, int(valid[:, step].sum(-1).max()))
            flat = rows[:, step, :width].reshape(-1)
            x = self.dataset.train_x[flat]
            if x.is_floating_point():
                x = x.to(dtype)
            x = x.reshape(self.num_silos, -1, *self.dataset.input_shape).to(device)
            y = self.dataset.train_y[flat].reshape(self.num_silos, -1).to(device)
            direction = self.noisy_gradient(weights, x, y, valid[:, step, :width].to(device), centre, prox, noise,
                                            noise_is_scratch=True)
            # w <- w - lr (g~ + lambda (w - a)) for the live silos, in place (noise is scratch now)
            if prox and not self.prox_inside_clip:
                direction.add_(torch.sub(weights, centre, out=noise).mul_(prox))
            step_taken = direction.mul_(self.lr)
            if bool(live.all()):
                weights.sub_(step_taken)
            else:
                weights = torch.where(live[:, None], weights - step_taken, weights)
        return weights

    def select_clusters(self, ctx: RoundContext, start: torch.Tensor, candidates: torch.Tensor,
                        in_round: int) -> np.ndarray:
        """Each silo's privately selected cluster: argmin of error rate + Gumbel(2 / (n_k eps_sel))."""
        mech = self.mechanism
        if in_round >= mech.selection_rounds:
            raise RuntimeError(f"the plan accounts for cluster selection in its first {mech.selection_rounds} rounds only")
        if ctx.global_round in self._selected:
            raise RuntimeError(f"cluster selection ran twice in round {ctx.global_round}")
        self._selected.add(ctx.global_round)
        errors = self.error_rates(candidates.to(start.dtype))
        chosen = np.empty(self.num_silos, dtype=np.int64)
        for k in range(self.num_silos):
            epsilon = mech.selection_epsilons[k] if mech.selection_epsilons else None
            if epsilon is None:
                raise RuntimeError("the plan has no selection budget for this silo")
            scale = 2.0 * (1.0 / mech.num_samples[k]) / epsilon
            rng = self._rng(ctx, SELECTION, self._keys[k])
            chosen[k] = int(np.argmin(errors[k] + rng.gumbel(0.0, scale, size=errors.shape[1])))
        return chosen

    def error_rates(self, candidates: torch.Tensor) -> np.ndarray:
        """``[K, C]``: each candidate model's error rate on each silo's training data
        (mistakes / n_k: changes by at most 1/n_k when one example is added or removed)."""
        named = unflatten_params(candidates, self._shapes)
        out = np.zeros((self.num_silos, candidates.shape[0]))
        with torch.no_grad():
            for k, client in enumerate(self.silo_clients):
                x, y = self.dataset.client_data(client)
                x = x.to(candidates.dtype).to(candidates.device) if x.is_floating_point() else x.to(candidates.device)
                logits = vmap(lambda p: functional_call(self.model, p, (x,)))(named)
                wrong = (logits.argmax(-1) != y.to(candidates.device)[None]).sum(-1)
                out[k] = wrong.cpu().numpy() / self.mechanism.num_samples[k]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {}
