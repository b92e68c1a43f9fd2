"""Options of the activation vector a client reports to Equitable FL [Equitable FL].

The server (:class:`fairfl.strategies.EquitableFL`) sends them in the train config and
the client (:func:`fairfl.client.activation_for_config`) reads them back, both through
:class:`ActivationOptions`; the keys are in :mod:`fairfl.contract.keys`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairfl.contract import keys
from fairfl.contract.config import get_config_value
from fairfl.fields import ParameterError

ACTIVATION_SOURCES: tuple[str, ...] = (
    "penultimate_logsoftmax",
    "penultimate_raw",
    "output_logprob",
)
"""Which activation a client averages (spec D1): log-softmax over the penultimate
features (paper, Def. 1), the raw penultimate features, or the class log-probabilities."""


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
        check_int("max_samples", self.max_samples, 1)
        check_int("min_samples", self.min_samples, 0)
        check_int("projection_dim", self.projection_dim, 0)
        check_int("projection_seed", self.projection_seed, 0)
        for name in ("dp_clip", "dp_noise"):
            value = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.dp_noise > 0 and self.dp_clip == 0:
            raise ParameterError(
                "dp_noise", f"dp_noise > 0 needs dp_clip > 0, got dp_clip={self.dp_clip}"
            )

    def to_config(self) -> dict[str, int | float | str]:
        """Return the train-config keys that carry these options."""
        return {
            keys.ACTIVATION_SOURCE: self.source,
            keys.ACTIVATION_MAX_SAMPLES: self.max_samples,
            keys.ACTIVATION_MIN_SAMPLES: self.min_samples,
            keys.ACTIVATION_PROJECTION_DIM: self.projection_dim,
            keys.ACTIVATION_PROJECTION_SEED: self.projection_seed,
            keys.ACTIVATION_DP_CLIP: float(self.dp_clip),
            keys.ACTIVATION_DP_NOISE: float(self.dp_noise),
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
            keys.ACTIVATION_SOURCE: ("source", str),
            keys.ACTIVATION_MAX_SAMPLES: ("max_samples", int),
            keys.ACTIVATION_MIN_SAMPLES: ("min_samples", int),
            keys.ACTIVATION_PROJECTION_DIM: ("projection_dim", int),
            keys.ACTIVATION_PROJECTION_SEED: ("projection_seed", int),
            keys.ACTIVATION_DP_CLIP: ("dp_clip", float),
            keys.ACTIVATION_DP_NOISE: ("dp_noise", float),
        }
        values: dict[str, Any] = {
            field: get_config_value(config, key, type_)
            for key, (field, type_) in types.items()
            if key in config
        }
        return cls(**values)


def check_int(name: str, value: object, minimum: int) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
