"""Run-time choice of the torch device (``docs/trainer.md``, "Local training engines").

``auto`` picks CUDA when a GPU is visible and the CPU otherwise; any other preference
is honoured exactly or refused, so a run never silently lands on a device it did not ask
for.
"""

from __future__ import annotations

import torch

from accounting.errors import InvalidInputError


def choose_device(preference: str = "auto") -> torch.device:
    """The device named by ``preference``: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

    ``auto`` means ``cuda`` if ``torch.cuda.is_available()`` else ``cpu``. Asking for an
    accelerator that is not there raises ``InvalidInputError("device", ...)``.
    """
    text = preference.strip().lower()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError as exc:
        raise InvalidInputError(
            "device", f"unknown device {preference!r}; use auto, cpu, cuda, cuda:N or mps"
        ) from exc
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidInputError("device", "cuda was asked for but no CUDA GPU is available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InvalidInputError(
                "device",
                f"{preference!r} was asked for but only {torch.cuda.device_count()} GPU(s) exist",
            )
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise InvalidInputError("device", "mps was asked for but is not available")
        return device
    raise InvalidInputError(
        "device", f"unsupported device {preference!r}; use auto, cpu, cuda, cuda:N or mps"
    )
