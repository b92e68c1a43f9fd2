from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SecAggSetup(_message.Message):
    __slots__ = ("stage", "sample_num", "share_num", "threshold", "clipping_range", "target_range", "mod_range", "max_weight", "arrays_key", "reply_arrays_key")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_NUM_FIELD_NUMBER: _ClassVar[int]
    SHARE_NUM_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CLIPPING_RANGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_RANGE_FIELD_NUMBER: _ClassVar[int]
    MOD_RANGE_FIELD_NUMBER: _ClassVar[int]
    MAX_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ARRAYS_KEY_FIELD_NUMBER: _ClassVar[int]
    REPLY_ARRAYS_KEY_FIELD_NUMBER: _ClassVar[int]
    stage: str
    sample_num: int
    share_num: int
    threshold: int
    clipping_range: float
    target_range: int
    mod_range: int
    max_weight: float
    arrays_key: str
    reply_arrays_key: str
    def __init__(self, stage: _Optional[str] = ..., sample_num: _Optional[int] = ..., share_num: _Optional[int] = ..., threshold: _Optional[int] = ..., clipping_range: _Optional[float] = ..., target_range: _Optional[int] = ..., mod_range: _Optional[int] = ..., max_weight: _Optional[float] = ..., arrays_key: _Optional[str] = ..., reply_arrays_key: _Optional[str] = ...) -> None: ...

class SecAggSetupReply(_message.Message):
    __slots__ = ("pk1", "pk2")
    PK1_FIELD_NUMBER: _ClassVar[int]
    PK2_FIELD_NUMBER: _ClassVar[int]
    pk1: bytes
    pk2: bytes
    def __init__(self, pk1: _Optional[bytes] = ..., pk2: _Optional[bytes] = ...) -> None: ...

class SecAggShareKeys(_message.Message):
    __slots__ = ("stage",)
    STAGE_FIELD_NUMBER: _ClassVar[int]
    stage: str
    def __init__(self, stage: _Optional[str] = ...) -> None: ...

class SecAggShareKeysReply(_message.Message):
    __slots__ = ("dsts", "ctxts")
    DSTS_FIELD_NUMBER: _ClassVar[int]
    CTXTS_FIELD_NUMBER: _ClassVar[int]
    dsts: _containers.RepeatedScalarFieldContainer[int]
    ctxts: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, dsts: _Optional[_Iterable[int]] = ..., ctxts: _Optional[_Iterable[bytes]] = ...) -> None: ...

class SecAggCollect(_message.Message):
    __slots__ = ("stage", "ctxts", "srcs")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    CTXTS_FIELD_NUMBER: _ClassVar[int]
    SRCS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    ctxts: _containers.RepeatedScalarFieldContainer[bytes]
    srcs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, stage: _Optional[str] = ..., ctxts: _Optional[_Iterable[bytes]] = ..., srcs: _Optional[_Iterable[int]] = ...) -> None: ...

class SecAggClientPart(_message.Message):
    __slots__ = ("weight_kind", "weight_scale", "num_examples", "loss", "weight", "qffl_q", "qffl_lipschitz", "qffl_by_size", "term_alpha", "term_shift")
    WEIGHT_KIND_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_SCALE_FIELD_NUMBER: _ClassVar[int]
    NUM_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    QFFL_Q_FIELD_NUMBER: _ClassVar[int]
    QFFL_LIPSCHITZ_FIELD_NUMBER: _ClassVar[int]
    QFFL_BY_SIZE_FIELD_NUMBER: _ClassVar[int]
    TERM_ALPHA_FIELD_NUMBER: _ClassVar[int]
    TERM_SHIFT_FIELD_NUMBER: _ClassVar[int]
    weight_kind: str
    weight_scale: float
    num_examples: int
    loss: float
    weight: float
    qffl_q: float
    qffl_lipschitz: float
    qffl_by_size: bool
    term_alpha: float
    term_shift: float
    def __init__(self, weight_kind: _Optional[str] = ..., weight_scale: _Optional[float] = ..., num_examples: _Optional[int] = ..., loss: _Optional[float] = ..., weight: _Optional[float] = ..., qffl_q: _Optional[float] = ..., qffl_lipschitz: _Optional[float] = ..., qffl_by_size: bool = ..., term_alpha: _Optional[float] = ..., term_shift: _Optional[float] = ...) -> None: ...

class SecAggCollectReply(_message.Message):
    __slots__ = ("masked_params",)
    MASKED_PARAMS_FIELD_NUMBER: _ClassVar[int]
    masked_params: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, masked_params: _Optional[_Iterable[bytes]] = ...) -> None: ...

class SecAggUnmask(_message.Message):
    __slots__ = ("stage", "active_nids", "dead_nids")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_NIDS_FIELD_NUMBER: _ClassVar[int]
    DEAD_NIDS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    active_nids: _containers.RepeatedScalarFieldContainer[int]
    dead_nids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, stage: _Optional[str] = ..., active_nids: _Optional[_Iterable[int]] = ..., dead_nids: _Optional[_Iterable[int]] = ...) -> None: ...

class SecAggUnmaskReply(_message.Message):
    __slots__ = ("nids", "shares")
    NIDS_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    nids: _containers.RepeatedScalarFieldContainer[int]
    shares: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, nids: _Optional[_Iterable[int]] = ..., shares: _Optional[_Iterable[bytes]] = ...) -> None: ...
