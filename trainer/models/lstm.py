"""Character LSTM (``docs/trainer.md``, "Models").

LEAF's Shakespeare model: an 8-dimensional character embedding, a 2-layer LSTM with 256
hidden units, and a linear layer from the last hidden state to the next character.

Under ``torch.func`` transforms (the batched engine's ``vmap``) the LSTM runs as explicit
tensor operations (one fused gate matrix per layer), because ``nn.LSTM``'s kernel has no
batching rule and would fall back to a slow per-client loop. Called directly (the loop
engine, evaluation) it runs PyTorch's fused LSTM kernel (``torch.lstm``, cuDNN on a GPU)
on the same weights, with the second bias of ``nn.LSTM`` fixed at zero: the same
function, one kernel per layer instead of one Python step per character (the loop
engine's LSTM was 2 client updates per second on an H100). Per layer and time step ``t``
(sigma the logistic function)

    [i, f, g, o] = x_t W_ih^T + h_{t-1} W_hh^T + b
    c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g),   h_t = sigma(o) * tanh(c_t)

with ``h_0 = c_0 = 0``. The input projections of all steps are one matrix product before
the recurrence. Weights start as in ``nn.LSTM``: uniform in ``+-1/sqrt(hidden_size)``.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn
from torch.nn import functional as F


class CharLSTM(nn.Module):
    # The recurrent matrices are used once per time step; the batched engine gets their
    # per-client gradients faster from one backward pass over all clients
    # (``trainer/engines/batched.py``).
    batched_gradients = "summed"

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 8,
        hidden_size: int = 256,
        num_layers: int = 2,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.hidden_size = hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = nn.ParameterList()
        self.weight_hh = nn.ParameterList()
        self.bias = nn.ParameterList()
        width = embedding_dim
        for _ in range(num_layers):
            self.weight_ih.append(nn.Parameter(torch.empty(4 * hidden_size, width).uniform_(-bound, bound)))
            self.weight_hh.append(
                nn.Parameter(torch.empty(4 * hidden_size, hidden_size).uniform_(-bound, bound))
            )
            self.bias.append(nn.Parameter(torch.empty(4 * hidden_size).uniform_(-bound, bound)))
            width = hidden_size
        self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the character after each sequence; ``x`` is ``[B, L]`` character codes."""
        sequence = F.embedding(x.long(), self.embedding.weight)
        if not under_function_transform():
            return self.head(self._fused_last_hidden(sequence))
        last = len(self.weight_ih) - 1
        for layer, (weight_ih, weight_hh, bias) in enumerate(
            zip(self.weight_ih, self.weight_hh, self.bias)
        ):
            projected = F.linear(sequence, weight_ih, bias)
            hidden = projected.new_zeros(projected.shape[0], self.hidden_size)
            cell = hidden
            outputs = []
            # unbind, not projected[:, t]: the backward of one indexing per step would
            # build and add a full-size zero tensor each step (quadratic in length).
            for projected_step in projected.unbind(1):
                gates = projected_step + F.linear(hidden, weight_hh)
                in_gate, forget_gate, candidate, out_gate = gates.chunk(4, dim=-1)
                cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(in_gate) * torch.tanh(candidate)
                hidden = torch.sigmoid(out_gate) * torch.tanh(cell)
                if layer != last:
                    outputs.append(hidden)
            if layer != last:
                sequence = torch.stack(outputs, dim=1)
        return self.head(hidden)

    def _fused_last_hidden(self, sequence: torch.Tensor) -> torch.Tensor:
        """The last layer's final hidden state by ``torch.lstm`` (the kernel behind ``nn.LSTM``).

        Gate order ``i, f, g, o`` and equations are ``nn.LSTM``'s, so the same weights give
        the same function; the hidden-to-hidden bias is a zero tensor (no parameter).
        """
        weights: list[torch.Tensor] = []
        for weight_ih, weight_hh, bias in zip(self.weight_ih, self.weight_hh, self.bias):
            weights += [weight_ih, weight_hh, bias, torch.zeros_like(bias)]
        state = sequence.new_zeros(len(self.weight_ih), sequence.shape[0], self.hidden_size)
        with warnings.catch_warnings():
            # cuDNN copies per-layer weights into one buffer on each call (they are model
            # parameters, not nn.LSTM's flattened buffer); a few MB, far below the kernel's cost
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
            output, _, _ = torch.lstm(sequence, (state, state), weights, True, len(self.weight_ih), 0.0,
                                      self.training, False, True)
        return output[:, -1]


def under_function_transform() -> bool:
    """True inside ``torch.func`` transforms (``vmap``, ``grad``), where the fused kernel cannot run."""
    peek = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    # without the probe (another torch), stay on the explicit path that works everywhere
    return peek is None or peek() is not None
