"""What both sides of fairfl's SecAgg+ agree on: record keys, stages, quantisation, its bound.

SecAgg+ is Bell, Bonawitz, Gascón, Lepoint and Raykova, *Secure Single-Server Aggregation
with (Poly)Logarithmic Overhead*, CCS 2020 (https://eprint.iacr.org/2020/704): SecAgg
(Bonawitz et al., *Practical Secure Aggregation for Privacy-Preserving Machine Learning*,
CCS 2017) with each client's secrets shared with, and its pairwise masks drawn with, only
its neighbours on a graph. The stages and their fields are Flower's
(:mod:`flwr.common.secure_aggregation.secaggplus_constants`); fairfl's record has its own
name, so Flower's ``secaggplus_mod`` and fairfl's never read each other's messages.

fairfl's setup stage carries the round's train instruction: the client trains, keeps its
update, and answers with its public keys and its train reply's *metrics* (no arrays), so
that the rule can compute each client's weight before anything is masked.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import Key, Stage
from numpy.typing import NDArray

from fairfl.secagg.config import MODULUS_RANGE

__all__ = [
    "ARRAYS_KEY",
    "CLIENT_PART",
    "HIDDEN_METRICS",
    "RECORD",
    "REKEY",
    "REPLY_ARRAYS_KEY",
    "Key",
    "Stage",
    "dequantized_mean",
    "quantisation_bound",
    "quantize_private",
    "signed_weight_total",
    "vector_dtype",
    "weight_ratio",
]

#: The ConfigRecord of every secure-aggregation message, both ways.
RECORD = "fairfl.secagg"
#: The ConfigRecord of the collect stage holding the client's part (its form's scalars).
CLIENT_PART = "fairfl.secagg.client-part"
#: Setup-stage key naming the ArrayRecord the client's update is read from.
ARRAYS_KEY = "arrays-key"
#: Setup-stage key naming the ArrayRecord of the train reply, where it differs from
#: :data:`ARRAYS_KEY`'s: the reply then carries the client's update itself (q-FedSGD's
#: full-batch gradient), not a model to take the difference of.
REPLY_ARRAYS_KEY = "reply-arrays-key"
#: Setup-stage key listing the train metrics the client keeps (a two-round form's private
#: scalars: its loss): they leave the client only masked, inside a secure sum.
HIDDEN_METRICS = "hidden-metrics"
#: Setup-stage flag of a two-round form's later sums: fresh keys, no training (reusing a
#: sum's masks for another would give away the difference of a client's two inputs).
REKEY = "rekey"


def vector_dtype(modulus: int) -> type[np.unsignedinteger[Any]]:
    """The narrowest unsigned integer type of a masked vector's residues mod ``modulus``."""
    return np.uint32 if modulus <= 2**32 else np.uint64


def quantize_private(
    values: list[NDArray[np.float64]],
    clipping_range: float,
    quantization_range: int,
    rng: np.random.Generator,
) -> tuple[list[NDArray[np.int64]], int]:
    """Flower's quantisation (:func:`flwr.common.secure_aggregation.quantization.quantize`).

    Each value is clipped to [-C, C], mapped to ``(x + C) Q / (2C)`` in [0, Q] and
    rounded stochastically (up with probability the fraction), so that the dequantised
    value is unbiased. Unlike Flower's function the draws come from ``rng``, not NumPy's
    global generator: the rounding is the client's secret, and an in-process run must not
    shift the global stream the server's sampling and the clients' data draw from.

    Returns
    -------
    tuple[list[NDArray[np.int64]], int]
        The integers, and how many values were clipped.
    """
    scale = quantization_range / (2 * clipping_range)
    quantized, clipped = [], 0
    for array in values:
        clipped += int(np.count_nonzero(np.abs(array) > clipping_range))
        shifted = (np.clip(array, -clipping_range, clipping_range) + clipping_range) * scale
        floor = np.floor(shifted)
        up = rng.random(shifted.shape) < (shifted - floor)
        quantized.append((floor + up).astype(np.int64))
    return quantized, clipped


def dequantized_mean(
    total: list[NDArray[Any]],
    num_clients: int,
    weight_total: int,
    clipping_range: float,
    quantization_range: int,
) -> list[NDArray[np.float64]]:
    """``Σ_k r̂_k u_k / Σ_k r̂_k`` from the unmasked sum of the quantised ``r̂_k u_k``.

    Each client's integer z_k stands for ``z_k 2C / Q - C``, so the sum of n of them
    for ``Σ z_k 2C/Q - n C`` (Flower's unmask stage: :func:`dequantize` then the offset
    ``-(n-1) C``); dividing by ``R̂ = Σ_k round(Q r_k) / Q`` gives the weighted mean.
    """
    values = dequantize(total, clipping_range, quantization_range)
    offset = -(num_clients - 1) * clipping_range
    scale = quantization_range / weight_total
    return [(np.asarray(v, dtype=np.float64) + offset) * scale for v in values]


def weight_ratio(weight: float, max_weight: float, quantization_range: int) -> int:
    """``round(Q a_k / a_max)``: a client's weight as the integer its vector leads with.

    The ratio is held to [-1, 1]: a weight may be negative (VRed's and Semi-VRed's λ
    above the round's β_max), and the modular sum carries its sign
    (:func:`signed_weight_total`).
    """
    ratio = max(min(weight / max_weight, 1.0), -1.0)
    return round(ratio * quantization_range)


def signed_weight_total(residue: int, num_clients: int, quantization_range: int) -> int:
    """``Σ_k round(Q a_k / a_max)`` from its residue modulo 2^32.

    Each term lies in [-Q, Q], so the sum lies in [-nQ, nQ]; n is at most
    :attr:`~fairfl.secagg.config.SecAggSettings.max_clients`, for which 2nQ < 2^32, so a
    residue above nQ can only be a negative sum wrapped around the modulus.
    """
    bound = num_clients * quantization_range
    return residue if residue <= bound else residue - MODULUS_RANGE


def quantisation_bound(
    num_clients: int,
    clipping_range: float,
    weight_total: int,
    max_payload: float | None = None,
    abs_total: int | None = None,
) -> float:
    """Largest error of one coordinate of the securely aggregated mean.

    With n clients, clipping range C, quantisation range Q, the payloads' largest
    magnitude U <= C (no value clipped), ``W = Σ_k round(Q a_k / a_max)`` the summed
    quantised weights (``weight_total``; about ``Q Σ a_k / a_max``) and
    ``|W| = Σ_k |round(Q a_k / a_max)|`` (``abs_total``; W itself when no weight is
    negative)::

        |ŵ - w| <= n (2C + U (1 + |W| / W) / 2) / W

    which is ``n (2C + U) / W`` for weights >= 0. Stochastic rounding moves each
    ``r̂_k u_k`` by less than one step 2C/Q, n steps in the sum, divided by
    ``R̂ = Σ r̂_k = W / Q``; rounding each weight ratio to a multiple of 1/Q
    (``|r̂_k - r_k| <= 1/(2Q)``) moves the normalised weights π_k = r_k / R by at most
    ``Σ_k |π̂_k - π_k| <= (Σ_k |r̂_k - r_k| + Σ_k |π_k| |R̂ - R|) / R̂
    <= n (1 + |W| / W) / (2 Q R̂)`` in total, each multiplying a payload of at most U.
    The spec (``docs/specs/spec-secure-aggregation.md``) gives both terms.

    Parameters
    ----------
    num_clients : int
        n, the clients in the sum.
    clipping_range : float
        C.
    weight_total : int
        The unmasked sum of the quantised weight ratios (> 0): ``Q R̂``, so Q is in it.
    max_payload : float | None
        U; ``None`` takes its bound C.
    abs_total : int | None
        The sum of the quantised ratios' magnitudes, or a bound on it (``None``: every
        weight is >= 0, so it is ``weight_total``).
    """
    payload = clipping_range if max_payload is None else max_payload
    spread = 1.0 if abs_total is None else (1.0 + abs_total / weight_total) / 2.0
    return num_clients * (2 * clipping_range + payload * spread) / weight_total
