from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "npy")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    NPY_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    npy: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., npy: _Optional[bytes] = ...) -> None: ...

class TrainInstruction(_message.Message):
    __slots__ = ("arrays", "config")
    class ArraysEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    arrays: _containers.MessageMap[str, Tensor]
    config: TrainConfig
    def __init__(self, arrays: _Optional[_Mapping[str, Tensor]] = ..., config: _Optional[_Union[TrainConfig, _Mapping]] = ...) -> None: ...

class TrainConfig(_message.Message):
    __slots__ = ("server_round", "lr", "local_epochs", "batch_size", "want_activation", "want_accuracy", "want_group_counts", "want_accuracy_after_training")
    SERVER_ROUND_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    LOCAL_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    WANT_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    WANT_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    WANT_GROUP_COUNTS_FIELD_NUMBER: _ClassVar[int]
    WANT_ACCURACY_AFTER_TRAINING_FIELD_NUMBER: _ClassVar[int]
    server_round: int
    lr: float
    local_epochs: int
    batch_size: int
    want_activation: bool
    want_accuracy: bool
    want_group_counts: bool
    want_accuracy_after_training: bool
    def __init__(self, server_round: _Optional[int] = ..., lr: _Optional[float] = ..., local_epochs: _Optional[int] = ..., batch_size: _Optional[int] = ..., want_activation: bool = ..., want_accuracy: bool = ..., want_group_counts: bool = ..., want_accuracy_after_training: bool = ...) -> None: ...

class TrainReply(_message.Message):
    __slots__ = ("arrays", "metrics", "gradient")
    class ArraysEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class GradientEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_FIELD_NUMBER: _ClassVar[int]
    arrays: _containers.MessageMap[str, Tensor]
    metrics: TrainMetrics
    gradient: _containers.MessageMap[str, Tensor]
    def __init__(self, arrays: _Optional[_Mapping[str, Tensor]] = ..., metrics: _Optional[_Union[TrainMetrics, _Mapping]] = ..., gradient: _Optional[_Mapping[str, Tensor]] = ...) -> None: ...

class TrainMetrics(_message.Message):
    __slots__ = ("num_examples", "train_loss", "qffl_h", "activation", "rcfl_eta", "partition_id", "loss_before_training", "objective_ignored", "acc_before_training", "group_counts", "acc_after_training")
    NUM_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    QFFL_H_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    RCFL_ETA_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    LOSS_BEFORE_TRAINING_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_IGNORED_FIELD_NUMBER: _ClassVar[int]
    ACC_BEFORE_TRAINING_FIELD_NUMBER: _ClassVar[int]
    GROUP_COUNTS_FIELD_NUMBER: _ClassVar[int]
    ACC_AFTER_TRAINING_FIELD_NUMBER: _ClassVar[int]
    num_examples: int
    train_loss: float
    qffl_h: float
    activation: _containers.RepeatedScalarFieldContainer[float]
    rcfl_eta: float
    partition_id: int
    loss_before_training: float
    objective_ignored: int
    acc_before_training: float
    group_counts: _containers.RepeatedScalarFieldContainer[int]
    acc_after_training: float
    def __init__(self, num_examples: _Optional[int] = ..., train_loss: _Optional[float] = ..., qffl_h: _Optional[float] = ..., activation: _Optional[_Iterable[float]] = ..., rcfl_eta: _Optional[float] = ..., partition_id: _Optional[int] = ..., loss_before_training: _Optional[float] = ..., objective_ignored: _Optional[int] = ..., acc_before_training: _Optional[float] = ..., group_counts: _Optional[_Iterable[int]] = ..., acc_after_training: _Optional[float] = ...) -> None: ...

class EvaluateReply(_message.Message):
    __slots__ = ("metrics",)
    METRICS_FIELD_NUMBER: _ClassVar[int]
    metrics: EvaluateMetrics
    def __init__(self, metrics: _Optional[_Union[EvaluateMetrics, _Mapping]] = ...) -> None: ...

class EvaluateMetrics(_message.Message):
    __slots__ = ("num_examples", "eval_loss", "eval_acc", "partition_id", "personal_eval_loss", "personal_eval_acc", "group_counts", "device_index")
    NUM_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    EVAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    EVAL_ACC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONAL_EVAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    PERSONAL_EVAL_ACC_FIELD_NUMBER: _ClassVar[int]
    GROUP_COUNTS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    num_examples: int
    eval_loss: float
    eval_acc: float
    partition_id: int
    personal_eval_loss: float
    personal_eval_acc: float
    group_counts: _containers.RepeatedScalarFieldContainer[int]
    device_index: int
    def __init__(self, num_examples: _Optional[int] = ..., eval_loss: _Optional[float] = ..., eval_acc: _Optional[float] = ..., partition_id: _Optional[int] = ..., personal_eval_loss: _Optional[float] = ..., personal_eval_acc: _Optional[float] = ..., group_counts: _Optional[_Iterable[int]] = ..., device_index: _Optional[int] = ...) -> None: ...

class ClientKeyQuery(_message.Message):
    __slots__ = ("client_key",)
    CLIENT_KEY_FIELD_NUMBER: _ClassVar[int]
    client_key: bool
    def __init__(self, client_key: bool = ...) -> None: ...

class ClientKeyReply(_message.Message):
    __slots__ = ("partition_id",)
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    def __init__(self, partition_id: _Optional[int] = ...) -> None: ...
