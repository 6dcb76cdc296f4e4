"""Every file loader on tiny files written here in the exact on-disk format."""

import gzip
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from trainer.data import detect_format, load_dataset
from trainer.data.cifar10 import load_cifar10
from trainer.data.idx import load_idx
from trainer.data.leaf_json import load_leaf
from trainer.data.shakespeare import load_shakespeare
from trainer.data.svhn import load_svhn


def _write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


def _images(rng: np.random.Generator, count: int, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, (count, *shape), dtype=np.uint8)


@pytest.mark.parametrize("compress", [True, False])
def test_idx_directory(tmp_path: Path, compress: bool) -> None:
    rng = np.random.default_rng(0)
    suffix = ".gz" if compress else ""
    train_images, test_images = _images(rng, 30, (28, 28)), _images(rng, 10, (28, 28))
    train_labels, test_labels = rng.integers(0, 10, 30), rng.integers(0, 10, 10)
    _write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", train_images, compress)
    _write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", train_labels, compress)
    _write_idx(tmp_path / f"t10k-images-idx3-ubyte{suffix}", test_images, compress)
    _write_idx(tmp_path / f"t10k-labels-idx1-ubyte{suffix}", test_labels, compress)
    assert detect_format(tmp_path) is load_idx
    data = load_dataset(str(tmp_path), num_clients=3, seed=0)
    assert data.input_shape == (1, 28, 28) and data.num_classes >= 2
    assert torch.equal(data.train_y, torch.from_numpy(train_labels))
    assert torch.equal(data.test_y, torch.from_numpy(test_labels))
    # Standardisation is affine per channel: pixel order is preserved.
    flat = data.train_x[5].flatten()
    assert torch.equal(flat.argsort(stable=True), torch.from_numpy(train_images[5].flatten().astype(np.int64)).argsort(stable=True))
    assert data.client_sizes() == [10, 10, 10]


def test_idx_without_test_pair_holds_out_a_split(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    _write_idx(tmp_path / "train-images.idx3-ubyte", _images(rng, 20, (8, 8)), False)
    _write_idx(tmp_path / "train-labels.idx1-ubyte", rng.integers(0, 3, 20), False)
    data = load_dataset(f"idx:{tmp_path}", num_clients=2, seed=0, test_fraction=0.25)
    assert data.test_y.shape[0] == 5 and data.train_y.shape[0] == 15


def test_idx_wrong_magic_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    # Labels where images belong: magic 0x801 instead of 0x803.
    _write_idx(tmp_path / "train-images-idx3-ubyte", rng.integers(0, 3, 20), False)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", rng.integers(0, 3, 20), False)
    with pytest.raises(InvalidInputError) as info:
        load_dataset(str(tmp_path), num_clients=2, seed=0)
    assert info.value.field == "dataset" and "magic" in info.value.message


def test_idx_truncated_file_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    _write_idx(tmp_path / "train-images-idx3-ubyte", _images(rng, 20, (8, 8)), False)
    path = tmp_path / "train-labels-idx1-ubyte"
    _write_idx(path, rng.integers(0, 3, 20), False)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(InvalidInputError, match="declares shape"):
        load_dataset(str(tmp_path), num_clients=2, seed=0)


def _write_cifar_batch(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    with path.open("wb") as handle:
        pickle.dump({b"batch_label": b"x", b"data": images.reshape(len(images), -1), b"labels": labels.tolist()}, handle)


def test_cifar10_batches(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    images = [_images(rng, 6, (3, 32, 32)) for _ in range(3)]
    labels = [rng.integers(0, 10, 6) for _ in range(3)]
    _write_cifar_batch(tmp_path / "data_batch_1", images[0], labels[0])
    _write_cifar_batch(tmp_path / "data_batch_2", images[1], labels[1])
    _write_cifar_batch(tmp_path / "test_batch", images[2], labels[2])
    assert detect_format(tmp_path) is load_cifar10
    data = load_dataset(str(tmp_path), num_clients=4, seed=0)
    assert data.input_shape == (3, 32, 32) and data.num_classes == 10
    assert torch.equal(data.train_y, torch.from_numpy(np.concatenate(labels[:2])))
    assert torch.equal(data.test_y, torch.from_numpy(labels[2]))
    # Channel-major layout: the red plane of image 0 comes first in b'data'.
    red = data.train_x[0, 0].flatten()
    assert torch.equal(red.argsort(stable=True), torch.from_numpy(images[0][0, 0].flatten().astype(np.int64)).argsort(stable=True))


def test_cifar10_pickle_that_runs_code_is_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with (tmp_path / "data_batch_1").open("wb") as handle:
        pickle.dump({b"data": Evil(), b"labels": [1]}, handle)
    with pytest.raises(InvalidInputError, match="refusing"):
        load_dataset(f"cifar10:{tmp_path}", num_clients=1, seed=0)


def test_cifar10_wrong_shape_is_refused(tmp_path: Path) -> None:
    _write_cifar_batch(tmp_path / "data_batch_1", np.zeros((4, 10), np.uint8), np.zeros(4, np.int64))
    with pytest.raises(InvalidInputError, match="3072"):
        load_dataset(str(tmp_path), num_clients=1, seed=0)


def test_svhn_mat_directory(tmp_path: Path) -> None:
    from scipy.io import savemat

    rng = np.random.default_rng(5)
    train_x = rng.integers(0, 256, (32, 32, 3, 12), dtype=np.uint8)
    train_y = np.array([[10], [1], [2], [10], [3], [4], [5], [6], [7], [8], [9], [10]], dtype=np.uint8)
    test_x = rng.integers(0, 256, (32, 32, 3, 4), dtype=np.uint8)
    test_y = np.array([[10], [2], [3], [4]], dtype=np.uint8)
    savemat(tmp_path / "train_32x32.mat", {"X": train_x, "y": train_y})
    savemat(tmp_path / "test_32x32.mat", {"X": test_x, "y": test_y})
    assert detect_format(tmp_path) is load_svhn
    data = load_dataset(str(tmp_path), num_clients=3, seed=0)
    assert data.input_shape == (3, 32, 32)
    assert data.train_y.tolist() == [0, 1, 2, 0, 3, 4, 5, 6, 7, 8, 9, 0]  # 10 means digit 0
    assert data.test_y.tolist() == [0, 2, 3, 4]
    # X[:, :, c, i] is channel c of image i.
    plane = data.train_x[7, 1].flatten()
    assert torch.equal(plane.argsort(stable=True), torch.from_numpy(train_x[:, :, 1, 7].flatten().astype(np.int64)).argsort(stable=True))
    single = load_dataset(str(tmp_path / "train_32x32.mat"), num_clients=2, seed=0, test_fraction=0.25)
    assert single.test_y.shape[0] == 3


def test_svhn_file_that_is_not_mat_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "train_32x32.mat"
    path.write_bytes(b"definitely not MATLAB")
    with pytest.raises(InvalidInputError) as info:
        load_dataset(f"svhn:{tmp_path}", num_clients=1, seed=0)
    assert info.value.field == "dataset" and ".mat" in info.value.message


def _leaf_document(users: dict[str, tuple[list, list]]) -> dict:
    return {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }


def test_leaf_directory_with_train_and_test(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    users = {f"f_{k}": (rng.normal(size=(n, 5)).tolist(), rng.integers(0, 4, n).tolist())
             for k, n in enumerate([7, 3, 5])}
    (tmp_path / "train" / "a.json").write_text(json.dumps(_leaf_document(users)))
    test = {"f_0": (rng.normal(size=(2, 5)).tolist(), [1, 3])}
    (tmp_path / "test" / "a.json").write_text(json.dumps(_leaf_document(test)))
    assert detect_format(tmp_path) is load_leaf
    data = load_dataset(str(tmp_path), num_clients=2, partition="natural", seed=0)
    assert data.client_ids == ("f_0", "f_2") and data.client_sizes() == [7, 5]
    x, y = data.client_data(1)
    assert torch.allclose(x, torch.tensor(users["f_2"][0], dtype=torch.float32))
    assert y.tolist() == users["f_2"][1]
    assert data.test_y.tolist() == [1, 3] and data.num_classes == 4
    # natural users keep their own test records as local test data
    assert data.client_test_indices is not None
    x, y = data.client_test_data(0)
    assert y.tolist() == [1, 3] and torch.allclose(x, torch.tensor(test["f_0"][0], dtype=torch.float32))
    assert data.client_test_indices[1].numel() == 0  # f_2 has no test records
    training = torch.cat(data.client_indices)
    assert set(training.tolist()).isdisjoint(data.client_test_indices[0].tolist())
    with pytest.raises(InvalidInputError) as info:
        load_dataset(str(tmp_path), num_clients=2, partition="natural", seed=0, client_test_fraction=0.2)
    assert info.value.field == "client_test_fraction"
    # pooled and re-split, the users' own test files no longer match clients: a held-out share does
    pooled = load_dataset(str(tmp_path), num_clients=3, partition="iid", seed=0, client_test_fraction=0.3)
    assert pooled.client_test_indices is not None and pooled.train_y.shape[0] == 15
    assert sum(int(t.numel()) for t in pooled.client_test_indices) == 3 * round(0.3 * 5)


def test_leaf_shakespeare_strings(tmp_path: Path) -> None:
    doc = _leaf_document({"ROMEO": (["abcd", "bcde", "cdef"], ["e", "f", "g"]),
                          "JULIET": (["wxyz", "xyz!"], ["!", "?"])})
    path = tmp_path / "all_data.json"
    path.write_text(json.dumps(doc))
    data = load_dataset(str(path), num_clients=2, partition="natural", seed=0, test_fraction=0.2)
    assert data.task == "next_char" and data.input_shape == (4,) and data.vocab is not None
    assert data.train_y.shape[0] + data.test_y.shape[0] == 5


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps({"users": ["a"]}), json.dumps(
        {"users": ["a"], "num_samples": [2], "user_data": {"a": {"x": [[1.0]], "y": [0, 1]}}})],
)
def test_leaf_malformed_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "data.json"
    path.write_text(content)
    with pytest.raises(InvalidInputError) as info:
        load_dataset(f"leaf:{path}", num_clients=1, seed=0)
    assert info.value.field == "dataset"


def test_text_file_is_detected_as_plays(tiny_play: Path) -> None:
    assert detect_format(tiny_play) is load_shakespeare


def test_unrecognised_directory_and_missing_path(tmp_path: Path) -> None:
    (tmp_path / "notes.csv").write_text("a,b\n")
    with pytest.raises(InvalidInputError, match="cannot recognise") as info:
        load_dataset(str(tmp_path), num_clients=1, seed=0)
    assert info.value.field == "dataset"
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_dataset(f"cifar10:{tmp_path / 'missing'}", num_clients=1, seed=0)
