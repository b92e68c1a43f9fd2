"""Wire contract v1: what strategies and clients agree on, importing neither.

``proto/fairfl/v1/contract.proto`` is the source of truth; this package is its Python
side. Strategies (server) and client helpers both import it; it imports only numpy and
flwr's record types.

Modules
-------
keys
    Record and config keys: Flower's own names, the reply metrics, and the train-config
    keys each rule sends.
replies
    Readers (validating, naming node and field) and writers of train/evaluate replies.
config
    ``get_config_value``: the one typed getter of config values.
activation
    ``ActivationOptions``: how a client computes Equitable FL's activation vector.
qffl
    q-FFL's h_k, which both the server and a client may compute.
"""

from fairfl.contract import keys
from fairfl.contract.replies import (
    EVALUATE_METRICS,
    REQUIRED_EVALUATE_METRICS,
    REQUIRED_TRAIN_METRICS,
    TRAIN_METRICS,
    EvaluateReply,
    FieldSpec,
    ModelLayout,
    ReplyError,
    TrainReply,
    array_view,
    check_array_values,
    check_value,
    read_evaluate_reply,
    read_train_reply,
    write_evaluate_reply,
    write_train_reply,
)

__all__ = [
    "EVALUATE_METRICS",
    "REQUIRED_EVALUATE_METRICS",
    "REQUIRED_TRAIN_METRICS",
    "TRAIN_METRICS",
    "EvaluateReply",
    "FieldSpec",
    "ModelLayout",
    "ReplyError",
    "TrainReply",
    "array_view",
    "check_array_values",
    "check_value",
    "keys",
    "read_evaluate_reply",
    "read_train_reply",
    "write_evaluate_reply",
    "write_train_reply",
]
