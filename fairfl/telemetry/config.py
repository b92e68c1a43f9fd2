"""Run-config keys of the telemetry sinks, parsed into :class:`TelemetrySettings`."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from fairfl.contract.config import dataclass_fields_from_config
from fairfl.fields import Fields, ParameterError, Spec, choice, integer

#: Sink names accepted in the ``telemetry`` run-config key (comma-separated).
SINKS = ("tensorboard", "mlflow", "wandb", "prometheus")
#: Values of ``telemetry-key``.
KEYS = ("client", "node-key")
#: The ``pip install`` extra that brings every sink's library.
EXTRA = "fairfl[telemetry]"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address.

    The one check for every listener fairfl opens: the dashboard's ``--host`` and the
    Prometheus endpoint's ``telemetry-host``. A host name other than ``localhost`` is
    not trusted to resolve to loopback.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class TelemetrySettings(Fields):
    """Which sinks get each round's record, and their options (run-config keys hyphenated).

    Attributes
    ----------
    telemetry : str
        Comma-separated sinks from :data:`SINKS` ("" = only ``rounds.jsonl``).
    telemetry_dir : str
        Folder of the TensorBoard event files, the MLflow file store and the W&B run
        ("" = ``<out-dir>/telemetry``).
    telemetry_host : str
        Address the Prometheus endpoint binds (loopback by default: open it on purpose;
        any other address is logged as a warning when the endpoint starts, since the
        endpoint has no authentication).
    telemetry_port : int
        Port of the Prometheus endpoint (0 = any free port, logged).
    telemetry_max_clients : int
        Cap on per-client label values (Prometheus) and per-client series (every sink):
        the first this many client keys seen get a series, later ones are counted in
        ``clients-unlabelled`` only.
    telemetry_wandb_online : bool
        W&B sends to its server only if this is true; by default the run is offline
        (``mode="offline"``, whatever ``WANDB_MODE`` says): nothing leaves the machine.
    telemetry_key : str
        What names a client in the trackers: ``client`` (its partition id, else
        ``node-<node id>``) or ``node-key`` (its SuperNode's public-key fingerprint
        where the Grid gives one, :mod:`fairfl.telemetry.nodes`; meant for deployments
        with node authentication on).
    """

    states_type: ClassVar[bool] = False  # a run config's types are checked when parsed

    telemetry: str = ""
    telemetry_dir: str = ""
    telemetry_host: str = "127.0.0.1"
    telemetry_port: int = integer(9464, key="telemetry-port", lower=0, upper=65535)
    telemetry_max_clients: int = integer(100, key="telemetry-max-clients", lower=0)
    telemetry_wandb_online: bool = False
    telemetry_key: str = choice("client", KEYS, key="telemetry-key")

    @classmethod
    def subject(cls, name: str, spec: Spec) -> str:
        """A message is about the run-config key (``run config telemetry-port ...``)."""
        return f"run config {spec.key}"

    def check(self) -> None:
        """Check the sink names (each number's bound is its field's declaration)."""
        for name in self.sinks:
            if name not in SINKS:
                raise ParameterError(
                    "telemetry",
                    f"run config telemetry: unknown sink {name!r}; choose from {SINKS} "
                    "(comma-separated)",
                    "telemetry",
                )

    @property
    def sinks(self) -> tuple[str, ...]:
        """The sink names, in order, without blanks or repeats."""
        names = [part.strip() for part in self.telemetry.split(",") if part.strip()]
        return tuple(dict.fromkeys(names))

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> TelemetrySettings:
        """Parse the ``telemetry*`` keys (others are ignored)."""
        return cls(**dataclass_fields_from_config(cls, run_config))


#: The run-config keys of :class:`TelemetrySettings`.
TELEMETRY_KEYS = tuple(item.name.replace("_", "-") for item in fields(TelemetrySettings))
