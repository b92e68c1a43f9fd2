"""fairfl's own client steps, one per train-config key its rules send.

Registered in :data:`fairfl.client.steps.CLIENT_STEPS` on import (importing
:mod:`fairfl.client` does), in the order a round ran them before the registry existed,
so that a shuffling DataLoader is iterated in the same order and results stay
bit-identical. Each step computes on the ClientApp's arrays when the round has them
(:attr:`ClientRound.split`, the functions fairfl's ClientApp always used) and on the
app's batches otherwise (:func:`fairfl.client.fair_train`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import cast

from flwr.app import ArrayRecord

from fairfl.client.activation import activation_for_config, loader_activation
from fairfl.client.ditto import (
    anchor_of,
    ditto_settings,
    load_personal,
    personal_batches_step,
    save_personal,
    state_record,
)
from fairfl.client.objectives import propfair_objective, proximal_mu
from fairfl.client.passes import (
    console_warning,
    loader_evaluate,
    loader_gradient,
    loader_group_counts,
    qffl_h_for_config,
)
from fairfl.client.private_signal import LOCAL_DP_STEP, PRIVATE_LOSS_STEP, private_accuracy
from fairfl.client.rcfl import rcfl_settings, train_rcfl, train_rcfl_loader
from fairfl.client.sensitive import model_group_counts
from fairfl.client.steps import CLIENT_STEPS, ClientRound, ClientStep, MetricValue
from fairfl.client.training import evaluate, train_local
from fairfl.contract import keys
from fairfl.contract.activation import ActivationOptions
from fairfl.contract.config import get_config_value, get_config_value_or
from fairfl.contract.qffl import write_gradient_reply
from fairfl.contract.replies import TRAIN_METRICS, FieldSpec


def _specs(*names: str) -> dict[str, FieldSpec]:
    """The contract's specs of ``names`` (the metrics a built-in step adds)."""
    return {name: TRAIN_METRICS[name] for name in names}


def full_gradient(round_: ClientRound) -> Mapping[str, MetricValue]:
    """q-FedSGD (``full-gradient``): reply ∇F_k(w^t) and F_k(w^t) of one pass, no training."""
    gradient, loss, count = loader_gradient(
        round_.model, round_.batches, round_.loss_fn, round_.device, round_.batch_keys
    )
    round_.reply = write_gradient_reply(
        ArrayRecord({key: gradient[key] for key in round_.sent}),
        num_examples=count,
        loss_before_training=loss,
        partition_id=round_.partition_id,
    )
    return {}


def accuracy_before(round_: ClientRound) -> Mapping[str, MetricValue]:
    """FedFa (``want-accuracy``): the received model's accuracy, from the F_k(w^t) pass.

    Clipped and noised under ``dp-accuracy-noise-multiplier``
    (:func:`~fairfl.client.private_signal.private_accuracy`).
    """
    assert round_.accuracy_before is not None  # declared received_accuracy
    return {keys.ACC_BEFORE_TRAINING: private_accuracy(round_.config, round_.accuracy_before)}


def group_counts_before(round_: ClientRound) -> Mapping[str, MetricValue]:
    """FairFed (``want-group-counts``): the received model's counts; none without attributes."""
    split = round_.split
    if split is not None:
        if split.attributes is None:
            return {}
        counts = model_group_counts(
            round_.model, split.x, split.y, split.attributes, round_.num_groups, round_.device
        )
    elif round_.attribute_fn is not None:
        counts = loader_group_counts(
            round_.model,
            round_.batches,
            round_.attribute_fn,
            round_.num_groups,
            round_.device,
            round_.batch_keys,
        )
    else:
        return {}
    return {keys.GROUP_COUNTS: counts}


def activation_before(round_: ClientRound) -> Mapping[str, MetricValue]:
    """Equitable FL (``want-activation``): the received model's activation vector."""
    split = round_.split
    if split is not None:
        activation = activation_for_config(
            round_.model, split.x, round_.device, round_.config, sample_seed=split.seed
        )
    else:
        vector = loader_activation(
            round_.model,
            round_.batches,
            round_.device,
            ActivationOptions.from_config(round_.config),
            activation_layer=round_.activation_layer,
            batch_keys=round_.batch_keys,
        )
        activation = None if vector is None else vector.tolist()
    return {} if activation is None else {keys.ACTIVATION: activation}


def proximal_term(round_: ClientRound) -> Mapping[str, MetricValue]:
    """FedProx (``proximal-mu``): add ``μ/2 ||w - w^t||²`` to the round's objective."""
    objective = round_.objective
    mu, sent = proximal_mu(round_.config), (*objective.config_keys, keys.PROXIMAL_MU)
    round_.objective = replace(objective, proximal_mu=mu, config_keys=sent)
    return {}


def propfair_transform(round_: ClientRound) -> Mapping[str, MetricValue]:
    """PropFair (``propfair-m``): each batch loss through PropFair's transform."""
    objective = round_.objective
    transform, sent = propfair_objective(round_.config), (*objective.config_keys, keys.PROPFAIR_M)
    round_.objective = replace(objective, batch_objective=transform, config_keys=sent)
    return {}


def rcfl_training(round_: ClientRound) -> Mapping[str, MetricValue]:
    """RC-FL (``rcfl-alpha``): κ joint steps in (ω, η) on the smoothed objective.

    Under :func:`fair_train` the reply's ``train_loss`` is the loss of the last step;
    fairfl's ClientApp sends F_k(w^t) there in every round.
    """
    settings = rcfl_settings(round_.config)
    assert settings is not None  # switched on by rcfl-alpha
    lr = get_config_value(round_.config, keys.LR, float)
    split = round_.split
    if split is not None:
        result = train_rcfl(
            round_.model,
            split.x,
            split.y,
            settings=settings,
            lr=lr,
            device=round_.device,
            seed=split.seed,
        )
        return {keys.RCFL_ETA: result.eta}
    result = train_rcfl_loader(
        round_.model,
        round_.batches,
        round_.loss_fn,
        settings=settings,
        lr=lr,
        device=round_.device,
        batch_keys=round_.batch_keys,
    )
    return {keys.RCFL_ETA: result.eta, keys.TRAIN_LOSS: result.loss_last}


def accuracy_after(round_: ClientRound) -> Mapping[str, MetricValue]:
    """FedFa (``want-accuracy-after-training``): the trained model's accuracy.

    Clipped and noised under ``dp-accuracy-noise-multiplier``
    (:func:`~fairfl.client.private_signal.private_accuracy`).
    """
    split = round_.split
    if split is not None:
        accuracy = evaluate(round_.model, split.x, split.y, round_.device)[1]
    else:
        accuracy = loader_evaluate(
            round_.model, round_.batches, round_.loss_fn, round_.device, round_.batch_keys
        )[1]
    return {keys.ACC_AFTER_TRAINING: private_accuracy(round_.config, accuracy)}


def qffl_h_after(round_: ClientRound) -> Mapping[str, MetricValue]:
    """q-FFL (``qffl-q``): h_k of the received and the trained model (002, Algorithm 2)."""
    assert round_.state is not None  # set before the after phase
    h = qffl_h_for_config(round_.config, round_.loss_before, round_.sent, round_.state)
    return {} if h is None else {keys.QFFL_H: h}


def ditto_personal(round_: ClientRound) -> Mapping[str, MetricValue]:
    """Ditto (``ditto-lambda``): the personal step on v_k (Algorithm 1, line 6).

    v_k is kept in ``context.state`` (and on disk with the node config's
    ``ditto-state-dir``). Under :func:`fair_train` the model then holds the trained
    global weights again (in a q-FedSGD round, the received ones); without ``context``
    or ``partition_id`` the step is skipped with a WARNING.
    """
    ditto = ditto_settings(round_.config)
    assert ditto is not None  # switched on by ditto-lambda
    model, sent, config = round_.model, round_.sent, round_.config
    if round_.context is None or round_.partition_id is None:
        console_warning(
            "fair_train: a Ditto round (%s) needs context= and partition_id= to keep "
            "the personal model; the personal step was skipped",
            keys.DITTO_LAMBDA,
        )
        return {}
    personal = load_personal(round_.context, round_.partition_id, sent)
    model.load_state_dict(personal.to_torch_state_dict(), strict=True)
    anchor = anchor_of(model, sent, round_.device)
    split = round_.split
    if split is not None:
        train_local(
            model,
            split.x,
            split.y,
            epochs=ditto.epochs,
            batch_size=get_config_value(config, keys.BATCH_SIZE, int),
            lr=ditto.lr,
            device=round_.device,
            seed=split.seed,
            proximal_mu=ditto.lam,
            anchor=anchor,
            # The global step's budget in steps, unless the rule set its own personal epochs.
            steps=(
                get_config_value_or(config, keys.LOCAL_STEPS, int, 0)
                if get_config_value_or(config, keys.DITTO_PERSONAL_EPOCHS, int, 0) == 0
                else 0
            ),
        )
        save_personal(round_.context, round_.partition_id, state_record(model, sent.keys()))
        return {}
    personal_batches_step(
        model, round_.batches, round_.loss_fn, anchor, ditto, round_.device, round_.batch_keys
    )
    save_personal(round_.context, round_.partition_id, state_record(model, sent.keys()))
    # fair_train's caller finds in its model what the reply holds: the trained weights
    # (the reply's copy: round_.state may share memory with the model), or in a
    # q-FedSGD round the received ones.
    reply = round_.reply
    restore = reply[keys.ARRAYS] if reply is not None and keys.ARRAYS in reply else sent
    model.load_state_dict(cast(ArrayRecord, restore).to_torch_state_dict(), strict=True)
    return {}


#: The built-in steps, in the order a round ran them before the registry.
BUILTIN_STEPS: tuple[ClientStep, ...] = (
    ClientStep(
        keys.FULL_GRADIENT,
        full_gradient,
        _specs(keys.NUM_EXAMPLES, keys.LOSS_BEFORE_TRAINING),
        phase="reply",
    ),
    PRIVATE_LOSS_STEP,  # DP on F_k(w^t): before every step that reads it
    ClientStep(
        keys.WANT_ACCURACY,
        accuracy_before,
        _specs(keys.ACC_BEFORE_TRAINING),
        received_accuracy=True,
    ),
    ClientStep(keys.WANT_GROUP_COUNTS, group_counts_before, _specs(keys.GROUP_COUNTS)),
    ClientStep(keys.WANT_ACTIVATION, activation_before, _specs(keys.ACTIVATION)),
    ClientStep(keys.PROXIMAL_MU, proximal_term, phase="objective", when="present"),
    ClientStep(keys.PROPFAIR_M, propfair_transform, phase="objective", when="present"),
    ClientStep(
        keys.RCFL_ALPHA,
        rcfl_training,
        _specs(keys.RCFL_ETA, keys.TRAIN_LOSS),
        phase="train",
        when="present",
    ),
    LOCAL_DP_STEP,  # dp = "local": the released model, before every step that reads it
    ClientStep(
        keys.WANT_ACCURACY_AFTER_TRAINING,
        accuracy_after,
        _specs(keys.ACC_AFTER_TRAINING),
        phase="after",
    ),
    ClientStep(keys.QFFL_Q, qffl_h_after, _specs(keys.QFFL_H), phase="after", when="present"),
    ClientStep(keys.DITTO_LAMBDA, ditto_personal, phase="personal", when="present"),
)

for _step in BUILTIN_STEPS:
    CLIENT_STEPS.register(_step)
