"""Which device a ClientApp trains on, and why: the GPU Ray assigned it, or the CPU.

Flower's simulation engine runs each ClientApp in a Ray actor with
``client-resources-num-cpus``/``num-gpus``. Ray gives an actor the GPUs it reserved
for it through ``CUDA_VISIBLE_DEVICES`` (an id list such as ``"1"``; several actors
share one GPU when ``num-gpus`` is a fraction such as 0.25) and *hides* every GPU
(``CUDA_VISIBLE_DEVICES=""``) when ``num-gpus`` is 0. Inside the process the visible
GPUs are renumbered from 0, so the GPU Ray assigned is ``cuda:0``. A deployed
SuperNode's SuperExec sees what its container or host gives it, the same way.

:func:`place` is the pure decision (from the environment variable and what torch
reports); :func:`fairfl.client.training.pick_device` applies it to this process and
logs the reason whenever ``auto`` falls back to the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The environment variable through which Ray (and CUDA) names the visible GPUs.
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Placement:
    """Where a client runs: a torch device name, and the reason for that choice."""

    device: str
    reason: str

    @property
    def on_gpu(self) -> bool:
        """Whether the device is a CUDA GPU."""
        return self.device.startswith("cuda")


def place(
    requested: str, *, visible: str | None, cuda_available: bool, device_count: int
) -> Placement:
    """Choose the device for a node's ``device`` setting.

    Parameters
    ----------
    requested : str
        The node config's ``device``: ``auto`` (a GPU when one is visible, else the
        CPU), ``cpu``, or ``cuda``/``cuda:N`` (N counts the *visible* GPUs).
    visible : str | None
        ``CUDA_VISIBLE_DEVICES`` (None: unset, every GPU of the machine is visible).
    cuda_available, device_count : bool, int
        ``torch.cuda.is_available()`` and ``torch.cuda.device_count()``.

    Raises
    ------
    ValueError
        If ``requested`` is not one of the forms above, or names a GPU that is not
        visible (an explicit request never falls back to the CPU).
    """
    hidden = visible is not None and visible.strip() in ("", "-1", "NoDevFiles")
    if requested == "cpu":
        return Placement("cpu", "device 'cpu' was requested")
    if requested == "auto":
        if hidden:
            return Placement(
                "cpu",
                f"no GPU is assigned to this process ({VISIBLE_ENV}={visible!r}; Ray hides "
                "GPUs from a ClientApp unless client-resources-num-gpus is above 0)",
            )
        if not cuda_available or device_count < 1:
            return Placement("cpu", "CUDA is not available (no GPU, driver or CUDA build of torch)")
        return Placement("cuda:0", _assigned(visible))
    if requested == "cuda" or (
        requested.startswith("cuda:") and requested.removeprefix("cuda:").isdigit()
    ):
        index = int(requested.removeprefix("cuda:")) if ":" in requested else 0
        shown = 0 if hidden or not cuda_available else device_count
        if index >= shown:
            raise ValueError(
                f"device {requested!r} was requested but only {shown} CUDA devices are "
                f"visible ({VISIBLE_ENV}={visible!r}, CUDA "
                f"{'available' if cuda_available else 'not available'})"
            )
        return Placement(f"cuda:{index}", _assigned(visible))
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {requested!r}")


def _assigned(visible: str | None) -> str:
    if visible is None:
        return f"CUDA is available ({VISIBLE_ENV} unset: every GPU of the machine is visible)"
    return f"the GPU assigned to this process ({VISIBLE_ENV}={visible!r})"
