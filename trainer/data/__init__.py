"""Federated datasets, offline only (``docs/trainer.md``, "Data").

``load_dataset`` is the one entry point; ``assign_groups`` deals clients into a plan's
groups.
"""

from trainer.data.dataset import FederatedDataset, Task
from trainer.data.groups import UNASSIGNED, assign_groups, clients_with_label
from trainer.data.load import detect_format, load_dataset
from trainer.data.partition import PARTITIONS

__all__ = [
    "PARTITIONS",
    "UNASSIGNED",
    "FederatedDataset",
    "Task",
    "assign_groups",
    "clients_with_label",
    "detect_format",
    "load_dataset",
]
