"""Data sets with a per-sample sensitive attribute, for group fairness (issue 37).

Two pools, each a binary classification with a sensitive attribute A per sample:

- ``"adult"``: the UCI Adult census data (Becker and Kohavi, 1996,
  https://archive.ics.uci.edu/dataset/2/adult), ``adult.data`` then ``adult.test`` read
  from ``<data_root>/uci-adult/`` as UCI serves them or gzip-compressed
  (``adult.data.gz``), each checked against its published MD5
  (:data:`ADULT_SOURCE`, :func:`fairfl.data.files.read_verified`; ``download=true``
  fetches missing files from UCI). Files in the former location ``<data_root>/adult/``
  are not read: move them to ``uci-adult/``. Label: income ``>50K``. Sensitive
  attribute: ``sex`` (Female 0, Male 1; ``race`` is available to :func:`encode_adult`
  as White 1, other 0). Preprocessing, the usual one: rows with a ``?`` dropped (30,162
  of adult.data's 32,561 rows and 15,060 of adult.test's 16,281 are kept), the 8
  categorical columns one-hot over the categories ``adult.names`` lists
  (:data:`ADULT_CATEGORIES`, 99 columns; every file gets the same width), the 6 numeric
  ones standardised over the pool: 105 features.
- ``"adult-synthetic"``, the embedded default (pure numpy, no files):
  :func:`synthetic_pool`, a planted binary attribute and a chosen bias.

Partitioner ``"dirichlet"`` skews these pools by the *attribute*, not the label: each
client's share of every attribute value is drawn from Dir(α), the heterogeneity FairFed
(Ezzeldin et al., AAAI 2023, §5) studies (α = 0.1 heterogeneous, α = 5000 near iid).
Partitioner ``"phd"`` splits Adult into AFL's two clients (Mohri, Sivek and Suresh, ICML
2019; q-FFL's comparison with AFL, Li et al., ICLR 2020): client 0 holds the rows whose
education is ``Doctorate``, client 1 all others (:func:`adult_doctorate`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from fairfl.data.files import DataFile, DataSource, read_verified

#: Pools with a sensitive attribute.
SENSITIVE_DATASETS: Final = ("adult", "adult-synthetic")
#: Values of their attribute A (0 and 1): the G of ``group-counts``' 4 G cells.
NUM_GROUPS: Final = 2

#: Adult's columns in file order (``adult.names``); the 15th is the income label.
ADULT_COLUMNS: Final = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
)
ADULT_NUMERIC: Final = (
    "age",
    "fnlwgt",
    "education-num",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
)
#: The categories of each categorical column, as ``adult.names`` lists them.
ADULT_CATEGORIES: Final[dict[str, tuple[str, ...]]] = {
    "workclass": (
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
        "State-gov", "Without-pay", "Never-worked",
    ),
    "education": (
        "Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
        "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate",
        "5th-6th", "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
        "Married-spouse-absent", "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
        "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
        "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
        "Armed-Forces",
    ),
    "relationship": (
        "Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried",
    ),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
        "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
        "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
        "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
        "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
    ),
}  # fmt: skip
#: The attribute value coded 1, per sensitive column (every other value is 0).
ADULT_PRIVILEGED: Final = {"sex": "Male", "race": "White"}
#: Features after encoding: 6 numeric + 99 one-hot.
ADULT_NUM_FEATURES: Final = len(ADULT_NUMERIC) + sum(len(c) for c in ADULT_CATEGORIES.values())

_UCI_ADULT: Final = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"
#: UCI Adult's two files as UCI serves them, with the MD5 of the published bytes.
ADULT_SOURCE: Final = DataSource(
    dataset="adult",
    folder="uci-adult",
    files=(
        DataFile("adult.data", "5d7c39d7b8804f071cdd1f2a7c460872", _UCI_ADULT + "adult.data"),
        DataFile("adult.test", "35238206dfdf7f1fe215bbb874adecdc", _UCI_ADULT + "adult.test"),
    ),
    page="https://archive.ics.uci.edu/dataset/2/adult",
)

#: ``adult-synthetic``: pool size, features (the last one is A itself), default bias.
SYNTHETIC_SAMPLES: Final = 12_000
SYNTHETIC_FEATURES: Final = 12
SYNTHETIC_BIAS: Final = 1.5


def read_adult_rows(lines: Iterable[str], where: str) -> tuple[list[list[str]], list[int]]:
    """Parse Adult's comma-separated rows: the 14 fields and the label, '?' rows dropped.

    Handles both files' forms: ``adult.test``'s first line (``|1x3 Cross validator``),
    its labels' trailing ``.`` (``>50K.``), blank lines and spaces after the commas.

    Parameters
    ----------
    lines : Iterable[str]
        The file's lines.
    where : str
        The file's name, for errors.

    Returns
    -------
    tuple[list[list[str]], list[int]]
        The kept rows' 14 fields, and their labels (1 for ``>50K``).

    Raises
    ------
    ValueError
        If a row has not 15 fields, an unknown label, an unknown category or a
        non-numeric number; the message names the file, the line and the column.
    """
    rows: list[list[str]] = []
    labels: list[int] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("|"):
            continue
        fields = [f.strip() for f in text.split(",")]
        if len(fields) != len(ADULT_COLUMNS) + 1:
            raise ValueError(
                f"{where} line {number}: expected {len(ADULT_COLUMNS) + 1} comma-separated "
                f"fields, got {len(fields)}"
            )
        if "?" in fields:
            continue
        label = fields[-1].rstrip(".")
        if label not in ("<=50K", ">50K"):
            raise ValueError(f"{where} line {number}: income must be <=50K or >50K, got {label!r}")
        for column, value in zip(ADULT_COLUMNS, fields, strict=False):
            if column in ADULT_CATEGORIES and value not in ADULT_CATEGORIES[column]:
                raise ValueError(f"{where} line {number}: {column} {value!r} is not a category")
            if column in ADULT_NUMERIC:
                try:
                    float(value)
                except ValueError:
                    raise ValueError(
                        f"{where} line {number}: {column} must be a number, got {value!r}"
                    ) from None
        rows.append(fields[:-1])
        labels.append(int(label == ">50K"))
    return rows, labels


def encode_adult(rows: list[list[str]], sensitive: str = "sex") -> tuple[np.ndarray, np.ndarray]:
    """One-hot and standardise Adult rows: features (n, 105) float32 and the attribute.

    Numeric columns are standardised with the mean and standard deviation of ``rows``
    (a column with no spread is only centred).

    Raises
    ------
    ValueError
        If ``sensitive`` is not ``"sex"`` or ``"race"``, or there are no rows.
    """
    if sensitive not in ADULT_PRIVILEGED:
        raise ValueError(f"sensitive must be one of {tuple(ADULT_PRIVILEGED)}, got {sensitive!r}")
    if not rows:
        raise ValueError("no Adult rows left (every row missing or '?')")
    columns = {name: [row[i] for row in rows] for i, name in enumerate(ADULT_COLUMNS)}
    numeric = np.array([columns[name] for name in ADULT_NUMERIC], dtype=np.float64).T
    spread = numeric.std(axis=0)
    numeric = (numeric - numeric.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    blocks = [numeric]
    for name, categories in ADULT_CATEGORIES.items():
        index = {c: i for i, c in enumerate(categories)}
        onehot = np.zeros((len(rows), len(categories)))
        onehot[np.arange(len(rows)), [index[v] for v in columns[name]]] = 1.0
        blocks.append(onehot)
    attribute = np.array(
        [v == ADULT_PRIVILEGED[sensitive] for v in columns[sensitive]], dtype=np.int64
    )
    return np.concatenate(blocks, axis=1).astype(np.float32), attribute


@dataclass(frozen=True)
class AdultTable:
    """Adult's kept rows, ``adult.data``'s first, then ``adult.test``'s.

    Parameters
    ----------
    rows : tuple[tuple[str, ...], ...]
        The 14 fields of every row without a ``?``.
    labels : np.ndarray
        int64, 1 for ``>50K``.
    from_test_file : np.ndarray
        bool, True for the rows of ``adult.test`` (AFL's test set).
    """

    rows: tuple[tuple[str, ...], ...]
    labels: np.ndarray
    from_test_file: np.ndarray


def parse_adult(contents: dict[str, bytes]) -> AdultTable:
    """Adult's rows from the bytes of ``adult.data`` and ``adult.test`` (:func:`read_adult_rows`).

    Raises
    ------
    ValueError
        As :func:`read_adult_rows`, naming the file.
    """
    rows: list[list[str]] = []
    labels: list[int] = []
    from_test: list[bool] = []
    for file in ADULT_SOURCE.files:
        lines = contents[file.name].decode("utf-8").splitlines()
        part_rows, part_labels = read_adult_rows(lines, file.name)
        rows += part_rows
        labels += part_labels
        from_test += [file.name == "adult.test"] * len(part_rows)
    return AdultTable(
        rows=tuple(tuple(row) for row in rows),
        labels=np.asarray(labels, dtype=np.int64),
        from_test_file=np.asarray(from_test, dtype=bool),
    )


@functools.lru_cache(maxsize=2)
def read_adult(data_root: str, download: bool = False) -> AdultTable:
    """Adult's rows from ``<data_root>/uci-adult/``, each file's MD5 checked first.

    Cached per process (the arrays are read-only).

    Raises
    ------
    FileNotFoundError
        If a file is missing and ``download`` is false; the message names the folder,
        UCI's address of each missing file and ``download=true``.
    fairfl.data.files.DataFileError
        If a file is not the published one (a wrong or truncated copy), naming it and
        the expected MD5.
    ValueError
        As :func:`read_adult_rows`.
    """
    table = parse_adult(read_verified(ADULT_SOURCE, data_root, download=download))
    table.labels.setflags(write=False)
    table.from_test_file.setflags(write=False)
    return table


def load_adult(
    data_root: str | Path, sensitive: str = "sex", *, download: bool = False
) -> tuple[np.ndarray, ...]:
    """Adult's pool from ``<data_root>/uci-adult/``, encoded (:func:`encode_adult`).

    Returns
    -------
    tuple[np.ndarray, ...]
        ``x`` (n, 105) float32, ``y`` int64 (1: >50K), ``a`` int64 (1: Male or White).

    Raises
    ------
    FileNotFoundError, fairfl.data.files.DataFileError, ValueError
        As :func:`read_adult`.
    """
    table = read_adult(str(data_root), download)
    x, a = encode_adult([list(row) for row in table.rows], sensitive)
    return x, table.labels.copy(), a


def adult_doctorate(data_root: str, download: bool = False) -> np.ndarray:
    """Whether each row of Adult's pool has education ``Doctorate`` (AFL's PhD client).

    Aligned with :func:`load_sensitive_pool`'s ``"adult"`` arrays; int64, 1 for a PhD.

    Raises
    ------
    FileNotFoundError, fairfl.data.files.DataFileError, ValueError
        As :func:`read_adult`.
    """
    education = ADULT_COLUMNS.index("education")
    rows = read_adult(data_root, download).rows
    return np.array([row[education] == "Doctorate" for row in rows], dtype=np.int64)


def synthetic_pool(
    seed: int,
    num_samples: int = SYNTHETIC_SAMPLES,
    bias: float = SYNTHETIC_BIAS,
    privileged_share: float = 0.5,
) -> tuple[np.ndarray, ...]:
    """A pool with a planted binary attribute A and a chosen bias against A = 0.

    ``A ~ Bernoulli(privileged_share)``; features ``z ~ N(0, I)`` of dimension 11, the
    first three shifted by ``0.8 A`` (proxies of A, as Adult's relationship and
    occupation are of sex), and A itself as the 12th feature; the label
    ``y ~ Bernoulli(sigmoid(w·z + bias (A - 1/2) - 1))`` with fixed ``w`` (a unit
    vector times 2, drawn once from seed 0). ``bias`` = 0 makes y independent of A given
    z; ``bias`` > 0 raises the positive rate of A = 1 (P(y=1) is 0.39 in the default
    pool, Adult's 0.24).

    Returns
    -------
    tuple[np.ndarray, ...]
        ``x`` (n, 12) float32, ``y`` int64, ``a`` int64.

    Raises
    ------
    ValueError
        If a setting is out of range.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not np.isfinite(bias):
        raise ValueError(f"bias must be finite, got {bias}")
    if not 0.0 < privileged_share < 1.0:
        raise ValueError(f"privileged_share must be in (0, 1), got {privileged_share}")
    weights = np.random.default_rng(0).normal(size=SYNTHETIC_FEATURES - 1)
    weights *= 2.0 / np.linalg.norm(weights)
    rng = np.random.default_rng([seed, 37])
    a = (rng.random(num_samples) < privileged_share).astype(np.int64)
    z = rng.normal(size=(num_samples, SYNTHETIC_FEATURES - 1))
    z[:, :3] += 0.8 * a[:, None]
    logits = z @ weights + bias * (a - 0.5) - 1.0
    y = (rng.random(num_samples) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    x = np.concatenate([z, a[:, None]], axis=1).astype(np.float32)
    return x, y, a


@functools.lru_cache(maxsize=4)
def load_sensitive_pool(
    name: str, data_root: str, download: bool = False
) -> tuple[np.ndarray, ...]:
    """``(x, y, a)`` of ``"adult"`` (from ``data_root/uci-adult``) or ``"adult-synthetic"``.

    Cached per process; the arrays are read-only. Like Adult, the synthetic pool is one
    fixed data set (pool seed 0): a run's seed changes its partition, splits and model.
    ``download`` fetches Adult's missing files from UCI (:func:`read_adult`).
    """
    if name == "adult":
        arrays = load_adult(data_root, download=download)
    elif name == "adult-synthetic":
        arrays = synthetic_pool(0)
    else:
        raise ValueError(f"dataset must be one of {SENSITIVE_DATASETS}, got {name!r}")
    for array in arrays:
        array.setflags(write=False)
    return arrays
