"""The immutable round object a rule reads: the accepted replies of one training round.

Built once per round from the replies that passed intake (validated, sorted by client
key), so a rule's weights function reads arrays of the round instead of the replies:
``round.shares`` (p_i), ``round.losses`` (F_i(w^t)), ``round.client_keys``. Its arrays
are read-only: a rule cannot change what another part of the round reads. The changes a
rule makes to its own state wait for the round's acceptance (:class:`DeferredUpdates`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fairfl.contract import TrainReply, client_key
from fairfl.strategies.core.aggregation import sample_weights


@dataclass(frozen=True)
class TrainRound:
    """One round's accepted replies, as the rule's weights function reads them.

    Attributes
    ----------
    server_round : int
        The round (with any resume offset).
    replies : tuple[TrainReply, ...]
        The accepted replies, in aggregation order (sorted by client key).
    num_examples : NDArray[np.int64]
        n_i of each reply (1 each in a round drawn ∝ n_i: the draw already weighs them).
    shares : NDArray[np.float64]
        ``p_i = n_i / Σ_j n_j`` (:func:`~fairfl.strategies.core.aggregation.sample_weights`).
    losses : NDArray[np.float64] | None
        F_i(w^t), each reply's loss before training (``train_loss_key``, after any
        loss clipping); ``None`` for a rule that reads no loss.
    client_keys : tuple[str, ...]
        The stable key of each reply's client (:func:`fairfl.contract.client_key`).
    """

    server_round: int
    replies: tuple[TrainReply, ...]
    num_examples: NDArray[np.int64]
    shares: NDArray[np.float64]
    losses: NDArray[np.float64] | None
    client_keys: tuple[str, ...]

    @classmethod
    def of(
        cls, server_round: int, replies: Sequence[TrainReply], loss_key: str | None
    ) -> TrainRound:
        """The round of ``replies``; ``loss_key`` names the loss metric (``None``: no loss).

        The replies were validated by intake: every loss is a finite number >= 0.
        """
        counts = np.array([r.num_examples for r in replies], dtype=np.int64)
        shares = sample_weights(counts)
        losses = None
        if loss_key is not None:
            losses = np.array([float(r.metrics[loss_key]) for r in replies], dtype=np.float64)  # type: ignore[arg-type]
            losses.flags.writeable = False
        for array in (counts, shares):
            array.flags.writeable = False
        keys = tuple(client_key(r.node_id, r.partition_id) for r in replies)
        return cls(server_round, tuple(replies), counts, shares, losses, keys)

    @property
    def loss_values(self) -> NDArray[np.float64]:
        """:attr:`losses`, for a rule that declared it reads them (``needs_loss``)."""
        assert self.losses is not None, "the rule reads losses but does not declare needs_loss"
        return self.losses


class DeferredUpdates:
    """The changes to a rule's state that one aggregation pass defers until acceptance.

    A rule's ``aggregate`` must not change the rule's state (AFL's λ, FedFV's history):
    the pass runs again without a reply it finds bad, and a round whose model is unusable
    is skipped. It hands each change to :meth:`defer` instead; ``aggregate_train``
    applies them once the round is accepted, and discards those of a pass it repeats.
    """

    def __init__(self) -> None:
        self._updates: list[Callable[[], None]] = []

    def defer(self, update: Callable[[], None]) -> None:
        """Call ``update`` once the round is accepted."""
        self._updates.append(update)

    def set(self, target: object, **values: Any) -> None:
        """Set these attributes of ``target`` (the rule) once the round is accepted."""
        self.defer(partial(_set_attributes, target, values))

    def discard(self) -> None:
        """Forget the deferred updates (their pass was rejected, or its round skipped)."""
        self._updates = []

    def apply(self) -> None:
        """Make the deferred updates, in the order they were deferred, and forget them."""
        updates, self._updates = self._updates, []
        for update in updates:
            update()


def _set_attributes(target: object, values: dict[str, Any]) -> None:
    for name, value in values.items():
        setattr(target, name, value)
