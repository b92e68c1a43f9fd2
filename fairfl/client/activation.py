"""The activation vector a client reports to Equitable-FL, and its privacy options.

A. Upadhyay, A. Hashemi, "Equitable Federated Learning with Activation Clustering",
arXiv:2410.19207, cited as [P003]; spec: ``specs/spec-activation-clustering.md``.

Definition 1 and Figure 1 of [P003]: the output of the pre-final layer after its
non-linearity, passed through a log-softmax, computed by applying the **received global
model** to the **client's local data** (§1). One vector per client is the mean over the
samples (spec §1.2, D1-D3):

    a_i = (1/|D'_i|) Σ_{x ∈ D'_i} log_softmax(h_{w^t}(x))

with D'_i the local training split, or a seeded random subset of ``max_samples`` of it,
the model in eval mode, before local training.

Options (spec §6.3, all off by default) are sent by the server in the train config,
read by :meth:`ActivationOptions.from_config`:

- ``activation-min-samples``: refuse to report a vector averaged over fewer samples
  (the client then leaves ``activation`` out and the server drops its reply);
- ``activation-projection-dim``: a seeded Gaussian random projection to k dimensions,
  the same matrix on every client (Johnson-Lindenstrauss: distances are roughly kept);
- ``activation-dp-clip`` and ``activation-dp-noise``: local differential privacy by the
  Gaussian mechanism, per-sample clipping to norm R, then noise N(0, (2 z R / n)² I) on
  the mean.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from fairfl.contract.activation import (
    ActivationOptions,
    check_int,
)

logger = logging.getLogger(__name__)

_BATCH = 1024


def projection_matrix(input_dim: int, output_dim: int, seed: int) -> NDArray[np.float64]:
    """Gaussian random projection ``P ∈ R^{k×d}`` with entries N(0, 1/k) (spec §6.3, item 3).

    Drawn by numpy from ``(seed, d, k)`` alone, so every client (any platform, any torch
    version) builds the same matrix. ``E ||P v||² = ||v||²``.

    Parameters
    ----------
    input_dim : int
        d, >= 1.
    output_dim : int
        k, >= 1.
    seed : int
        >= 0.

    Returns
    -------
    NDArray[np.float64]
        Shape ``(output_dim, input_dim)``.

    Raises
    ------
    ValueError
        If a dimension is < 1 or the seed < 0.
    """
    check_int("input_dim", input_dim, 1)
    check_int("output_dim", output_dim, 1)
    check_int("seed", seed, 0)
    rng = np.random.default_rng((seed, input_dim, output_dim))
    return rng.standard_normal((output_dim, input_dim)) / math.sqrt(output_dim)


def per_sample_activations(model: nn.Module, inputs: Tensor, source: str) -> Tensor:
    """Compute the activation of every sample of a batch, before averaging (spec D1).

    Parameters
    ----------
    model : nn.Module
        A fairfl model (``features`` and ``classifier``), already in eval mode.
    inputs : Tensor
        A batch.
    source : str
        One of `ACTIVATION_SOURCES`.

    Returns
    -------
    Tensor
        Shape ``(batch, feature_dim)``, or ``(batch, num_classes)`` for
        ``"output_logprob"``.
    """
    h = model.features(inputs)  # type: ignore[operator]
    if source == "penultimate_logsoftmax":
        # Softmax over the feature coordinates (Fig. 1), not over the classes.
        return nn.functional.log_softmax(h, dim=1)
    if source == "penultimate_raw":
        return h
    return nn.functional.log_softmax(model.classifier(h), dim=1)  # type: ignore[operator]


@torch.no_grad()
def client_activation(
    model: nn.Module,
    x: np.ndarray,
    device: torch.device,
    options: ActivationOptions | None = None,
    *,
    sample_seed: int = 0,
    noise_rng: np.random.Generator | None = None,
) -> NDArray[np.float64] | None:
    """Compute the activation vector a_i of a client (spec §1.2), with the options.

    Steps: pick up to ``max_samples`` samples (seeded by ``sample_seed``); compute each
    one's activation (:func:`per_sample_activations`, eval mode, no gradients); project
    it (``projection_dim``); clip it to norm ``dp_clip``; average; add Gaussian noise
    (``dp_noise``). Projecting before clipping keeps the noise in k dimensions.

    Parameters
    ----------
    model : nn.Module
        The received global model w^t (call this before local training).
    x : np.ndarray
        The local training inputs.
    device : torch.device
        Where to run the model.
    options : ActivationOptions | None
        ``None``: the defaults (the paper's vector).
    sample_seed : int
        Seeds the subset when there are more than ``max_samples`` samples.
    noise_rng : np.random.Generator | None
        Source of the DP noise. ``None`` draws fresh OS entropy, as privacy requires:
        noise the server could regenerate from a known seed protects nothing.

    Returns
    -------
    NDArray[np.float64] | None
        The vector, or ``None`` when the client has fewer than ``min_samples``
        samples (it then reports nothing).

    Raises
    ------
    ValueError
        If ``x`` is empty.
    """
    options = options or ActivationOptions()
    n = len(x)
    if n == 0:
        raise ValueError("cannot compute an activation vector of an empty split")
    if n < options.min_samples:
        logger.info(
            "activation: %d local samples < activation-min-samples %d; not reporting it",
            n,
            options.min_samples,
        )
        return None
    rows = np.arange(n)
    if n > options.max_samples:
        rng = np.random.default_rng((sample_seed, n))
        rows = np.sort(rng.choice(n, size=options.max_samples, replace=False))
    model.eval()
    projection: NDArray[np.float64] | None = None
    total: NDArray[np.float64] | None = None
    for start in range(0, len(rows), _BATCH):
        inputs = torch.from_numpy(x[rows[start : start + _BATCH]]).to(device)
        values = per_sample_activations(model, inputs, options.source).double().cpu().numpy()
        if options.projection_dim > 0:
            if projection is None:
                projection = projection_matrix(
                    values.shape[1], options.projection_dim, options.projection_seed
                )
            values = values @ projection.T
        if options.dp_clip > 0:
            values = clip_rows(values, options.dp_clip)
        batch_sum = values.sum(axis=0)
        total = batch_sum if total is None else total + batch_sum
    assert total is not None
    mean = total / len(rows)
    if options.dp_noise > 0:
        sigma = gaussian_noise_scale(options.dp_clip, options.dp_noise, len(rows))
        rng = noise_rng if noise_rng is not None else np.random.default_rng()
        mean = mean + rng.normal(0.0, sigma, size=mean.shape)
    return mean


def clip_rows(values: NDArray[np.float64], max_norm: float) -> NDArray[np.float64]:
    """Scale each row to norm ``min(||row||, max_norm)`` (a new array)."""
    norms = np.linalg.norm(values, axis=1, keepdims=True)
    scale = np.minimum(1.0, max_norm / np.maximum(norms, np.finfo(np.float64).tiny))
    return values * scale


def gaussian_noise_scale(clip: float, noise_multiplier: float, num_samples: int) -> float:
    """σ = 2 z R / n: noise multiplier z times the sensitivity 2R/n of the clipped mean."""
    return 2.0 * noise_multiplier * clip / num_samples


def activation_for_config(
    model: nn.Module,
    x: np.ndarray,
    device: torch.device,
    config: Mapping[str, Any],
    *,
    sample_seed: int,
) -> list[float] | None:
    """Return what the ClientApp sends as ``activation`` (``None``: nothing)."""
    vector = client_activation(
        model, x, device, ActivationOptions.from_config(config), sample_seed=sample_seed
    )
    return None if vector is None else vector.tolist()
