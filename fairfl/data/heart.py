"""FLamby's Fed-Heart-Disease: UCI Heart Disease's four hospitals as four natural clients.

Ogier du Terrail et al., "FLamby: Datasets and Benchmarks for Cross-Silo Federated Learning
in Realistic Healthcare Settings", NeurIPS 2022 Datasets and Benchmarks. The data are the
four ``processed.<centre>.data`` files of Janosi, Steinbrunn, Pfisterer & Detrano (1988),
*Heart Disease*, UCI Machine Learning Repository (CC BY 4.0), read from
``<data_root>/uci-heart-disease/`` and checked against the MD5s FLamby's download script
checks (`fairfl.data.files`).

The preparation is FLamby's current one (``flamby/datasets/fed_heart_disease/dataset.py``,
with the per-centre shuffle and normalisation of September 2022), step for step:

1. each centre's file is read as a headerless CSV, ``?`` is missing, columns 10, 11 and 12
   are dropped, then every row with a missing value; the last column is the label, 0 stays
   0 and every diagnosis > 0 becomes 1;
2. each centre is split 66/34 by scikit-learn's ``train_test_split(np.arange(n),
   test_size=1 - 0.66, train_size=0.66, random_state=43, shuffle=True, stratify=s)``, where
   ``s`` is the binary labels if both classes have more than 2 samples in the centre, else
   ``None``; samples keep their file order within each split;
3. columns 2 (chest pain type) and 6 (resting ECG) of all centres together are one-hot
   encoded as ``pandas.get_dummies(columns=[2, 6], drop_first=True)`` does: the other 8
   columns first, in order, then one column per value of column 2 but its smallest, then of
   column 6 (values taken over all four centres) -- 13 features, float32;
4. each sample is normalised by its own centre's *training* mean and unbiased standard
   deviation, ``(x - mean) / (std + 1e-9)``.

Centre ids: Cleveland 0, Hungary 1, Switzerland 2, Long Beach VA 3; train/test sizes
199/104, 172/89, 30/16, 85/45. This fixed split replaces fairfl's ``test-fraction`` split for
this data set.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from fairfl.data.files import DataFile, DataSource, read_verified

DATASET = "fed-heart-disease"
"""The ``dataset`` run-config value."""

CENTRES: tuple[str, ...] = ("cleveland", "hungarian", "switzerland", "va")
"""File stems of the four hospitals, by client id (Cleveland, Hungary, Switzerland,
Long Beach VA)."""

NUM_CLIENTS = len(CENTRES)
NUM_FEATURES = 13
NUM_CLASSES = 2

_BASE_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/heart-disease/"
_MD5 = {
    "cleveland": "2d91a8ff69cfd9616aa47b59d6f843db",
    "hungarian": "22e96bee155b5973568101c93b3705f6",
    "switzerland": "9a87f7577310b3917730d06ba9349e20",
    "va": "4249d03ca7711e84f4444768c9426170",
}

SOURCE = DataSource(
    dataset=DATASET,
    folder="uci-heart-disease",
    files=tuple(
        DataFile(
            name=f"processed.{centre}.data",
            md5=_MD5[centre],
            url=f"{_BASE_URL}processed.{centre}.data",
        )
        for centre in CENTRES
    ),
    page="https://archive.ics.uci.edu/dataset/45/heart+disease",
)
"""The four published files and their MD5s (those of FLamby's download script)."""

#: FLamby's train fraction and the seed of its per-centre split.
TRAIN_FRACTION = 0.66
SPLIT_SEED = 43
#: Columns FLamby drops (slope, ca, thal: mostly missing outside Cleveland), and the
#: categorical columns it one-hot encodes (chest pain type, resting ECG), by file column.
_DROPPED_COLUMNS = (10, 11, 12)
_CATEGORICAL_COLUMNS = (2, 6)
#: Added to the standard deviation, as FLamby does, so that a constant feature maps to 0.
_STD_EPSILON = 1e-9


@dataclass(frozen=True, eq=False)
class HeartCentre:
    """One hospital's prepared train and test splits.

    Attributes
    ----------
    x_train, x_test : np.ndarray
        float32 features, shape ``(n, 13)``, normalised by the centre's training statistics.
    y_train, y_test : np.ndarray
        int64 labels, 0 (no disease) or 1.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def parse_centre(text: str) -> tuple[np.ndarray, np.ndarray]:
    """One centre's file as FLamby reads it: columns 10-12 dropped, then incomplete rows.

    Parameters
    ----------
    text : str
        The ``processed.<centre>.data`` file: 14 comma-separated columns, ``?`` missing.

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        The 10 remaining feature columns (float64, file order) and the binary labels
        (int64: 0 stays 0, every diagnosis > 0 is 1) of the complete rows.

    Raises
    ------
    ValueError
        If a row does not have 14 columns or a value is not a number.
    """
    table = np.genfromtxt(
        io.StringIO(text), delimiter=",", missing_values="?", filling_values=np.nan, ndmin=2
    )
    if table.shape[1] != 14:
        raise ValueError(f"dataset {DATASET!r}: expected 14 columns, got {table.shape[1]}")
    kept = np.delete(table, _DROPPED_COLUMNS, axis=1)
    kept = kept[~np.isnan(kept).any(axis=1)]
    return kept[:, :-1], (kept[:, -1] != 0).astype(np.int64)


def split_centre(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FLamby's per-centre 66/34 split: train and test positions, each in file order.

    Stratified by label when both classes have more than 2 samples, as FLamby decides;
    scikit-learn's own ``train_test_split`` draws it, so the positions are FLamby's.

    Parameters
    ----------
    labels : np.ndarray
        The centre's binary labels, in file order.

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        Sorted train positions and sorted test positions.
    """
    # Imported here: scikit-learn's import (SciPy's) takes a second that other data sets
    # need not pay in every ClientApp process.
    from sklearn.model_selection import train_test_split

    counts = np.bincount(labels, minlength=NUM_CLASSES)
    stratify = labels if np.count_nonzero(counts) > 1 and counts[counts > 0].min() > 2 else None
    train, test = train_test_split(
        np.arange(len(labels)),
        test_size=1.0 - TRAIN_FRACTION,
        train_size=TRAIN_FRACTION,
        random_state=SPLIT_SEED,
        shuffle=True,
        stratify=stratify,
    )
    return np.sort(train), np.sort(test)


def one_hot_drop_first(features: np.ndarray) -> np.ndarray:
    """``pandas.get_dummies(columns=[2, 6], drop_first=True)`` on FLamby's 10 columns.

    The columns that are not encoded come first, in order; then, for column 2 and then
    column 6, one 0/1 column per distinct value in increasing order, the smallest dropped.

    Parameters
    ----------
    features : np.ndarray
        All centres' rows, shape ``(n, 10)``, float64.

    Returns
    -------
    np.ndarray
        float64, shape ``(n, 8 + sum of (distinct values - 1))``: 13 for the four centres.
    """
    plain = [c for c in range(features.shape[1]) if c not in _CATEGORICAL_COLUMNS]
    blocks = [features[:, plain]]
    for column in _CATEGORICAL_COLUMNS:
        values = np.unique(features[:, column])
        blocks.append((features[:, column, None] == values[None, 1:]).astype(np.float64))
    return np.concatenate(blocks, axis=1)


def normalise(x: NDArray[np.float32], train: NDArray[np.float32]) -> NDArray[np.float32]:
    """``(x - mean) / (std + 1e-9)`` with the mean and unbiased std of ``train``'s rows.

    Parameters
    ----------
    x : np.ndarray
        float32 rows of one centre, shape ``(n, d)``.
    train : np.ndarray
        float32 training rows of the same centre, shape ``(m, d)``, m >= 2.

    Returns
    -------
    np.ndarray
        float32, shape ``(n, d)``.
    """
    # Accumulated in float64, then rounded: the float32 statistics torch's cascaded sums
    # give FLamby, to float32 rounding.
    mean: NDArray[np.float32] = train.mean(axis=0, dtype=np.float64).astype(np.float32)
    std: NDArray[np.float32] = train.std(axis=0, ddof=1, dtype=np.float64).astype(np.float32)
    return ((x - mean) / (std + np.float32(_STD_EPSILON))).astype(np.float32)


def prepare(files: dict[str, bytes]) -> tuple[HeartCentre, ...]:
    """FLamby's preparation of the four published files (see the module docstring).

    Parameters
    ----------
    files : dict[str, bytes]
        Each file's bytes by its name (``processed.cleveland.data``...).

    Returns
    -------
    tuple[HeartCentre, ...]
        The four centres, by client id.
    """
    parsed = [parse_centre(files[f"processed.{centre}.data"].decode("ascii")) for centre in CENTRES]
    encoded = one_hot_drop_first(np.concatenate([x for x, _ in parsed])).astype(np.float32)
    centres: list[HeartCentre] = []
    start = 0
    for _, y in parsed:
        x = encoded[start : start + len(y)]
        start += len(y)
        train, test = split_centre(y)
        centres.append(
            HeartCentre(
                x_train=normalise(x[train], x[train]),
                y_train=y[train],
                x_test=normalise(x[test], x[train]),
                y_test=y[test],
            )
        )
    return tuple(centres)


@functools.lru_cache(maxsize=2)
def load_centres(data_root: str, download: bool) -> tuple[HeartCentre, ...]:
    """The four prepared centres from ``<data_root>/uci-heart-disease/``, once per process.

    Parameters
    ----------
    data_root : str
        The data root (absolute).
    download : bool
        Fetch missing files from UCI first (`fairfl.data.files.read_verified`).

    Returns
    -------
    tuple[HeartCentre, ...]
        The four centres, by client id; their arrays are read-only (shared).

    Raises
    ------
    FileNotFoundError
        If a file is missing and ``download`` is false (the message says where to get it).
    fairfl.data.files.DataFileError
        If a file is not the published one (the message names it and its expected MD5).
    """
    centres = prepare(read_verified(SOURCE, Path(data_root), download=download))
    for centre in centres:
        for array in (centre.x_train, centre.y_train, centre.x_test, centre.y_test):
            array.setflags(write=False)
    return centres
