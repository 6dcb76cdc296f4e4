"""The value every loader returns: a federated dataset (``docs/trainer.md``, "Data").

All clients' rows live in one tensor (``train_x``, ``train_y``) and each client is an
index tensor into it (its training rows, and, where the data has them, its own local test
rows). Batching many clients at once is then one gather
``train_x[rows]`` instead of a Python loop over per-client tensors, and views (the
character windows of ``shakespeare``) never have to be copied per client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Task = Literal["classification", "next_char", "regression"]


@dataclass(frozen=True, eq=False)
class FederatedDataset:
    """Per-client training data over one pool of rows, plus a held-out test set.

    ``train_x[client_indices[i]]`` and ``train_y[client_indices[i]]`` are client ``i``'s
    samples; ``client_ids[i]`` is its name (a speaking role for ``shakespeare``).
    Features are float32 (images ``[C, H, W]``, vectors ``[D]``) or, for
    ``task == "next_char"``, uint8 character codes ``[L]`` into ``vocab``; labels are
    int64 class indices (the next character's code for ``next_char``), or float32 targets
    for ``task == "regression"`` (one output; ``num_classes`` is 1).

    ``client_test_indices[i]`` (optional) are client ``i``'s local test rows, also rows of
    ``train_x``/``train_y`` and disjoint from every client's training rows: a held-out
    share of its own data (``client_test_fraction``) or a LEAF user's own test records.
    ``test_x``/``test_y`` stay the server's test set.
    """

    name: str
    task: Task
    train_x: torch.Tensor
    train_y: torch.Tensor
    client_indices: tuple[torch.Tensor, ...]
    client_ids: tuple[str, ...]
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    vocab: str | None = None
    client_test_indices: tuple[torch.Tensor, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.client_indices) != len(self.client_ids):
            raise ValueError("client_indices and client_ids differ in length")
        if self.client_test_indices is not None and len(self.client_test_indices) != len(self.client_ids):
            raise ValueError("client_test_indices and client_ids differ in length")
        if self.train_x.shape[0] != self.train_y.shape[0]:
            raise ValueError("train_x and train_y differ in length")
        if self.test_x.shape[0] != self.test_y.shape[0]:
            raise ValueError("test_x and test_y differ in length")
        if tuple(self.train_x.shape[1:]) != tuple(self.input_shape):
            raise ValueError("train_x rows do not have input_shape")
        if (self.task == "next_char") != (self.vocab is not None):
            raise ValueError("vocab is set exactly for next_char data")

    @property
    def num_clients(self) -> int:
        return len(self.client_ids)

    @property
    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out test set ``(x, y)``."""
        return self.test_x, self.test_y

    def client_sizes(self) -> list[int]:
        """Number of training samples of each client."""
        return [int(rows.numel()) for rows in self.client_indices]

    @property
    def has_client_tests(self) -> bool:
        """Whether the clients have local test rows (``client_test_indices``)."""
        return self.client_test_indices is not None

    def client_test_data(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``client``'s local test samples ``(x, y)``; empty without local tests."""
        if self.client_test_indices is None:
            return self.train_x[:0], self.train_y[:0]
        rows = self.client_test_indices[client]
        return self.train_x[rows], self.train_y[rows]

    def client_data(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``client``'s training samples ``(x, y)`` (a copy of its rows)."""
        rows = self.client_indices[client]
        return self.train_x[rows], self.train_y[rows]
