"""Run-config keys of differential privacy, parsed into :class:`PrivacySettings`.

Each key's default and bound are declared once, on its field (:mod:`fairfl.fields`); a
bad value is refused with a :class:`~fairfl.fields.ParameterError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fairfl.fields import Fields, ParameterError, Spec, choice, real
from fairfl.privacy.signal import scalar_noise_multiplier

#: Values of the ``dp`` run-config key.
MODES = ("none", "central-fixed", "central-adaptive", "local", "distributed")
#: Values of ``dp-calibration``: how σ covers the rule's weights (see :class:`PrivacySettings`).
CALIBRATIONS = ("max-weight", "cap")
#: Under ``dp = "distributed"`` the secure sum's range C_s must hold C (1 + NOISE_RANGE z):
#: 6 standard deviations of a client's noise (at most z C, for t = 1) beyond the largest
#: weighted payload C (:mod:`~fairfl.privacy.distributed`).
NOISE_RANGE = 6.0


@dataclass(frozen=True)
class PrivacySettings(Fields):
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
    dp_accuracy_noise_multiplier : float
        z_A >= 0: each client clips the training accuracy a rule asks for (FedFa's Acc_k)
        to [0, 1] and adds N(0, z_A²) before sending it (:mod:`~fairfl.privacy.signal`);
        0 (the default): the accuracy is sent in the clear.
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

    states_type: ClassVar[bool] = False  # a run config's types are checked when parsed

    dp: str = choice("none", MODES, key="dp")
    dp_clipping_norm: float = real(1.0, key="dp-clipping-norm", lower=0.0, lower_open=True)
    dp_noise_multiplier: float = real(1.0, key="dp-noise-multiplier", lower=0.0, lower_open=True)
    dp_delta: float = real(
        1e-5, key="dp-delta", lower=0.0, upper=1.0, lower_open=True, upper_open=True, span=True
    )
    dp_weight_cap: float = real(1.0, key="dp-weight-cap", lower=1.0, note=" (κ in κ/m)")
    dp_calibration: str = choice("max-weight", CALIBRATIONS, key="dp-calibration")
    dp_loss_noise_multiplier: float = real(
        0.0, key="dp-loss-noise-multiplier", lower=0.0, note=" (0: losses in the clear)"
    )
    dp_accuracy_noise_multiplier: float = real(
        0.0, key="dp-accuracy-noise-multiplier", lower=0.0, note=" (0: accuracies in the clear)"
    )
    dp_loss_bound: float = real(5.0, key="dp-loss-bound", lower=0.0, lower_open=True)
    dp_target_quantile: float = real(0.5, key="dp-target-quantile", lower=0.0, upper=1.0, span=True)
    dp_clip_lr: float = real(0.2, key="dp-clip-lr", lower=0.0, lower_open=True)
    dp_clipped_count_stddev: float = real(
        0.0, key="dp-clipped-count-stddev", lower=0.0, note=" (0: m/20)"
    )
    dp_dropout_tolerance: float = real(
        0.0, key="dp-dropout-tolerance", lower=0.0, upper=1.0, upper_open=True, span=True
    )

    @classmethod
    def subject(cls, name: str, spec: Spec) -> str:
        """A message is about the run-config key (``run config dp-delta must be ...``)."""
        return f"run config {spec.key}"

    def check(self) -> None:
        """What no one field's bound says; the error names the key it refuses."""
        stddev = self.dp_clipped_count_stddev
        if stddev != 0 and stddev <= self.dp_noise_multiplier / 2:
            raise ParameterError(
                "dp_clipped_count_stddev",
                "run config dp-clipped-count-stddev must be > dp-noise-multiplier / 2 "
                f"({self.dp_noise_multiplier / 2:g}) or 0 (m/20), got {stddev!r}",
                "dp-clipped-count-stddev",
            )
        for name in ("dp_loss_noise_multiplier", "dp_accuracy_noise_multiplier"):
            key = name.replace("_", "-")
            if getattr(self, name) > 0 and self.dp == "none":
                raise ParameterError(
                    name,
                    f"run config {key} > 0 needs dp (the account is the model's): set dp, "
                    f"or {key} = 0",
                    key,
                )
        if self.dp == "distributed" and self.dp_calibration == "cap":
            raise ParameterError(
                "dp_calibration",
                "run config dp-calibration='cap' is refused with dp='distributed': the "
                "clients' noise is sized to the round's largest weight (max-weight)",
                "dp-calibration",
            )

    @property
    def enabled(self) -> bool:
        """Whether the run adds noise (``dp`` is not ``"none"``)."""
        return self.dp != "none"

    @property
    def signal_noise_multiplier(self) -> float:
        """The clients' scalar releases as one Gaussian's multiplier (0: none noised).

        :func:`~fairfl.privacy.signal.scalar_noise_multiplier` of z_F and z_A.
        """
        return scalar_noise_multiplier(
            self.dp_loss_noise_multiplier, self.dp_accuracy_noise_multiplier
        )
