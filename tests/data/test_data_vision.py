"""Tests of the torchvision data sets on tiny fake files written in the real on-disk formats.

MNIST and Fashion-MNIST: big-endian idx-ubyte files (magic 0x00000803 for uint8
images of 3 dims, 0x00000801 for uint8 labels) under ``<root>/<Class>/raw/``;
torchvision checks only that the four files exist. CIFAR-10: python pickles
under ``<root>/cifar-10-batches-py/`` whose ``data`` rows are 3,072 bytes (the R,
G and B planes, each 32x32 row-major); torchvision checks their md5 sums
against the official release, so the tests put the fakes' md5 sums in
``CIFAR10.train_list``/``test_list``/``meta`` and torchvision's check still runs.
"""

import hashlib
import pickle
import re
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from torchvision.datasets import CIFAR10

from fairfl.data import load_client_data, partition_sizes

NUM_TRAIN = 40
NUM_TEST = 10


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _write_mnist(root: Path, folder: str, seed: int) -> np.ndarray:
    """Write fake MNIST-format files; return the training images, NCHW uint8, and labels."""
    rng = np.random.default_rng(seed)
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    train = rng.integers(0, 256, (NUM_TRAIN, 28, 28), dtype=np.uint8)
    train_labels = np.arange(NUM_TRAIN) % 10
    _write_idx(raw / "train-images-idx3-ubyte", train)
    _write_idx(raw / "train-labels-idx1-ubyte", train_labels)
    _write_idx(raw / "t10k-images-idx3-ubyte", rng.integers(0, 256, (NUM_TEST, 28, 28)))
    _write_idx(raw / "t10k-labels-idx1-ubyte", np.arange(NUM_TEST) % 10)
    return train[:, None], train_labels


def _write_cifar(root: Path, monkeypatch: pytest.MonkeyPatch | None) -> np.ndarray:
    """Write fake CIFAR-10 pickles (8 images per batch); register their md5 sums if asked."""
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    images, labels = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (8, 3072), dtype=np.uint8)
        batch_labels = [int(v) for v in rng.integers(0, 10, 8)]
        batch = {
            "batch_label": name,
            "labels": batch_labels,
            "data": data,
            "filenames": [f"{name}_{i}.png" for i in range(8)],
        }
        (folder / name).write_bytes(pickle.dumps(batch))
        if name != "test_batch":
            images.append(data.reshape(8, 3, 32, 32))
            labels.extend(batch_labels)
    meta = {"label_names": [f"class{i}" for i in range(10)], "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    if monkeypatch is not None:

        def md5(name):
            return hashlib.md5((folder / name).read_bytes()).hexdigest()

        monkeypatch.setattr(CIFAR10, "train_list", [[n, md5(n)] for n, _ in CIFAR10.train_list])
        monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5("test_batch")]])
        monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5("batches.meta")})
    return np.concatenate(images), np.array(labels)


def _rows(x: np.ndarray, y: np.ndarray) -> Counter:
    return Counter(img.tobytes() + bytes([int(label)]) for img, label in zip(x, y, strict=True))


def _load_all(dataset: str, root: Path, num_partitions: int, **kwargs) -> Counter:
    """All clients' train and test samples, back as uint8 pixels, counted."""
    rows: Counter = Counter()
    for pid in range(num_partitions):
        data = load_client_data(
            dataset=dataset,
            partitioner="iid",
            partition_id=pid,
            num_partitions=num_partitions,
            data_root=str(root),
            **kwargs,
        )
        for x, y in ((data.x_train, data.y_train), (data.x_test, data.y_test)):
            assert x.dtype == np.float32
            assert x.min() >= 0.0 and x.max() <= 1.0
            rows.update(_rows(np.rint(x * 255).astype(np.uint8), y))
    return rows


@pytest.mark.parametrize(
    ("dataset", "folder"), [("mnist", "MNIST"), ("fashionmnist", "FashionMNIST")]
)
def test_mnist_formats_load_the_training_file_in_nchw(tmp_path, dataset, folder):
    images, labels = _write_mnist(tmp_path, folder, seed=len(folder))
    data = load_client_data(
        dataset=dataset,
        partitioner="iid",
        partition_id=0,
        num_partitions=4,
        data_root=str(tmp_path),
    )
    assert data.x_train.shape[1:] == (1, 28, 28)
    # Every training image exactly once over all clients; the t10k file is not used.
    assert _load_all(dataset, tmp_path, 4) == _rows(images, labels)
    assert (
        sum(
            partition_sizes(
                dataset=dataset, partitioner="iid", num_partitions=4, data_root=str(tmp_path)
            )
        )
        == 4 * 7
    )


def test_cifar10_loads_the_five_training_batches_in_nchw(tmp_path, monkeypatch):
    images, labels = _write_cifar(tmp_path, monkeypatch)
    assert _load_all("cifar10", tmp_path, 5) == _rows(images, labels)
    data = load_client_data(
        dataset="cifar10",
        partitioner="iid",
        partition_id=1,
        num_partitions=5,
        data_root=str(tmp_path),
    )
    assert data.x_train.shape[1:] == (3, 32, 32)


def test_download_true_uses_files_already_there(tmp_path):
    # torchvision's download() returns at once when the files exist: no network.
    images, labels = _write_mnist(tmp_path, "MNIST", seed=0)
    assert _load_all("mnist", tmp_path, 2, download=True) == _rows(images, labels)
    assert (tmp_path / ".fairfl-download.lock").is_file()


@pytest.mark.parametrize(
    ("dataset", "expected"),
    [
        ("mnist", "MNIST/raw/train-images-idx3-ubyte"),
        ("fashionmnist", "FashionMNIST/raw/t10k-labels-idx1-ubyte"),
        ("cifar10", "cifar-10-batches-py/data_batch_1"),
        ("cifar10", "cifar-10-batches-py/batches.meta"),
    ],
)
def test_missing_files_name_the_path_and_the_download_option(tmp_path, dataset, expected):
    root = tmp_path / "nothing-here"
    with pytest.raises(FileNotFoundError, match=re.escape(str(root / expected))) as info:
        load_client_data(
            dataset=dataset,
            partitioner="iid",
            partition_id=0,
            num_partitions=2,
            data_root=str(root),
        )
    assert f"dataset {dataset!r} not found under data_root {str(root)!r}" in str(info.value)
    assert "set download=True (run config: download = true)" in str(info.value)
    assert not root.exists()  # nothing is created without download=True


def test_one_missing_file_is_reported(tmp_path):
    _write_mnist(tmp_path, "MNIST", seed=0)
    (tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte'\\]"):
        partition_sizes(
            dataset="mnist", partitioner="iid", num_partitions=2, data_root=str(tmp_path)
        )


def test_cifar10_files_failing_the_md5_check_are_reported(tmp_path):
    _write_cifar(tmp_path, monkeypatch=None)  # official md5 sums: the fakes fail them
    message = (
        f"torchvision could not read dataset 'cifar10' under data_root {str(tmp_path)!r}: "
        "Dataset not found or corrupted."
    )
    with pytest.raises(RuntimeError, match=re.escape(message)):
        load_client_data(
            dataset="cifar10",
            partitioner="iid",
            partition_id=0,
            num_partitions=2,
            data_root=str(tmp_path),
        )


def test_empty_data_root_means_the_default_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".cache" / "fairfl" / "data" / "MNIST" / "raw"
    with pytest.raises(FileNotFoundError, match=re.escape(str(expected))):
        load_client_data(dataset="mnist", partitioner="iid", partition_id=0, num_partitions=2)
