"""MNIST / Fashion-MNIST IDX files (``docs/trainer.md``, "File formats").

An IDX file (LeCun's format, optionally gzip-compressed) is: two zero bytes, a type byte
(0x08 unsigned byte, ...), the number of dimensions, each dimension as a big-endian
uint32, then the values. Image files have magic 0x00000803 (ubyte, 3 dimensions), label
files 0x00000801 (ubyte, 1 dimension); both are checked. A directory holds
``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte`` and, optionally, the ``t10k-``
pair (``.gz`` or not; ``-`` or ``.`` before ``idx``).
"""

from __future__ import annotations

import gzip
import re
import struct
from pathlib import Path

import numpy as np

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate_images

IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
_FILE = re.compile(r"^(train|t10k)-(images|labels)[-.]idx[13]-ubyte(\.gz)?$")
_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def idx_files(directory: Path) -> dict[tuple[str, str], Path]:
    """``(split, kind) -> path`` for the IDX files in ``directory`` (``split`` train/t10k)."""
    found: dict[tuple[str, str], Path] = {}
    for entry in sorted(directory.iterdir()):
        match = _FILE.match(entry.name)
        if match and entry.is_file():
            found.setdefault((match.group(1), match.group(2)), entry)
    return found


def read_idx(path: Path, expected_magic: int) -> np.ndarray:
    """The array stored in the IDX file at ``path``, which must carry ``expected_magic``."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InvalidInputError("dataset", f"cannot read IDX file {str(path)!r}: {exc}") from exc
    if len(raw) < 4:
        raise InvalidInputError("dataset", f"{str(path)!r} is too short to be an IDX file")
    (magic,) = struct.unpack(">I", raw[:4])
    if magic != expected_magic:
        raise InvalidInputError(
            "dataset",
            f"{str(path)!r} has IDX magic 0x{magic:08X}, expected 0x{expected_magic:08X}",
        )
    ndim = raw[3]
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_TYPES[raw[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - header != expected:
        raise InvalidInputError(
            "dataset",
            f"{str(path)!r} declares shape {dims} ({expected} bytes of data) but holds "
            f"{len(raw) - header}",
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)


def load_idx(
    directory: str | Path,
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    test_fraction: float = 0.2,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
) -> FederatedDataset:
    """MNIST-style IDX files in ``directory``; without a ``t10k`` pair a seeded test split."""
    directory = Path(directory)
    files = idx_files(directory)
    if ("train", "images") not in files or ("train", "labels") not in files:
        raise InvalidInputError(
            "dataset",
            f"{str(directory)!r} lacks train-images-idx3-ubyte / train-labels-idx1-ubyte",
        )

    def pair(split: str) -> tuple[np.ndarray, np.ndarray]:
        images = read_idx(files[(split, "images")], IMAGES_MAGIC)
        labels = read_idx(files[(split, "labels")], LABELS_MAGIC).astype(np.int64)
        if images.shape[0] != labels.shape[0]:
            raise InvalidInputError(
                "dataset",
                f"{split} images ({images.shape[0]}) and labels ({labels.shape[0]}) differ in count",
            )
        return images[:, None, :, :], labels

    has_test = ("t10k", "images") in files and ("t10k", "labels") in files
    return federate_images(
        f"idx:{directory.name}", pair("train"), pair("t10k") if has_test else None,
        num_classes=None,  # IDX files do not say how many classes; the labels do
        num_clients=num_clients, partition=partition, alpha=alpha, seed=seed,
        test_fraction=test_fraction, max_test_samples=max_test_samples,
        client_test_fraction=client_test_fraction,
    )
