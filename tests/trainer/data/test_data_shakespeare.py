from pathlib import Path

import pytest
import torch

from accounting.errors import InvalidInputError
from trainer.data import load_dataset
from trainer.data.shakespeare import VOCAB, encode, parse_roles


def _decode(codes: torch.Tensor) -> str:
    return "".join(VOCAB[int(c)] for c in codes)


def test_parse_roles_from_tiny_text(tiny_play: Path) -> None:
    roles = parse_roles(tiny_play.read_text())
    assert list(roles) == ["First Citizen", "All", "Second Citizen"]
    assert roles["First Citizen"] == (
        "Before we proceed any further, hear me speak. You are all resolved rather to die "
        "than to famish? Resolved, resolved. 'Tis most certain: aye."
    )
    assert roles["All"] == "Speak, speak. We know't, we know't."
    assert "ignored" not in " ".join(roles.values())


def test_windows_predict_the_next_character_of_the_role(tiny_play: Path) -> None:
    data = load_dataset(
        f"shakespeare:{tiny_play}",
        num_clients=1,
        partition="natural",
        seed=0,
        sequence_length=10,
        min_samples=20,
        test_fraction=0.2,
    )
    assert data.task == "next_char" and data.vocab == VOCAB and data.num_classes == 95
    assert data.client_ids == ("First Citizen",)  # the only role with 20 windows
    role = parse_roles(tiny_play.read_text())["First Citizen"]
    train_text = role[: len(role) - round(0.2 * len(role))]
    x, y = data.client_data(0)
    assert x.shape == (len(train_text) - 10, 10) and x.dtype == torch.uint8
    for row in (0, 7, x.shape[0] - 1):
        assert _decode(x[row]) == train_text[row : row + 10]
        assert VOCAB[int(y[row])] == train_text[row + 10]
    test_x, test_y = data.test
    assert test_x.shape[1] == 10 and test_x.shape[0] == test_y.shape[0] > 0


def test_windows_never_cross_roles(tiny_play: Path) -> None:
    data = load_dataset(
        f"shakespeare:{tiny_play}", num_clients=3, partition="natural", seed=0,
        sequence_length=4, min_samples=1,
    )
    roles = parse_roles(tiny_play.read_text())
    for client, name in enumerate(data.client_ids):
        x, y = data.client_data(client)
        text = roles[name]
        for row in range(x.shape[0]):
            assert _decode(x[row]) + VOCAB[int(y[row])] in text


def test_characters_outside_the_vocabulary_become_spaces() -> None:
    assert _decode(torch.from_numpy(encode("a\tb\u00e9c"))) == "a b c"


def test_shared_file_has_many_roles(shakespeare_path: Path) -> None:
    data = load_dataset(
        f"shakespeare:{shakespeare_path}", num_clients=100, partition="natural", seed=0
    )
    assert data.num_clients == 100
    assert "First Citizen" in data.client_ids and "MENENIUS" in data.client_ids
    sizes = data.client_sizes()
    assert min(sizes) >= 64 and sum(sizes) > 500_000
    assert data.train_x.shape[1:] == (80,) and data.test_x.shape[0] > 10_000
    # The 100 largest roles: every role left out is smaller than every role kept.
    everything = load_dataset(
        f"shakespeare:{shakespeare_path}", num_clients=200, partition="natural", seed=0
    )
    left_out = [s for c, s in zip(everything.client_ids, everything.client_sizes())
                if c not in data.client_ids]
    assert max(left_out) <= min(sizes)


def test_too_many_natural_clients_is_an_error(tiny_play: Path) -> None:
    with pytest.raises(InvalidInputError) as info:
        load_dataset(f"shakespeare:{tiny_play}", num_clients=5, partition="natural", seed=0,
                     sequence_length=4, min_samples=1)
    assert info.value.field == "num_clients"


def test_file_without_speeches_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "prose.txt"
    path.write_text("Just prose, no speakers at all.\nAnother line.\n")
    with pytest.raises(InvalidInputError) as info:
        load_dataset(f"shakespeare:{path}", num_clients=1, partition="natural", seed=0)
    assert info.value.field == "dataset" and "speaker" in info.value.message


def test_iid_split_of_roles(tiny_play: Path) -> None:
    data = load_dataset(f"shakespeare:{tiny_play}", num_clients=4, partition="iid", seed=3,
                        sequence_length=4, min_samples=1)
    assert data.num_clients == 4
    assert sum(data.client_sizes()) == sum(
        load_dataset(f"shakespeare:{tiny_play}", num_clients=3, partition="natural", seed=3,
                     sequence_length=4, min_samples=1).client_sizes()
    )
