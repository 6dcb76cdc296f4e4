"""Local training engines (``docs/trainer.md``, "Local training engines").

``train_clients`` runs a round's clients from the global parameters with the ``loop``
(reference) or ``batched`` (``torch.func``) engine; ``evaluate`` scores a parameter
vector; the ``*_params`` helpers move between named tensors and flat vectors.
"""

from trainer.engines.batches import client_rows, gather_batches
from trainer.engines.config import LocalTrainingConfig
from trainer.engines.evaluate import ClientScores, evaluate, evaluate_clients
from trainer.engines.params import flatten_params, num_params, param_shapes, unflatten_params
from trainer.engines.train import ENGINES, Engine, train_clients

__all__ = [
    "ENGINES",
    "ClientScores",
    "Engine",
    "LocalTrainingConfig",
    "client_rows",
    "evaluate",
    "evaluate_clients",
    "flatten_params",
    "gather_batches",
    "num_params",
    "param_shapes",
    "train_clients",
    "unflatten_params",
]
