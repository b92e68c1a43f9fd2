"""The data sets fairfl knows: names, shapes, and a cached loader of each pool.

A *pool* is the whole labelled data set that partitioners split between clients.
``digits`` is scikit-learn's bundled copy of the UCI handwritten digits (1,797
8x8 images, no files needed), read from the package's data file without importing
scikit-learn (`digits_file`); ``mnist``, ``fashionmnist`` and ``cifar10`` are the
official training sets read by torchvision (`fairfl.data.vision`); synthetic
data sets have no pool, each device is generated alone
(`fairfl.data.synthetic`).
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fairfl.data import heart, sensitive, synthetic

DATASETS: tuple[str, ...] = (
    "digits",
    "synthetic",
    "mnist",
    "fashionmnist",
    "cifar10",
    *sensitive.SENSITIVE_DATASETS,
    heart.DATASET,
)
"""Data set names. Synthetic(α, β) is also available as ``"synthetic-<α>-<β>"``."""

NATURAL_FEDERATIONS: dict[str, int] = {heart.DATASET: heart.NUM_CLIENTS}
"""Data sets whose clients are their own silos (FLamby's hospitals), with their number:
partitioner ``"natural"`` only, ``num-partitions`` fixed, the publisher's train/test split."""

DEFAULT_DATA_ROOT = "~/.cache/fairfl/data"
"""Where torchvision data sets are looked for when ``data_root`` is empty."""

_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "digits": ((1, 8, 8), 10),
    "synthetic": ((synthetic.NUM_FEATURES,), synthetic.NUM_CLASSES),
    "mnist": ((1, 28, 28), 10),
    "fashionmnist": ((1, 28, 28), 10),
    "cifar10": ((3, 32, 32), 10),
    "adult": ((sensitive.ADULT_NUM_FEATURES,), 2),
    "adult-synthetic": ((sensitive.SYNTHETIC_FEATURES,), 2),
    heart.DATASET: ((heart.NUM_FEATURES,), heart.NUM_CLASSES),
}


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about a data set.

    Attributes
    ----------
    name : str
        The data set name, as given.
    input_shape : tuple[int, ...]
        Shape of one sample as the model sees it: ``(channels, height, width)``
        for images, ``(60,)`` for synthetic data.
    num_classes : int
        Number of classes.

    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int


def check_dataset(name: object) -> None:
    """Raise unless ``name`` names a data set.

    Parameters
    ----------
    name : object
        A value of `DATASETS`, ``"synthetic-<α>-<β>"`` or ``"synthetic-<α>-<β>-sigma<σ>"``.

    Raises
    ------
    ValueError
        If ``name`` names no data set; the message lists the valid names.

    """
    if isinstance(name, str) and (name in DATASETS or synthetic.parse_name(name) is not None):
        return
    raise ValueError(
        f"dataset must be one of {DATASETS}, 'synthetic-<alpha>-<beta>' (e.g. "
        f"'synthetic-0.5-0.5') or 'synthetic-<alpha>-<beta>-sigma<sigma>' (device sizes "
        f"LogNormal(4, sigma) + 50; e.g. 'synthetic-1-1-sigma0.75'), got {name!r}"
    )


def dataset_info(name: str) -> DatasetInfo:
    """Describe data set ``name`` without loading it.

    Parameters
    ----------
    name : str
        One of `DATASETS`, or ``"synthetic-<α>-<β>"`` such as
        ``"synthetic-0.5-0.5"`` (``"synthetic"`` is Synthetic(1, 1)).

    Returns
    -------
    DatasetInfo
        Its per-sample input shape and number of classes.

    Raises
    ------
    ValueError
        If ``name`` names no data set.

    """
    check_dataset(name)
    key = "synthetic" if synthetic.parse_name(name) is not None else name
    input_shape, num_classes = _SHAPES[key]
    return DatasetInfo(name=name, input_shape=input_shape, num_classes=num_classes)


def resolve_data_root(data_root: str) -> str:
    """Return the absolute data root: ``data_root``, or `DEFAULT_DATA_ROOT` if empty.

    Parameters
    ----------
    data_root : str
        A directory; ``~`` is expanded.

    Returns
    -------
    str
        The absolute path.

    """
    return str(Path(data_root or DEFAULT_DATA_ROOT).expanduser().resolve())


@functools.lru_cache(maxsize=4)
def load_pool(name: str, data_root: str, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """Load the pool of a non-synthetic data set, once per process.

    Parameters
    ----------
    name : str
        ``"digits"``, ``"mnist"``, ``"fashionmnist"`` or ``"cifar10"``.
    data_root : str
        Absolute data root (see `resolve_data_root`); unused for ``"digits"``.
    download : bool
        Download missing torchvision files; unused for ``"digits"``.

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        ``x`` in the model's layout, ``(n, *input_shape)``: float32 in [0, 1] for
        digits, uint8 for the image files (divide by 255, see `to_model_input`);
        ``y``: int64 labels. Both read-only, since they are shared.

    """
    if name == "digits":
        x, y = load_digits_file(digits_file())
    elif name in sensitive.SENSITIVE_DATASETS:  # the attribute: load_client_data
        x, y, _ = sensitive.load_sensitive_pool(name, data_root, download)
        return x, y
    else:
        # Imported here: torchvision's import takes seconds that digits and
        # synthetic runs need not pay.
        from fairfl.data import vision

        x, y = vision.load_train_set(name, Path(data_root), download)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def digits_file() -> Path:
    """Locate scikit-learn's ``datasets/data/digits.csv.gz`` without importing it.

    ``import sklearn`` pulls in SciPy (about a second per ClientApp process); the file
    is found through the package's import spec, which runs none of its code.

    Returns
    -------
    Path
        The gzipped CSV: 1,797 rows of 64 pixel counts (0..16) and the label.

    Raises
    ------
    FileNotFoundError
        If scikit-learn is not installed or its copy lacks the file; the message says
        how to get it.

    """
    spec = importlib.util.find_spec("sklearn")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    raise FileNotFoundError(
        "dataset 'digits' is read from scikit-learn's bundled file "
        "sklearn/datasets/data/digits.csv.gz, "
        + (
            f"which is missing from the installed scikit-learn ({locations})"
            if locations
            else "but scikit-learn is not installed"
        )
        + ": pip install 'scikit-learn>=1.4'"
    )


def load_digits_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read the digits CSV as `sklearn.datasets.load_digits` does, scaled for a model.

    Parameters
    ----------
    path : Path
        ``digits.csv.gz`` (see `digits_file`).

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        ``x``: float32 ``(1797, 1, 8, 8)``, the pixel counts 0..16 divided by 16;
        ``y``: int64 labels 0..9.

    """
    with gzip.open(path, "rt") as text:
        table = np.loadtxt(text, delimiter=",", ndmin=2)  # float64, as scikit-learn reads it
    # Pixels are counts 0..16 of an 8x8 grid of 4x4 blocks.
    x = (table[:, :-1].reshape(-1, 8, 8) / 16.0).astype(np.float32)[:, None, :, :]
    y = table[:, -1].astype(np.int64)
    return x, y


def to_model_input(x: np.ndarray) -> np.ndarray:
    """Return samples of a pool as float32 in [0, 1], as a new array.

    Parameters
    ----------
    x : np.ndarray
        uint8 pixels (0..255) or float32 values already in [0, 1].

    Returns
    -------
    np.ndarray
        A float32 array that shares no memory with ``x``.

    """
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    return x.astype(np.float32, copy=True)
