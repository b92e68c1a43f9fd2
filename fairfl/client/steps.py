"""Client steps: what a rule asks of a client, keyed by the train-config key that asks.

A rule's server half sends train-config keys (``want-group-counts``, ``rcfl-alpha``,
...); each key switches on one :class:`ClientStep` of the registry :data:`CLIENT_STEPS`,
which measures or trains and returns the metrics it adds to the train reply.
:func:`fairfl.client.fair_train` and fairfl's own ClientApp run a round as the same
loop over the switched-on steps, so a rule that needs a new client report brings its
step with it and edits neither:

- the built-in steps are registered here;
- every entry point of the group ``fairfl.client_steps`` that another distribution
  declares (``want-my-report = mypkg.client:MY_STEP``, naming a :class:`ClientStep`)
  is loaded on first use, on the client only: the server never imports this module,
  so a torch-free server install is not touched by it.

A step runs in one of six phases of a round, in this order:

``reply``
    Answers the round itself and sets :attr:`ClientRound.reply` (q-FedSGD's gradient);
    no other step runs but the ``personal`` ones.
``before``
    Measures the received model w^t, after F_k(w^t) (:attr:`ClientRound.loss_before`);
    must leave the model as it found it.
``objective``
    Sets the loss the round's training minimises (:attr:`ClientRound.objective`):
    FedProx's proximal term (``proximal-mu``), PropFair's transform (``propfair-m``).
``train``
    Replaces the app's local training (RC-FL's joint steps); at most one a round.
``after``
    Measures the trained model; :attr:`ClientRound.state` holds its weights.
``personal``
    Runs once the reply is written, and may then change the model (Ditto's personal
    step on v_k).

Each step declares the metric keys it may add with their ranges
(:class:`fairfl.contract.replies.FieldSpec`); registering a step declares a new key to
the contract (:func:`fairfl.contract.replies.declare_train_metrics`), and the server
half declares it too (its rule module), so that the server's reply reader checks and
keeps it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from torch import Tensor, nn

from fairfl.client.batches import BatchKeys, split_batch
from fairfl.client.objectives import LocalObjective
from fairfl.client.passes import AttributeFn, loader_evaluate, loader_mean_loss
from fairfl.client.training import LossFn, evaluate
from fairfl.contract.replies import (
    TRAIN_METRICS,
    FieldSpec,
    declare_train_metrics,
    write_train_reply,
)

logger = logging.getLogger(__name__)

#: The entry-point group other distributions declare their client steps in.
ENTRY_POINT_GROUP = "fairfl.client_steps"

Phase = Literal["reply", "before", "objective", "train", "after", "personal"]
#: The phases in the order a round runs them.
PHASES: tuple[Phase, ...] = ("reply", "before", "objective", "train", "after", "personal")

#: A metric value a step adds (an int, a float, or a list of either).
MetricValue = int | float | list[int] | list[float]


@dataclass(frozen=True)
class ArraySplit:
    """The training split as arrays, as fairfl's own ClientApp holds it.

    Built-in steps compute on it with the array functions the ClientApp always used
    (:mod:`fairfl.client.training`), so its results stay bit-identical; a step of
    another distribution can ignore it and iterate :meth:`ClientRound.pairs`.

    Attributes
    ----------
    x, y : np.ndarray
        Inputs and labels.
    attributes : np.ndarray | None
        Each sample's sensitive attribute, where the data carry one.
    seed : int
        The client's seed for this round (local shuffling, activation sampling).
    """

    x: np.ndarray
    y: np.ndarray
    attributes: np.ndarray | None
    seed: int


@dataclass
class ClientRound:
    """One train round on a client: what a step may read, and what the round has found.

    Attributes
    ----------
    model : nn.Module
        The model: the received weights w^t until training, the trained ones after.
    config : ConfigRecord
        The round's train config.
    sent : ArrayRecord
        The received global model w^t.
    device : torch.device
        Where the model runs.
    loss_fn : LossFn
        The mean loss of a batch (the app's; cross-entropy in fairfl's ClientApp).
    batches : Iterable
        The training data as batches (the app's loader, or the split cut in chunks),
        iterable several times; :meth:`pairs` gives them as tensors on ``device``.
    batch_keys : tuple[str, str] | None
        A dict batch's ``(inputs, targets)`` keys.
    split : ArraySplit | None
        fairfl's ClientApp: the split as arrays; ``None`` under :func:`fair_train`.
    attribute_fn : AttributeFn | None
        :func:`fair_train`'s ``attribute_fn`` (group fairness), if given.
    num_groups : int
        G, the number of attribute values.
    activation_layer : str | None
        :func:`fair_train`'s ``activation_layer``.
    context : Context | None
        The ClientApp's context (a step's state between rounds).
    partition_id : int | None
        The client's stable key.
    train_fn : Callable[[ClientRound], Mapping[str, MetricValue]] | None
        The round's default local training (the app's), which a ``train`` step
        replaces; returns the metrics it adds (``train_loss``, ``objective-ignored``).
    loss_before : float
        F_k(w^t), set before the ``before`` steps run.
    accuracy_before : float | None
        The received model's accuracy from the same pass, when a switched-on step
        declared :attr:`ClientStep.received_accuracy`.
    num_examples : int
        n_k, set with ``loss_before``.
    objective : LocalObjective
        How the local loss differs from the app's this round, set by the ``objective``
        steps (default: not at all); the round's training minimises it.
    state : dict[str, Tensor] | None
        The trained weights (CPU, the received key order), set before ``after`` steps.
    reply : RecordDict | None
        The reply content a ``reply`` step wrote.
    """

    model: nn.Module
    config: ConfigRecord
    sent: ArrayRecord
    device: torch.device
    loss_fn: LossFn
    batches: Iterable[Any]
    batch_keys: BatchKeys | None = None
    split: ArraySplit | None = None
    attribute_fn: AttributeFn | None = None
    num_groups: int = 2
    activation_layer: str | None = None
    context: Context | None = None
    partition_id: int | None = None
    train_fn: Callable[[ClientRound], Mapping[str, MetricValue]] | None = None
    loss_before: float = float("nan")
    accuracy_before: float | None = None
    num_examples: int = 0
    objective: LocalObjective = field(default_factory=LocalObjective)
    state: dict[str, Tensor] | None = None
    reply: RecordDict | None = None

    def pairs(self) -> Iterator[tuple[Tensor, Tensor]]:
        """``(inputs, targets)`` of each batch of :attr:`batches`, as tensors on the device."""
        for batch in self.batches:
            inputs, targets = split_batch(batch, self.batch_keys)
            yield (
                torch.as_tensor(inputs).to(self.device),
                torch.as_tensor(targets).to(self.device),
            )

    def measure_received(self, accuracy: bool) -> None:
        """Set :attr:`loss_before`, :attr:`num_examples` and, if asked, the accuracy.

        One pass of the received model over the data, eval mode, no gradients.
        """
        if self.split is not None:
            # mean_loss is this pass's loss: the ClientApp always counted the accuracy.
            loss, correct = evaluate(self.model, self.split.x, self.split.y, self.device)
            count = len(self.split.y)
        elif accuracy:
            loss, correct, count = loader_evaluate(
                self.model, self.batches, self.loss_fn, self.device, self.batch_keys
            )
        else:
            loss, count = loader_mean_loss(
                self.model, self.batches, self.loss_fn, self.device, self.batch_keys
            )
        self.loss_before, self.num_examples = loss, count
        self.accuracy_before = correct if accuracy else None


#: ``step(round) -> the metrics it adds`` (an empty mapping: none).
StepFn = Callable[[ClientRound], Mapping[str, MetricValue]]


@dataclass(frozen=True)
class ClientStep:
    """A client step, switched on by one train-config key.

    Parameters
    ----------
    key : str
        The train-config key that switches the step on.
    run : Callable[[ClientRound], Mapping[str, MetricValue]]
        The step: reads the round, returns the metrics it adds to the reply.
    metrics : Mapping[str, FieldSpec]
        Every metric key the step may add, with its range; keys outside the contract's
        tables are declared to it on registration.
    phase : {"reply", "before", "objective", "train", "after", "personal"} (default: "before")
        When in the round it runs (module docstring).
    when : {"true", "present"} (default: "true")
        Switched on when the key's value is true, or whenever the key is present
        (``qffl-q = 0`` still asks for h_k).
    received_accuracy : bool (default: False)
        Whether the step reads :attr:`ClientRound.accuracy_before` (the F_k(w^t) pass
        then counts correct predictions too).
    """

    key: str
    run: StepFn
    metrics: Mapping[str, FieldSpec] = field(default_factory=dict)
    phase: Phase = "before"
    when: Literal["true", "present"] = "true"
    received_accuracy: bool = False

    def switched_on(self, config: ConfigRecord) -> bool:
        """Whether ``config`` switches this step on."""
        if self.when == "present":
            return self.key in config
        return bool(config.get(self.key, False))


class ClientStepError(ValueError):
    """A client step the registry refuses, or two ``train`` steps in one round."""


class ClientSteps(Mapping[str, ClientStep]):
    """The registry: train-config key -> :class:`ClientStep`, in registration order.

    The built-in steps are registered when :mod:`fairfl.client` is imported; the entry
    points of :data:`ENTRY_POINT_GROUP` are loaded on first lookup. A plug-in that
    cannot be loaded is left out with one WARNING and never blocks the others.
    """

    def __init__(self) -> None:
        self._steps: dict[str, ClientStep] = {}
        self._plugins_loaded = False
        self.broken: dict[str, str] = {}
        #: The entry point (``module:attribute``) of each plug-in step loaded, by key.
        self.plugins: dict[str, str] = {}

    def register(self, step: ClientStep) -> ClientStep:
        """Add ``step``; return it.

        Raises
        ------
        ClientStepError
            If its key already switches another step, or its phase is unknown.
        """
        if step.phase not in PHASES:
            raise ClientStepError(f"client step {step.key!r}: unknown phase {step.phase!r}")
        if step.key in self._steps and self._steps[step.key] is not step:
            raise ClientStepError(f"client step {step.key!r} is already registered")
        declare_train_metrics(
            {key: spec for key, spec in step.metrics.items() if key not in TRAIN_METRICS}
        )
        self._steps[step.key] = step
        return step

    def _loaded(self) -> dict[str, ClientStep]:
        if not self._plugins_loaded:
            self._plugins_loaded = True
            for entry in entry_points(group=ENTRY_POINT_GROUP):
                try:
                    self._load_plugin(entry)
                except Exception as error:  # any plug-in's failure costs that plug-in only
                    self.broken[entry.name] = f"{type(error).__name__}: {error}"
                    logger.warning(
                        "client step plug-in %s left out: %s", entry.name, self.broken[entry.name]
                    )
        return self._steps

    def _load_plugin(self, entry: EntryPoint) -> None:
        step = entry.load()
        if not isinstance(step, ClientStep):
            raise ClientStepError(f"{entry.value} is a {type(step).__name__}, not a ClientStep")
        if step.key != entry.name:
            raise ClientStepError(
                f"{entry.value} is switched by {step.key!r}, not by its entry point's name"
            )
        self.register(step)
        self.plugins[step.key] = entry.value

    def active(self, config: ConfigRecord) -> list[ClientStep]:
        """The steps ``config`` switches on, in registration order.

        Raises
        ------
        ClientStepError
            If it switches on more than one ``train`` step.
        """
        steps = [step for step in self._loaded().values() if step.switched_on(config)]
        trainers = [step.key for step in steps if step.phase == "train"]
        if len(trainers) > 1:
            raise ClientStepError(f"the train config switches on two trainings: {trainers}")
        return steps

    def __getitem__(self, key: str) -> ClientStep:
        return self._loaded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


#: The registry of client steps.
CLIENT_STEPS = ClientSteps()


def run_phase(
    phase: Phase, steps: Iterable[ClientStep], round_: ClientRound
) -> dict[str, MetricValue]:
    """Run the steps of ``phase``; return the metrics they add, merged.

    Raises
    ------
    ClientStepError
        If a step returns a key it did not declare, or two steps the same key.
    """
    added: dict[str, MetricValue] = {}
    for step in steps:
        if step.phase != phase:
            continue
        for key, value in step.run(round_).items():
            if key not in step.metrics:
                raise ClientStepError(f"client step {step.key!r} returned undeclared {key!r}")
            if key in added:
                raise ClientStepError(f"two client steps return {key!r}")
            added[key] = value
    return added


def run_round(round_: ClientRound, *, received_loss_as_train_loss: bool = False) -> RecordDict:
    """Run one train round through the steps its config switches on; return the reply.

    In order: the ``reply`` steps (one that answers skips to the ``personal`` ones);
    F_k(w^t) and n_k of the received model (:meth:`ClientRound.measure_received`); the
    ``before`` steps; the ``objective`` steps; the ``train`` step, or
    :attr:`ClientRound.train_fn` (minimising :attr:`ClientRound.objective`) when none is
    on; the trained weights into :attr:`ClientRound.state`; the ``after`` steps; the
    reply (wire contract v1) with every metric the steps added; the ``personal`` steps.

    Parameters
    ----------
    round_ : ClientRound
        The round, its model loaded with the received weights.
    received_loss_as_train_loss : bool (default: False)
        Send F_k(w^t) as ``train_loss`` too (fairfl's ClientApp, for a stock Flower
        QFedAvg server); otherwise ``train_loss`` is what the training reports.

    Returns
    -------
    RecordDict
        The reply's content.

    Raises
    ------
    ClientStepError
        If the config switches on two ``train`` steps, or a step returns a key it did
        not declare or another step returned.
    """
    steps = CLIENT_STEPS.active(round_.config)
    run_phase("reply", steps, round_)
    if round_.reply is None:
        round_.measure_received(any(step.received_accuracy for step in steps))
        added = run_phase("before", steps, round_)
        _merge(added, run_phase("objective", steps, round_))
        if any(step.phase == "train" for step in steps):
            trained: Mapping[str, MetricValue] = run_phase("train", steps, round_)
        else:
            assert round_.train_fn is not None  # every caller hands its training
            trained = round_.train_fn(round_)
        _merge(added, trained)
        state = {key: value.detach().cpu() for key, value in round_.model.state_dict().items()}
        round_.state = {key: state[key] for key in round_.sent}  # the received order
        _merge(added, run_phase("after", steps, round_))
        round_.reply = write_train_reply(
            ArrayRecord(round_.state),
            num_examples=round_.num_examples,
            loss_before_training=round_.loss_before,
            train_loss=round_.loss_before if received_loss_as_train_loss else None,
            partition_id=round_.partition_id,
            metrics=added,
        )
    reply = round_.reply
    run_phase("personal", steps, round_)
    return reply


def _merge(added: dict[str, MetricValue], more: Mapping[str, MetricValue]) -> None:
    """Add ``more`` to ``added``; a key both hold is a step's mistake."""
    for key, value in more.items():
        if key in added:
            raise ClientStepError(f"two client steps return {key!r}")
        added[key] = value
