"""Which rules central DP (:mod:`fairfl.privacy`) can calibrate, and attaching it to one.

The noise of :class:`~fairfl.privacy.central.CentralFixedClipping` is ``z C max_k |λ_k|``:
the sensitivity of ``w^t - Σ_k λ_k (w^t - w_k)`` to one clipped update. A rule whose new
model is not of that form has another sensitivity, which is refused here rather than
guessed:

* FedMGDA+ and its variants (fedavg-n, fedmgda-plain, mgda-prox) and FedFV normalise or
  project each update and pick λ by a QP or conflicts over the private updates themselves;
* q-FedSGD steps along gradients divided by Σ h_k;
* FedAdam and FedYogi rescale the mean update by the server optimiser's running moments,
  and FedFa keeps a server momentum of the *un-noised* averages, so noise on the new model
  has no λ C bound (and the momentum would carry un-noised updates into later rounds).

q-FFL's step is of the form, with λ_k = L F_k^q / Σ h_j, but h_j reads the update's
norm: under DP it is computed from the clipped update (the clients' ``qffl-h`` is not
used) and the noise is calibrated to the step's own bound given the losses,
:func:`~fairfl.strategies.qffl_step.qffl_sensitivity_share`, not to max λ.

Distributed DP (``dp = "distributed"``, under SecAgg+) sizes the clients' noise before
masking, so the server must know every weight then (:data:`KNOWN_WEIGHTS`); rules whose
clients compute their own weights are refused (:func:`distributed_refusal`).
"""

from __future__ import annotations

from fairfl.privacy.adaptive import AdaptiveClipping
from fairfl.privacy.central import CentralFixedClipping
from fairfl.privacy.config import PrivacySettings
from fairfl.privacy.distributed import DistributedNoise
from fairfl.privacy.local import LocalNoise
from fairfl.strategies.base import FairStrategy
from fairfl.strategies.fedfa import FedFa
from fairfl.strategies.fedopt import FedOptRule
from fairfl.strategies.secure import secure_form_of

__all__ = ["KNOWN_WEIGHTS", "attach_privacy", "distributed_refusal", "privacy_refusal"]


def privacy_refusal(strategy: FairStrategy) -> str | None:
    """Why central DP cannot be calibrated to ``strategy``'s update, or None if it can."""
    if isinstance(strategy, FedOptRule | FedFa):
        return (
            f"{strategy.rule_name}'s server optimiser or momentum rescales and keeps the "
            "un-noised mean update: noise on the new model has no max λ·C bound"
        )
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
        If the rule's update is not one the noise is calibrated to (:func:`privacy_refusal`).
    """
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
