"""One client's train and test data: partition the pool, then split the partition.

`load_client_data` is a pure function of its arguments. A SuperNode computes
only its own partition from ``(partition_id, num_partitions)`` and gets exactly
what the same client gets in simulation. The pool and the partition index lists
are cached in-process, so loading every client of a federation in one process
partitions once, and the index lists also in a file cache shared by processes
(`fairfl.data.cache`: a fresh ClientApp process per message partitions only once per
machine); the returned arrays are fresh copies each time.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import Required, TypedDict, Unpack

import numpy as np

from fairfl.data import heart, sensitive, synthetic
from fairfl.data.cache import cached_partition
from fairfl.data.groups import GroupLayout, group_layout
from fairfl.data.partition import (
    PARTITIONERS,
    num_test_samples,
    num_validation_samples,
    partition_indices,
    train_test_split,
    validation_split,
)
from fairfl.data.sources import (
    NATURAL_FEDERATIONS,
    check_dataset,
    dataset_info,
    load_pool,
    resolve_data_root,
    to_model_input,
)


@dataclass(frozen=True, eq=False)
class ClientData:
    """A client's local train, test and (optional) validation splits.

    ``eq=False``: arrays have no single truth value, so instances compare by
    identity; compare the arrays with `numpy.array_equal`.

    Attributes
    ----------
    x_train : np.ndarray
        float32 samples, shape ``(n_train, *input_shape)`` (see `dataset_info`).
    y_train : np.ndarray
        int64 labels, shape ``(n_train,)``.
    x_test : np.ndarray
        float32 samples, shape ``(n_test, *input_shape)``.
    y_test : np.ndarray
        int64 labels, shape ``(n_test,)``.
    x_val : np.ndarray
        float32 samples of the validation split carved from the training part
        (``validation_fraction`` of `load_client_data`); empty when there is none.
    y_val : np.ndarray
        int64 labels of the validation split, shape ``(n_val,)``.
    a_train, a_test, a_val : np.ndarray
        int64 sensitive attribute of each sample of the three splits, for the data sets
        that have one (`fairfl.data.sensitive`); empty for the others.

    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_val: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    y_val: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    a_train: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    a_test: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    a_val: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @property
    def has_attribute(self) -> bool:
        """Whether every sample carries a sensitive attribute (`fairfl.data.sensitive`)."""
        return len(self.a_train) == len(self.y_train) and len(self.a_train) > 0


class FederationArguments(TypedDict, total=False):
    """The keyword arguments that fix every client's data (all but ``partition_id``).

    Those of :func:`load_client_data` (which documents each, with its default), taken
    alike by :func:`partition_sizes` and :func:`check_federation`;
    :meth:`fairfl.settings.RunSettings.data_kwargs` builds them from a run config.
    """

    dataset: Required[str]
    partitioner: Required[str]
    num_partitions: Required[int]
    seed: int
    dirichlet_alpha: float
    shards_per_partition: int
    test_fraction: float
    data_root: str
    download: bool
    group_sizes: str
    group_labels: str
    group_samples_per_class: int
    validation_fraction: float


def load_client_data(*, partition_id: int, **arguments: Unpack[FederationArguments]) -> ClientData:
    """Load client ``partition_id``'s share of a data set, split into train and test.

    The pool is partitioned into ``num_partitions`` disjoint shares that together
    hold every sample once; the share is then split into train and test,
    stratified by label (`fairfl.data.partition.train_test_split`). Every client
    gets at least 2 train samples and 1 test sample.

    Parameters
    ----------
    dataset : str
        One of `DATASETS`. Synthetic(α, β) is ``"synthetic-<α>-<β>"``, e.g.
        ``"synthetic-0-0"`` or ``"synthetic-0.5-0.5"``; ``"synthetic"`` is
        Synthetic(1, 1); ``"synthetic-<α>-<β>-sigma<σ>"`` also sets the σ of the
        device sizes (`fairfl.data.synthetic`).
    partitioner : str
        One of `PARTITIONERS`: ``"iid"`` (uniformly random, near-equal sizes),
        ``"dirichlet"`` (label skew, Dir(``dirichlet_alpha``) per class),
        ``"shards"`` (label-sorted shards, ``shards_per_partition`` each),
        ``"groups"`` (planted label-disjoint groups, ``group_*``) for the
        pooled data sets; ``"natural"`` (device k is partition k) for synthetic
        data sets and the natural federations (``"fed-heart-disease"``: hospital k
        is partition k), and only for them.
    partition_id : int
        This client's partition, in ``[0, num_partitions)``; Flower's
        ``node_config["partition-id"]``.
    num_partitions : int
        Number of partitions (for synthetic data: of devices), >= 1; for a natural
        federation its number of silos (`NATURAL_FEDERATIONS`: 4 for
        ``"fed-heart-disease"``).
    seed : int (default: 0)
        Seed of the partition and of the train/test split, >= 0. For synthetic
        data it also seeds the devices' data.
    dirichlet_alpha : float (default: 0.3)
        Concentration α > 0 of ``"dirichlet"``; small α gives few labels per client.
    shards_per_partition : int (default: 2)
        Shards per client of ``"shards"``, >= 1.
    test_fraction : float (default: 0.3)
        Fraction of each client's samples held out as its test split, in (0, 1). A
        natural federation keeps its publisher's split (`fairfl.data.heart`: FLamby's
        66/34) and refuses any other value.
    data_root : str (default: "")
        Directory of torchvision's files for ``mnist``, ``fashionmnist`` and
        ``cifar10`` (layout: `fairfl.data.vision`); empty means
        ``~/.cache/fairfl/data``.
    download : bool (default: False)
        Download missing torchvision files into ``data_root``.
    group_sizes, group_labels, group_samples_per_class : str, str, int
        The planted groups of partitioner ``"groups"`` (default: ``"4,6"``, ``""``,
        0), ignored by the others; see `fairfl.data.groups.group_layout`.
    validation_fraction : float (default: 0.0)
        Fraction of the *training* split moved to a validation split, in [0, 1)
        (`fairfl.data.partition.validation_split`: stratified, at least 1 sample
        each side); 0: no validation split. The test split is the same for every
        value.

    Returns
    -------
    ClientData
        New arrays, not shared with any cache or earlier call.

    Raises
    ------
    ValueError
        If an argument is invalid, names an unknown data set or partitioner,
        combines a synthetic data set with a partitioner other than
        ``"natural"`` (or the reverse), or if the partition cannot give every
        client 3 samples (2 train, 1 test).
    FileNotFoundError
        If torchvision files are missing and ``download`` is False.

    """
    federation = _Federation(**arguments)
    num_partitions, seed = federation.num_partitions, int(federation.seed)
    if not _is_int(partition_id) or not 0 <= partition_id < num_partitions:
        raise ValueError(
            f"partition_id must be an int in [0, num_partitions={num_partitions}), "
            f"got {partition_id!r}"
        )
    partition_id = int(partition_id)
    dataset, data_root = federation.dataset, resolve_data_root(federation.data_root)
    if dataset == heart.DATASET:
        return _centre_data(federation, partition_id, data_root)
    spec = synthetic.parse_name(dataset)
    if spec is not None:
        alpha, beta, size_sigma = spec
        x, y = synthetic.device_data(alpha, beta, seed, partition_id, size_sigma)
        rows = np.arange(len(y))
    else:
        x, y = load_pool(dataset, data_root, federation.download)
        rows = _partition_lists(federation)[partition_id]
    if federation.partitioner == "phd":
        # AFL's split: adult.data trains, adult.test tests (fairfl.data.sensitive).
        in_test = sensitive.read_adult(data_root, federation.download).from_test_file[rows]
        train, test = np.flatnonzero(~in_test), np.flatnonzero(in_test)
    else:
        train, test = train_test_split(y[rows], float(federation.test_fraction), seed, partition_id)
    kept, validation = validation_split(
        y[rows[train]], float(federation.validation_fraction), seed, partition_id
    )
    train_rows, validation_rows = rows[train][kept], rows[train][validation]
    attribute: dict[str, np.ndarray] = {}
    if dataset in sensitive.SENSITIVE_DATASETS:
        _, _, a = sensitive.load_sensitive_pool(dataset, data_root)
        attribute = {
            "a_train": a[train_rows].copy(),
            "a_test": a[rows[test]].copy(),
            "a_val": a[validation_rows].copy(),
        }
    return ClientData(
        x_train=to_model_input(x[train_rows]),
        y_train=y[train_rows],
        x_test=to_model_input(x[rows[test]]),
        y_test=y[rows[test]],
        x_val=to_model_input(x[validation_rows]),
        y_val=y[validation_rows],
        **attribute,
    )


def _centre_data(federation: _Federation, partition_id: int, data_root: str) -> ClientData:
    """Hospital ``partition_id``'s FLamby split, validation carved from its training part."""
    centre = heart.load_centres(data_root, federation.download)[partition_id]
    kept, validation = validation_split(
        centre.y_train, float(federation.validation_fraction), int(federation.seed), partition_id
    )
    return ClientData(
        x_train=centre.x_train[kept],
        y_train=centre.y_train[kept],
        x_test=centre.x_test.copy(),
        y_test=centre.y_test.copy(),
        x_val=centre.x_train[validation],
        y_val=centre.y_train[validation],
    )


def partition_sizes(**arguments: Unpack[FederationArguments]) -> list[int]:
    """Return the train-split size of every partition, for reports.

    Takes the arguments of `load_client_data` except ``partition_id``, and
    agrees with it: entry i is ``len(load_client_data(..., partition_id=i).y_train)``.
    For synthetic data sets it draws only the devices' sizes, not their samples.

    Parameters
    ----------
    **arguments : FederationArguments
        See `load_client_data`.

    Returns
    -------
    list[int]
        ``num_partitions`` train sizes, by partition id.

    Raises
    ------
    ValueError, FileNotFoundError
        As `load_client_data`.

    """
    federation = _Federation(**arguments)
    spec = synthetic.parse_name(federation.dataset)
    if federation.dataset == heart.DATASET:
        centres = heart.load_centres(resolve_data_root(federation.data_root), federation.download)
        return [
            len(c.y_train) - num_validation_samples(len(c.y_train), federation.validation_fraction)
            for c in centres
        ]
    if spec is not None:
        seed = int(federation.seed)
        sizes = [
            synthetic.device_size(seed, pid, spec[2]) for pid in range(federation.num_partitions)
        ]
    else:
        sizes = [len(rows) for rows in _partition_lists(federation)]
    if federation.partitioner == "phd":
        in_test = sensitive.read_adult(
            resolve_data_root(federation.data_root), federation.download
        ).from_test_file
        train = [int((~in_test[rows]).sum()) for rows in _partition_lists(federation)]
        return [n - num_validation_samples(n, federation.validation_fraction) for n in train]
    train = [size - num_test_samples(size, federation.test_fraction) for size in sizes]
    return [n - num_validation_samples(n, federation.validation_fraction) for n in train]


def check_federation(**arguments: Unpack[FederationArguments]) -> None:
    """Check the arguments of `load_client_data` (but ``partition_id``) without any data.

    Takes the arguments of `partition_sizes`; reads no pool, cuts no partition and draws
    no device, so its cost does not grow with ``num_partitions``.

    Raises
    ------
    ValueError
        As `load_client_data` for the same arguments, naming the argument.

    """
    _Federation(**arguments)


_DEFAULT_TEST_FRACTION = 0.3


@dataclass(frozen=True)
class _Federation:
    """`FederationArguments` with their defaults, checked on construction.

    Hashable: `_partition_lists` caches by it. ``validation_fraction`` does not take
    part in the comparison: the partitions do not depend on it.
    """

    dataset: str
    partitioner: str
    num_partitions: int
    seed: int = 0
    dirichlet_alpha: float = 0.3
    shards_per_partition: int = 2
    test_fraction: float = _DEFAULT_TEST_FRACTION
    data_root: str = ""
    download: bool = False
    group_sizes: str = "4,6"
    group_labels: str = ""
    group_samples_per_class: int = 0
    validation_fraction: float = field(default=0.0, compare=False)

    def groups(self) -> GroupLayout | None:
        """Return the planted groups of partitioner ``"groups"`` (``None`` for others)."""
        if self.partitioner != "groups":
            return None
        return group_layout(
            self.group_sizes,
            self.group_labels,
            self.group_samples_per_class,
            num_partitions=self.num_partitions,
            num_classes=dataset_info(self.dataset).num_classes,
        )

    def __post_init__(self) -> None:
        check_dataset(self.dataset)
        if self.partitioner not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {PARTITIONERS}, got {self.partitioner!r}")
        is_synthetic = synthetic.parse_name(self.dataset) is not None
        if self.dataset in NATURAL_FEDERATIONS:
            self._check_natural_federation()
            return
        if is_synthetic and self.partitioner != "natural":
            raise ValueError(
                f"partitioner must be 'natural' for synthetic dataset {self.dataset!r} "
                f"(device k is partition k), got {self.partitioner!r}"
            )
        if not is_synthetic and self.partitioner == "natural":
            raise ValueError(
                f"partitioner must be one of {PARTITIONERS[:-1]} for dataset "
                f"{self.dataset!r}, got 'natural' (only synthetic datasets have natural "
                "partitions)"
            )
        _check(
            _is_int(self.num_partitions) and self.num_partitions >= 1,
            "num_partitions",
            "an int >= 1",
            self.num_partitions,
        )
        _check(_is_int(self.seed) and self.seed >= 0, "seed", "an int >= 0", self.seed)
        _check(
            _is_real(self.dirichlet_alpha) and self.dirichlet_alpha > 0,
            "dirichlet_alpha",
            "a finite number > 0",
            self.dirichlet_alpha,
        )
        _check(
            _is_int(self.shards_per_partition) and self.shards_per_partition >= 1,
            "shards_per_partition",
            "an int >= 1",
            self.shards_per_partition,
        )
        _check(
            _is_real(self.test_fraction) and 0 < self.test_fraction < 1,
            "test_fraction",
            "a number in (0, 1)",
            self.test_fraction,
        )
        _check(isinstance(self.data_root, str), "data_root", "a str", self.data_root)
        _check(isinstance(self.download, bool), "download", "a bool", self.download)
        self.groups()  # checks the group-* keys of partitioner "groups"
        if self.partitioner == "phd":
            _check(
                self.dataset == "adult",
                "dataset",
                "'adult' for partitioner 'phd' (AFL's PhD / non-PhD split of UCI Adult)",
                self.dataset,
            )
            _check(
                self.num_partitions == 2,
                "num_partitions",
                "2 for partitioner 'phd' (AFL's two clients: PhD, non-PhD)",
                self.num_partitions,
            )
            _check(
                self.test_fraction == _DEFAULT_TEST_FRACTION,
                "test_fraction",
                f"left at its default {_DEFAULT_TEST_FRACTION} for partitioner 'phd', whose "
                "test split is AFL's: the rows of adult.test",
                self.test_fraction,
            )
        _check(
            _is_real(self.validation_fraction) and 0 <= self.validation_fraction < 1,
            "validation_fraction",
            "a number in [0, 1)",
            self.validation_fraction,
        )

    def _check_natural_federation(self) -> None:
        """A natural federation's fixed clients and split (`NATURAL_FEDERATIONS`)."""
        silos = NATURAL_FEDERATIONS[self.dataset]
        if self.partitioner != "natural":
            raise ValueError(
                f"partitioner must be 'natural' for dataset {self.dataset!r} (its {silos} "
                f"hospitals are its clients), got {self.partitioner!r}"
            )
        _check(
            _is_int(self.num_partitions) and self.num_partitions == silos,
            "num_partitions",
            f"{silos} for dataset {self.dataset!r} (one client per hospital)",
            self.num_partitions,
        )
        _check(
            _is_real(self.test_fraction) and self.test_fraction == _DEFAULT_TEST_FRACTION,
            "test_fraction",
            f"left at its default {_DEFAULT_TEST_FRACTION} for dataset {self.dataset!r}, "
            "whose test split is FLamby's fixed 66/34 split of each hospital",
            self.test_fraction,
        )
        _check(_is_int(self.seed) and self.seed >= 0, "seed", "an int >= 0", self.seed)
        _check(isinstance(self.data_root, str), "data_root", "a str", self.data_root)
        _check(isinstance(self.download, bool), "download", "a bool", self.download)
        _check(
            _is_real(self.validation_fraction) and 0 <= self.validation_fraction < 1,
            "validation_fraction",
            "a number in [0, 1)",
            self.validation_fraction,
        )


@functools.lru_cache(maxsize=16)
def _partition_lists(federation: _Federation) -> tuple[np.ndarray, ...]:
    _, labels = load_pool(
        federation.dataset, resolve_data_root(federation.data_root), federation.download
    )
    if federation.partitioner == "phd":  # AFL's split: labels are the PhD indicator
        labels = sensitive.adult_doctorate(
            resolve_data_root(federation.data_root), federation.download
        )
    elif (
        federation.dataset in sensitive.SENSITIVE_DATASETS and federation.partitioner == "dirichlet"
    ):
        # FairFed's heterogeneity (fairfl.data.sensitive): skew the attribute mix.
        _, _, labels = sensitive.load_sensitive_pool(
            federation.dataset, resolve_data_root(federation.data_root)
        )
    settings = {
        "partitioner": federation.partitioner,
        "num_partitions": int(federation.num_partitions),
        "seed": int(federation.seed),
        "dirichlet_alpha": float(federation.dirichlet_alpha),
        "shards_per_partition": int(federation.shards_per_partition),
        "group_sizes": federation.group_sizes,
        "group_labels": federation.group_labels,
        "group_samples_per_class": int(federation.group_samples_per_class),
    }
    lists = cached_partition(
        settings,
        labels,
        lambda: partition_indices(
            labels,
            partitioner=federation.partitioner,
            num_partitions=int(federation.num_partitions),
            seed=int(federation.seed),
            dirichlet_alpha=float(federation.dirichlet_alpha),
            shards_per_partition=int(federation.shards_per_partition),
            groups=federation.groups(),
        ),
    )
    for rows in lists:
        rows.setflags(write=False)
    return tuple(lists)


def _check(ok: bool, name: str, expected: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
