"""Record keys of wire contract v1 (``proto/fairfl/v1/contract.proto``).

Flower's own record names (``arrays``, ``config``, ``metrics``, ``num-examples``,
``server-round``) are kept so that stock Flower ClientApps and strategies interoperate.
A test checks every key here against the ``.proto`` file.
"""

from typing import Final

# Record names inside a Message's RecordDict.
ARRAYS: Final = "arrays"
CONFIG: Final = "config"
METRICS: Final = "metrics"

# Train instruction (server -> client), ConfigRecord keys.
SERVER_ROUND: Final = "server-round"
LR: Final = "lr"
LOCAL_EPOCHS: Final = "local-epochs"
BATCH_SIZE: Final = "batch-size"
WANT_ACTIVATION: Final = "want-activation"
# PropFair's client-side loss transform (rule keys, documented in
# fairfl.strategies.propfair; not part of the proto's TrainConfig).
PROPFAIR_M: Final = "propfair-m"
PROPFAIR_EPSILON: Final = "propfair-epsilon"
PROPFAIR_HUBER: Final = "propfair-huber"

# Train reply (client -> server), MetricRecord keys.
NUM_EXAMPLES: Final = "num-examples"
# F_k(w^t): loss of the *received* global model before local training. Underscored
# only because Flower's QFedAvg reads this exact key.
TRAIN_LOSS: Final = "train_loss"
QFFL_H: Final = "qffl-h"
ACTIVATION: Final = "activation"
RCFL_ETA: Final = "rcfl-eta"
PARTITION_ID: Final = "partition-id"

# Evaluate reply (client -> server), MetricRecord keys.
EVAL_LOSS: Final = "eval_loss"
EVAL_ACC: Final = "eval_acc"
