"""Test loss and accuracy of a parameter vector, on the server's test set or on every
client's own test rows (``docs/trainer.md``, "Evaluation")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.engines.params import num_params, param_shapes, unflatten_params


def evaluate(
    model: nn.Module,
    params: torch.Tensor | Mapping[str, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    *,
    batch_size: int = 1024,
) -> dict[str, float]:
    """``{"loss": mean cross-entropy, "accuracy": fraction of argmax hits}`` over ``test``.

    ``params`` is a flat ``[d]`` vector or a name -> tensor mapping; the computation runs on
    its device and dtype, ``batch_size`` rows at a time.
    """
    named = unflatten_params(params, model) if isinstance(params, torch.Tensor) else dict(params)
    first = next(iter(named.values()))
    x_all, y_all = test
    count = int(y_all.shape[0])
    if count == 0:
        raise ValueError("the test set is empty")
    total_loss = torch.zeros((), dtype=torch.float64, device=first.device)
    correct = torch.zeros((), dtype=torch.int64, device=first.device)
    with torch.no_grad():
        for start in range(0, count, batch_size):
            x = x_all[start : start + batch_size]
            if x.is_floating_point():
                x = x.to(first.dtype)
            x = x.to(first.device)
            y = y_all[start : start + batch_size].to(first.device)
            logits = functional_call(model, named, (x,))
            total_loss += F.cross_entropy(logits, y, reduction="sum").to(torch.float64)
            correct += (logits.argmax(dim=-1) == y).sum()
    return {"loss": float(total_loss) / count, "accuracy": int(correct) / count}


@dataclass(frozen=True)
class ClientScores:
    """Per-client test results of ``evaluate_clients`` (float64 / int64 tensors ``[n]`` on the host).

    ``loss_sum``: summed cross-entropy over the client's test rows; ``correct``: argmax hits;
    ``count``: its test rows (0 for a client without local test data).
    """

    loss_sum: torch.Tensor
    correct: torch.Tensor
    count: torch.Tensor

    @property
    def accuracy(self) -> torch.Tensor:
        """Each client's accuracy (NaN for a client without test rows)."""
        return self.correct.to(torch.float64) / self.count.to(torch.float64)

    @property
    def loss(self) -> torch.Tensor:
        """Each client's mean loss (NaN for a client without test rows)."""
        return self.loss_sum / self.count.to(torch.float64)

    def mean_accuracy(self, members: torch.Tensor | None = None) -> float | None:
        """The mean of the per-client accuracies of ``members`` (positions, default all)
        that have test rows: every client counts once, whatever its test size, as in the
        papers' per-client averages. ``None`` when none of them has test rows."""
        accuracy, count = self.accuracy, self.count
        if members is not None:
            accuracy, count = accuracy[members], count[members]
        scored = count > 0
        if not bool(scored.any()):
            return None
        return float(accuracy[scored].mean())


def evaluate_clients(
    model: nn.Module,
    params: torch.Tensor,
    dataset: FederatedDataset,
    clients: Sequence[int],
    *,
    batch_size: int = 1024,
    device: torch.device | str | None = None,
) -> ClientScores:
    """Each client's loss and accuracy on its own local test rows (docs/trainer.md §Evaluation).

    ``params`` is one flat ``[d]`` vector for every client (e.g. the global model), or one
    row per client ``[len(clients), d]`` (e.g. personal models, which may live on the host).
    The computation runs on ``device`` (default: where ``params`` is) in ``params``' dtype.
    With one vector all clients' rows are scored in batches of ``batch_size``; with one row
    per client the clients are scored together under ``vmap``, each client's rows padded to
    the largest count among them (padding is masked out), about ``batch_size`` rows at a
    time. ``dataset`` must have local test data (``client_test_indices``).
    """
    if dataset.client_test_indices is None:
        raise InvalidInputError(
            "client_test_fraction",
            f"{dataset.name} has no per-client test data; load it with client_test_fraction > 0 "
            "(or LEAF's per-user test files)",
        )
    members = [int(c) for c in clients]
    target = torch.device(device) if device is not None else params.device
    rows = [dataset.client_test_indices[c] for c in members]
    counts = torch.tensor([int(r.numel()) for r in rows], dtype=torch.int64)
    loss_sum = torch.zeros(len(members), dtype=torch.float64)
    correct = torch.zeros(len(members), dtype=torch.int64)
    if not members or int(counts.sum()) == 0:
        return ClientScores(loss_sum, correct, counts)
    if params.dim() == 1:
        flat_rows = torch.cat(rows)
        owner = torch.repeat_interleave(torch.arange(len(members)), counts)
        named = unflatten_params(params.to(target), model)
        dtype = params.dtype
        with torch.no_grad():
            for start in range(0, flat_rows.numel(), batch_size):
                batch = flat_rows[start : start + batch_size]
                logits = functional_call(model, named, (_features(dataset, batch, target, dtype),))
                y = dataset.train_y[batch].to(target)
                losses = F.cross_entropy(logits, y, reduction="none").to(torch.float64).cpu()
                hits = (logits.argmax(dim=-1) == y).to(torch.int64).cpu()
                loss_sum.index_add_(0, owner[start : start + batch_size], losses)
                correct.index_add_(0, owner[start : start + batch_size], hits)
        return ClientScores(loss_sum, correct, counts)
    if tuple(params.shape) != (len(members), num_params(model)):
        raise InvalidInputError(
            "params", f"must be [{num_params(model)}] or [{len(members)}, {num_params(model)}], got {list(params.shape)}"
        )
    shapes = param_shapes(model)
    forward = vmap(lambda named, x: functional_call(model, named, (x,)))
    width = max(1, int(counts.max()))
    chunk = max(1, batch_size // width)
    with torch.no_grad():
        for start in range(0, len(members), chunk):
            part = slice(start, start + chunk)
            size = len(rows[part])
            padded = torch.zeros(size, width, dtype=torch.int64)
            mask = torch.zeros(size, width, dtype=torch.bool)
            for i, client_rows in enumerate(rows[part]):
                padded[i, : client_rows.numel()] = client_rows
                mask[i, : client_rows.numel()] = True
            x = _features(dataset, padded.reshape(-1), target, params.dtype).reshape(size, width, *dataset.input_shape)
            y = dataset.train_y[padded.reshape(-1)].reshape(size, width).to(target)
            logits = forward(unflatten_params(params[part].to(target), shapes), x)
            losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").reshape(size, width)
            hits = logits.argmax(dim=-1) == y
            keep = mask.to(target)
            loss_sum[part] = (losses.to(torch.float64) * keep).sum(dim=1).cpu()
            correct[part] = (hits & keep).sum(dim=1).cpu()
    return ClientScores(loss_sum, correct, counts)


def _features(dataset: FederatedDataset, rows: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    x = dataset.train_x[rows]
    if x.is_floating_point():
        x = x.to(dtype)
    return x.to(device)
