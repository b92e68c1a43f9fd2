"""What a round does differently under central DP: clipped replies, capped shares.

:class:`PrivateRounds` is a base of :class:`~fairfl.strategies.core.base.FairStrategy`, kept
apart so that the orchestrator stays the round's outline; with ``dp = "none"``
(``privacy`` is None) each method is the plain round's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from flwr.app import ArrayRecord
from numpy.typing import NDArray

from fairfl.contract import TrainReply, array_view
from fairfl.privacy.central import CentralFixedClipping
from fairfl.strategies.core.records import TrainRoundRecord


class PrivateRounds:
    """The DP hooks of a rule's round (:mod:`fairfl.privacy`): clipping and the share cap."""

    #: Central DP (``dp = "central-fixed"``; set by
    #: :func:`~fairfl.strategies.private.attach_privacy`), or None: off.
    privacy: CentralFixedClipping | None = None
    #: Whether the rule noises its weighted average itself, before a server step from it
    #: (:class:`~fairfl.strategies.core.reweighted.StepsFromWeightedAverage`): the step is then
    #: post-processing, and :meth:`noised` adds nothing to the stepped model.
    noises_average: ClassVar[bool] = False
    #: Messages sent per round and phase (``{"train": m}``).
    sampled: dict[int, dict[str, int]]
    max_client_share: float
    current_arrays: ArrayRecord | None

    def sampled_train(self, server_round: int) -> int:
        """m: the train messages sent in ``server_round`` (0 before any)."""
        return self.sampled.get(server_round, {}).get("train", 0)

    def share_cap(self, server_round: int) -> float:
        """The largest share of λ one client may carry: ``max_client_share``, or κ/m under DP."""
        if self.privacy is None:
            return self.max_client_share
        return min(self.max_client_share, self.privacy.share_cap(self.sampled_train(server_round)))

    def clipped_replies(
        self, replies: list[TrainReply], record: TrainRoundRecord
    ) -> list[TrainReply]:
        """The replies with each update ``w_k - w^t`` clipped to ``dp-clipping-norm``.

        Records the share of replies clipped (``dp-clip-fraction``). DP off, or no
        reply: the replies as they are.
        """
        if self.privacy is None or not replies:
            return replies
        assert self.current_arrays is not None  # set by configure_train
        global_arrays = [array_view(array) for array in self.current_arrays.values()]
        clipped, fraction = self.privacy.clip(global_arrays, [r.arrays for r in replies])
        record.diagnostics["dp-clip-fraction"] = fraction
        return [replace(r, arrays=arrays) for r, arrays in zip(replies, clipped, strict=True)]

    def noised(
        self,
        server_round: int,
        result: tuple[list[NDArray[Any]], dict[str, Any]],
        record: TrainRoundRecord,
    ) -> list[NDArray[Any]]:
        """The rule's new model, with the round's Gaussian noise added when DP is on.

        ``result`` is the rule's ``(new arrays, diagnostics)``; the diagnostics go into
        the round's record, then the noise's settings (σ, the effective multiplier). A rule
        that :attr:`noises_average` noised its average already: its model as it is.
        """
        new_arrays, diagnostics = result
        record.diagnostics.update(diagnostics)
        if self.privacy is None or self.noises_average:
            return new_arrays
        return self.with_noise(server_round, new_arrays, record)

    def with_noise(
        self, server_round: int, arrays: list[NDArray[Any]], record: TrainRoundRecord
    ) -> list[NDArray[Any]]:
        """``arrays`` plus the round's Gaussian noise (DP on); σ and z_eff into the record."""
        assert self.privacy is not None  # callers check
        noisy, noise = self.privacy.release(
            arrays,
            record.weights.values(),
            self.sampled_train(server_round),
            record.diagnostics.get("dp-sensitivity-weight"),  # q-FFL's bound, if set
        )
        record.diagnostics.update(noise)
        return noisy

    def account(self, record: TrainRoundRecord, *, released: bool) -> None:
        """Add a released round to the privacy account (its ε in the record); drop a skipped one."""
        if self.privacy is None:
            return
        if released:
            record.diagnostics.update(self.privacy.commit())
        else:
            record.diagnostics.update(self.privacy.discard())

    def private_train_config(self) -> dict[str, float]:
        """Train-config keys of DP the clients act on (their loss noise); DP off: none."""
        return {} if self.privacy is None else self.privacy.train_config()
