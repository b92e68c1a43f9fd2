"""The activation vector a client reports to Equitable-FL, and its privacy options.

A. Upadhyay, A. Hashemi, "Equitable Federated Learning with Activation Clustering",
arXiv:2410.19207, cited as [Equitable FL]; spec: ``docs/specs/spec-activation-clustering.md``.

Definition 1 and Figure 1 of [Equitable FL]: the output of the pre-final layer after its
non-linearity, passed through a log-softmax, computed by applying the **received global
model** to the **client's local data** (§1). One vector per client is the mean over the
samples (spec §1.2, D1-D3)::

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
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from fairfl.client.batches import BatchKeys, split_batch
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


def per_sample_activations(
    model: nn.Module, inputs: Tensor, source: str, activation_layer: str | None = None
) -> Tensor:
    """Compute the activation of every sample of a batch, before averaging (spec D1).

    Parameters
    ----------
    model : nn.Module
        Already in eval mode. The penultimate activation h is ``model.features(x)``
        when ``activation_layer`` is ``None`` and the model has ``features`` (fairfl's
        models); otherwise it is read by a hook (:func:`penultimate_layer`).
    inputs : Tensor
        A batch.
    source : str
        One of `ACTIVATION_SOURCES`.
    activation_layer : str | None
        Name of the submodule (as in ``model.named_modules()``) whose output is h.

    Returns
    -------
    Tensor
        Shape ``(batch, feature_dim)`` (a hooked output is flattened after the batch
        dimension), or ``(batch, num_classes)`` for ``"output_logprob"``.

    Raises
    ------
    ValueError
        If h cannot be found (see :func:`penultimate_layer`).
    """
    if activation_layer is None and callable(getattr(model, "features", None)):
        h: Tensor = model.features(inputs)  # type: ignore[operator]
        if source == "output_logprob":
            return nn.functional.log_softmax(model.classifier(h), dim=1)  # type: ignore[operator]
    else:
        h, outputs = _hooked_forward(model, inputs, activation_layer)
        if source == "output_logprob":
            return nn.functional.log_softmax(outputs, dim=1)
    if source == "penultimate_logsoftmax":
        # Softmax over the feature coordinates (Fig. 1), not over the classes.
        return nn.functional.log_softmax(h, dim=1)
    return h


def penultimate_layer(model: nn.Module, activation_layer: str | None) -> tuple[nn.Module, bool]:
    """Find the layer whose output (or input) is the penultimate activation h.

    Parameters
    ----------
    model : nn.Module
        Any torch model.
    activation_layer : str | None
        A name from ``model.named_modules()``: h is that submodule's **output**.
        ``None``: h is the **input** of the model's last ``nn.Linear`` (last in
        ``model.modules()`` order, i.e. registration order), the usual classifier head.

    Returns
    -------
    tuple[nn.Module, bool]
        The layer, and whether h is its input (``True``) or its output (``False``).

    Raises
    ------
    ValueError
        If ``activation_layer`` names no submodule, or it is ``None`` and the model has
        no ``nn.Linear``.
    """
    if activation_layer is not None:
        modules = dict(model.named_modules())
        if activation_layer not in modules or activation_layer == "":
            names = [name for name in modules if name]
            raise ValueError(
                f"activation_layer {activation_layer!r} is not a submodule of "
                f"{type(model).__name__}; its submodules are {names}"
            )
        return modules[activation_layer], False
    linears = [module for module in model.modules() if isinstance(module, nn.Linear)]
    if not linears:
        raise ValueError(
            f"{type(model).__name__} has no features() method and no nn.Linear layer to "
            "read the penultimate activation from: pass activation_layer='<name of the "
            "submodule whose output is the penultimate activation>'"
        )
    return linears[-1], True


def _hooked_forward(
    model: nn.Module, inputs: Tensor, activation_layer: str | None
) -> tuple[Tensor, Tensor]:
    """Run ``model(inputs)``; return h (read by a hook, flattened) and the outputs."""
    layer, read_input = penultimate_layer(model, activation_layer)
    captured: list[object] = []
    if read_input:
        handle = layer.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    else:
        handle = layer.register_forward_hook(lambda _m, _a, out: captured.append(out))
    try:
        outputs = model(inputs)
    finally:
        handle.remove()
    where = repr(activation_layer) if activation_layer is not None else "the last nn.Linear"
    if not captured:
        raise ValueError(
            f"{where} of {type(model).__name__} was not called in forward(); pass "
            "activation_layer naming the submodule whose output is the penultimate activation"
        )
    # A layer called several times in one forward (weight sharing): its last call.
    h = captured[-1]
    if not isinstance(h, Tensor):
        raise ValueError(
            f"{where} of {type(model).__name__} gives {type(h).__name__}, not a Tensor; "
            "pass activation_layer naming a submodule whose output is a Tensor"
        )
    return h.flatten(1), outputs


@torch.no_grad()
def client_activation(
    model: nn.Module,
    x: np.ndarray,
    device: torch.device,
    options: ActivationOptions | None = None,
    *,
    sample_seed: int = 0,
    noise_rng: np.random.Generator | None = None,
    activation_layer: str | None = None,
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
    activation_layer : str | None
        See :func:`per_sample_activations`.
    batch_keys : tuple[str, str] | None
        A dict batch's ``(inputs, targets)`` keys (:func:`fairfl.client.batches.split_batch`).

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
    if _too_few(n, options):
        return None
    rows = np.arange(n)
    if n > options.max_samples:
        rng = np.random.default_rng((sample_seed, n))
        rows = np.sort(rng.choice(n, size=options.max_samples, replace=False))
    model.eval()
    values = (
        per_sample_activations(
            model,
            torch.from_numpy(x[rows[start : start + _BATCH]]).to(device),
            options.source,
            activation_layer,
        )
        for start in range(0, len(rows), _BATCH)
    )
    return _noisy_mean(*_clipped_sum(values, options), options, noise_rng)


@torch.no_grad()
def loader_activation(
    model: nn.Module,
    batches: Iterable[Any],
    device: torch.device,
    options: ActivationOptions | None = None,
    *,
    noise_rng: np.random.Generator | None = None,
    activation_layer: str | None = None,
    batch_keys: BatchKeys | None = None,
) -> NDArray[np.float64] | None:
    """:func:`client_activation` over the batches of a DataLoader instead of an array.

    Parameters
    ----------
    model : nn.Module
        The received global model w^t (call this before local training).
    batches : Iterable
        ``(inputs, targets)`` or dict batches (a ``torch.utils.data.DataLoader`` or any
        iterable); only the inputs are used.
    device : torch.device
        Where to run the model.
    options : ActivationOptions | None
        ``None``: the defaults (the paper's vector).
    noise_rng : np.random.Generator | None
        As in :func:`client_activation`.
    activation_layer : str | None
        See :func:`per_sample_activations`.

    Returns
    -------
    NDArray[np.float64] | None
        The vector, or ``None`` when the loader has fewer than ``min_samples`` samples.

    Raises
    ------
    ValueError
        If the loader yields no sample, or h cannot be found.

    Notes
    -----
    The subset of ``max_samples`` is the **first** ``max_samples`` samples the loader
    yields (a shuffling loader gives a random subset), not the seeded subset of
    :func:`client_activation`; ``min_samples`` is compared with all the loader's samples.
    """
    options = options or ActivationOptions()
    model.eval()
    counted = [0]  # all samples, including those past max_samples

    def values() -> Iterator[Tensor]:
        for batch in batches:
            inputs = torch.as_tensor(split_batch(batch, batch_keys)[0])
            take = min(len(inputs), options.max_samples - min(counted[0], options.max_samples))
            counted[0] += len(inputs)
            if take > 0:
                yield per_sample_activations(
                    model, inputs[:take].to(device), options.source, activation_layer
                )

    total, used = _clipped_sum(values(), options)
    if counted[0] == 0:
        raise ValueError("cannot compute an activation vector: the loader yielded no sample")
    if _too_few(counted[0], options):
        return None
    return _noisy_mean(total, used, options, noise_rng)


def _too_few(n: int, options: ActivationOptions) -> bool:
    """Whether ``n`` samples are below ``min_samples`` (logged)."""
    if n < options.min_samples:
        logger.info(
            "activation: %d local samples < activation-min-samples %d; not reporting it",
            n,
            options.min_samples,
        )
        return True
    return False


def _clipped_sum(
    batches: Iterable[Tensor], options: ActivationOptions
) -> tuple[NDArray[np.float64] | None, int]:
    """Project and clip each per-sample activation; return their sum and count."""
    projection: NDArray[np.float64] | None = None
    total: NDArray[np.float64] | None = None
    count = 0
    for batch in batches:
        values = batch.double().cpu().numpy()
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
        count += len(values)
    return total, count


def _noisy_mean(
    total: NDArray[np.float64] | None,
    count: int,
    options: ActivationOptions,
    noise_rng: np.random.Generator | None,
) -> NDArray[np.float64]:
    """The mean of ``count`` clipped vectors, plus the Gaussian noise when it is on."""
    assert total is not None and count > 0
    mean = total / count
    if options.dp_noise > 0:
        sigma = gaussian_noise_scale(options.dp_clip, options.dp_noise, count)
        rng = noise_rng if noise_rng is not None else np.random.default_rng()
        mean = mean + rng.normal(0.0, sigma, size=mean.shape)
    return mean


def clip_rows(values: NDArray[np.float64], max_norm: float) -> NDArray[np.float64]:
    """Scale each row to norm ``min(||row||, max_norm)`` (a new array)."""
    norms: NDArray[np.float64] = np.linalg.norm(values, axis=1, keepdims=True)
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
