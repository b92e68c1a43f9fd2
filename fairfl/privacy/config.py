"""Run-config keys of differential privacy, parsed into :class:`PrivacySettings`."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Values of the ``dp`` run-config key.
MODES = ("none", "central-fixed", "central-adaptive", "local", "distributed")
#: Values of ``dp-calibration``: how σ covers the rule's weights (see :class:`PrivacySettings`).
CALIBRATIONS = ("max-weight", "cap")
#: Under ``dp = "distributed"`` the secure sum's range C_s must hold C (1 + NOISE_RANGE z):
#: 6 standard deviations of a client's noise (at most z C, for t = 1) beyond the largest
#: weighted payload C (:mod:`~fairfl.privacy.distributed`).
NOISE_RANGE = 6.0


@dataclass(frozen=True)
class PrivacySettings:
    """Differential-privacy settings of a run (run-config keys hyphenated).

    Attributes
    ----------
    dp : str
        ``"none"`` (off, the default) or ``"central-fixed"``: the server clips each
        client's update ``w_k - w^t`` to L2 norm C and adds Gaussian noise to the new model
        (central DP with fixed clipping, McMahan et al., ICLR 2018);
        ``"central-adaptive"``: the same with C adapted to a quantile of the update norms
        (:mod:`~fairfl.privacy.adaptive`); or ``"local"``: each
        client clips its update to C and adds N(0, (z C)²) before sending it
        (:mod:`~fairfl.privacy.local`); or ``"distributed"`` (with
        ``secure-aggregation = "secagg+"`` only): each client clips its update to C and
        adds its share of the noise before masking, so that the unmasked sum carries
        noise of standard deviation z times the sum's sensitivity
        (:mod:`~fairfl.privacy.distributed`).
    dp_clipping_norm : float
        C > 0, the L2 bound of one client's update.
    dp_noise_multiplier : float
        z > 0: the noise's standard deviation over the round's sensitivity.
    dp_delta : float
        δ in (0, 1) at which ε is reported.
    dp_weight_cap : float
        κ >= 1: in ``cap`` calibration no client weighs more than κ/m of the round's
        weights (m: the clients sampled for the round).
    dp_calibration : str
        ``"max-weight"``: ``σ = z·C·max_k |λ_k|``, the round's largest actual weight (z holds
        exactly, σ varies by round). ``"cap"``: the weights are capped at κ/m and
        renormalised, σ = z·C·κ/m is fixed ahead; a round whose weights still exceed
        κ/m (fewer replies than m/κ) says so in its record.
    dp_loss_noise_multiplier : float
        z_F >= 0: each client clips its loss F_k(w^t) to [0, B] and adds N(0, (z_F B)²)
        before sending it (:mod:`~fairfl.privacy.signal`); 0 (the default): the loss is
        sent in the clear, as the rules read it without DP.
    dp_loss_bound : float
        B > 0, the bound of the loss a client sends under loss noise.
    dp_target_quantile : float
        γ in [0, 1] of ``central-adaptive``: the share of updates C should not clip.
    dp_clip_lr : float
        η_C > 0 of ``central-adaptive``'s geometric update of C.
    dp_clipped_count_stddev : float
        σ_b >= 0 of ``central-adaptive``'s noisy count; 0: m/20 (Andrew et al.'s and
        Flower's default). A value given must exceed z/2.
    dp_dropout_tolerance : float
        ρ in [0, 1) of ``distributed``: the share of the clients given a part of the
        secure sum that may drop before it is unmasked with the full noise. Each client's
        noise is sized for t = ceil((1 - ρ) m) survivors of the m; fewer survivors leave
        less noise, accounted as such.
    """

    dp: str = "none"
    dp_clipping_norm: float = 1.0
    dp_noise_multiplier: float = 1.0
    dp_delta: float = 1e-5
    dp_weight_cap: float = 1.0
    dp_calibration: str = "max-weight"
    dp_loss_noise_multiplier: float = 0.0
    dp_loss_bound: float = 5.0
    dp_target_quantile: float = 0.5
    dp_clip_lr: float = 0.2
    dp_clipped_count_stddev: float = 0.0
    dp_dropout_tolerance: float = 0.0

    def __post_init__(self) -> None:
        """Check every value; the error names the run-config key."""
        if self.dp not in MODES:
            raise ValueError(f"run config dp must be one of {MODES}, got {self.dp!r}")
        if self.dp_calibration not in CALIBRATIONS:
            raise ValueError(
                f"run config dp-calibration must be one of {CALIBRATIONS}, "
                f"got {self.dp_calibration!r}"
            )
        checks = (
            ("dp-clipping-norm", self.dp_clipping_norm, self.dp_clipping_norm > 0, "> 0"),
            ("dp-noise-multiplier", self.dp_noise_multiplier, self.dp_noise_multiplier > 0, "> 0"),
            ("dp-delta", self.dp_delta, 0 < self.dp_delta < 1, "in (0, 1)"),
            ("dp-weight-cap", self.dp_weight_cap, self.dp_weight_cap >= 1, ">= 1 (κ in κ/m)"),
            ("dp-loss-noise-multiplier", self.dp_loss_noise_multiplier,
             self.dp_loss_noise_multiplier >= 0, ">= 0"),
            ("dp-loss-bound", self.dp_loss_bound, self.dp_loss_bound > 0, "> 0"),
            ("dp-target-quantile", self.dp_target_quantile,
             0 <= self.dp_target_quantile <= 1, "in [0, 1]"),
            ("dp-clip-lr", self.dp_clip_lr, self.dp_clip_lr > 0, "> 0"),
            ("dp-clipped-count-stddev", self.dp_clipped_count_stddev,
             self.dp_clipped_count_stddev == 0
             or self.dp_clipped_count_stddev > self.dp_noise_multiplier / 2,
             "> dp-noise-multiplier / 2 (or 0: m/20)"),
            ("dp-dropout-tolerance", self.dp_dropout_tolerance,
             0 <= self.dp_dropout_tolerance < 1, "in [0, 1)"),
        )  # fmt: skip
        for key, value, ok, bound in checks:
            if not math.isfinite(value) or not ok:
                raise ValueError(f"run config {key} must be a finite number {bound}, got {value!r}")
        if self.dp_loss_noise_multiplier > 0 and self.dp == "none":
            raise ValueError(
                "run config dp-loss-noise-multiplier > 0 needs dp (the account is the model's): "
                "set dp, or dp-loss-noise-multiplier = 0"
            )

        if self.dp == "distributed" and self.dp_calibration == "cap":
            raise ValueError(
                "run config dp-calibration='cap' is refused with dp='distributed': the "
                "clients' noise is sized to the round's largest weight (max-weight)"
            )

    @property
    def enabled(self) -> bool:
        """Whether the run adds noise (``dp`` is not ``"none"``)."""
        return self.dp != "none"
