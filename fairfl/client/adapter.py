"""One call that makes any PyTorch ClientApp speak every fairfl rule: :func:`fair_train`.

A Flower ClientApp with its own model, DataLoader, loss and training loop calls::

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        content = fair_train(msg, Net(), trainloader, nn.CrossEntropyLoss(), my_train)
        return Message(content=content, reply_to=msg)

:func:`fair_train` loads the received global model, measures what the round's rule
needs (the train config says which rule it is), calls the app's own training function
with the loss the rule wants minimised, and writes the reply of wire contract v1.
:func:`fair_evaluate` does the same for evaluate messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

# Registers fairfl's own client steps, which run_round finds by their config keys.
import fairfl.client.builtin_steps  # noqa: F401
from fairfl.client.batches import BatchKeys
from fairfl.client.ditto import load_personal
from fairfl.client.objectives import LocalObjective

# The passes lived here before the client steps; their old import path still works.
from fairfl.client.passes import (
    AttributeFn,
    console_warning,
    loader_evaluate,
    loader_group_counts,
)
from fairfl.client.passes import loader_gradient as loader_gradient
from fairfl.client.passes import loader_mean_loss as loader_mean_loss
from fairfl.client.passes import qffl_h_for_config as qffl_h_for_config
from fairfl.client.steps import ClientRound, MetricValue, run_round
from fairfl.client.training import LossFn, proximal_objective
from fairfl.contract import keys, write_evaluate_reply
from fairfl.contract.config import get_config_value

#: ``train_fn(model, trainloader, loss_fn, config) -> train loss or None``.
TrainFn = Callable[[nn.Module, Any, LossFn, ConfigRecord], float | Tensor | None]


def fair_train(
    message: Message,
    model: nn.Module,
    trainloader: Iterable[Any],
    loss_fn: LossFn,
    train_fn: TrainFn,
    *,
    device: torch.device | str | None = None,
    activation_layer: str | None = None,
    partition_id: int | None = None,
    batch_keys: BatchKeys | None = None,
    context: Context | None = None,
    attribute_fn: AttributeFn | None = None,
    num_groups: int = 2,
) -> RecordDict:
    """Train ``model`` for one round of a fairfl rule and return the train reply.

    In order: load the received weights w^t (``message.content["arrays"]``) into
    ``model``; measure the mean loss F_k(w^t) of the received model over the whole
    ``trainloader`` (eval mode, no gradients) and count its samples; if the config has
    ``want-activation`` (Equitable FL), compute the activation vector of the received
    model; if it has ``want-group-counts`` (FairFed) and ``attribute_fn`` is given,
    count the received model's predictions per (attribute value, label, prediction)
    (:func:`loader_group_counts`); then train, and reply per wire contract v1.

    In a q-FedSGD round (config key ``full-gradient``) nothing is trained and
    ``train_fn`` is not called: the reply carries the full-batch gradient ∇F_k(w^t)
    and F_k(w^t) of one pass over ``trainloader`` (:func:`loader_gradient`).

    Training is the app's own ``train_fn(model, trainloader, wrapped_loss, config)``,
    except in an RC-FL round (config key ``rcfl-alpha``), where fair_train itself takes
    the rule's κ joint steps in (ω, η) with ``loss_fn`` over the loader
    (:func:`fairfl.client.rcfl.train_rcfl_loader`, plain SGD at the config's ``lr``)
    and ``train_fn`` is not called. ``wrapped_loss`` is ``loss_fn`` with the round's
    objective, set by the client steps its config keys switch on
    (:mod:`fairfl.client.objectives`): PropFair's transform (``propfair-m``) and
    FedProx's ``μ/2 ||w - w^t||²`` (``proximal-mu``); ``loss_fn``
    itself when the rule asks for neither. When the rule sends such an objective and
    ``train_fn`` never calls ``wrapped_loss``, the objective was not applied: the reply
    says so (``objective-ignored`` = 1) and a WARNING is logged.

    In a Ditto round (config key ``ditto-lambda``) fair_train then takes Ditto's
    personal step (Algorithm 1, line 6: plain SGD on ``loss_fn`` plus (λ/2)‖v − w^t‖²)
    on the client's personal model v_k, kept in ``context.state`` and, with the node
    config's ``ditto-state-dir``, on disk (:mod:`fairfl.client.ditto`); ``model`` holds
    the trained global weights again afterwards (in a q-FedSGD round, the received
    ones). It needs ``context`` and ``partition_id`` (the client's stable key); without
    them the personal step is skipped with a WARNING and the round is the global rule's
    alone.

    In a q-FFL round (config key ``qffl-q``) the server's L = 1/lr holds for plain SGD at
    the config's ``lr`` only: an optimizer that ``train_fn`` steps on ``model`` with
    momentum, Nesterov, an adaptive rule (Adam, RMSprop, ...) or another learning rate is
    logged at WARNING with the fix.

    Parameters
    ----------
    message : Message
        The train message: ``arrays`` (w^t) and ``config`` (``lr``, ``local-epochs``,
        ``batch-size`` and the rule's keys).
    model : nn.Module
        The app's model; fair_train loads the received weights into it (strict: the
        same keys as the server's model) and it is trained in place.
    trainloader : Iterable
        ``(inputs, targets)`` pairs or dict batches (``{"img": ..., "label": ...}``, see
        ``batch_keys``): a ``torch.utils.data.DataLoader`` or any iterable that can be
        iterated several times. Inputs go to ``model(inputs)``.
    loss_fn : Callable[[Tensor, Tensor], Tensor]
        ``loss_fn(outputs, targets)``: the **mean** loss of a batch as a scalar tensor
        (e.g. ``nn.CrossEntropyLoss()``); F_k is the sample-weighted mean of these.
    train_fn : Callable[[nn.Module, Iterable, LossFn, ConfigRecord], float | None]
        ``train_fn(model, trainloader, loss_fn, config)``: the app's training loop. It
        gets ``model`` (in train mode, on ``device``), the same ``trainloader``, the
        loss to minimise (use it, not the app's own, so that the rule's objective
        applies) and the round's ConfigRecord (read ``lr``, ``local-epochs`` from it).
        It trains ``model`` in place and may return its mean training loss, which is
        sent as Flower's usual ``train_loss``.
    device : torch.device | str | None
        Where to run: the model is moved there and every batch is moved to it.
        ``None``: where the model's parameters are.
    activation_layer : str | None
        Where the penultimate activation h is read for Equitable FL. ``None``: from
        ``model.features(x)`` when the model has that method (fairfl's models), else
        the input of the model's last ``nn.Linear`` (a forward pre-hook). A name from
        ``model.named_modules()``: that submodule's output (a forward hook).
    partition_id : int | None
        Sent as ``partition-id`` when given (for per-client results; every fairfl rule
        logs a warning for a reply without it).
    batch_keys : tuple[str, str] | None
        The ``(inputs, targets)`` keys of dict batches. ``None``: detected from the usual
        names (``img``, ``image``, ``pixel_values``, ``x``, ``features``, ``inputs``;
        ``label``, ``labels``, ``y``, ``target``, ``targets``, ``fine_label``; see
        :func:`fairfl.client.batches.split_batch`).
    context : Context | None
        The ClientApp's context, where Ditto keeps the personal model.
    attribute_fn : Callable[[batch], array] | None
        Group fairness (FairFed): ``attribute_fn(batch)`` gives each sample of a batch
        of the loader its sensitive attribute, ints in [0, ``num_groups``) (e.g.
        ``lambda batch: batch["sex"]``); the targets must be binary labels 0/1.
        ``None``: the client sends no ``group-counts`` and FairFed refuses its reply.
    num_groups : int (default: 2)
        G, the number of attribute values of the federation (every client sends 4 G
        counts, zeros for a value it lacks); FairFed's metric needs G = 2.

    Returns
    -------
    RecordDict
        ``arrays``: the trained model's ``state_dict`` (CPU, in the received key
        order); ``metrics``: ``num-examples``, ``loss-before-training`` (F_k(w^t)),
        ``train_loss`` when ``train_fn`` returns one (RC-FL: the loss of its last
        step), ``acc-before-training`` (the received model's accuracy, argmax over
        dim 1, when the config has ``want-accuracy``: FedFa), ``acc-after-training``
        (the trained model's accuracy on ``trainloader``, a pass after ``train_fn``,
        when the config has ``want-accuracy-after-training``: FedFa's default),
        ``group-counts`` (the
        received model's, when the config has ``want-group-counts`` and
        ``attribute_fn`` is given: FairFed), ``activation`` (Equitable FL),
        ``rcfl-eta`` (RC-FL) and ``qffl-h`` (q-FFL, config key ``qffl-q``),
        ``objective-ignored`` (0 or 1, when the rule sends a client objective).
        ``train_loss`` is the loss measured *during* local training (what ``train_fn``
        returns), not F_k(w^t). A q-FedSGD round replies ``gradient`` (the gradient, in
        the received key order) instead of ``arrays``,
        with ``num-examples`` and ``loss-before-training``.

    Raises
    ------
    ValueError
        If the loader yields no sample, a config key is missing or malformed (the
        message names it), the activation vector cannot be read (the message names
        ``activation_layer``), or a dict batch's keys cannot be detected.
    KeyError
        If a dict batch lacks one of ``batch_keys``.
    TypeError
        If a batch is neither an ``(inputs, targets)`` pair nor a dict.
    """
    # RecordDict's [] is typed as any record; the typed views (array_records) cost
    # ~20 us a message, the cast nothing.
    config = cast(ConfigRecord, message.content[keys.CONFIG])
    sent = cast(ArrayRecord, message.content[keys.ARRAYS])
    run_on = _load(model, sent, device)

    def train_app(round_: ClientRound) -> dict[str, MetricValue]:
        train_loss, ignored = _train_app(
            model, trainloader, loss_fn, train_fn, config, round_.objective
        )
        added: dict[str, MetricValue] = {}
        if train_loss is not None:
            added[keys.TRAIN_LOSS] = train_loss
        if ignored is not None:
            added[keys.OBJECTIVE_IGNORED] = int(ignored)
        return added

    # The rule's own steps (fairfl.client.builtin_steps, a plug-in's) by its config keys.
    return run_round(
        ClientRound(
            model=model,
            config=config,
            sent=sent,
            device=run_on,
            loss_fn=loss_fn,
            batches=trainloader,
            batch_keys=batch_keys,
            attribute_fn=attribute_fn,
            num_groups=num_groups,
            activation_layer=activation_layer,
            context=context,
            partition_id=partition_id,
            train_fn=train_app,
        )
    )


def _train_app(
    model: nn.Module,
    trainloader: Iterable[Any],
    loss_fn: LossFn,
    train_fn: TrainFn,
    config: ConfigRecord,
    objective: LocalObjective,
) -> tuple[float | None, bool | None]:
    """Run the app's ``train_fn`` with the round's objective; return its loss and a flag.

    The flag is ``None`` when the rule sends no client objective, else whether
    ``train_fn`` never called the wrapped loss (logged at WARNING). In a q-FFL round,
    each way the optimizers ``train_fn`` stepped depart from plain SGD at the config's
    ``lr`` is logged at WARNING (:func:`sgd_problems`).
    """
    wrapped = proximal_objective(
        loss_fn, model, objective.proximal_mu, transform=objective.batch_objective
    )
    calls = [0]

    def counted(outputs: Tensor, targets: Tensor) -> Tensor:
        calls[0] += 1
        return wrapped(outputs, targets)

    model.train()
    handed = loss_fn if wrapped is loss_fn else counted  # no objective: the app's own
    with _stepped_optimizers(model) as optimizers:
        returned = train_fn(model, trainloader, handed, config)
    if isinstance(returned, Tensor):
        returned = returned.detach()
    ignored = None
    if wrapped is not loss_fn:  # the rule sent a client objective
        ignored = calls[0] == 0
        if ignored:
            console_warning(
                "fair_train: the rule sent a client objective (%s) but train_fn never "
                "called the loss_fn it was handed, so it was not applied; train with "
                "that loss_fn (its 3rd argument) instead of the app's own criterion",
                ", ".join(objective.config_keys),
            )
    if keys.QFFL_Q in config and keys.LR in config:
        for problem in sgd_problems(optimizers, get_config_value(config, keys.LR, float)):
            console_warning(
                "fair_train: q-FFL computes L = 1/lr for plain SGD at the config's lr, "
                "but train_fn %s; train with torch.optim.SGD(params, lr=config['lr']) "
                "(no momentum), or set the strategy's client_learning_rate to the "
                "step size the clients really take (about lr / (1 - momentum))",
                problem,
            )
    return (None if returned is None else float(returned)), ignored


def fair_evaluate(
    message: Message,
    model: nn.Module,
    testloader: Iterable[Any],
    loss_fn: LossFn,
    *,
    device: torch.device | str | None = None,
    partition_id: int | None = None,
    batch_keys: BatchKeys | None = None,
    context: Context | None = None,
    attribute_fn: AttributeFn | None = None,
    num_groups: int = 2,
) -> RecordDict:
    """Evaluate the received model on ``testloader`` and return the evaluate reply.

    Loads ``message.content["arrays"]`` into ``model`` and replies ``num-examples``,
    ``eval_loss`` (sample-weighted mean of ``loss_fn`` over the batches) and
    ``eval_acc`` (fraction of samples whose ``outputs.argmax(dim=1)`` equals the
    target), the metrics fairfl's fairness report reads.

    Parameters
    ----------
    message : Message
        The evaluate message (``arrays``).
    model, testloader, loss_fn, device, partition_id, batch_keys, context
        As in :func:`fair_train`.
    attribute_fn, num_groups
        As in :func:`fair_train`; with ``attribute_fn`` the reply carries the received
        model's ``group-counts`` on ``testloader`` every round (any rule: the group
        fairness metrics of ``rounds.jsonl``).

    Returns
    -------
    RecordDict
        ``metrics`` with ``num-examples``, ``eval_loss``, ``eval_acc``; when the config
        has ``ditto-personal`` (Ditto) and ``context`` and ``partition_id`` are given,
        also ``personal-eval_loss`` and ``personal-eval_acc`` of the personal model
        (the received model's own values for a client that never trained);
        ``group-counts`` when ``attribute_fn`` is given.

    Raises
    ------
    ValueError
        If the loader yields no sample, or ``attribute_fn`` gives a value outside
        [0, ``num_groups``) or a target is not 0 or 1.
    """
    sent = cast(ArrayRecord, message.content[keys.ARRAYS])
    run_on = _load(model, sent, device)
    loss, accuracy, num_examples = loader_evaluate(model, testloader, loss_fn, run_on, batch_keys)
    counts = None
    if attribute_fn is not None:  # before the personal model replaces the received one
        counts = loader_group_counts(
            model, testloader, attribute_fn, num_groups, run_on, batch_keys
        )
    personal = None
    config = cast(ConfigRecord, message.content.get(keys.CONFIG, ConfigRecord()))
    wants_personal = bool(config.get(keys.DITTO_PERSONAL, False))
    if wants_personal and context is not None and partition_id is not None:
        kept = load_personal(context, partition_id, sent)
        personal = (loss, accuracy)
        if kept is not sent:
            model.load_state_dict(kept.to_torch_state_dict(), strict=True)
            kept_loss, kept_acc, _ = loader_evaluate(model, testloader, loss_fn, run_on, batch_keys)
            personal = (kept_loss, kept_acc)
    return write_evaluate_reply(
        num_examples=num_examples,
        eval_loss=loss,
        eval_acc=accuracy,
        partition_id=partition_id,
        personal=personal,
        group_counts=counts,
    )


def _load(model: nn.Module, arrays: ArrayRecord, device: torch.device | str | None) -> torch.device:
    """Load the received weights into ``model``, move it to ``device``; return that."""
    model.load_state_dict(arrays.to_torch_state_dict(), strict=True)
    if device is None:
        parameter = next(model.parameters(), None)
        return parameter.device if parameter is not None else torch.device("cpu")
    run_on = torch.device(device)
    model.to(run_on)
    return run_on


def sgd_problems(optimizers: Iterable[torch.optim.Optimizer], lr: float) -> list[str]:
    """How each optimizer departs from plain SGD at learning rate ``lr``, in words.

    q-FFL's Lipschitz estimate L = 1/η (Li et al. 2020, §4: "L is used as 1/η") is exact for
    plain SGD with step size η: with momentum β the steps grow towards η/(1 - β), and an
    adaptive optimizer (Adam, RMSprop, ...) has no single step size.

    Parameters
    ----------
    optimizers : Iterable[torch.optim.Optimizer]
        The optimizers that stepped the model.
    lr : float
        η, the config's ``lr``.

    Returns
    -------
    list[str]
        One phrase per problem (empty: plain SGD at ``lr``), e.g. ``"stepped SGD with
        momentum=0.9"``.
    """
    problems: list[str] = []
    for optimizer in optimizers:
        name = type(optimizer).__name__
        if not isinstance(optimizer, torch.optim.SGD):
            problems.append(f"stepped {name}, not plain SGD")
            continue
        for group in optimizer.param_groups:
            if float(group.get("momentum", 0.0)) > 0 or bool(group.get("nesterov", False)):
                problems.append(f"stepped SGD with momentum={group['momentum']:g}")
            if float(group["lr"]) != lr:
                problems.append(f"stepped SGD with lr={float(group['lr']):g}, not lr={lr:g}")
    return list(dict.fromkeys(problems))  # one line per distinct problem


@contextmanager
def _stepped_optimizers(model: nn.Module) -> Iterator[list[torch.optim.Optimizer]]:
    """Collect, while the block runs, each optimizer that steps a parameter of ``model``.

    A global optimizer step pre-hook (torch >= 2.0), removed on exit: ``train_fn``
    builds its optimizer itself, so this is the one place the adapter can see it.
    """
    own = {id(p) for p in model.parameters()}
    seen: list[torch.optim.Optimizer] = []

    def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if all(optimizer is not o for o in seen) and any(
            id(p) in own for group in optimizer.param_groups for p in group["params"]
        ):
            seen.append(optimizer)

    handle = register_optimizer_step_pre_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()
