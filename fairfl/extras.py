"""Which ``pip install "fairfl[<extra>]"`` brings each optional module (no imports).

The core install (``pip install fairfl``) is what a server that aggregates needs; the
rest comes in extras (``[project.optional-dependencies]`` in pyproject.toml). The
``fairfl`` command and the up-front checks of a run
(:mod:`fairfl.server.preflight`) turn a missing module into one line naming its extra.
"""

from __future__ import annotations

#: The extra of each optional top-level module fairfl imports.
MODULE_EXTRAS: dict[str, str] = {
    "torch": "client",
    "torchvision": "vision",
    "datasets": "data",
    "flwr_datasets": "data",
    "sklearn": "data",
    "matplotlib": "report",
    "PIL": "report",
    "rich": "report",
    "ray": "simulation",
    "tensorboard": "telemetry",
    "mlflow": "telemetry",
    "wandb": "telemetry",
    "prometheus_client": "telemetry",
    "dash": "dashboard",
    "plotly": "dashboard",
    "flask": "dashboard",
    "werkzeug": "dashboard",
    "selenium": "browser",
    "dp_accounting": "privacy",
}


def install_hint(module: str) -> str:
    """``pip install "fairfl[<extra>]"`` for ``module`` (a dotted name is fine).

    A module of no extra gets ``pip install <module>``.
    """
    extra = MODULE_EXTRAS.get(module.split(".")[0])
    return f'pip install "fairfl[{extra}]"' if extra else f"pip install {module.split('.')[0]}"
