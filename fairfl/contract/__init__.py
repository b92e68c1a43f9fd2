"""Wire contract v1: what strategies and clients agree on, importing neither.

``proto/fairfl/v1/contract.proto`` is the source of truth; this package is its Python
side. Strategies (server) and client helpers both import it; it imports only numpy and
flwr's record types.

Modules
-------
bounds
    The documented range of every scalar a client reports (``MAX_LOSS``, ...).
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
clients
    Stable client keys (the partition id) for per-client state, and the client-key query.
"""

from fairfl.contract import bounds, keys
from fairfl.contract.clients import (
    client_key,
    client_key_order,
    counts_from_state,
    is_client_key_query,
    read_client_key_reply,
    sorted_client_keys,
    write_client_key_query,
    write_client_key_reply,
)
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
    "bounds",
    "check_array_values",
    "check_value",
    "client_key",
    "client_key_order",
    "counts_from_state",
    "is_client_key_query",
    "keys",
    "read_client_key_reply",
    "read_evaluate_reply",
    "read_train_reply",
    "sorted_client_keys",
    "write_client_key_query",
    "write_client_key_reply",
    "write_evaluate_reply",
    "write_train_reply",
]
