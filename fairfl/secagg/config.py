"""Run-config keys of secure aggregation, parsed into :class:`SecAggSettings`.

The defaults are those of Flower's :class:`flwr.server.workflow.SecAggPlusWorkflow`
(flwr 1.42: ``max_weight=1000.0``, ``clipping_range=8.0``, ``quantization_range=2**22``,
``modulus_range=2**32``). The workflow has no default for the number of shares and
the reconstruction threshold; fairfl takes those of Flower's secure-aggregation example
(``examples/flower-secure-aggregation``: 3 shares, threshold 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairfl.contract.config import dataclass_fields_from_config

#: Values of the ``secure-aggregation`` run-config key.
MODES = ("none", "secagg+")
#: The range the masks are drawn from, and the modulus of every sum (Flower's default).
MODULUS_RANGE = 2**32


@dataclass(frozen=True)
class SecAggSettings:
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
        C > 0: every masked value (weight ratio × payload) is clipped to [-C, C].
    secagg_quantization_range : int
        Q >= 2: the integers [0, Q] a value of [-C, C] is mapped to.
    secagg_max_weight : float
        The largest client weight (> 0); a client whose weight is larger refuses to
        send (its ratio to this is quantised with Q).
    """

    secure_aggregation: str = "none"
    secagg_num_shares: float = 3.0
    secagg_reconstruction_threshold: float = 2.0
    secagg_clipping_range: float = 8.0
    secagg_quantization_range: int = 4194304
    secagg_max_weight: float = 1000.0

    def __post_init__(self) -> None:
        """Check every value; the error names the run-config key."""
        if self.secure_aggregation not in MODES:
            raise ValueError(
                f"run config secure-aggregation must be one of {MODES}, "
                f"got {self.secure_aggregation!r}"
            )
        shares, threshold = self.secagg_num_shares, self.secagg_reconstruction_threshold
        for key, value in (
            ("secagg-num-shares", shares),
            ("secagg-reconstruction-threshold", threshold),
            ("secagg-clipping-range", self.secagg_clipping_range),
            ("secagg-max-weight", self.secagg_max_weight),
        ):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"run config {key} must be a finite number > 0, got {value!r}")
        if shares > 1 and (shares != int(shares) or shares < 3):
            raise ValueError(
                "run config secagg-num-shares must be a fraction in (0, 1] of the sampled "
                f"clients or an integer >= 3, got {shares!r}"
            )
        if threshold > 1 and threshold != int(threshold):
            raise ValueError(
                "run config secagg-reconstruction-threshold must be a fraction in (0, 1] of "
                f"the shares or an integer >= 2, got {threshold!r}"
            )
        if shares > 1 and threshold > 1 and threshold >= shares:
            raise ValueError(
                f"run config secagg-reconstruction-threshold ({threshold:g}) must be less "
                f"than secagg-num-shares ({shares:g}): Bell et al.'s SecAgg+ needs t < k"
            )
        if self.secagg_clipping_range > 1e12:
            raise ValueError(
                "run config secagg-clipping-range must be at most 1e12, "
                f"got {self.secagg_clipping_range!r}"
            )
        quantization = self.secagg_quantization_range
        # Flower's check (SecAggPlusWorkflow._check_init_params): the masks' modulus is
        # larger than Q, so that one quantised value fits.
        if not 2 <= quantization < MODULUS_RANGE:
            raise ValueError(
                f"run config secagg-quantization-range must be in [2, {MODULUS_RANGE}), "
                f"got {quantization!r}"
            )

    @property
    def enabled(self) -> bool:
        """Whether the run aggregates securely."""
        return self.secure_aggregation != "none"

    @property
    def max_clients(self) -> int:
        """The most clients one sum can hold: n Q < 2^32 (no wrap of the modular sum)."""
        return (MODULUS_RANGE - 1) // self.secagg_quantization_range

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
