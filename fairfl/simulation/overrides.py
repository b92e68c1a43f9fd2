"""The Flower app and the strings ``flwr run`` takes: run config, federation config.

Finding the app directory (the nearest ``pyproject.toml`` with ``[tool.flwr.app]``),
rendering run-config values as a ``--run-config`` string and reading its ``out-dir``
back, and a simulation's ``--federation-config`` (nodes, client resources, ``ray.init``
arguments, parsed from ``KEY=VALUE`` items).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def find_app_dir(start: Path | None = None) -> Path:
    """The Flower app directory: the nearest ``pyproject.toml`` with ``[tool.flwr.app]``.

    Searched upwards from ``start`` (default: this package's source tree, then the
    working directory).

    Raises
    ------
    FileNotFoundError
        If no such ``pyproject.toml`` is found (e.g. fairfl installed from a wheel:
        pass the app directory explicitly).
    """
    starts = [start] if start is not None else [Path(__file__).resolve(), Path.cwd()]
    for origin in starts:
        for folder in [origin, *origin.parents]:
            project = folder / "pyproject.toml"
            if project.is_file() and "[tool.flwr.app]" in project.read_text(encoding="utf-8"):
                return folder
    raise FileNotFoundError(
        "no pyproject.toml with [tool.flwr.app] above "
        + " or ".join(str(s) for s in starts)
        + "; pass the Flower app directory explicitly"
    )


def toml_overrides(run_config: Mapping[str, Any]) -> str:
    """Render run-config values as a ``flwr run --run-config`` string.

    Strings are single-quoted TOML literals, booleans ``true``/``false``, floats keep a
    decimal point or exponent (``1.0``, ``1e-05``) so Flower keeps their type.

    Raises
    ------
    ValueError
        If a value is a non-finite float, a string containing a single quote, or of
        another type.
    """
    parts = []
    for key, value in run_config.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"run config {key} must be finite, got {value!r}")
            text = repr(value)
        elif isinstance(value, str):
            if "'" in value:
                raise ValueError(f"run config {key} must not contain a single quote: {value!r}")
            text = f"'{value}'"
        else:
            raise ValueError(
                f"run config {key} must be bool, int, float or str, got {type(value).__name__}"
            )
        parts.append(f"{key}={text}")
    return " ".join(parts)


def run_out_dir(run_config: str, app: Path) -> Path:
    """The ``out-dir`` a run writes to: the ``--run-config`` override, else the app's default.

    A relative folder is relative to the app directory (where the ServerApp runs).

    Raises
    ------
    ValueError
        If ``run_config`` is not a valid ``--run-config`` string.
    """
    from flwr.common.config import parse_config_args

    try:
        overrides = parse_config_args([run_config]) if run_config.strip() else {}
    except Exception as error:  # click's ClickException or a TOML error, by flwr version
        raise ValueError(f"cannot parse {run_config!r}: {error}") from error
    out_dir = overrides.get("out-dir")
    if out_dir is None:
        project = tomllib.loads((app / "pyproject.toml").read_text(encoding="utf-8"))
        out_dir = project["tool"]["flwr"]["app"]["config"]["out-dir"]
    path = Path(str(out_dir))
    return path if path.is_absolute() else app / path


#: ``ray.init`` arguments Ray refuses when it connects to an existing cluster.
CLUSTER_OWNED_INIT_ARGS = ("num_cpus", "num_gpus")


def federation_config(
    supernodes: int,
    cpus_per_client: float,
    gpus_per_client: float = 0.0,
    init_args: Mapping[str, Any] | None = None,
    *,
    attached: bool = False,
) -> str:
    """``flwr run --federation-config`` of a simulation: nodes, client resources, init args.

    Raises
    ------
    ValueError
        If a resource is negative, or ``attached`` and ``init_args`` set ``num_cpus`` or
        ``num_gpus`` (Ray fails such a run: "When connecting to an existing cluster,
        num_cpus and num_gpus must not be provided", and ``flwr run`` still exits 0).
    """
    if supernodes < 1:
        raise ValueError(f"supernodes must be at least 1, got {supernodes}")
    if cpus_per_client <= 0 or gpus_per_client < 0:
        raise ValueError(
            "client resources must be positive CPUs and non-negative GPUs, got "
            f"cpus={cpus_per_client}, gpus={gpus_per_client}"
        )
    parts = [f"num-supernodes={supernodes}", f"client-resources-num-cpus={cpus_per_client:g}"]
    if gpus_per_client > 0:
        parts.append(f"client-resources-num-gpus={gpus_per_client:g}")
    for name, value in (init_args or {}).items():
        key = name.replace("-", "_")
        if attached and key in CLUSTER_OWNED_INIT_ARGS:
            raise ValueError(
                f"init arg {name} cannot be set when attaching to a Ray cluster: the "
                "cluster's own resources are used (leave it out, or drop --ray-address)"
            )
        parts.append(toml_overrides({f"init-args-{key.replace('_', '-')}": value}))
    return " ".join(parts)


def parse_init_args(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as init args; values are TOML scalars (``4``, ``true``, ``'x'``).

    Raises
    ------
    ValueError
        If an item has no ``=`` or its value is not a TOML scalar.
    """
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--init-arg must be KEY=VALUE, got {item!r}")
        try:
            parsed[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            parsed[key.strip()] = value.strip()  # a bare word: a string
    return parsed
