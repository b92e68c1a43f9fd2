"""MNIST, Fashion-MNIST and CIFAR-10 training sets, read from disk by torchvision.

Only the official *training* file of each data set is read and then partitioned;
every client re-splits its share into train and test (see `fairfl.data`). This
is what the Semi-VRed paper does with CIFAR ("only the 50,000-image training set,
re-split per client"), and it keeps every client's test split drawn from its own
label distribution. The official test files must still be present, because
torchvision checks for them.

Files go where torchvision expects them under ``root``:

- ``<root>/MNIST/raw/`` and ``<root>/FashionMNIST/raw/``: the four uncompressed
  idx-ubyte files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``);
- ``<root>/cifar-10-batches-py/``: ``data_batch_1`` to ``data_batch_5``,
  ``test_batch`` and ``batches.meta`` (python pickles). torchvision checks their
  md5 sums against the official release.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torchvision import datasets as tv_datasets

_CLASS_NAMES = {"mnist": "MNIST", "fashionmnist": "FashionMNIST", "cifar10": "CIFAR10"}


def _dataset_class(name: str) -> type[tv_datasets.MNIST] | type[tv_datasets.CIFAR10]:
    # Imported on use: torchvision costs seconds in every ClientApp process otherwise.
    from torchvision import datasets

    cls: type[tv_datasets.MNIST] | type[tv_datasets.CIFAR10] = getattr(datasets, _CLASS_NAMES[name])
    return cls


VISION_DATASETS: tuple[str, ...] = tuple(_CLASS_NAMES)
"""Names of the data sets read by `load_train_set`."""


def expected_files(name: str, root: Path) -> list[Path]:
    """Return the files torchvision needs to read data set ``name`` from ``root``.

    Parameters
    ----------
    name : str
        One of `VISION_DATASETS`.
    root : Path
        The data root directory.

    Returns
    -------
    list[Path]
        The paths, taken from the torchvision class so they follow its version.

    """
    cls = _dataset_class(name)
    if cls.__name__ != "CIFAR10":
        raw = root / cls.__name__ / "raw"
        return [raw / Path(resource).name.removesuffix(".gz") for resource, _ in cls.resources]
    folder = root / cls.base_folder
    names = [file for file, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    return [folder / file for file in names]


def load_train_set(name: str, root: Path, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """Read the official training set of ``name`` with torchvision.

    Parameters
    ----------
    name : str
        One of `VISION_DATASETS`.
    root : Path
        The data root directory (see the module docstring for the layout).
    download : bool
        Download the files into ``root`` first if they are missing. Concurrent
        callers (e.g. simulated clients in several processes) take turns through a
        lock file, ``<root>/.fairfl-download.lock``, so only one downloads.

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        ``x``: uint8 images, shape ``(n, channels, height, width)``; ``y``: int64
        labels, shape ``(n,)``.

    Raises
    ------
    FileNotFoundError
        If ``download`` is False and a file is missing; the message lists the paths.
    RuntimeError
        If torchvision fails to download or read the files (e.g. a CIFAR-10 md5
        mismatch).

    """
    cls = _dataset_class(name)
    if download:
        root.mkdir(parents=True, exist_ok=True)
        with (root / ".fairfl-download.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            dataset = _open(cls, name, root, download=True)
    else:
        missing = [str(path) for path in expected_files(name, root) if not path.is_file()]
        if missing:
            raise FileNotFoundError(
                f"dataset {name!r} not found under data_root {str(root)!r}: missing "
                f"{missing}. Put torchvision's {cls.__name__} files there, or set "
                "download=True (run config: download = true) to fetch them."
            )
        dataset = _open(cls, name, root, download=False)
    if type(dataset).__name__ != "CIFAR10":
        x = dataset.data.numpy()[:, None, :, :]
        y = dataset.targets.numpy()
    else:
        x = dataset.data.transpose(0, 3, 1, 2)  # NHWC -> NCHW
        y = np.asarray(dataset.targets)
    return np.ascontiguousarray(x, dtype=np.uint8), y.astype(np.int64)


def _open(
    cls: type[tv_datasets.MNIST] | type[tv_datasets.CIFAR10], name: str, root: Path, download: bool
) -> tv_datasets.MNIST | tv_datasets.CIFAR10:
    try:
        return cls(str(root), train=True, download=download)
    except RuntimeError as err:
        raise RuntimeError(
            f"torchvision could not {'download' if download else 'read'} dataset {name!r} "
            f"under data_root {str(root)!r}: {err}. If the files are corrupted or not the "
            "official release, delete them and set download=True (run config: "
            "download = true)."
        ) from err
