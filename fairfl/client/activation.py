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
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from fairfl.settings import get_config_value

logger = logging.getLogger(__name__)

ACTIVATION_SOURCES: tuple[str, ...] = (
    "penultimate_logsoftmax",
    "penultimate_raw",
    "output_logprob",
)
"""Which activation a client averages (spec D1): log-softmax over the penultimate
features (paper, Def. 1), the raw penultimate features, or the class log-probabilities."""

# Train-config keys (server -> client) of the activation options.
SOURCE = "activation-source"
MAX_SAMPLES = "activation-max-samples"
MIN_SAMPLES = "activation-min-samples"
PROJECTION_DIM = "activation-projection-dim"
PROJECTION_SEED = "activation-projection-seed"
DP_CLIP = "activation-dp-clip"
DP_NOISE = "activation-dp-noise"

_BATCH = 1024


@dataclass(frozen=True)
class ActivationOptions:
    """How a client computes the activation vector it reports.

    Parameters
    ----------
    source : str (default: "penultimate_logsoftmax")
        One of `ACTIVATION_SOURCES`.
    max_samples : int (default: 2048)
        Average over at most this many local training samples (a seeded random subset
        when there are more), >= 1 (spec D3).
    min_samples : int (default: 0)
        Report nothing when fewer samples are available (spec §6.3, item 1), >= 0;
        0 is off.
    projection_dim : int (default: 0)
        Project each vector to this many dimensions with :func:`projection_matrix`,
        >= 0; 0 is off.
    projection_seed : int (default: 0)
        Seed of the projection matrix, the same for every client, >= 0.
    dp_clip : float (default: 0.0)
        R: clip each per-sample vector to norm <= R before averaging, >= 0; 0 is off.
    dp_noise : float (default: 0.0)
        z: add N(0, (2 z R / n)² I) to the mean of n clipped vectors, >= 0; needs
        ``dp_clip`` > 0.

    Raises
    ------
    ValueError
        If a value is out of range (the message names it).

    Notes
    -----
    With noise on, use ``source="penultimate_raw"``: the log-softmax adds the same large
    offset ``-LSE(h)`` to every coordinate (spec §1.2), which uses up the clipping norm.
    The noise protects the activation channel only; the model update the client also
    sends needs its own mechanism. ``2R/n`` is the sensitivity of the mean of n clipped
    vectors when one sample is replaced.
    """

    source: str = "penultimate_logsoftmax"
    max_samples: int = 2048
    min_samples: int = 0
    projection_dim: int = 0
    projection_seed: int = 0
    dp_clip: float = 0.0
    dp_noise: float = 0.0

    def __post_init__(self) -> None:
        """Check every option."""
        if self.source not in ACTIVATION_SOURCES:
            raise ValueError(f"source must be one of {ACTIVATION_SOURCES}, got {self.source!r}")
        _check_int("max_samples", self.max_samples, 1)
        _check_int("min_samples", self.min_samples, 0)
        _check_int("projection_dim", self.projection_dim, 0)
        _check_int("projection_seed", self.projection_seed, 0)
        for name in ("dp_clip", "dp_noise"):
            value = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.dp_noise > 0 and self.dp_clip == 0:
            raise ValueError(f"dp_noise > 0 needs dp_clip > 0, got dp_clip={self.dp_clip}")

    def to_config(self) -> dict[str, int | float | str]:
        """Return the train-config keys that carry these options."""
        return {
            SOURCE: self.source,
            MAX_SAMPLES: self.max_samples,
            MIN_SAMPLES: self.min_samples,
            PROJECTION_DIM: self.projection_dim,
            PROJECTION_SEED: self.projection_seed,
            DP_CLIP: float(self.dp_clip),
            DP_NOISE: float(self.dp_noise),
        }

    def settings(self) -> dict[str, Any]:
        """Return the options by field name, for logs and results files."""
        return {
            "source": self.source,
            "max_samples": self.max_samples,
            "min_samples": self.min_samples,
            "projection_dim": self.projection_dim,
            "dp_clip": self.dp_clip,
            "dp_noise": self.dp_noise,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ActivationOptions:
        """Read the options from a train config; absent keys keep their defaults.

        Raises
        ------
        ValueError
            If a key has the wrong type or value (the message names it).
        """
        types = {
            SOURCE: ("source", str),
            MAX_SAMPLES: ("max_samples", int),
            MIN_SAMPLES: ("min_samples", int),
            PROJECTION_DIM: ("projection_dim", int),
            PROJECTION_SEED: ("projection_seed", int),
            DP_CLIP: ("dp_clip", float),
            DP_NOISE: ("dp_noise", float),
        }
        values = {
            field: get_config_value(config, key, type_)
            for key, (field, type_) in types.items()
            if key in config
        }
        return cls(**values)


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
    _check_int("input_dim", input_dim, 1)
    _check_int("output_dim", output_dim, 1)
    _check_int("seed", seed, 0)
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


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
