"""Record keys of wire contract v1 (``proto/fairfl/v1/contract.proto``).

Flower's own record names (``arrays``, ``config``, ``metrics``, ``num-examples``,
``server-round``) are kept so that stock Flower ClientApps and strategies interoperate.
A test checks every key here against the ``.proto`` file.

The train-config keys each rule adds (q, RC-FL's α/μ/κ, the proximal μ, the activation
options) live here too: the strategy that sends a key and the client that reads it
both import it from this module, and neither imports the other.
"""

from typing import Final

# Record names inside a Message's RecordDict.
ARRAYS: Final = "arrays"
# A q-FedSGD train reply's ArrayRecord: ∇F_k(w^t), same keys, shapes and dtypes as the
# received model (0 for buffers and integer counters), in place of ARRAYS.
GRADIENT: Final = "gradient"
CONFIG: Final = "config"
METRICS: Final = "metrics"

# Train instruction (server -> client), ConfigRecord keys.
SERVER_ROUND: Final = "server-round"
LR: Final = "lr"
LOCAL_EPOCHS: Final = "local-epochs"
# Local minibatch steps per round in place of LOCAL_EPOCHS (FLamby's budget, run-config
# local-steps); sent only when > 0, absent means epochs. Not part of the proto's TrainConfig.
LOCAL_STEPS: Final = "local-steps"
BATCH_SIZE: Final = "batch-size"
WANT_ACTIVATION: Final = "want-activation"
# Ask the client for ACC_BEFORE_TRAINING below (FedFa); absent means no.
WANT_ACCURACY: Final = "want-accuracy"
# Ask the client for GROUP_COUNTS below on its training split (FairFed); absent means no.
WANT_GROUP_COUNTS: Final = "want-group-counts"
# Ask the client for ACC_AFTER_TRAINING below (FedFa's default); absent means no.
WANT_ACCURACY_AFTER_TRAINING: Final = "want-accuracy-after-training"
# PropFair's client-side loss transform (rule keys, documented in
# fairfl.strategies.propfair; not part of the proto's TrainConfig).
PROPFAIR_M: Final = "propfair-m"
PROPFAIR_EPSILON: Final = "propfair-epsilon"
PROPFAIR_HUBER: Final = "propfair-huber"
# FedProx-style proximal term μ/2 ‖w - w^t‖² added to the local loss (Equitable FL,
# MGDA-Prox); absent means 0.
PROXIMAL_MU: Final = "proximal-mu"
# q of q-FFL, sent every round by QFFL so that a client can report its own h_k.
QFFL_Q: Final = "qffl-q"
# q-FedSGD (Li et al. 2020, Algorithm 1), sent every round by QFedSGD: true asks the client
# for the full-batch gradient ∇F_k(w^t) of the received model over its whole training
# split and F_k(w^t) from the same pass, with no local training; the reply carries the
# gradient as the ArrayRecord GRADIENT below instead of ARRAYS.
FULL_GRADIENT: Final = "full-gradient"
# RC-FL (the RC-FL paper): the global dual variable η^t (the reply carries the updated η under
# the same key, RCFL_ETA below); this client's conservativeness α_i ∈ (0, 1], whose
# presence marks an RC-FL round; the softplus temperature μ > 0; κ local gradient steps
# (not epochs); the η step size (absent: ``lr``); examples per step (0: the whole split).
RCFL_ALPHA: Final = "rcfl-alpha"
RCFL_MU: Final = "rcfl-mu"
RCFL_LOCAL_STEPS: Final = "rcfl-local-steps"
RCFL_LR_ETA: Final = "rcfl-lr-eta"
RCFL_BATCH_SIZE: Final = "rcfl-batch-size"
# Equitable FL's activation options (fairfl.contract.activation.ActivationOptions).
ACTIVATION_SOURCE: Final = "activation-source"
ACTIVATION_MAX_SAMPLES: Final = "activation-max-samples"
ACTIVATION_MIN_SAMPLES: Final = "activation-min-samples"
ACTIVATION_PROJECTION_DIM: Final = "activation-projection-dim"
ACTIVATION_PROJECTION_SEED: Final = "activation-projection-seed"
ACTIVATION_DP_CLIP: Final = "activation-dp-clip"
ACTIVATION_DP_NOISE: Final = "activation-dp-noise"

# Ditto (Li et al., ICML 2021; docs/specs/spec-ditto.md), sent every round by Ditto:
# λ of the personal objective h_k(v; w) = F_k(v) + λ/2 ||v - w||², whose presence marks
# a Ditto round; the personal epochs (0: as many as LOCAL_EPOCHS); the personal step size
# as a multiple of LR. In the evaluate config, DITTO_PERSONAL = true asks the client to
# evaluate its personal model too (PERSONAL_EVAL_LOSS / PERSONAL_EVAL_ACC below).
DITTO_LAMBDA: Final = "ditto-lambda"
DITTO_PERSONAL_EPOCHS: Final = "ditto-personal-epochs"
DITTO_PERSONAL_LR_SCALE: Final = "ditto-personal-lr-scale"
DITTO_PERSONAL: Final = "ditto-personal"

# Client-key query (server -> client, a Flower QUERY message), ConfigRecord key: true
# asks the client for its stable key; the reply's MetricRecord holds PARTITION_ID
# (fairfl.contract.clients).
CLIENT_KEY_QUERY: Final = "client-key"

# Train reply (client -> server), MetricRecord keys.
NUM_EXAMPLES: Final = "num-examples"
# F_k(w^t): mean loss of the *received* global model on the local training split,
# measured before local training. The loss-aware rules read this key by default
# (their ``train_loss_key``).
LOSS_BEFORE_TRAINING: Final = "loss-before-training"
# Acc_k(w^t): accuracy (a fraction) of the *received* global model on the local training
# split, from the same pass as LOSS_BEFORE_TRAINING; sent when the config has
# WANT_ACCURACY. FedFa weighs clients by it.
ACC_BEFORE_TRAINING: Final = "acc-before-training"
# Accuracy (a fraction) of the client's *locally trained* model on its local training
# split, measured after local training; sent when the config has
# WANT_ACCURACY_AFTER_TRAINING. FedFa weighs clients by it as the code of its paper's
# experiments did (its default).
ACC_AFTER_TRAINING: Final = "acc-after-training"
# Group counts of a binary classifier over a per-sample sensitive attribute: samples per
# (attribute value a, label y, prediction ŷ), cell 4a + 2y + ŷ (fairfl.contract.sensitive);
# never the predictions themselves. In a train reply (config WANT_GROUP_COUNTS): of the
# received model on the training split, before local training (FairFed). In an evaluate
# reply: of the evaluated model on the evaluated split, from every client whose data
# carries the attribute.
GROUP_COUNTS: Final = "group-counts"
# Flower's name: a stock ClientApp reports the loss *during* local training here. Read
# by Flower's QFedAvg; fairfl's rules read it only with ``train_loss_key="train_loss"``.
TRAIN_LOSS: Final = "train_loss"
QFFL_H: Final = "qffl-h"
ACTIVATION: Final = "activation"
RCFL_ETA: Final = "rcfl-eta"
PARTITION_ID: Final = "partition-id"
# 1 when the round's rule sent a client objective (PROXIMAL_MU, PROPFAIR_M) and the
# app's training never called the loss that applies it, so the update ignores it; 0 when
# it was applied. Absent when the rule sends none (fairfl.contract.objective).
OBJECTIVE_IGNORED: Final = "objective-ignored"

# Evaluate reply (client -> server), MetricRecord keys.
EVAL_LOSS: Final = "eval_loss"
EVAL_ACC: Final = "eval_acc"
# Ditto: loss and accuracy of the client's personal model v_k on the same split.
PERSONAL_EVAL_LOSS: Final = "personal-eval_loss"
PERSONAL_EVAL_ACC: Final = "personal-eval_acc"
# The CUDA device the client evaluated on, numbered as its process sees them (the GPU
# Ray assigned a ClientApp is 0); -1 on the CPU (fairfl.client.placement).
DEVICE_INDEX: Final = "device-index"
