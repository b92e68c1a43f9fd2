"""Planted client groups with their own labels: the ``"groups"`` partitioner.

Equitable-FL's experiments (A. Upadhyay, A. Hashemi, arXiv:2410.19207, Table 1 and
§5.1; spec ``docs/specs/spec-activation-clustering.md`` §4.2) plant groups of clients of
unequal size that hold disjoint sets of labels. On MNIST, clients 0-3 hold classes 0-3
and clients 4-9 hold classes 4-9, and every client gets the same number of images (800)
of each of its classes, so the larger group also has more data.

Run-config keys: ``group-sizes`` (clients per group, e.g. ``"4,6"``; they must add up to
``num-partitions``), ``group-labels`` (the classes of each group, e.g. ``"0-3|4-9"``;
empty: contiguous blocks of classes in proportion to the group sizes) and
``group-samples-per-class`` (samples of each class per client; 0: the largest number
every class can supply). Partition ids are assigned group by group: the first
``sizes[0]`` partitions are group 0, and so on (:func:`planted_groups`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

PARTITIONER = "groups"
"""Name of this partitioner in `fairfl.data.PARTITIONERS`."""

# Seed stream of np.random.default_rng((seed, stream)); partition.py uses 1-3.
_GROUPS_STREAM = 4

_MIN_PARTITION_SIZE = 3  # = fairfl.data.partition.MIN_PARTITION_SIZE (2 train, 1 test)


@dataclass(frozen=True)
class GroupLayout:
    """Which clients form which group, and which classes each group holds.

    Attributes
    ----------
    sizes : tuple[int, ...]
        Clients per group, each >= 1.
    labels : tuple[tuple[int, ...], ...]
        The sorted classes of each group.
    samples_per_class : int
        Samples of each of its classes per client; 0 picks the largest feasible.
    """

    sizes: tuple[int, ...]
    labels: tuple[tuple[int, ...], ...]
    samples_per_class: int = 0

    @property
    def num_partitions(self) -> int:
        """Total number of clients."""
        return sum(self.sizes)


def parse_group_sizes(text: str) -> tuple[int, ...]:
    """Parse ``"3,7"`` into ``(3, 7)``.

    Raises
    ------
    ValueError
        If an entry is not an int >= 1 or there is none.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        sizes = ()
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(
            f"group-sizes must be comma-separated ints >= 1 such as '3,7', got {text!r}"
        )
    return sizes


def default_group_labels(sizes: tuple[int, ...], num_classes: int) -> tuple[tuple[int, ...], ...]:
    """Contiguous blocks of classes in proportion to the group sizes.

    Largest-remainder rounding of ``num_classes · size / Σ sizes`` with at least one
    class per group; ties go to the earlier group. The paper's MNIST layout (4 and 6
    clients, classes 0-3 and 4-9) and its CIFAR-100 layout (2, 3 and 5 clients, 20, 30
    and 50 classes) follow this rule.

    Raises
    ------
    ValueError
        If there are more groups than classes.
    """
    if len(sizes) > num_classes:
        raise ValueError(
            f"group-sizes has {len(sizes)} groups but the data set has only {num_classes} "
            "classes: every group needs a class"
        )
    total = sum(sizes)
    quota = [num_classes * s / total for s in sizes]
    counts = [max(1, math.floor(q)) for q in quota]
    remainder = [q - math.floor(q) for q in quota]
    by_remainder = sorted(range(len(sizes)), key=lambda g: (-remainder[g], g))
    for g in by_remainder[: max(0, num_classes - sum(counts))]:
        counts[g] += 1
    while sum(counts) > num_classes:  # the minimum of 1 took classes from larger groups
        larger = [g for g in range(len(sizes)) if counts[g] > 1]
        g = max(larger, key=lambda g: (counts[g] - quota[g], counts[g], -g))
        counts[g] -= 1
    blocks: list[tuple[int, ...]] = []
    start = 0
    for count in counts:
        blocks.append(tuple(range(start, start + count)))
        start += count
    return tuple(blocks)


def parse_group_labels(
    text: str, sizes: tuple[int, ...], num_classes: int
) -> tuple[tuple[int, ...], ...]:
    """Parse ``"0-2|3-9"`` or ``"0,1,2|3,4,5,6,7,8,9"``; empty gives the default blocks.

    Groups are separated by ``|``; inside a group, classes by ``,``, and ``a-b`` is the
    range a..b inclusive.

    Raises
    ------
    ValueError
        If the number of groups differs from ``len(sizes)``, a group is empty, or a
        class is not an int in ``[0, num_classes)``.
    """
    if not str(text).strip():
        return default_group_labels(sizes, num_classes)
    groups = str(text).split("|")
    if len(groups) != len(sizes):
        raise ValueError(
            f"group-labels must list {len(sizes)} groups separated by '|' (one per entry of "
            f"group-sizes), got {len(groups)} in {text!r}"
        )
    parsed: list[tuple[int, ...]] = []
    for group in groups:
        classes: set[int] = set()
        for item in (p.strip() for p in group.split(",")):
            if not item:
                continue
            try:
                if "-" in item:
                    low, high = (int(v) for v in item.split("-"))
                    classes.update(range(low, high + 1))
                else:
                    classes.add(int(item))
            except ValueError:
                raise ValueError(
                    f"group-labels entries must be ints or ranges 'a-b', got {item!r} in {text!r}"
                ) from None
        if not classes:
            raise ValueError(f"group-labels has an empty group in {text!r}")
        bad = sorted(c for c in classes if not 0 <= c < num_classes)
        if bad:
            raise ValueError(
                f"group-labels classes must be in [0, {num_classes}), got {bad} in {text!r}"
            )
        parsed.append(tuple(sorted(classes)))
    return tuple(parsed)


def group_layout(
    group_sizes: str,
    group_labels: str,
    group_samples_per_class: int,
    *,
    num_partitions: int,
    num_classes: int,
) -> GroupLayout:
    """Parse and check the three run-config keys of the ``"groups"`` partitioner.

    Raises
    ------
    ValueError
        If a key is malformed, the sizes do not add up to ``num_partitions`` or
        ``group_samples_per_class`` < 0 (the message names the key).
    """
    sizes = parse_group_sizes(group_sizes)
    if sum(sizes) != num_partitions:
        raise ValueError(
            f"group-sizes {group_sizes!r} adds up to {sum(sizes)} clients, but num-partitions "
            f"is {num_partitions}: they must be equal"
        )
    if (
        isinstance(group_samples_per_class, bool)
        or not isinstance(group_samples_per_class, int)
        or group_samples_per_class < 0
    ):
        raise ValueError(
            f"group-samples-per-class must be an int >= 0, got {group_samples_per_class!r}"
        )
    labels = parse_group_labels(group_labels, sizes, num_classes)
    return GroupLayout(sizes=sizes, labels=labels, samples_per_class=group_samples_per_class)


def planted_groups(sizes: tuple[int, ...] | list[int]) -> NDArray[np.int64]:
    """Group id of every partition id: ``(3, 7) -> [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]``."""
    return np.repeat(np.arange(len(sizes), dtype=np.int64), list(sizes))


def groups_partition(labels: np.ndarray, layout: GroupLayout, seed: int) -> list[np.ndarray]:
    """Give every client of group g the same number of samples of each class of g.

    Each class's samples are shuffled, then dealt in consecutive blocks of
    ``q = samples_per_class`` to the clients holding that class, in partition order.
    Samples left over are not used (as in the paper, which gives 800 images of each
    class to every client). Classes may be shared by several groups; the classes of
    the paper's layouts are not.

    Parameters
    ----------
    labels : np.ndarray
        Label of every sample of the pool.
    layout : GroupLayout
        From :func:`group_layout`.
    seed : int
        Seed of the shuffles, >= 0.

    Returns
    -------
    list[np.ndarray]
        One int64 index array per partition (in random order), disjoint.

    Raises
    ------
    ValueError
        If a class cannot supply ``q`` samples to each of its clients, or a client
        would get fewer than 3 samples.
    """
    labels = np.asarray(labels)
    groups = planted_groups(layout.sizes)
    holders: dict[int, list[int]] = {}
    for pid, g in enumerate(groups.tolist()):
        for c in layout.labels[g]:
            holders.setdefault(c, []).append(pid)
    available = {c: int(np.count_nonzero(labels == c)) for c in holders}
    feasible = min(available[c] // len(pids) for c, pids in holders.items())
    q = layout.samples_per_class or feasible
    if q > feasible or q == 0:
        c = min(holders, key=lambda c: available[c] // len(holders[c]))
        raise ValueError(
            f"partitioner 'groups': class {c} has {available[c]} samples for "
            f"{len(holders[c])} clients, so at most {feasible} samples per class per "
            f"client are possible; asked for {q or 'at least 1'} (group-samples-per-class)"
        )
    smallest = min(q * len(layout.labels[g]) for g in range(len(layout.sizes)))
    if smallest < _MIN_PARTITION_SIZE:
        raise ValueError(
            f"partitioner 'groups' gives a client only {smallest} samples; every partition "
            f"needs at least {_MIN_PARTITION_SIZE} (2 train, 1 test): raise "
            "group-samples-per-class"
        )
    rng = np.random.default_rng((seed, _GROUPS_STREAM))
    parts: list[list[np.ndarray]] = [[] for _ in range(layout.num_partitions)]
    for c in sorted(holders):
        members = rng.permutation(np.flatnonzero(labels == c))
        for slot, pid in enumerate(holders[c]):
            parts[pid].append(members[slot * q : (slot + 1) * q])
    return [rng.permutation(np.concatenate(p)).astype(np.int64) for p in parts]
