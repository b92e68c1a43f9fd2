"""Run-config keys of secure aggregation, parsed into :class:`SecAggSettings`.

The defaults are those of Flower's :class:`flwr.server.workflow.SecAggPlusWorkflow`
(flwr 1.42: ``max_weight=1000.0``, ``clipping_range=8.0``, ``quantization_range=2**22``,
``modulus_range=2**32``). The workflow has no default for the number of shares and
the reconstruction threshold; fairfl takes those of Flower's secure-aggregation example
(``examples/flower-secure-aggregation``: 3 shares, threshold 2). Each key's default and
bound are declared once, on its field (:mod:`fairfl.fields`); a bad value is refused
with a :class:`~fairfl.fields.ParameterError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from fairfl.contract.config import dataclass_fields_from_config
from fairfl.fields import Fields, ParameterError, Spec, choice, integer, real

#: Values of the ``secure-aggregation`` run-config key.
MODES = ("none", "secagg+")
#: The range the masks are drawn from, and the modulus of every sum (Flower's default).
MODULUS_RANGE = 2**32


@dataclass(frozen=True)
class SecAggSettings(Fields):
    """Secure-aggregation settings of a run (run-config keys hyphenated).

    Attributes
    ----------
    secure_aggregation : str
        ``"none"`` (each client's update reaches the rule) or ``"secagg+"`` (SecAgg+,
        Bell et al., CCS 2020: the server learns only the sum of the masked updates).
    secagg_num_shares : float
        Shares of each client's secrets (its neighbourhood, itself included). An integer
        >= 3, or a fraction in (0, 1] of the round's sampled clients (Flower's rule).
    secagg_reconstruction_threshold : float
        Shares needed to rebuild a secret: an integer >= 2 below ``secagg-num-shares``,
        or a fraction in (0, 1] of the shares. A round in which a client's neighbourhood
        keeps fewer live clients than this is skipped.
    secagg_clipping_range : float
        C in (0, 1e12]: every masked value (weight ratio × payload) is clipped to [-C, C].
    secagg_quantization_range : int
        Q in [2, 2^32): the integers [0, Q] a value of [-C, C] is mapped to (Flower's
        check, ``SecAggPlusWorkflow._check_init_params``: the masks' modulus is larger
        than Q, so that one quantised value fits).
    secagg_max_weight : float
        The largest client weight (> 0); a client whose weight is larger refuses to
        send (its ratio to this is quantised with Q).
    """

    states_type: ClassVar[bool] = False  # a run config's types are checked when parsed

    secure_aggregation: str = choice("none", MODES, key="secure-aggregation")
    # > 0 here; as counts (above 1) in check().
    secagg_num_shares: float = real(3.0, key="secagg-num-shares", lower=0.0, lower_open=True)
    secagg_reconstruction_threshold: float = real(
        2.0, key="secagg-reconstruction-threshold", lower=0.0, lower_open=True
    )
    secagg_clipping_range: float = real(
        8.0, key="secagg-clipping-range", lower=0.0, upper=1e12, lower_open=True, span=True
    )
    secagg_quantization_range: int = integer(
        4194304, key="secagg-quantization-range", lower=2, upper=MODULUS_RANGE - 1
    )
    secagg_max_weight: float = real(1000.0, key="secagg-max-weight", lower=0.0, lower_open=True)

    @classmethod
    def subject(cls, name: str, spec: Spec) -> str:
        """A message is about the run-config key (``run config secagg-max-weight ...``)."""
        return f"run config {spec.key}"

    def check(self) -> None:
        """What no one field's bound says: shares and threshold as counts; t < k.

        Raises
        ------
        ParameterError
            Naming ``secagg-num-shares`` or ``secagg-reconstruction-threshold``.
        """
        shares, threshold = self.secagg_num_shares, self.secagg_reconstruction_threshold
        if shares > 1 and (shares != int(shares) or shares < 3):
            raise ParameterError(
                "secagg_num_shares",
                "run config secagg-num-shares must be a fraction in (0, 1] of the sampled "
                f"clients or an integer >= 3, got {shares!r}",
                "secagg-num-shares",
            )
        if threshold > 1 and threshold != int(threshold):
            raise ParameterError(
                "secagg_reconstruction_threshold",
                "run config secagg-reconstruction-threshold must be a fraction in (0, 1] of "
                f"the shares or an integer >= 2, got {threshold!r}",
                "secagg-reconstruction-threshold",
            )
        if shares > 1 and threshold > 1 and threshold >= shares:
            raise ParameterError(
                "secagg_reconstruction_threshold",
                f"run config secagg-reconstruction-threshold ({threshold:g}) must be less "
                f"than secagg-num-shares ({shares:g}): Bell et al.'s SecAgg+ needs t < k",
                "secagg-reconstruction-threshold",
            )

    @property
    def enabled(self) -> bool:
        """Whether the run aggregates securely."""
        return self.secure_aggregation != "none"

    @property
    def max_clients(self) -> int:
        """The most clients one sum can hold: 2 n Q < 2^32.

        Each quantised value lies in [0, Q], so n of them sum below 2^32 without a wrap;
        the weights' sum lies in [-nQ, nQ] (a weight may be negative), which the modular
        sum tells apart only if 2 n Q < 2^32
        (:func:`~fairfl.secagg.protocol.signed_weight_total`).
        """
        return (MODULUS_RANGE - 1) // (2 * self.secagg_quantization_range)

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> SecAggSettings:
        """Parse the keys this dataclass knows; others are ignored."""
        return cls(**dataclass_fields_from_config(cls, run_config))

    def shares_and_threshold(self, num_sampled: int) -> tuple[int, int]:
        """The round's number of shares and threshold for ``num_sampled`` clients.

        Flower's rule (``SecAggPlusWorkflow.setup_stage``): a fraction of the sampled
        clients, rounded up to an odd number (each client's neighbourhood is itself and
        ``k // 2`` clients on each side of it on a ring), at least 3, at most all; the
        threshold a fraction of the shares, at least 2.
        """
        shares = self.secagg_num_shares
        if shares <= 1:
            count = round(shares * num_sampled)
            if count < num_sampled and count % 2 == 0:
                count += 1
            if count <= 2:
                count = num_sampled
        else:
            count = int(shares)
        if count < num_sampled and count % 2 == 0:
            count += 1  # the ring holds k // 2 neighbours each side: k odd
        count = min(count, num_sampled)
        threshold = self.secagg_reconstruction_threshold
        needed = max(round(threshold * count), 2) if threshold <= 1 else int(threshold)
        return count, needed
