"""The client halves of DP: noise F_k(w^t), Acc_k, and under ``dp = "local"`` the update.

:func:`private_accuracy` is what FedFa's accuracy steps send: the accuracy clipped and
noised when the train config carries ``dp-accuracy-noise-multiplier``.

``dp-local-noise-multiplier`` switches on an ``after`` step that clips the trained model's
update to ``dp-local-clipping-norm`` and adds Gaussian noise
(:func:`~fairfl.privacy.signal.local_release`), registered before the other ``after``
steps, so that q-FFL's h_k and every reply value read the released model.

A ``before`` step (:mod:`fairfl.client.steps`) switched on by the train-config key
``dp-loss-noise-multiplier``, which the server sends under ``dp`` with a loss noise
(:mod:`fairfl.privacy.signal`). It replaces ``loss_before`` of the
:class:`~fairfl.client.steps.ClientRound` by the clipped and noised value, so every later
step and the reply read that one. It is registered before the other ``before`` steps.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from fairfl.client.steps import ClientRound, ClientStep, MetricValue
from fairfl.privacy.signal import (
    DP_ACCURACY_NOISE_MULTIPLIER,
    DP_LOCAL_CLIPPING_NORM,
    DP_LOCAL_NOISE_MULTIPLIER,
    DP_LOSS_BOUND,
    DP_LOSS_NOISE_MULTIPLIER,
    local_release,
    noised_accuracy,
    noised_loss,
)


def private_loss_before(
    round_: ClientRound, rng: np.random.Generator | None = None
) -> Mapping[str, MetricValue]:
    """Clip F_k(w^t) to [0, B] and add N(0, (z_F B)²) (``rng`` None: fresh OS entropy)."""
    config = round_.config
    bound = float(config[DP_LOSS_BOUND])  # type: ignore[arg-type]
    multiplier = float(config[DP_LOSS_NOISE_MULTIPLIER])  # type: ignore[arg-type]
    if not (bound > 0 and multiplier >= 0):
        raise ValueError(
            f"train config {DP_LOSS_BOUND}={bound!r} and {DP_LOSS_NOISE_MULTIPLIER}="
            f"{multiplier!r}: need a bound > 0 and a multiplier >= 0"
        )
    generator = np.random.default_rng() if rng is None else rng
    round_.loss_before = noised_loss(round_.loss_before, bound, multiplier, generator)
    return {}


def private_accuracy(
    config: Mapping[str, object], accuracy: float, rng: np.random.Generator | None = None
) -> float:
    """The accuracy a client sends: clipped to [0, 1] and noised when the server asks.

    With ``dp-accuracy-noise-multiplier`` z_A in the train config,
    ``min(1, max(0, clip(Acc, 0, 1) + N(0, z_A²)))`` (``rng`` None: fresh OS entropy);
    without it, ``accuracy`` as measured. FedFa's accuracy steps (before and after
    training) send what this returns.
    """
    if DP_ACCURACY_NOISE_MULTIPLIER not in config:
        return accuracy
    multiplier = float(config[DP_ACCURACY_NOISE_MULTIPLIER])  # type: ignore[arg-type]
    if not multiplier >= 0:
        raise ValueError(
            f"train config {DP_ACCURACY_NOISE_MULTIPLIER}={multiplier!r}: need a multiplier >= 0"
        )
    generator = np.random.default_rng() if rng is None else rng
    return noised_accuracy(accuracy, multiplier, generator)


#: The step, registered by :mod:`fairfl.client.builtin_steps` before the other ``before`` ones.
PRIVATE_LOSS_STEP = ClientStep(DP_LOSS_NOISE_MULTIPLIER, private_loss_before, when="present")


def local_dp_after(
    round_: ClientRound, rng: np.random.Generator | None = None
) -> Mapping[str, MetricValue]:
    """Replace the trained weights by their local-DP release (``rng`` None: OS entropy)."""
    assert round_.state is not None  # set before the after phase
    config = round_.config
    clipping = float(config[DP_LOCAL_CLIPPING_NORM])  # type: ignore[arg-type]
    multiplier = float(config[DP_LOCAL_NOISE_MULTIPLIER])  # type: ignore[arg-type]
    names = list(round_.state)
    trained = [round_.state[name].numpy() for name in names]
    sent = [round_.sent[name].numpy() for name in names]
    generator = np.random.default_rng() if rng is None else rng
    released = local_release(trained, sent, clipping, multiplier, generator)
    round_.state = {
        name: torch.as_tensor(array, dtype=round_.state[name].dtype)
        for name, array in zip(names, released, strict=True)
    }
    return {}


#: ``dp = "local"``'s step, registered before the other ``after`` ones.
LOCAL_DP_STEP = ClientStep(DP_LOCAL_NOISE_MULTIPLIER, local_dp_after, phase="after", when="present")
