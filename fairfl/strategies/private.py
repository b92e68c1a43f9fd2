"""Which rules central DP (:mod:`fairfl.privacy`) can calibrate, and attaching it to one.

The noise of :class:`~fairfl.privacy.central.CentralFixedClipping` is ``z C max_k |λ_k|``:
the sensitivity of ``w^t - Σ_k λ_k (w^t - w_k)`` to one clipped update. A rule whose new
model is not of that form has another sensitivity, which is refused here rather than
guessed:

* FedMGDA+ and its variants (fedavg-n, fedmgda-plain, mgda-prox) and FedFV normalise or
  project each update and pick λ by a QP or conflicts over the private updates themselves;
* q-FedSGD steps along gradients divided by Σ h_k.

RC-FL is refused under every ``dp`` mode (:func:`clear_scalar_refusal`): its η^{t+1}
averages a scalar the clients report in the clear.

FedAdam, FedYogi and FedFa step from their weighted average w̄ (server optimiser,
momentum): central DP noises w̄, which is of the form, before the step
(:class:`~fairfl.strategies.core.reweighted.StepsFromWeightedAverage`), so the step and the
moments it keeps are post-processing. FedFa's weights read the accuracies the clients
send, private under ``dp-accuracy-noise-multiplier`` (:mod:`fairfl.privacy.signal`), which
only a rule that reads an accuracy may ask for (:func:`accuracy_refusal`).

q-FFL's step is of the form, with λ_k = L F_k^q / Σ h_j, but h_j reads the update's
norm: under DP it is computed from the clipped update (the clients' ``qffl-h`` is not
used) and the noise is calibrated to the step's own bound given the losses,
:func:`~fairfl.strategies.qffl_step.qffl_sensitivity_share`, not to max λ.

Distributed DP (``dp = "distributed"``, under SecAgg+) sizes the clients' noise before
masking, so the server must know every weight then (:data:`KNOWN_WEIGHTS`); rules whose
clients compute their own weights are refused (:func:`distributed_refusal`).
"""

from __future__ import annotations

from fairfl.contract import keys
from fairfl.privacy.adaptive import AdaptiveClipping
from fairfl.privacy.central import CentralFixedClipping
from fairfl.privacy.config import PrivacySettings
from fairfl.privacy.distributed import DistributedNoise
from fairfl.privacy.local import LocalNoise
from fairfl.strategies.core.base import FairStrategy
from fairfl.strategies.secure import AggregatesClearScalars, secure_form_of

__all__ = [
    "ACCURACY_METRICS",
    "KNOWN_WEIGHTS",
    "accuracy_refusal",
    "attach_privacy",
    "clear_scalar_refusal",
    "distributed_refusal",
    "privacy_refusal",
]


#: The train metrics that are a client's accuracy (FedFa's Acc_k, after or before training).
ACCURACY_METRICS = (keys.ACC_AFTER_TRAINING, keys.ACC_BEFORE_TRAINING)


def accuracy_refusal(strategy: FairStrategy, settings: PrivacySettings) -> str | None:
    """Why ``dp-accuracy-noise-multiplier`` cannot apply to ``strategy``, or None if it can.

    Only an accuracy a rule asks for is noised; a rule that reads none would release
    nothing the account counts.
    """
    if settings.dp_accuracy_noise_multiplier <= 0:
        return None
    if any(key in ACCURACY_METRICS for key in strategy.required_metrics):
        return None
    name = strategy.registry_name or type(strategy).__name__
    return (
        f"run config dp-accuracy-noise-multiplier > 0 noises the training accuracy a rule "
        f"reads (FedFa's); strategy {name} reads none: set it to 0"
    )


def clear_scalar_refusal(strategy: FairStrategy) -> str | None:
    """Why no DP mode covers ``strategy``'s state, or None: it averages clear client scalars.

    RC-FL's η^{t+1} is the W-weighted mean of the η_j its clients report in the clear
    (:class:`~fairfl.strategies.secure.AggregatesClearScalars`), sent to every client
    next round: a release of the clients' data no noise of any ``dp`` mode covers.
    """
    if not isinstance(strategy, AggregatesClearScalars):
        return None
    return (
        f"{strategy.rule_name}'s state moves with a scalar each client reports in the clear "
        "(RC-FL's eta^{t+1}, the weighted mean of the clients' eta_j, sent to every client), "
        "which no noise covers"
    )


def privacy_refusal(strategy: FairStrategy) -> str | None:
    """Why central DP cannot be calibrated to ``strategy``'s update, or None if it can."""
    if not strategy.caps_client_share:
        return (
            f"{strategy.rule_name}'s update is not w - Σ λ_k (w - w_k) (it normalises, projects "
            "or re-solves over the private updates): its sensitivity is not max λ·C"
        )
    return None


#: The secure forms' weights the server knows when it sends the parts: counts it read in
#: the clear, TERM's tilt of the clear losses, weights it broadcasts (distributed DP sizes
#: the clients' noise to the largest).
KNOWN_WEIGHTS = ("num-examples", "term", "broadcast")


def distributed_refusal(strategy: FairStrategy) -> str | None:
    """Why distributed DP cannot size its noise for ``strategy``, or None if it can."""
    name = strategy.registry_name or type(strategy).__name__
    form = secure_form_of(type(strategy))
    if form is None or form.weight is None:
        return f"strategy {name} has no secure form (it cannot run under SecAgg+)"
    if form.weight not in KNOWN_WEIGHTS:
        return (
            f"strategy {name}'s clients compute their own weights ({form.weight}) from "
            "what the server never sees, so it cannot size the noise to the largest weight; "
            f"distributed DP takes the rules whose weights are {', '.join(KNOWN_WEIGHTS)}"
        )
    return None


def attach_privacy(
    strategy: FairStrategy, settings: PrivacySettings, *, sampling_rate: float, seed: int
) -> None:
    """Give ``strategy`` central DP with fixed clipping, local or distributed DP.

    ``dp = "distributed"`` runs under SecAgg+ (:class:`fairfl.strategies.secure.SecureRounds`
    sizes and accounts the clients' noise): only rules whose weights the server knows
    (:data:`KNOWN_WEIGHTS`); the server's optimiser or step from the noisy sum is
    post-processing, so FedAdam and FedYogi are covered.

    Raises
    ------
    ValueError
        If the rule's update is not one the noise is calibrated to (:func:`privacy_refusal`),
        its state moves with clear client scalars (:func:`clear_scalar_refusal`), or
        accuracy noise is asked of a rule that reads no accuracy (:func:`accuracy_refusal`).
    """
    refused = accuracy_refusal(strategy, settings)
    if refused is not None:
        raise ValueError(refused)
    reason = clear_scalar_refusal(strategy)
    if reason is not None:
        raise ValueError(f"run config dp={settings.dp!r} is refused for this rule: {reason}")
    if settings.dp == "distributed":
        reason = distributed_refusal(strategy)
        if reason is not None:
            raise ValueError(f"run config dp='distributed' is refused for this rule: {reason}")
        strategy.privacy = DistributedNoise(settings, sampling_rate=1.0, seed=seed)
        return
    if settings.dp == "local":  # any rule: it post-processes what the clients released
        if strategy.reply_arrays_key != strategy.arrayrecord_key:
            raise ValueError(
                f"run config dp='local' is refused for this rule: {strategy.rule_name}'s "
                "clients reply with a gradient, not the model the local noise covers"
            )
        strategy.privacy = LocalNoise(settings, sampling_rate=sampling_rate, seed=seed)
        return
    reason = privacy_refusal(strategy)
    if reason is not None:
        raise ValueError(f"run config dp={settings.dp!r} is refused for this rule: {reason}")
    central = AdaptiveClipping if settings.dp == "central-adaptive" else CentralFixedClipping
    strategy.privacy = central(settings, sampling_rate=sampling_rate, seed=seed)
