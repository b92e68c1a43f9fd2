"""Partitioners (pool -> disjoint client index sets) and the per-client train/test split.

Every function here is deterministic: the same labels and arguments give the same
index arrays, whatever the global RNG state. Each random step draws from its own
generator, seeded by ``(seed, stream)``, so changing one step leaves the others as
they were.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

from fairfl.data.groups import GroupLayout, groups_partition

PARTITIONERS: tuple[str, ...] = ("iid", "dirichlet", "shards", "groups", "phd", "natural")
"""Names accepted as ``partitioner``. ``"natural"`` is for synthetic data only.
``"groups"`` plants label-disjoint client groups (`fairfl.data.groups`). ``"phd"`` is
AFL's split of Adult only (`phd_partition`)."""

MIN_PARTITION_SIZE = 3
"""Fewest samples of a partition: 2 train samples and 1 test sample."""

# Seed streams: np.random.default_rng((seed, stream, ...)).
_IID_STREAM = 1
_SHARDS_STREAM = 2
_SPLIT_STREAM = 3
_VALIDATION_STREAM = 4


def partition_indices(
    labels: np.ndarray,
    *,
    partitioner: str,
    num_partitions: int,
    seed: int,
    dirichlet_alpha: float,
    shards_per_partition: int,
    groups: GroupLayout | None = None,
) -> list[np.ndarray]:
    """Split the indices ``0..len(labels)-1`` into ``num_partitions`` disjoint sets.

    Parameters
    ----------
    labels : np.ndarray
        Label of every sample of the pool, shape ``(n,)``.
    partitioner : str
        ``"iid"``, ``"dirichlet"``, ``"shards"``, ``"groups"`` or ``"phd"`` (see the
        functions of the same name with a ``_partition`` suffix; ``"phd"`` reads
        ``labels`` as the PhD indicator).
    num_partitions : int
        Number of partitions, >= 1.
    seed : int
        Seed, >= 0.
    dirichlet_alpha : float
        Concentration of ``"dirichlet"``, > 0.
    shards_per_partition : int
        Shards per partition of ``"shards"``, >= 1.
    groups : GroupLayout | None
        The planted groups of ``"groups"`` (`fairfl.data.groups.group_layout`);
        required for it, ignored otherwise.

    Returns
    -------
    list[np.ndarray]
        One int64 index array per partition; together they hold every index once
        (``"groups"``: at most once, it leaves samples unused).

    Raises
    ------
    ValueError
        If a partition would get fewer than `MIN_PARTITION_SIZE` samples.

    """
    if partitioner == "dirichlet":
        return dirichlet_partition(labels, num_partitions, dirichlet_alpha, seed)
    if partitioner == "phd":
        return phd_partition(labels, num_partitions)
    if partitioner == "groups":
        if groups is None:
            raise ValueError("partitioner 'groups' needs a GroupLayout (groups=...)")
        return groups_partition(labels, groups, seed)
    if partitioner == "iid":
        parts = iid_partition(len(labels), num_partitions, seed)
    else:
        parts = shard_partition(labels, num_partitions, shards_per_partition, seed)
    smallest = min(range(num_partitions), key=lambda pid: len(parts[pid]))
    if len(parts[smallest]) < MIN_PARTITION_SIZE:
        raise ValueError(
            f"partitioner {partitioner!r} splits {len(labels)} samples into {num_partitions} "
            f"partitions, leaving partition {smallest} with {len(parts[smallest])} samples; "
            f"every partition needs at least {MIN_PARTITION_SIZE} (2 train, 1 test): "
            "use fewer partitions"
        )
    return parts


def iid_partition(num_samples: int, num_partitions: int, seed: int) -> list[np.ndarray]:
    """Split ``num_samples`` shuffled indices into near-equal partitions.

    Uses flwr-datasets' `IidPartitioner` on a seeded permutation of the indices:
    `IidPartitioner` itself takes contiguous shards and does not shuffle (Flower's
    ``FederatedDataset`` shuffles before partitioning). Sizes differ by at most 1.

    Parameters
    ----------
    num_samples : int
        Size of the pool.
    num_partitions : int
        Number of partitions, >= 1.
    seed : int
        Seed of the permutation, >= 0.

    Returns
    -------
    list[np.ndarray]
        One int64 index array per partition.

    """
    order = np.random.default_rng((seed, _IID_STREAM)).permutation(num_samples)
    # Imported on use: flwr-datasets pulls in pandas and matplotlib (seconds per
    # ClientApp process), and a SuperNode partitions once per process at most.
    from datasets import Dataset
    from flwr_datasets.partitioner import IidPartitioner

    partitioner = IidPartitioner(num_partitions=num_partitions)
    partitioner.dataset = Dataset.from_dict({"index": order})
    return [_indices_of(partitioner, pid) for pid in range(num_partitions)]


def phd_partition(doctorate: np.ndarray, num_partitions: int) -> list[np.ndarray]:
    """AFL's two clients of UCI Adult: the PhDs (partition 0) and everyone else (1).

    Mohri, Sivek and Suresh (Agnostic Federated Learning, ICML 2019, §5) split Adult by
    the education attribute into a "doctorate" domain and a "non-doctorate" one, and
    the q-FFL paper (Li, Sanjabi, Beirami and Smith, ICLR 2020) compares with AFL on
    that split; its code (``fair_flearn/data/adult/create_dataset.py``) lists the PhD
    client first.

    Parameters
    ----------
    doctorate : np.ndarray
        1 where the sample's education is ``Doctorate``, 0 elsewhere, shape ``(n,)``.
    num_partitions : int
        Must be 2.

    Returns
    -------
    list[np.ndarray]
        The int64 indices of the PhD samples, then those of the others.

    Raises
    ------
    ValueError
        If ``num_partitions`` is not 2, or either client would get fewer than
        `MIN_PARTITION_SIZE` samples.

    """
    if num_partitions != 2:
        raise ValueError(
            f"partitioner 'phd' makes AFL's two clients (PhD, non-PhD): num_partitions "
            f"must be 2, got {num_partitions}"
        )
    is_phd = np.asarray(doctorate) == 1
    parts = [np.flatnonzero(is_phd).astype(np.int64), np.flatnonzero(~is_phd).astype(np.int64)]
    for pid, part in enumerate(parts):
        if len(part) < MIN_PARTITION_SIZE:
            raise ValueError(
                f"partitioner 'phd' leaves partition {pid} with {len(part)} samples; "
                f"every partition needs at least {MIN_PARTITION_SIZE} (2 train, 1 test)"
            )
    return parts


def dirichlet_partition(
    labels: np.ndarray, num_partitions: int, alpha: float, seed: int
) -> list[np.ndarray]:
    """Split by label skew: class k's samples go to partitions in Dir(α·1) proportions.

    Uses flwr-datasets' `DirichletPartitioner` (no self-balancing) with
    ``min_partition_size`` = `MIN_PARTITION_SIZE`: it redraws all proportions,
    up to 10 more times, until every partition is that large. Partitions are
    therefore drawn from Dir(α) conditioned on that minimum size.

    Parameters
    ----------
    labels : np.ndarray
        Label of every sample, shape ``(n,)``.
    num_partitions : int
        Number of partitions, >= 1.
    alpha : float
        Concentration α > 0; small α gives few labels per partition.
    seed : int
        Seed of the draws, >= 0.

    Returns
    -------
    list[np.ndarray]
        One int64 index array per partition.

    Raises
    ------
    ValueError
        If no draw gives every partition `MIN_PARTITION_SIZE` samples.

    """
    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner

    partitioner = DirichletPartitioner(
        num_partitions=num_partitions,
        partition_by="label",
        alpha=float(alpha),
        min_partition_size=MIN_PARTITION_SIZE,
        self_balancing=False,
        seed=seed,
    )
    partitioner.dataset = Dataset.from_dict(
        {"index": np.arange(len(labels)), "label": np.asarray(labels)}
    )
    try:
        with warnings.catch_warnings():
            # One warning per redraw ("This is not a desired behavior"); the
            # ValueError below is the only outcome worth reporting.
            warnings.filterwarnings("ignore", message="The specified min_partition_size")
            return [_indices_of(partitioner, pid) for pid in range(num_partitions)]
    except ValueError as err:
        raise ValueError(
            f"partitioner 'dirichlet' could not split {len(labels)} samples into "
            f"{num_partitions} partitions of at least {MIN_PARTITION_SIZE} samples (2 train, "
            f"1 test) with dirichlet_alpha={alpha} in 11 draws: increase dirichlet_alpha "
            f"or use fewer partitions ({err})"
        ) from err


def shard_partition(
    labels: np.ndarray, num_partitions: int, shards_per_partition: int, seed: int
) -> list[np.ndarray]:
    """Split pathologically: sort by label, cut into shards, deal shards out.

    McMahan et al. (FedAvg, AISTATS 2017): the pool, sorted by label, is cut into
    ``num_partitions * shards_per_partition`` contiguous shards; each partition
    gets ``shards_per_partition`` random shards, so it sees only a few labels.

    Written in numpy rather than with flwr-datasets' `ShardPartitioner` because
    that one drops samples: with equal shards of ``floor(n / num_shards)`` samples
    it leaves the remainder unused, and with ``keep_incomplete_shard=True`` it
    may leave out a whole shard. Here shard sizes differ by at most 1 and every
    sample is used once. Samples of one label are shuffled before sorting, so
    the shards of a label hold random samples of it.

    Parameters
    ----------
    labels : np.ndarray
        Label of every sample, shape ``(n,)``.
    num_partitions : int
        Number of partitions, >= 1.
    shards_per_partition : int
        Shards per partition, >= 1.
    seed : int
        Seed of the shuffles, >= 0.

    Returns
    -------
    list[np.ndarray]
        One int64 index array per partition, in random order.

    """
    rng = np.random.default_rng((seed, _SHARDS_STREAM))
    shuffled = rng.permutation(len(labels))
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shards = np.array_split(by_label, num_partitions * shards_per_partition)
    dealt = rng.permutation(len(shards)).reshape(num_partitions, shards_per_partition)
    return [
        rng.permutation(np.concatenate([shards[shard] for shard in row])).astype(np.int64)
        for row in dealt
    ]


def num_test_samples(num_samples: int, test_fraction: float) -> int:
    """Return how many of a partition's ``num_samples`` samples go to its test split.

    ``round(test_fraction * num_samples)`` (halves round up), clipped so that the
    test split has at least 1 sample and the train split at least 2.

    Parameters
    ----------
    num_samples : int
        Size of the partition, >= `MIN_PARTITION_SIZE`.
    test_fraction : float
        Fraction in (0, 1).

    Returns
    -------
    int
        The test size.

    """
    return min(max(math.floor(test_fraction * num_samples + 0.5), 1), num_samples - 2)


def train_test_split(
    labels: np.ndarray, test_fraction: float, seed: int, partition_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Split one partition into train and test positions, stratified by label.

    The test size is `num_test_samples`. Each label gets test samples in
    proportion to its count (largest-remainder rounding, ties broken at random),
    so the test split follows the partition's own label distribution; a label
    with a single sample may land in either split. Which samples of a label go
    to test is random.

    Parameters
    ----------
    labels : np.ndarray
        Labels of the partition's samples, shape ``(n,)``, n >= `MIN_PARTITION_SIZE`.
    test_fraction : float
        Fraction in (0, 1).
    seed : int
        Seed, >= 0.
    partition_id : int
        The partition's id; with ``seed`` it seeds the split.

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        Sorted int64 positions into ``labels`` of the train and the test samples.

    """
    rng = np.random.default_rng((seed, _SPLIT_STREAM, partition_id))
    return _stratified_split(labels, num_test_samples(len(labels), test_fraction), rng)


def num_validation_samples(num_train: int, validation_fraction: float) -> int:
    """Return how many of a client's ``num_train`` training samples go to validation.

    ``round(validation_fraction * num_train)`` (halves round up), clipped so that
    validation and the remaining training part each keep at least 1 sample; 0 when
    ``validation_fraction`` is 0 (no validation split).

    Parameters
    ----------
    num_train : int
        Size of the training split, >= 2 (`train_test_split` leaves at least 2).
    validation_fraction : float
        Fraction in [0, 1).

    Returns
    -------
    int
        The validation size.

    """
    if validation_fraction == 0:
        return 0
    return min(max(math.floor(validation_fraction * num_train + 0.5), 1), num_train - 1)


def validation_split(
    labels: np.ndarray, validation_fraction: float, seed: int, partition_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Carve a validation split out of one client's training split, stratified by label.

    As `train_test_split`, with the size `num_validation_samples` and its own random
    stream, so the test split never changes with ``validation_fraction``.

    Parameters
    ----------
    labels : np.ndarray
        Labels of the client's *training* samples, shape ``(n,)``, n >= 2.
    validation_fraction : float
        Fraction in [0, 1); 0 gives an empty validation split.
    seed : int
        Seed, >= 0.
    partition_id : int
        The partition's id; with ``seed`` it seeds the split.

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        Sorted int64 positions into ``labels`` of the kept training and the
        validation samples.

    """
    rng = np.random.default_rng((seed, _VALIDATION_STREAM, partition_id))
    return _stratified_split(labels, num_validation_samples(len(labels), validation_fraction), rng)


def _stratified_split(
    labels: np.ndarray, num_held_out: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the kept and the ``num_held_out`` held-out samples (per-label quotas)."""
    num_test = num_held_out
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    quota = counts * (num_test / len(labels))
    per_class = np.floor(quota).astype(np.int64)
    # The largest fractional parts get the remaining test samples. Those parts are
    # < 1 and sum to the remainder, so only labels with a positive part are chosen
    # and no label gets more test samples than it has.
    remainder = num_test - int(per_class.sum())
    order = np.lexsort((rng.random(len(classes)), -(quota - per_class)))
    per_class[order[:remainder]] += 1
    is_test = np.zeros(len(labels), dtype=bool)
    for label_index, count in enumerate(per_class):
        members = np.flatnonzero(inverse == label_index)
        is_test[rng.choice(members, size=count, replace=False)] = True
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _indices_of(
    partitioner: IidPartitioner | DirichletPartitioner, partition_id: int
) -> np.ndarray:
    return np.asarray(partitioner.load_partition(partition_id)["index"], dtype=np.int64)
