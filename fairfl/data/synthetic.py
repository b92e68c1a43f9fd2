"""Synthetic(α, β) federated data of FedProx and q-FFL, in pure numpy.

Li et al., "Federated Optimization in Heterogeneous Networks" (FedProx), MLSys
2020, §5.1, https://arxiv.org/abs/1812.06127, and Li et al., "Fair Resource
Allocation in Federated Learning" (q-FFL), ICLR 2020,
https://openreview.net/pdf?id=ByexElSYDr, which uses the same generator with 100
devices. Device k holds samples of a multinomial logistic regression
``y = argmax(softmax(W_k x + b_k))`` with x in R^60 and 10 classes::

    u_k ~ N(0, α),   W_k ~ N(u_k, 1) (60 x 10),   b_k ~ N(u_k, 1) (10)
    B_k ~ N(0, β),   v_k ~ N(B_k, 1) (60),        x ~ N(v_k, Σ),  Σ = diag(j^-1.2)
    n_k = floor(LogNormal(4, σ)) + 50,  σ = 2

α controls how much the local models differ, β how much the local features
differ, σ how unequal the devices' sizes are. As in the reference generator
(``data/synthetic_*/generate_synthetic.py`` of FedProx and q-FFL), the second
argument of N(0, α) and N(0, β) is a standard deviation
(``np.random.normal(0, alpha)``), although the papers write it as
a variance; the two agree for α, β in {0, 1}.

``"synthetic-<α>-<β>-sigma<σ>"`` sets σ (opt-in; the reference generator's σ = 2 is the
default). With σ = 2, the largest of 100 devices holds 12-43 % of all samples in seeds
1-5 (5,286-26,061 samples), and a size-proportional draw picks it almost every round;
with σ = 0.75 the same devices hold 12,013-12,759 samples in all, 120-128 ± 60-74 per
device, the largest under 5 %.

Departures from the reference code, none of which changes the distribution:

- Each device draws from its own generator, seeded by ``(seed, device)``, so a
  SuperNode creates only its own device, and device k is the same whatever the
  number of devices. The reference draws all devices from one global stream.
- x is drawn as ``v_k + sqrt(diag(Σ)) * N(0, I)``, which equals
  ``multivariate_normal(v_k, Σ)`` in distribution for diagonal Σ, at a fraction of
  the cost.
"""

from __future__ import annotations

import functools
import re

import numpy as np

NUM_FEATURES = 60
"""Dimension of x."""

NUM_CLASSES = 10
"""Number of classes."""

DEFAULT_ALPHA = 1.0
"""α of the plain ``"synthetic"`` data set: Synthetic(1, 1)."""

DEFAULT_BETA = 1.0
"""β of the plain ``"synthetic"`` data set: Synthetic(1, 1)."""

DEFAULT_SIZE_SIGMA = 2.0
"""σ of ``n_k = floor(LogNormal(4, σ)) + 50`` in the reference generator."""

MIN_DEVICE_SIZE = 50
"""The ``+ 50`` of ``n_k = floor(LogNormal(4, σ)) + 50``: no device holds fewer samples."""

_NUMBER = r"\d+(?:\.\d+)?"
_NAME = re.compile(
    rf"synthetic-(?P<alpha>{_NUMBER})-(?P<beta>{_NUMBER})(?:-sigma(?P<sigma>{_NUMBER}))?"
)

# Standard deviation of each feature of x around v_k: sqrt(j^-1.2), j = 1..60.
_FEATURE_STD = np.sqrt(np.arange(1, NUM_FEATURES + 1, dtype=np.float64) ** -1.2)


def parse_name(name: str) -> tuple[float, float, float] | None:
    """Return ``(α, β, σ)`` of a synthetic data set name, or None for other names.

    Parameters
    ----------
    name : str
        ``"synthetic"`` (α = β = 1), ``"synthetic-<α>-<β>"`` or
        ``"synthetic-<α>-<β>-sigma<σ>"`` with non-negative decimal numbers, e.g.
        ``"synthetic-0-0"``, ``"synthetic-0.5-0.5"`` or ``"synthetic-1-1-sigma0.75"``;
        σ is 2 (the reference generator's) unless given.

    Returns
    -------
    tuple[float, float, float] | None
        ``(α, β, σ)``, or None when ``name`` names no synthetic data set.

    """
    if name == "synthetic":
        return DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_SIZE_SIGMA
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    sigma = DEFAULT_SIZE_SIGMA if match["sigma"] is None else float(match["sigma"])
    return float(match["alpha"]), float(match["beta"]), sigma


def device_size(seed: int, device: int, size_sigma: float = DEFAULT_SIZE_SIGMA) -> int:
    """Return n_k, the number of samples device ``device`` holds.

    Draws only the size, not the samples, so it is cheap for every device.

    Parameters
    ----------
    seed : int
        Seed of the federation, >= 0.
    device : int
        Device index k, >= 0.
    size_sigma : float
        σ of ``LogNormal(4, σ)``, >= 0.

    Returns
    -------
    int
        ``floor(LogNormal(4, σ)) + 50``, the size `device_data` returns.

    """
    return _draw_size(_device_rng(seed, device), size_sigma)


@functools.lru_cache(maxsize=256)
def device_data(
    alpha: float, beta: float, seed: int, device: int, size_sigma: float = DEFAULT_SIZE_SIGMA
) -> tuple[np.ndarray, np.ndarray]:
    """Generate the samples of one device of Synthetic(α, β).

    Parameters
    ----------
    alpha : float
        α >= 0, the standard deviation of u_k (model heterogeneity).
    beta : float
        β >= 0, the standard deviation of B_k (feature heterogeneity).
    seed : int
        Seed of the federation, >= 0.
    device : int
        Device index k, >= 0.
    size_sigma : float
        σ of the device size ``floor(LogNormal(4, σ)) + 50``, >= 0. The size takes
        one normal draw whatever σ, so devices differ in nothing but their number of
        samples across σ (same W_k, b_k, v_k; the first samples agree).

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        ``x`` (float32, shape ``(n_k, 60)``) and ``y`` (int64, shape ``(n_k,)``),
        both read-only because they are cached.

    """
    rng = _device_rng(seed, device)
    size = _draw_size(rng, size_sigma)
    model_mean = rng.normal(0.0, alpha)  # u_k
    feature_shift = rng.normal(0.0, beta)  # B_k
    feature_mean = rng.normal(feature_shift, 1.0, NUM_FEATURES)  # v_k
    weights = rng.normal(model_mean, 1.0, (NUM_FEATURES, NUM_CLASSES))  # W_k
    bias = rng.normal(model_mean, 1.0, NUM_CLASSES)  # b_k
    x = feature_mean + rng.standard_normal((size, NUM_FEATURES)) * _FEATURE_STD
    # argmax(softmax(z)) = argmax(z): the softmax of the reference code is not needed.
    y = np.argmax(x @ weights + bias, axis=1).astype(np.int64)
    x32 = x.astype(np.float32)
    x32.setflags(write=False)
    y.setflags(write=False)
    return x32, y


def _device_rng(seed: int, device: int) -> np.random.Generator:
    return np.random.default_rng((seed, device))


def _draw_size(rng: np.random.Generator, size_sigma: float) -> int:
    # Must stay the first draw from the device's generator: `device_size` relies on it.
    return int(rng.lognormal(4.0, size_sigma)) + MIN_DEVICE_SIZE
