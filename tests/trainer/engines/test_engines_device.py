import pytest
import torch

from accounting.errors import InvalidInputError
from trainer.device import choose_device


def test_auto_picks_cuda_when_present_else_cpu() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert choose_device().type == expected
    assert choose_device("auto").type == expected


def test_cpu_is_always_available() -> None:
    assert choose_device("cpu") == torch.device("cpu")
    assert choose_device(" CPU ") == torch.device("cpu")


def test_missing_accelerator_and_nonsense_are_refused() -> None:
    if not torch.cuda.is_available():
        with pytest.raises(InvalidInputError) as info:
            choose_device("cuda")
        assert info.value.field == "device"
    else:
        with pytest.raises(InvalidInputError):
            choose_device(f"cuda:{torch.cuda.device_count()}")
    with pytest.raises(InvalidInputError) as info:
        choose_device("abacus")
    assert info.value.field == "device"
