"""Readers and writers of wire contract v1 (``proto/fairfl/v1/contract.proto``).

Every reply a strategy aggregates goes through :func:`read_train_reply` or
:func:`read_evaluate_reply`. A reply that breaks the contract raises
:class:`ReplyError`, which names the client (node id), the field and the reason; the
strategy logs it, drops that reply and goes on with the rest. Every reported scalar
must be finite and within the range :mod:`fairfl.contract.bounds` documents.

The tables :data:`TRAIN_METRICS` and :data:`EVALUATE_METRICS` are the Python side of
the ``.proto`` messages ``TrainMetrics`` and ``EvaluateMetrics``; a test checks that they
agree field by field.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from io import BytesIO
from types import MappingProxyType
from typing import Any, Literal, cast

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from numpy.typing import NDArray

from fairfl.contract import keys
from fairfl.contract.bounds import MAX_ABS_ACTIVATION, MAX_LOSS, MAX_QFFL_H

ValueKind = Literal["int", "float", "float-list", "int-list"]


@dataclass(frozen=True)
class FieldSpec:
    """One MetricRecord key of the contract.

    Parameters
    ----------
    kind : {"int", "float", "float-list", "int-list"}
        Python type of the value on the wire.
    lower : float | None
        Smallest allowed value (``None``: unbounded).
    lower_inclusive : bool
        Whether ``lower`` itself is allowed.
    upper : float | None
        Largest allowed value (inclusive); ``None``: unbounded.
    limit : str
        What sets ``upper`` (and ``lower`` when it is ``-upper``), named in the error
        (``"max_loss"``); "" for none.
    multiple_of : int
        A list's length must be a multiple of this (``group-counts``: 4 cells a group).
    """

    kind: ValueKind
    lower: float | None = None
    lower_inclusive: bool = True
    upper: float | None = None
    limit: str = ""
    multiple_of: int = 1


def _loss_spec(max_loss: float) -> FieldSpec:
    return FieldSpec("float", lower=0.0, upper=max_loss, limit="max_loss")


def _eta_spec(max_loss: float) -> FieldSpec:
    return FieldSpec("float", lower=-max_loss, upper=max_loss, limit="max_loss")


# Python side of message TrainMetrics in contract.proto; the ranges are documented in
# fairfl.contract.bounds.
TRAIN_METRICS: Mapping[str, FieldSpec] = {
    keys.NUM_EXAMPLES: FieldSpec("int", lower=0, lower_inclusive=False),
    keys.LOSS_BEFORE_TRAINING: _loss_spec(MAX_LOSS),
    keys.ACC_BEFORE_TRAINING: FieldSpec("float", lower=0.0, upper=1.0),
    keys.ACC_AFTER_TRAINING: FieldSpec("float", lower=0.0, upper=1.0),
    keys.TRAIN_LOSS: _loss_spec(MAX_LOSS),
    keys.QFFL_H: FieldSpec("float", lower=0.0, lower_inclusive=False, upper=MAX_QFFL_H),
    keys.ACTIVATION: FieldSpec("float-list", lower=-MAX_ABS_ACTIVATION, upper=MAX_ABS_ACTIVATION),
    keys.RCFL_ETA: _eta_spec(MAX_LOSS),
    keys.PARTITION_ID: FieldSpec("int", lower=0),
    keys.OBJECTIVE_IGNORED: FieldSpec("int", lower=0, upper=1),
    keys.GROUP_COUNTS: FieldSpec("int-list", lower=0, multiple_of=4),
}

# Python side of message EvaluateMetrics in contract.proto.
EVALUATE_METRICS: Mapping[str, FieldSpec] = {
    keys.NUM_EXAMPLES: FieldSpec("int", lower=0, lower_inclusive=False),
    # No upper bound: evaluation drives no rule state (fairfl.contract.bounds says why).
    keys.EVAL_LOSS: FieldSpec("float", lower=0.0),
    keys.EVAL_ACC: FieldSpec("float", lower=0.0, upper=1.0),
    keys.PARTITION_ID: FieldSpec("int", lower=0),
    # Ditto's personal model v_k on the same split; optional, sent as a pair.
    keys.PERSONAL_EVAL_LOSS: FieldSpec("float", lower=0.0),
    keys.PERSONAL_EVAL_ACC: FieldSpec("float", lower=0.0, upper=1.0),
    # Group counts on the same split (fairfl.contract.sensitive); optional.
    keys.GROUP_COUNTS: FieldSpec("int-list", lower=0, multiple_of=4),
    # The CUDA device index the client evaluated on, -1 on the CPU; optional.
    keys.DEVICE_INDEX: FieldSpec("int", lower=-1),
}

#: Train-reply metric keys outside the contract's table, declared by the client steps and
#: the server rules that bring them (:func:`declare_train_metrics`).
_DECLARED_TRAIN_METRICS: dict[str, FieldSpec] = {}


def declare_train_metrics(specs: Mapping[str, FieldSpec]) -> None:
    """Declare train-reply metric keys of a rule's own (a plug-in's client report).

    Both halves of a rule declare its keys: the client step on registration
    (:class:`fairfl.client.steps.ClientStep`'s ``metrics``), so that the reply writer
    knows each value's kind, and the server half (its rule module, on import), so that
    :func:`read_train_reply` checks each value against its range and keeps it in
    ``TrainReply.metrics``. Declaring a key again with the same spec does nothing.

    Raises
    ------
    ValueError
        If a key is one of the contract's (:data:`TRAIN_METRICS`) or was declared
        with another spec.
    """
    for key, spec in specs.items():
        if key in TRAIN_METRICS:
            raise ValueError(f"train metric {key!r} is the contract's own; it cannot be declared")
        known = _DECLARED_TRAIN_METRICS.setdefault(key, spec)
        if known != spec:
            raise ValueError(f"train metric {key!r} is already declared as {known}, not {spec}")


def train_metric_spec(key: str) -> FieldSpec | None:
    """The spec of a train-reply metric key: the contract's or a declared one; else ``None``."""
    return TRAIN_METRICS.get(key) or _DECLARED_TRAIN_METRICS.get(key)


# Keys every train / evaluate reply must carry.
REQUIRED_TRAIN_METRICS: tuple[str, ...] = (keys.NUM_EXAMPLES,)
REQUIRED_EVALUATE_METRICS: tuple[str, ...] = (keys.NUM_EXAMPLES, keys.EVAL_LOSS, keys.EVAL_ACC)


class ReplyError(ValueError):
    """A client's reply breaks the wire contract.

    Parameters
    ----------
    node_id : int
        The replying node.
    field : str
        The offending field, as a path (``metrics['train_loss']``, ``arrays['fc.weight']``).
    reason : str
        What is wrong with it.
    missing_key : str | None
        The metric key, when the reply lacks a required one (``reason`` is then
        "is missing").
    """

    def __init__(
        self, node_id: int, field: str, reason: str, *, missing_key: str | None = None
    ) -> None:
        self.node_id = node_id
        self.field = field
        self.reason = reason
        self.missing_key = missing_key
        super().__init__(f"node {node_id}: {field} {reason}")


@dataclass(frozen=True)
class TrainReply:
    """A validated train reply.

    Attributes
    ----------
    node_id : int
        Sender of the reply.
    num_examples : int
        n_k, the client's local training samples.
    arrays : list[NDArray]
        Local weights w_k, in the key order of the global model that was sent.
    metrics : dict[str, int | float | list[float]]
        Every contract key the reply carried (and the reader's ``loss_key`` and
        ``weight_key``), validated.
    """

    node_id: int
    num_examples: int
    arrays: list[NDArray[Any]]
    metrics: dict[str, int | float | list[float]] = field(default_factory=dict)

    @property
    def partition_id(self) -> int | None:
        """Stable client id, when the client sent one."""
        value = self.metrics.get(keys.PARTITION_ID)
        # The reader validated partition-id as an integer.
        return int(cast(int, value)) if value is not None else None


@dataclass(frozen=True)
class EvaluateReply:
    """A validated evaluate reply: one client's loss and accuracy on its test split.

    ``personal_eval_loss`` / ``personal_eval_acc`` are those of the client's personal
    model (Ditto), ``None`` when the reply has none.
    """

    node_id: int
    num_examples: int
    eval_loss: float
    eval_acc: float
    partition_id: int | None = None
    personal_eval_loss: float | None = None
    personal_eval_acc: float | None = None
    #: ``group-counts`` on the same split (fairfl.contract.sensitive), when sent.
    group_counts: tuple[int, ...] | None = None
    #: ``device-index``: the CUDA device the client evaluated on, -1 the CPU, when sent.
    device_index: int | None = None


@dataclass(frozen=True)
class ModelLayout:
    """Keys, shapes and dtypes of the global model a reply must match."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, arrays: ArrayRecord) -> ModelLayout:
        """Read the layout of an ArrayRecord without decoding its data."""
        return cls(
            keys=tuple(arrays.keys()),
            shapes=tuple(tuple(a.shape) for a in arrays.values()),
            dtypes=tuple(str(a.dtype) for a in arrays.values()),
        )


def check_value(node_id: int, record: str, key: str, value: object, spec: FieldSpec) -> None:
    """Raise :class:`ReplyError` unless ``value`` fits ``spec``."""
    where = f"{record}[{key!r}]"
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ReplyError(node_id, where, f"must be an int, got {type(value).__name__}")
        numbers = [float(value)]
    elif spec.kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise ReplyError(node_id, where, f"must be a float, got {type(value).__name__}")
        numbers = [float(value)]
    elif spec.kind == "int-list":
        if not isinstance(value, list | tuple) or not value:
            raise ReplyError(node_id, where, "must be a non-empty list of ints")
        if any(isinstance(v, bool) or not isinstance(v, int | np.integer) for v in value):
            raise ReplyError(node_id, where, "must hold only ints")
        if len(value) % spec.multiple_of:
            raise ReplyError(
                node_id,
                where,
                f"must have a multiple of {spec.multiple_of} entries, got {len(value)}",
            )
        numbers = [float(v) for v in value]
    else:
        if not isinstance(value, list | tuple) or not value:
            raise ReplyError(node_id, where, "must be a non-empty list of floats")
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in value):
            raise ReplyError(node_id, where, "must hold only floats")
        numbers = [float(v) for v in value]
    if not all(math.isfinite(v) for v in numbers):
        bad = next(v for v in numbers if not math.isfinite(v))
        raise ReplyError(node_id, where, f"is {bad}")
    limit = f" ({spec.limit})" if spec.limit else ""
    if spec.lower is not None:
        low = min(numbers)
        if low < spec.lower or (not spec.lower_inclusive and low == spec.lower):
            relation = ">=" if spec.lower_inclusive else ">"
            by = limit if spec.upper is not None and spec.lower == -spec.upper else ""
            raise ReplyError(node_id, where, f"must be {relation} {spec.lower:g}{by}, got {low:g}")
    if spec.upper is not None and max(numbers) > spec.upper:
        raise ReplyError(node_id, where, f"must be <= {spec.upper:g}{limit}, got {max(numbers):g}")


def _metrics_of(node_id: int, message: Message) -> dict[str, Any]:
    """The reply's ``metrics`` MetricRecord as a plain dict, read once.

    Each access of Flower's ``RecordDict.metric_records`` builds and type-checks a new
    dict of the records: the reader looks the record up by its name instead.
    """
    if message.has_error():
        raise ReplyError(node_id, "error", f"reply is an error: {message.error.reason}")
    record = message.content.get(keys.METRICS)
    if not isinstance(record, MetricRecord):
        raise ReplyError(node_id, f"content[{keys.METRICS!r}]", "is missing (no MetricRecord)")
    return dict(record.items())


def _read_metrics(
    node_id: int,
    metrics: Mapping[str, Any],
    table: Mapping[str, FieldSpec],
    required: Sequence[str],
) -> dict[str, int | float | list[float]]:
    for key in required:
        if key not in metrics:
            raise ReplyError(node_id, f"metrics[{key!r}]", "is missing", missing_key=key)
    values: dict[str, int | float | list[float]] = {}
    for key, spec in table.items():
        if key in metrics:
            value = metrics[key]
            check_value(node_id, "metrics", key, value, spec)
            values[key] = value
    return values


@functools.lru_cache(maxsize=64)
def _train_table(
    weight_key: str, loss_key: str | None, max_loss: float, declared: int
) -> Mapping[str, FieldSpec]:
    """The spec of each train metric a reply may carry, built once per reader's settings.

    ``declared`` is the number of declared keys (:func:`declare_train_metrics` only adds
    keys, never changes one), so a key declared later gets a table of its own.
    """
    table = {
        weight_key: TRAIN_METRICS[keys.NUM_EXAMPLES],
        **_DECLARED_TRAIN_METRICS,
        **TRAIN_METRICS,
    }
    loss_spec = _loss_spec(max_loss)
    table.update({keys.LOSS_BEFORE_TRAINING: loss_spec, keys.TRAIN_LOSS: loss_spec})
    table[keys.RCFL_ETA] = _eta_spec(max_loss)
    if loss_key is not None:
        table.setdefault(loss_key, loss_spec)
    return MappingProxyType(table)


def read_train_reply(
    message: Message,
    layout: ModelLayout,
    required_metrics: Sequence[str] = (),
    max_abs_weight: float | None = None,
    *,
    check_values: bool = True,
    loss_key: str | None = None,
    weight_key: str = keys.NUM_EXAMPLES,
    arrays_key: str = keys.ARRAYS,
    max_loss: float = MAX_LOSS,
) -> TrainReply:
    """Validate a train reply against the contract and the global model that was sent.

    Parameters
    ----------
    message : Message
        The reply.
    layout : ModelLayout
        Keys, shapes and dtypes of the sent global model; the reply's ``arrays`` must
        match them exactly.
    required_metrics : Sequence[str]
        Metric keys the rule needs besides ``weight_key`` (e.g.
        ``loss-before-training``).
    max_abs_weight : float | None
        Reject weights larger than this in absolute value (``None``: only finiteness).
    check_values : bool
        Check that float arrays are finite and within ``max_abs_weight`` (default).
        ``False`` leaves that to a caller that reads every value anyway; it must then
        call :func:`check_array_values` on what it cannot vouch for.
    loss_key : str | None
        A key checked as a loss (float >= 0) when present, and kept in
        ``TrainReply.metrics`` even if it is not a contract key (a rule's
        ``train_loss_key``). Whether it is required is ``required_metrics``' business.
    weight_key : str
        The key of n_k, an int > 0 (Flower's ``weighted_by_key``).
    arrays_key : str
        The name of the reply's ArrayRecord (Flower's ``arrayrecord_key``).
    max_loss : float
        Upper bound of every loss (``loss-before-training``, ``train_loss``,
        ``loss_key``) and of ``|rcfl-eta|`` (:data:`fairfl.contract.bounds.MAX_LOSS`;
        the module documents every range).

    Returns
    -------
    TrainReply
        The decoded, validated reply.

    Raises
    ------
    ReplyError
        Naming the node, the field and the reason.
    """
    node_id = int(message.metadata.src_node_id)
    table = _train_table(weight_key, loss_key, max_loss, len(_DECLARED_TRAIN_METRICS))
    metrics = _read_metrics(
        node_id,
        _metrics_of(node_id, message),
        table,
        (weight_key, *required_metrics),
    )
    arrays = message.content.get(arrays_key)
    if not isinstance(arrays, ArrayRecord):
        raise ReplyError(node_id, f"content[{arrays_key!r}]", "is missing (no ArrayRecord)")
    got_keys = tuple(arrays.keys())
    if set(got_keys) != set(layout.keys):
        missing = sorted(set(layout.keys) - set(got_keys))
        extra = sorted(set(got_keys) - set(layout.keys))
        raise ReplyError(
            node_id,
            "arrays",
            f"keys differ from the global model: missing {missing}, extra {extra}",
        )
    decoded: list[NDArray[Any]] = []
    for key, shape, dtype in zip(layout.keys, layout.shapes, layout.dtypes, strict=True):
        array = arrays[key]
        if tuple(array.shape) != shape:
            raise ReplyError(
                node_id, f"arrays[{key!r}]", f"has shape {tuple(array.shape)}, expected {shape}"
            )
        if str(array.dtype) != dtype:
            raise ReplyError(
                node_id, f"arrays[{key!r}]", f"has dtype {array.dtype}, expected {dtype}"
            )
        try:
            value = array_view(array)
        except Exception as error:  # any payload, however broken, costs one reply only
            raise ReplyError(node_id, f"arrays[{key!r}]", f"cannot be decoded: {error}") from error
        if value.shape != shape or _dtype_name(value.dtype) != dtype:
            raise ReplyError(
                node_id, f"arrays[{key!r}]", "payload does not match its declared shape/dtype"
            )
        if check_values:
            check_array_values(node_id, key, value, max_abs_weight)
        decoded.append(value)
    num_examples = int(metrics[weight_key])  # type: ignore[arg-type]
    return TrainReply(node_id=node_id, num_examples=num_examples, arrays=decoded, metrics=metrics)


def array_view(array: Array) -> NDArray[Any]:
    """Decode an ``Array`` as a read-only view of its ``.npy`` payload, without a copy.

    ``Array.numpy()`` copies the payload through ``np.load``; strategies only read the
    replies (they never write into inputs), so a view saves a copy of every reply.
    Only what an honest client sends is accepted: ``stype`` ``numpy.ndarray``, a ``.npy``
    v1.0 or v2.0 header, a plain numeric dtype (no objects, no fields), and exactly as
    many bytes as the header's shape needs. Nothing is ever unpickled.

    Raises
    ------
    ValueError
        If the payload is anything else (the message says what is wrong).
    """
    if array.stype != "numpy.ndarray":
        raise ValueError(f"has serialisation type {array.stype!r}, expected 'numpy.ndarray'")
    data = array.data
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValueError(f"has a payload of type {type(data).__name__}, expected bytes")
    offset = _header_size(data)
    if offset > _MAX_HEADER_BYTES:
        raise ValueError(f"has a .npy header of {offset} bytes, more than {_MAX_HEADER_BYTES}")
    shape, fortran_order, dtype = _npy_header(bytes(data[:offset]))
    expected = math.prod(shape) * dtype.itemsize
    if len(data) - offset != expected:
        raise ValueError(
            f"has {len(data) - offset} payload bytes, its header ({dtype}, "
            f"{shape}) needs {expected}"
        )
    flat = np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=offset)
    return flat.reshape(shape, order="F" if fortran_order else "C")


#: Longest ``.npy`` magic string and header read: numpy's own limit on the header dict
#: (``np.load``'s ``max_header_size``) plus the 12 bytes before it.
_MAX_HEADER_BYTES = 12 + 10_000


def _header_size(data: bytes | bytearray | memoryview) -> int:
    """Bytes of a ``.npy`` payload's magic string and header (as its length field says).

    Only the version bytes choose the length field's width; a wrong magic string or
    version is left to :func:`_npy_header`, which names it.
    """
    major = data[6] if len(data) > 6 else 0
    if major == 1 and len(data) >= 10:
        return 10 + int.from_bytes(data[8:10], "little")
    if major == 2 and len(data) >= 12:
        return 12 + int.from_bytes(data[8:12], "little")
    return min(len(data), 12)


@functools.lru_cache(maxsize=256)
def _npy_header(header: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype of a ``.npy`` header, parsed once per distinct header.

    Every reply of a round carries the same headers (one per array of the model): the
    parse (``ast.literal_eval`` of the header dict) is done once each, not once per
    reply and array. Bounded, so that a client varying its headers only evicts entries.

    Raises
    ------
    ValueError
        If the header is not a ``.npy`` v1.0 or v2.0 header of a plain numeric dtype.
    """
    stream = BytesIO(header)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"has .npy format version {version}, expected (1, 0) or (2, 0)")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"has dtype {dtype}: objects and structured dtypes are refused")
    return tuple(shape), bool(fortran_order), dtype


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: np.dtype[Any]) -> str:
    """``str(dtype)``, once per dtype (numpy builds the name again on every call)."""
    return str(dtype)


def check_array_values(node_id: int, key: str, value: NDArray[Any], max_abs: float | None) -> None:
    """Raise :class:`ReplyError` if a float array has NaN/Inf or ``|value| > max_abs``."""
    if not np.issubdtype(value.dtype, np.floating) or value.size == 0:
        return
    # min and max are NaN if any element is, and +-inf bound the rest: two cheap passes
    # with no temporary array.
    low, high = float(value.min()), float(value.max())
    if math.isfinite(low) and math.isfinite(high):
        peak = max(-low, high)
        if max_abs is None or peak <= max_abs:
            return
        raise ReplyError(node_id, f"arrays[{key!r}]", f"has |value| {peak:g} > {max_abs:g}")
    bad = "nan" if np.isnan(value).any() else "inf"
    raise ReplyError(node_id, f"arrays[{key!r}]", f"contains {bad}")


def read_evaluate_reply(message: Message, *, weight_key: str = keys.NUM_EXAMPLES) -> EvaluateReply:
    """Validate an evaluate reply; raise :class:`ReplyError` naming node and field.

    ``weight_key`` is the key of the test-sample count (Flower's ``weighted_by_key``);
    ``eval_loss`` must be finite and >= 0, ``eval_acc`` in [0, 1]
    (:mod:`fairfl.contract.bounds`); so must the personal model's pair (Ditto), which is
    optional but comes whole: one of ``personal-eval_loss`` / ``personal-eval_acc``
    without the other is refused.
    """
    node_id = int(message.metadata.src_node_id)
    required = (weight_key, *REQUIRED_EVALUATE_METRICS[1:])
    table = {weight_key: EVALUATE_METRICS[keys.NUM_EXAMPLES], **EVALUATE_METRICS}
    metrics = _read_metrics(node_id, _metrics_of(node_id, message), table, required)
    partition = metrics.get(keys.PARTITION_ID)
    counts = metrics.get(keys.GROUP_COUNTS)
    device = metrics.get(keys.DEVICE_INDEX)
    personal_loss = metrics.get(keys.PERSONAL_EVAL_LOSS)
    personal_acc = metrics.get(keys.PERSONAL_EVAL_ACC)
    if (personal_loss is None) != (personal_acc is None):
        present, absent = (
            (keys.PERSONAL_EVAL_LOSS, keys.PERSONAL_EVAL_ACC)
            if personal_acc is None
            else (keys.PERSONAL_EVAL_ACC, keys.PERSONAL_EVAL_LOSS)
        )
        raise ReplyError(node_id, f"metrics[{absent!r}]", f"is missing while {present!r} is sent")
    return EvaluateReply(
        node_id=node_id,
        num_examples=int(metrics[weight_key]),  # type: ignore[arg-type]
        eval_loss=float(metrics[keys.EVAL_LOSS]),  # type: ignore[arg-type]
        eval_acc=float(metrics[keys.EVAL_ACC]),  # type: ignore[arg-type]
        partition_id=int(partition) if partition is not None else None,  # type: ignore[arg-type]
        personal_eval_loss=None if personal_loss is None else float(personal_loss),  # type: ignore[arg-type]
        personal_eval_acc=None if personal_acc is None else float(personal_acc),  # type: ignore[arg-type]
        group_counts=None if counts is None else tuple(int(c) for c in counts),  # type: ignore[union-attr]
        device_index=None if device is None else int(device),  # type: ignore[arg-type]
    )


def write_train_reply(
    arrays: ArrayRecord,
    *,
    num_examples: int,
    train_loss: float | None = None,
    partition_id: int | None = None,
    activation: Sequence[float] | None = None,
    qffl_h: float | None = None,
    rcfl_eta: float | None = None,
    loss_before_training: float | None = None,
    objective_ignored: bool | None = None,
    acc_before_training: float | None = None,
    group_counts: Sequence[int] | None = None,
    acc_after_training: float | None = None,
    metrics: Mapping[str, int | float | Sequence[int] | Sequence[float]] | None = None,
) -> RecordDict:
    """Build the content of a train reply (see ``TrainReply`` in the .proto).

    ``loss_before_training`` is F_k(w^t), the loss of the received global model before
    local training, which the loss-aware rules read; ``train_loss`` is Flower's key,
    read by Flower's QFedAvg and by fairfl's rules only with
    ``train_loss_key="train_loss"``. ``acc_before_training`` is the received model's
    accuracy from the same pass as F_k(w^t), ``acc_after_training`` the locally trained
    model's on the same split (FedFa; each sent when the config asks for it).
    ``objective_ignored`` is sent as 0 or 1 when given (whether the app's training
    skipped the rule's client objective). ``group_counts`` are the received model's on
    the training split (FairFed; :mod:`fairfl.contract.sensitive`).

    ``metrics`` are those the round's client steps added (:mod:`fairfl.client.steps`),
    by key: a contract key takes its place as if given by its keyword, any other must
    be declared (:func:`declare_train_metrics`); each value is written as its spec's
    kind says (an int, a float, or a list of them).

    Raises
    ------
    ValueError
        If a key of ``metrics`` is given by its keyword too, or is declared nowhere.
    """
    values: dict[str, int | float | list[int] | list[float]] = {
        keys.NUM_EXAMPLES: int(num_examples)
    }
    optional: dict[str, int | float | list[int] | list[float] | None] = {
        keys.LOSS_BEFORE_TRAINING: None
        if loss_before_training is None
        else float(loss_before_training),
        keys.TRAIN_LOSS: None if train_loss is None else float(train_loss),
        keys.QFFL_H: None if qffl_h is None else float(qffl_h),
        keys.ACTIVATION: None if activation is None else [float(v) for v in activation],
        keys.RCFL_ETA: None if rcfl_eta is None else float(rcfl_eta),
        keys.PARTITION_ID: None if partition_id is None else int(partition_id),
        keys.OBJECTIVE_IGNORED: None if objective_ignored is None else int(objective_ignored),
        keys.ACC_BEFORE_TRAINING: None
        if acc_before_training is None
        else float(acc_before_training),
        keys.GROUP_COUNTS: None if group_counts is None else [int(c) for c in group_counts],
        keys.ACC_AFTER_TRAINING: None if acc_after_training is None else float(acc_after_training),
    }
    for key, value in (metrics or {}).items():
        spec = train_metric_spec(key)
        if spec is None:
            raise ValueError(f"train metric {key!r} is not declared (declare_train_metrics)")
        if optional.get(key) is not None or key == keys.NUM_EXAMPLES:
            raise ValueError(f"train metric {key!r} is given twice")
        optional[key] = _as_kind(value, spec.kind)  # a contract key keeps its place
    values.update({k: v for k, v in optional.items() if v is not None})
    return RecordDict({keys.ARRAYS: arrays, keys.METRICS: MetricRecord(values)})


def _as_kind(
    value: int | float | Sequence[int] | Sequence[float], kind: ValueKind
) -> int | float | list[int] | list[float]:
    """``value`` as the wire type of ``kind`` (what the keywords of the writer do)."""
    if kind == "int":
        return int(cast(int, value))
    if kind == "float":
        return float(cast(float, value))
    if kind == "int-list":
        return [int(v) for v in cast(Sequence[int], value)]
    return [float(v) for v in cast(Sequence[float], value)]


def write_evaluate_reply(
    *,
    num_examples: int,
    eval_loss: float,
    eval_acc: float,
    partition_id: int | None = None,
    personal: tuple[float, float] | None = None,
    group_counts: Sequence[int] | None = None,
    device_index: int | None = None,
) -> RecordDict:
    """Build the content of an evaluate reply (see ``EvaluateReply`` in the .proto).

    ``personal`` is the (loss, accuracy) of the client's personal model (Ditto);
    ``group_counts`` the evaluated model's on the same split
    (:mod:`fairfl.contract.sensitive`); ``device_index`` the CUDA device it ran on, -1
    the CPU.
    """
    values: dict[str, int | float | list[int] | list[float]] = {
        keys.NUM_EXAMPLES: int(num_examples),
        keys.EVAL_LOSS: float(eval_loss),
        keys.EVAL_ACC: float(eval_acc),
    }
    if partition_id is not None:
        values[keys.PARTITION_ID] = int(partition_id)
    if personal is not None:
        values[keys.PERSONAL_EVAL_LOSS] = float(personal[0])
        values[keys.PERSONAL_EVAL_ACC] = float(personal[1])
    if group_counts is not None:
        values[keys.GROUP_COUNTS] = [int(c) for c in group_counts]
    if device_index is not None:
        values[keys.DEVICE_INDEX] = int(device_index)
    return RecordDict({keys.METRICS: MetricRecord(values)})
