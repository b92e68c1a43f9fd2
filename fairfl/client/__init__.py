"""Client side: the fairfl ClientApp and what other ClientApps call.

Most apps need one function: :func:`fair_train` (and :func:`fair_evaluate`), which
takes the app's model, DataLoader, loss and training loop and does what the round's
rule asks for. The pieces it is made of are exported too, for apps that assemble the
reply themselves. Importing this package needs torch and flwr, not fairfl's data sets,
models or strategies (``fairfl.client.app``, fairfl's own ClientApp, does).
"""

from fairfl.client.activation import (
    activation_for_config,
    client_activation,
    loader_activation,
    penultimate_layer,
)
from fairfl.client.adapter import TrainFn, fair_evaluate, fair_train, sgd_problems
from fairfl.client.batches import BatchKeys, split_batch
from fairfl.client.objectives import (
    LocalObjective,
    local_objective,
    objective_loss,
    propfair_loss,
)
from fairfl.client.passes import (
    loader_evaluate,
    loader_gradient,
    loader_group_counts,
    loader_mean_loss,
    qffl_h_for_config,
)
from fairfl.client.rcfl import (
    RCFLLocalResult,
    RCFLSettings,
    rcfl_settings,
    train_rcfl,
    train_rcfl_loader,
)
from fairfl.client.steps import CLIENT_STEPS, ArraySplit, ClientRound, ClientStep
from fairfl.client.training import (
    LossFn,
    activation_vector,
    evaluate,
    mean_loss,
    pick_device,
    train_local,
)
from fairfl.contract import write_evaluate_reply, write_train_reply
from fairfl.contract.activation import ActivationOptions
from fairfl.contract.qffl import qffl_h, write_gradient_reply

__all__ = [
    "CLIENT_STEPS",
    "ActivationOptions",
    "ArraySplit",
    "BatchKeys",
    "ClientRound",
    "ClientStep",
    "LocalObjective",
    "LossFn",
    "RCFLLocalResult",
    "RCFLSettings",
    "TrainFn",
    "activation_for_config",
    "activation_vector",
    "client_activation",
    "evaluate",
    "fair_evaluate",
    "fair_train",
    "loader_activation",
    "loader_evaluate",
    "loader_gradient",
    "loader_group_counts",
    "loader_mean_loss",
    "local_objective",
    "mean_loss",
    "objective_loss",
    "penultimate_layer",
    "pick_device",
    "propfair_loss",
    "qffl_h",
    "qffl_h_for_config",
    "rcfl_settings",
    "sgd_problems",
    "split_batch",
    "train_local",
    "train_rcfl",
    "train_rcfl_loader",
    "write_evaluate_reply",
    "write_gradient_reply",
    "write_train_reply",
]
