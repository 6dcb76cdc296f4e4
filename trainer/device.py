"""Run-time choice of the torch device (``docs/trainer.md``, "Local training engines").

``auto`` picks CUDA when a GPU is visible and the CPU otherwise; any other preference
is honoured exactly or refused, so a run never silently lands on a device it did not ask
for.
"""

from __future__ import annotations

from typing import Any

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


def configure_float_math(allow_tf32: bool = False) -> None:
    """Set float32 matmul, convolution and RNN precision for this process (``docs/trainer.md`` §Reproducible GPU math).

    By default (``allow_tf32=False``) float32 stays IEEE float32 on every backend, and cuDNN
    picks deterministic algorithms without autotuning, so a run is reproducible from its
    seed on a GPU and the two engines agree as on the CPU. cuDNN's own default runs
    convolutions in TF32 (10-bit mantissa), which made the engines' updates differ by
    4e-3 (CNN) and 3e-2 (ResNet-18) on an H100. ``allow_tf32=True`` opts into TF32 for
    speed, giving up that agreement. These are process-wide torch settings (torch has no
    other scope for them); on the CPU they change nothing.
    """
    precision = "tf32" if allow_tf32 else "ieee"
    cudnn: Any = torch.backends.cudnn  # its conv/rnn submodules are set at import, untyped
    torch.backends.cuda.matmul.fp32_precision = precision
    cudnn.conv.fp32_precision = precision
    cudnn.rnn.fp32_precision = precision
    cudnn.deterministic = not allow_tf32
    cudnn.benchmark = False
