"""fairfl's ClientApp: local training and the reports each fair rule needs.

On ``train`` it loads the received global model w^t, measures F_k(w^t) on the whole local
training split (``train_loss``, before any local step), adds the extra reports the
config asks for, runs local SGD and replies per wire contract v1. On ``evaluate`` it
replies loss and accuracy of w^t on the local test split (or, for tuning, on
the validation split: run config ``evaluate-split``), with ``group-counts`` where the
data carry a sensitive attribute (:mod:`fairfl.client.sensitive`). On a client-key
``query`` it
replies its partition id (:mod:`fairfl.contract.clients`). In a Ditto round it also takes
the personal step on its personal model v_k and, asked by the evaluate config, evaluates
v_k beside w^t (:mod:`fairfl.client.ditto`).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, cast

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

# Registers fairfl's own client steps, which run_round finds by their config keys.
import fairfl.client.builtin_steps  # noqa: F401
from fairfl.client.ditto import load_personal
from fairfl.client.sensitive import model_group_counts
from fairfl.client.steps import ArraySplit, ClientRound, MetricValue, run_round
from fairfl.client.training import (
    evaluate,
    pick_device,
    train_local,
)
from fairfl.contract import (
    is_client_key_query,
    keys,
    write_client_key_reply,
    write_evaluate_reply,
)
from fairfl.contract.config import get_config_value, get_config_value_or
from fairfl.data import ClientData, dataset_info, load_client_data
from fairfl.data.sensitive import NUM_GROUPS
from fairfl.logs import attach_flower_console
from fairfl.models import FairModel, build_model
from fairfl.secagg.client import secaggplus_mod
from fairfl.settings import NodeSettings, RunSettings

logger = logging.getLogger(__name__)

# The SecAgg+ mod acts only on train messages that ask for secure aggregation.
app = ClientApp(mods=[secaggplus_mod])

#: Samples per batch a client step iterates (q-FedSGD's full-batch gradient, whose sum
#: is the same for any cut, a plug-in's report); this only bounds memory.
_GRADIENT_BATCH = 1024


#: Clients whose data one process keeps (simulation: a worker serves many clients). Past
#: it every message rebuilds its client's data: 4,096 made a 10,000-client in-process
#: round 3x slower per client than a 1,000-client one; 16,384 keeps the cost per client
#: flat to 10,000 clients (~1.3 GB of Synthetic(1, 1) data there).
CLIENT_DATA_CACHE = 16_384


@lru_cache(maxsize=CLIENT_DATA_CACHE)
def _client_data(settings: RunSettings, node: NodeSettings) -> ClientData:
    data_root = node.data_root or settings.data_root
    kwargs = settings.data_kwargs() | {
        "num_partitions": node.num_partitions,
        "data_root": data_root,
    }
    return load_client_data(partition_id=node.partition_id, **kwargs)


def _settings(context: Context) -> tuple[RunSettings, NodeSettings]:
    """Parse the run's settings and the node's from ``context`` (no cache)."""
    settings = RunSettings.from_run_config(context.run_config)
    node = NodeSettings.from_node_config(context.node_config, settings.num_partitions)
    if node.num_partitions != settings.num_partitions:
        settings = replace(settings, num_partitions=node.num_partitions)
    return settings, node


#: Runs whose settings one process keeps: a SuperNode's ClientApp may serve several runs
#: in turn, but few at a time.
RUN_SETTINGS_CACHE = 8


@dataclass(frozen=True)
class _ParsedRun:
    """One run's parsed settings.

    Attributes
    ----------
    run_config : dict[str, Any]
        The run config they were parsed from.
    by_partitions : dict[Any, RunSettings]
        The settings by the node config's ``num-partitions`` as given (``None``
        where a node config leaves it out): Flower's simulation engine sets it per
        SuperNode, and the settings take it.
    """

    run_config: dict[str, Any]
    by_partitions: dict[Any, RunSettings]


_parsed_runs: OrderedDict[int, _ParsedRun] = OrderedDict()
# A simulation worker may run ClientApp calls on several threads.
_parsed_runs_lock = threading.Lock()


def _run_settings(context: Context) -> tuple[RunSettings, NodeSettings]:
    """:func:`_settings`, parsed once per run instead of on every message.

    Keyed by run id, and parsed anew when the run config differs from the one parsed:
    the in-process runner stamps every run with the same run id. Settings that fail to
    parse are not kept, so each message raises their error as before.
    """
    partitions = context.node_config.get("num-partitions")
    with _parsed_runs_lock:
        parsed = _parsed_runs.get(context.run_id)
        if parsed is not None and parsed.run_config != context.run_config:
            parsed = None
        if parsed is not None:
            _parsed_runs.move_to_end(context.run_id)
            settings = parsed.by_partitions.get(partitions)
            if settings is not None:
                # Without num-partitions the node takes the run's, which settings holds.
                return settings, NodeSettings.from_node_config(
                    context.node_config, settings.num_partitions
                )
    settings, node = _settings(context)
    with _parsed_runs_lock:
        if parsed is None:
            parsed = _ParsedRun(dict(context.run_config), {})
            _parsed_runs[context.run_id] = parsed
            _parsed_runs.move_to_end(context.run_id)  # a replaced run config's entry too
            while len(_parsed_runs) > RUN_SETTINGS_CACHE:
                _parsed_runs.popitem(last=False)
        parsed.by_partitions[partitions] = settings
    return settings, node


#: Each thread's models, one per (model, input shape, classes, device): a worker that
#: serves many messages (the in-process runner, a simulation actor) loads every received
#: model into the same module instead of building or copying one per message.
_worker = threading.local()


def _worker_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, device: torch.device
) -> FairModel:
    models: dict[tuple[object, ...], FairModel] = _worker.__dict__.setdefault("models", {})
    key = (name, input_shape, num_classes, str(device))
    if key not in models:
        # The initial weights are overwritten by every message's global model.
        models[key] = build_model(name, input_shape, num_classes, seed=0).to(device)
    return models[key]


def load_global_model(message: Message, settings: RunSettings, device: torch.device) -> FairModel:
    """Load the received global weights into this thread's model of the run.

    The module is reused across messages (a deep copy per message cost ~11 % of an
    in-process round at 1,000 clients): every parameter and buffer is overwritten from
    the message (``strict=True``) and every gradient dropped, so the result is the same
    as on a fresh copy. The caller must be done with the model returned by the previous
    call on this thread (each ClientApp call is: it replies with copies).
    """
    info = dataset_info(settings.dataset)
    model = _worker_model(settings.model, tuple(info.input_shape), info.num_classes, device)
    # RecordDict's [] is typed as any record; the typed views (array_records) cost
    # ~20 us a message, the cast nothing.
    state = cast(ArrayRecord, message.content[keys.ARRAYS]).to_torch_state_dict()
    model.load_state_dict(state, strict=True)
    model.zero_grad(set_to_none=True)
    return model


def training_seed(seed: int, server_round: int, partition_id: int) -> int:
    """Seed of a client's local shuffling: reproducible from the run seed and round."""
    return (seed * 1_000_003 + server_round * 10_007 + partition_id) % (2**63)


@app.train()
def train(message: Message, context: Context) -> Message:
    """Train on the local split and reply weights, n_k, F_k(w^t) and what the rule asks.

    The rule's train-config keys switch on its client steps
    (:data:`fairfl.client.steps.CLIENT_STEPS`, a plug-in's included), run by
    :func:`fairfl.client.steps.run_round` as under :func:`fairfl.client.fair_train`.
    """
    attach_flower_console()
    settings, node = _run_settings(context)
    data = _client_data(settings, node)
    device = pick_device(node.device)
    # The server's train and evaluate messages carry a ConfigRecord under config.
    config = cast(ConfigRecord, message.content[keys.CONFIG])
    model = load_global_model(message, settings, device)
    server_round = get_config_value(config, keys.SERVER_ROUND, int)
    split = ArraySplit(
        x=data.x_train,
        y=data.y_train,
        attributes=data.a_train if data.has_attribute else None,
        seed=training_seed(settings.seed, server_round, node.partition_id),
    )

    def train_default(round_: ClientRound) -> dict[str, MetricValue]:
        objective = round_.objective  # set by the objective steps (proximal-mu, ...)
        train_local(
            model,
            split.x,
            split.y,
            epochs=get_config_value(config, keys.LOCAL_EPOCHS, int),
            batch_size=get_config_value(config, keys.BATCH_SIZE, int),
            lr=get_config_value(config, keys.LR, float),
            device=device,
            seed=split.seed,
            batch_objective=objective.batch_objective,
            proximal_mu=objective.proximal_mu,
            steps=get_config_value_or(config, keys.LOCAL_STEPS, int, 0),
        )
        return {}

    content = run_round(
        ClientRound(
            model=model,
            config=config,
            sent=cast(ArrayRecord, message.content[keys.ARRAYS]),
            device=device,
            loss_fn=torch.nn.functional.cross_entropy,
            batches=[
                (split.x[start : start + _GRADIENT_BATCH], split.y[start : start + _GRADIENT_BATCH])
                for start in range(0, len(split.y), _GRADIENT_BATCH)
            ],
            split=split,
            num_groups=NUM_GROUPS,
            context=context,
            partition_id=node.partition_id,
            train_fn=train_default,
        ),
        # Also for a stock Flower QFedAvg server, which reads train_loss.
        received_loss_as_train_loss=True,
    )
    return Message(content=content, reply_to=message)


@app.evaluate()
def evaluate_global(message: Message, context: Context) -> Message:
    """Reply loss and accuracy of the received model on the local test split.

    With run config ``evaluate-split = "validation"`` (hyperparameter tuning) it
    evaluates on the validation split carved from the training data instead
    (``validation-fraction``), and the test split is not read.
    """
    attach_flower_console()
    settings, node = _run_settings(context)
    data = _client_data(settings, node)
    device = pick_device(node.device)
    model = load_global_model(message, settings, device)
    x, y = (
        (data.x_val, data.y_val)
        if settings.evaluate_split == "validation"
        else (data.x_test, data.y_test)
    )
    loss, accuracy = evaluate(model, x, y, device)
    counts = None
    if data.has_attribute:  # group fairness: counts per (attribute, label, prediction)
        a = data.a_val if settings.evaluate_split == "validation" else data.a_test
        counts = model_group_counts(model, x, y, a, NUM_GROUPS, device)
    personal = None
    config = cast(ConfigRecord, message.content.get(keys.CONFIG, ConfigRecord()))
    if bool(config.get(keys.DITTO_PERSONAL, False)):  # Ditto: v_k on the same split
        sent = cast(ArrayRecord, message.content[keys.ARRAYS])
        kept = load_personal(context, node.partition_id, sent)
        if kept is sent:  # never trained: v_k would start from this w^t
            personal = (loss, accuracy)
        else:
            model.load_state_dict(kept.to_torch_state_dict(), strict=True)
            personal = evaluate(model, x, y, device)
    content = write_evaluate_reply(
        num_examples=len(y),
        eval_loss=loss,
        eval_acc=accuracy,
        group_counts=counts,
        partition_id=node.partition_id,
        personal=personal,
        device_index=-1 if device.type == "cpu" else device.index or 0,
    )
    return Message(content=content, reply_to=message)


@app.query()
def query(message: Message, context: Context) -> Message:
    """Answer a client-key query with this node's partition id (its stable client key).

    Raises
    ------
    ValueError
        If the query asks for something else (Flower turns it into an error reply).
    """
    if not is_client_key_query(message.content):
        raise ValueError(
            f"fairfl's ClientApp answers only the client-key query (config "
            f"'{keys.CLIENT_KEY_QUERY}': true), got {list(message.content.keys())}"
        )
    _, node = _run_settings(context)
    return Message(content=write_client_key_reply(node.partition_id), reply_to=message)
