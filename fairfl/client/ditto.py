"""Ditto's client side: the personal model v_k, its step and where it lives.

Li, Hu, Beirami and Smith, ICML 2021 (docs/specs/spec-ditto.md). In a Ditto round (train
config ``ditto-lambda``) the client trains the global model as usual and also takes the
personal step of Algorithm 1, line 6 on its own model v_k,

    v_k ← v_k − η (∇F_k(v_k) + λ (v_k − w^t)),

i.e. SGD on F_k plus the proximal term (λ/2)‖v_k − w^t‖² around the *received* global
model (:func:`fairfl.strategies.ditto.personal_step` is the same step on arrays).

v_k lives across rounds in the ClientApp's ``Context.state`` (record
:data:`STATE_RECORD`) and, when the node config sets ``ditto-state-dir``, in
``<dir>/run-<run id>/client-<client key>.npz`` too, written atomically (a temporary file
renamed over the old one), so that a SuperNode restarted within the run keeps it. The
client key is the node's partition id (its stable key). A client that never trained
starts from the first global model it receives.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context
from torch import Tensor, nn

from fairfl._files import write_atomically
from fairfl.client.batches import BatchKeys, split_batch
from fairfl.client.training import LossFn, proximal_objective, sgd_step, zero_grad
from fairfl.contract import keys
from fairfl.contract.config import get_config_value, get_config_value_or

logger = logging.getLogger(__name__)

T = TypeVar("T", int, float)

#: Node-config key of the folder the personal models are kept in ("" or absent: none).
STATE_DIR_KEY = "ditto-state-dir"
#: ``Context.state`` record holding v_k.
STATE_RECORD = "ditto-personal"


@dataclass(frozen=True)
class DittoSettings:
    """One round's personal step: λ, epochs and step size (resolved from the config)."""

    lam: float
    epochs: int
    lr: float


def ditto_settings(config: ConfigRecord | Mapping[str, Any]) -> DittoSettings | None:
    """The round's :class:`DittoSettings`, or ``None`` when it is not a Ditto round.

    ``ditto-personal-epochs`` 0 (or absent) takes ``local-epochs``; the step size is
    ``ditto-personal-lr-scale`` (default 1) times ``lr``. A config without
    ``local-epochs`` or ``lr`` (a ServerApp of the user's that sends only what its own
    ClientApp reads) takes the run's defaults for training,
    :class:`fairfl.settings.RunSettings`' ``local-epochs`` and ``lr``, with one WARNING
    per key, instead of failing every client's round.

    Raises
    ------
    ValueError
        If a key is malformed or out of range (the message names it).
    """
    if keys.DITTO_LAMBDA not in config:
        return None
    lam = get_config_value(config, keys.DITTO_LAMBDA, float)
    epochs = get_config_value_or(config, keys.DITTO_PERSONAL_EPOCHS, int, 0)
    scale = get_config_value_or(config, keys.DITTO_PERSONAL_LR_SCALE, float, 1.0)
    if not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"config {keys.DITTO_LAMBDA} must be a finite number >= 0, got {lam!r}")
    if epochs < 0:
        raise ValueError(f"config {keys.DITTO_PERSONAL_EPOCHS} must be >= 0, got {epochs!r}")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"config {keys.DITTO_PERSONAL_LR_SCALE} must be > 0, got {scale!r}")
    return DittoSettings(
        lam=lam,
        epochs=epochs or _training_value(config, keys.LOCAL_EPOCHS, int),
        lr=scale * _training_value(config, keys.LR, float),
    )


#: Training keys already warned about as missing (once per process each).
_DEFAULTED: set[str] = set()


def _training_value(config: ConfigRecord | Mapping[str, Any], key: str, type_: type[T]) -> T:
    """``config[key]``, or the run's default for training (``RunSettings``) when absent."""
    if key in config:
        return get_config_value(config, key, type_)
    from fairfl.settings import RunSettings  # only for a config that lacks the key

    default: T = getattr(RunSettings, key.replace("-", "_"))
    if key not in _DEFAULTED:
        _DEFAULTED.add(key)
        logger.warning(
            "ditto: the train config has no %s; the personal step takes fairfl's default "
            "for training, %s = %r (send %s in the train config to choose)",
            key,
            key,
            default,
            key,
        )
    return default


def state_path(state_dir: str | os.PathLike[str], run_id: int, client_key: int) -> Path:
    """Where client ``client_key``'s personal model of run ``run_id`` is kept on disk."""
    return Path(state_dir) / f"run-{run_id}" / f"client-{client_key}.npz"


def _state_dir(context: Context) -> str:
    return str(context.node_config.get(STATE_DIR_KEY, ""))


def load_personal(context: Context, client_key: int, received: ArrayRecord) -> ArrayRecord:
    """v_k: from ``Context.state``, else from the node's state dir, else the received w^t.

    Raises
    ------
    ValueError
        If the kept model's keys or shapes differ from the received model's (the message
        names the client and where it was kept).
    """
    if STATE_RECORD in context.state:
        personal = cast(ArrayRecord, context.state[STATE_RECORD])
        _check_layout(personal, received, f"client {client_key}'s Context.state")
        return personal
    folder = _state_dir(context)
    path = state_path(folder, context.run_id, client_key) if folder else None
    if path is not None and path.exists():
        with np.load(path, allow_pickle=False) as stored:
            personal = ArrayRecord({name: Array(stored[name]) for name in stored.files})
        _check_layout(personal, received, f"client {client_key}'s {path}")
        context.state[STATE_RECORD] = personal
        logger.info("ditto: client %d: personal model restored from %s", client_key, path)
        return personal
    return received


def save_personal(context: Context, client_key: int, personal: ArrayRecord) -> None:
    """Keep v_k in ``Context.state`` and, with a state dir, atomically on disk."""
    context.state[STATE_RECORD] = personal
    folder = _state_dir(context)
    if not folder:
        return
    arrays = {k: a.numpy() for k, a in personal.items()}
    # numpy's stubs type the ** names as its own keywords (allow_pickle).
    write_atomically(
        state_path(folder, context.run_id, client_key),
        lambda stream: np.savez(stream, **arrays),  # type: ignore[arg-type]
    )


def _check_layout(personal: ArrayRecord, received: ArrayRecord, where: str) -> None:
    mine = {k: tuple(a.shape) for k, a in personal.items()}
    theirs = {k: tuple(a.shape) for k, a in received.items()}
    if mine != theirs:
        raise ValueError(
            f"ditto: {where} holds a personal model whose keys/shapes {mine} differ from "
            f"the received model's {theirs}; remove it to start from the global model"
        )


def personal_batches_step(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: LossFn,
    anchor: list[Tensor],
    settings: DittoSettings,
    device: torch.device,
    batch_keys: BatchKeys | None = None,
) -> float:
    """Ditto's personal update on ``model`` (holding v_k) over ``settings.epochs`` passes.

    Each minibatch takes the step of Algorithm 1, line 6: plain SGD at ``settings.lr`` on
    ``loss_fn`` plus (λ/2)‖v − w^t‖² (:func:`fairfl.client.training.proximal_objective`,
    FedProx's objective with μ = λ), ``anchor`` being w^t's parameters in
    ``model.parameters()`` order. Returns the mean batch loss of F_k.

    Raises
    ------
    ValueError
        If ``batches`` yields no batch.
    """
    model.train()
    parameters = list(model.parameters())
    losses: list[float] = []

    def personal_loss(outputs: Tensor, targets: Tensor) -> Tensor:
        loss = loss_fn(outputs, targets)
        losses.append(float(loss.detach()))  # F_k's, before the proximal term
        return loss

    objective = proximal_objective(personal_loss, model, settings.lam, anchor=anchor)
    for _ in range(settings.epochs):
        for batch in batches:
            inputs, targets = split_batch(batch, batch_keys)
            zero_grad(parameters)
            outputs = model(torch.as_tensor(inputs).to(device))
            objective(outputs, torch.as_tensor(targets).to(device)).backward()
            sgd_step(parameters, settings.lr)
    if not losses:
        raise ValueError("ditto: the loader yielded no batch for the personal step")
    return float(np.mean(losses))


def anchor_of(model: nn.Module, received: ArrayRecord, device: torch.device) -> list[Tensor]:
    """w^t's tensors in ``model.parameters()`` order (the proximal term's anchor)."""
    state = received.to_torch_state_dict()
    names = [name for name, _ in model.named_parameters()]
    return [state[name].to(device) for name in names]


def state_record(model: nn.Module, order: Iterable[str]) -> ArrayRecord:
    """``model``'s state dict on the CPU as an ArrayRecord, in the key order ``order``."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return ArrayRecord({key: state[key] for key in order})
