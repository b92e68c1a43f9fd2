"""The client half of fairfl's SecAgg+: a Flower mod, :func:`secaggplus_mod`.

A ClientApp adds it (``ClientApp(mods=[secaggplus_mod])``); it acts only on train messages
that carry fairfl's secure-aggregation record (:data:`~fairfl.secagg.protocol.RECORD`), so
the same app serves clear runs unchanged. The stages follow Bell et al. (CCS 2020,
Algorithm 2, with Bonawitz et al., CCS 2017, §4) as Flower's ``secaggplus_mod`` runs them,
built on Flower's primitives (key agreement, authenticated encryption, Shamir shares, the
masks' generator); what differs is fairfl's:

* setup trains: the mod calls the app, keeps ``Δ_k = w_k - w^t``, and replies with the
  public keys and the train reply's metrics, its ArrayRecords emptied;
* the collect stage masks the weight and payload of the rule's form
  (:func:`fairfl.secagg.forms.client_part`), not ``num_examples`` and the whole model;
* a weight above ``secagg-max-weight`` in magnitude is refused (an error reply), never
  wrapped;
* under distributed DP the update is clipped and the masked values noised first
  (:mod:`fairfl.secagg.noise`);
* the reply's ``qffl-h``, a function of ``‖Δ_k‖``, is dropped from the clear metrics,
  and so are the metrics a two-round form hides (setup's ``hidden-metrics``): the client
  keeps them for its parts;
* an integer array of a payload (FairFed's group counts) is masked as it is, not
  quantised, so that its sum is exact; a weight the form keeps (FairFed's ω_k) stays
  in ``Context.state`` (:data:`HELD`) from round to round, and in the node's
  ``secagg-state-dir`` when its node config names one (:mod:`fairfl.secagg.held`); a
  client the server counts as holding it that holds none refuses the round, naming
  the key, and starts again from ω_k^0 the next (:func:`~fairfl.secagg.forms.restarted_held`);
* a setup with ``rekey`` (a two-round form's later sums) trains nothing: it draws fresh
  keys for the next sum of the same round.
"""

from __future__ import annotations

import logging
import os
from typing import Any, cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import ndarray_to_bytes
from flwr.common.secure_aggregation.crypto.shamir import create_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import (
    decrypt,
    encrypt,
    generate_shared_key,
)
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    parameters_addition,
    parameters_mod,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.secaggplus_utils import (
    pseudo_rand_gen,
    share_keys_plaintext_concat,
    share_keys_plaintext_separate,
)
from flwr.supercore.primitives.asymmetric import (
    bytes_to_private_key,
    bytes_to_public_key,
    generate_key_pairs,
    private_key_to_bytes,
    public_key_to_bytes,
)
from numpy.typing import NDArray

from fairfl.contract import keys
from fairfl.secagg import held as held_state
from fairfl.secagg.forms import (
    SCALAR_STAGES,
    WEIGHT_KIND,
    client_part,
    held_after,
    restarted_held,
)
from fairfl.secagg.noise import clip_to_norm, noised
from fairfl.secagg.protocol import (
    ARRAYS_KEY,
    CLIENT_PART,
    HIDDEN_METRICS,
    RECORD,
    REKEY,
    REPLY_ARRAYS_KEY,
    Key,
    Stage,
    quantize_private,
    vector_dtype,
)
from fairfl.secagg.protocol import weight_ratio as quantized_weight

__all__ = ["HELD", "PRIVATE", "STATE", "UPDATE", "WEIGHT_RTOL", "secaggplus_mod", "secret_rng"]

logger = logging.getLogger(__name__)

#: The client's protocol state (Flower's :class:`SecAggPlusState`) in ``Context.state``.
STATE = "fairfl.secagg.state"
#: Its update Δ_k, kept from setup to the collect stage.
UPDATE = "fairfl.secagg.update"
#: The train metrics a two-round form hides (its F_k), kept until its last sum.
PRIVATE = "fairfl.secagg.private"
#: What a form keeps on the client across rounds (FairFed's ω_k), in ``Context.state``:
#: the in-process runner's checkpoints keep it, so a resumed run's clients hold it too.
HELD = held_state.RECORD
#: A weight this far (relative) above ``max_weight`` is a float rounding of it, not a breach.
WEIGHT_RTOL = 1e-9


def secaggplus_mod(msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
    """Run fairfl's SecAgg+ stages on train messages that ask for them; pass others on.

    Raises
    ------
    ValueError
        If a stage comes out of order, the keys or shares do not check out, or the
        client's weight exceeds ``max_weight`` (the reply is then an error: the server
        counts the client as dropped).
    """
    if msg.metadata.message_type != MessageType.TRAIN or RECORD not in msg.content.config_records:
        return call_next(msg, ctxt)
    config = msg.content.config_records[RECORD]
    stage = str(config[Key.STAGE])
    state = SecAggPlusState(**ctxt.state.config_records.get(STATE, ConfigRecord()))
    _check_stage(state.current_stage, stage)
    state.current_stage = stage
    if stage == Stage.SETUP:
        state.nid = msg.metadata.dst_node_id
        out = _setup(msg, ctxt, call_next, state, config)
    elif stage == Stage.SHARE_KEYS:
        out = Message(RecordDict({RECORD: ConfigRecord(_share_keys(state, config))}), reply_to=msg)
    elif stage == Stage.COLLECT_MASKED_VECTORS:
        part = msg.content.config_records[CLIENT_PART]
        res = _collect_masked_vectors(state, ctxt, config, part)
        out = Message(RecordDict({RECORD: ConfigRecord(res)}), reply_to=msg)
    elif stage == Stage.UNMASK:
        out = Message(RecordDict({RECORD: ConfigRecord(_unmask(state, config))}), reply_to=msg)
    else:
        raise ValueError(f"secure aggregation: unknown stage {stage!r}")
    ctxt.state.config_records[STATE] = ConfigRecord(state.to_dict())
    return out


def _check_stage(current: str, stage: str) -> None:
    """Setup may (re)start a round any time; every other stage follows the one before."""
    if stage == Stage.SETUP:
        return
    stages = Stage.all()
    if stage not in stages:
        raise ValueError(f"secure aggregation: unknown stage {stage!r}")
    expected = stages[(stages.index(current) + 1) % len(stages)]
    if stage != expected:
        raise ValueError(f"secure aggregation: expected stage {expected!r}, got {stage!r}")


def _setup(
    msg: Message,
    ctxt: Context,
    call_next: ClientAppCallable,
    state: SecAggPlusState,
    config: ConfigRecord,
) -> Message:
    """Train, keep Δ_k and the scalars, reply with the public keys and the clear metrics."""
    state.sample_num = int(cast(int, config[Key.SAMPLE_NUMBER]))
    state.share_num = int(cast(int, config[Key.SHARE_NUMBER]))
    state.threshold = int(cast(int, config[Key.THRESHOLD]))
    state.clipping_range = float(cast(float, config[Key.CLIPPING_RANGE]))
    state.target_range = int(cast(int, config[Key.TARGET_RANGE]))
    state.mod_range = int(cast(int, config[Key.MOD_RANGE]))
    state.max_weight = float(cast(float, config[Key.MAX_WEIGHT]))
    state.rd_seed_share_dict, state.sk1_share_dict, state.ss2_dict = {}, {}, {}
    state.public_keys_dict = {}
    if bool(config.get(REKEY, False)):
        if UPDATE not in ctxt.state.array_records:
            raise ValueError("secure aggregation: a rekey setup, but this client holds no update")
        keys_record = ConfigRecord(_new_keys(state))
        return Message(RecordDict({RECORD: keys_record}), reply_to=msg)
    out = call_next(msg, ctxt)
    if out.has_error():
        return out
    arrays_key = str(config[ARRAYS_KEY])
    reply_key = str(config.get(REPLY_ARRAYS_KEY, arrays_key))
    sent, trained = msg.content.array_records[arrays_key], out.content.array_records[reply_key]
    if list(sent.keys()) != list(trained.keys()):
        raise ValueError(
            f"secure aggregation: the train reply's arrays {list(trained.keys())} differ "
            f"from the global model's {list(sent.keys())}"
        )
    update = {key: np.asarray(trained[key].numpy(), np.float64) for key in sent}
    if reply_key == arrays_key:
        # A model: Δ_k = w_k - w^t, in float64 (where the difference of two float32
        # arrays is exact). A record of its own (q-FedSGD's gradient) is the update.
        for key in sent:
            update[key] -= np.asarray(sent[key].numpy(), np.float64)
    ctxt.state.array_records[UPDATE] = ArrayRecord({k: Array(v) for k, v in update.items()})
    for record in out.content.array_records.values():
        record.clear()  # the server never receives this client's arrays
    hidden = [str(k) for k in cast(list[str], config.get(HIDDEN_METRICS, []))]
    private: dict[str, Any] = {}
    for metrics in out.content.metric_records.values():
        # q-FFL's h_k holds ‖w^t - w_k‖²: it is masked as the weight, never sent clear.
        metrics.pop(keys.QFFL_H, None)
        for key in hidden:
            if key in metrics:
                value = metrics.pop(key)  # a float, or a list (FairFed's group counts)
                private[key] = list(value) if isinstance(value, list) else float(value)
    ctxt.state.config_records[PRIVATE] = ConfigRecord(private)
    out.content.config_records[RECORD] = ConfigRecord(_new_keys(state))
    return Message(out.content, reply_to=msg)


def _new_keys(state: SecAggPlusState) -> dict[str, Any]:
    """Draw the sum's two key pairs; the public keys the setup reply carries."""
    sk1, pk1 = generate_key_pairs()
    sk2, pk2 = generate_key_pairs()
    state.sk1, state.pk1 = private_key_to_bytes(sk1), public_key_to_bytes(pk1)
    state.sk2, state.pk2 = private_key_to_bytes(sk2), public_key_to_bytes(pk2)
    return {Key.PUBLIC_KEY_1: state.pk1, Key.PUBLIC_KEY_2: state.pk2}


def _share_keys(state: SecAggPlusState, config: ConfigRecord) -> dict[str, Any]:
    """Share the mask seed b and the key sk1 among the neighbours (Bell et al., Round 1)."""
    keys = {int(nid): cast(list[bytes], value) for nid, value in config.items() if nid != Key.STAGE}
    state.public_keys_dict = {nid: (pair[0], pair[1]) for nid, pair in keys.items()}
    if len(keys) < state.threshold:
        raise ValueError("secure aggregation: fewer neighbours than the threshold")
    public = [key for pair in keys.values() for key in pair]
    if len(set(public)) != len(public):
        raise ValueError("secure aggregation: two neighbours sent the same public key")
    if keys.get(state.nid) != [state.pk1, state.pk2]:
        raise ValueError("secure aggregation: the server changed this client's public keys")
    state.rd_seed = os.urandom(32)
    seed_shares = create_shares(state.rd_seed, state.threshold, state.share_num)
    key_shares = create_shares(state.sk1, state.threshold, state.share_num)
    destinations, ciphertexts = [], []
    for index, (nid, (_, pk2)) in enumerate(state.public_keys_dict.items()):
        if nid == state.nid:
            state.rd_seed_share_dict[nid] = seed_shares[index]
            state.sk1_share_dict[nid] = key_shares[index]
            continue
        shared = generate_shared_key(bytes_to_private_key(state.sk2), bytes_to_public_key(pk2))
        state.ss2_dict[nid] = shared
        plaintext = share_keys_plaintext_concat(
            state.nid, nid, seed_shares[index], key_shares[index]
        )
        destinations.append(nid)
        ciphertexts.append(encrypt(shared, plaintext))
    return {Key.DESTINATION_LIST: destinations, Key.CIPHERTEXT_LIST: ciphertexts}


def _collect_masked_vectors(
    state: SecAggPlusState, ctxt: Context, config: ConfigRecord, part: ConfigRecord
) -> dict[str, Any]:
    """Mask ``[round(Q a_k / a_max), quantised r̂_k u_k]`` (Bell et al., Round 2)."""
    sources = cast(list[int], config[Key.SOURCE_LIST])
    ciphertexts = cast(list[bytes], config[Key.CIPHERTEXT_LIST])
    if len(ciphertexts) + 1 < state.threshold:
        raise ValueError("secure aggregation: fewer live neighbours than the threshold")
    for source, ciphertext in zip(sources, ciphertexts, strict=True):
        plaintext = decrypt(state.ss2_dict[source], ciphertext)
        sender, receiver, seed_share, key_share = share_keys_plaintext_separate(plaintext)
        if sender != source or receiver != state.nid:
            raise ValueError(
                f"secure aggregation: node {state.nid} got node {sender}'s shares for node "
                f"{receiver} from node {source}"
            )
        state.rd_seed_share_dict[source] = seed_share
        state.sk1_share_dict[source] = key_share
    update = [array.numpy() for array in ctxt.state.array_records[UPDATE].values()]
    held = held_state.load_held(ctxt)
    if (restart := restarted_held(part, held)) is not None:
        held_state.save_held(ctxt, {**held, **restart})
        raise ValueError(
            "secure aggregation: this client lost the weight its rule keeps on it across "
            "rounds (FairFed's ω_k: a restarted SuperNode without node config "
            f"{held_state.STATE_DIR_KEY}); it sits out this round and starts again from "
            f"ω_k^0 = n_k / n; set node config {held_state.STATE_DIR_KEY} to keep ω_k"
        )
    kept = {**ctxt.state.config_records.get(PRIVATE, ConfigRecord()), **held}
    # Distributed DP (the part carries its keys): the update clipped before the form reads it.
    weight, payload = client_part(part, clip_to_norm(part, update), kept)
    # The server's public scale puts the largest weight at a_max, up to float rounding.
    if abs(weight) > state.max_weight * (1 + WEIGHT_RTOL):
        raise ValueError(
            f"secure aggregation: this client's weight {weight:.6g} exceeds "
            f"secagg-max-weight ({state.max_weight:g}) in magnitude; raise secagg-max-weight"
        )
    quantization = state.target_range
    weight_ratio = quantized_weight(weight, state.max_weight, quantization)  # r̂_k Q
    rng = secret_rng()
    exact = [p for p in payload if p.dtype.kind == "i"]  # FairFed's group counts
    floats = [p * (weight_ratio / quantization) for p in payload if p.dtype.kind != "i"]
    quantized, clipped = quantize_private(
        noised(part, floats, rng), state.clipping_range, quantization, rng
    )
    if exact:
        quantized = _with_integers(payload, quantized, weight_ratio, quantization)
    if clipped:
        logger.warning(
            "secure aggregation: %d values of this client's weighted update lie outside "
            "[-%g, %g] and were clipped; raise secagg-clipping-range",
            clipped,
            state.clipping_range,
            state.clipping_range,
        )
    vector: list[NDArray[Any]] = [np.array([weight_ratio], dtype=np.int64), *quantized]
    shapes = [a.shape for a in vector]
    vector = parameters_addition(vector, pseudo_rand_gen(state.rd_seed, state.mod_range, shapes))
    for source in sources:
        # Pairwise masks cancel in the sum: the larger id adds, the smaller subtracts.
        shared = generate_shared_key(
            bytes_to_private_key(state.sk1),
            bytes_to_public_key(state.public_keys_dict[source][0]),
        )
        mask = pseudo_rand_gen(shared, state.mod_range, shapes)
        if state.nid > source:
            vector = parameters_addition(vector, mask)
        else:
            vector = parameters_subtraction(vector, mask)
    vector = parameters_mod(vector, state.mod_range)
    if part.get(WEIGHT_KIND) not in SCALAR_STAGES:  # the round's last sum: the update's
        del ctxt.state.array_records[UPDATE]  # the update leaves the client only masked
        ctxt.state.config_records.pop(PRIVATE, None)
        if keep := held_after(part, kept):  # FairFed's ω_k, for the next round
            held_state.save_held(ctxt, {**held, **keep})
    # Residues mod 2^32 fit 4 bytes: half of the int64 Flower's masks come in.
    wire = vector_dtype(state.mod_range)
    return {Key.MASKED_PARAMETERS: [ndarray_to_bytes(a.astype(wire)) for a in vector]}


def _with_integers(
    payload: list[NDArray[Any]],
    quantized: list[NDArray[np.int64]],
    weight_ratio: int,
    quantization: int,
) -> list[NDArray[np.int64]]:
    """The quantised payload with its integer arrays put in as they are, in order.

    An integer c in [0, Q] is the quantiser's image of ``c 2C/Q - C``: masked as c, it
    sums exactly (no rounding, stochastic or float), and the server reads the sum of the
    integers back exactly (:meth:`fairfl.strategies.secure_sums.TwoRoundSums.exact_total`).
    It needs the weight a_max (r̂_k = 1): any other weight would scale it.
    """
    floats = iter(quantized)
    out = []
    for array in payload:
        if array.dtype.kind != "i":
            out.append(next(floats))
            continue
        if weight_ratio != quantization or array.min() < 0 or array.max() > quantization:
            raise ValueError(
                f"secure aggregation: exact integers need the weight a_max and values in "
                f"[0, {quantization}] (secagg-quantization-range), got {array.tolist()}"
            )
        out.append(array.astype(np.int64))
    return out


def secret_rng() -> np.random.Generator:
    """The client's secret generator (OS entropy): its rounding and its DP noise."""
    return np.random.default_rng()


def _unmask(state: SecAggPlusState, config: ConfigRecord) -> dict[str, Any]:
    """Send b's shares of the live neighbours and sk1's of the dropped (Round 4)."""
    active = cast(list[int], config[Key.ACTIVE_NODE_ID_LIST])
    dead = cast(list[int], config[Key.DEAD_NODE_ID_LIST])
    if len(active) < state.threshold:
        raise ValueError("secure aggregation: fewer live neighbours than the threshold")
    if set(active) & set(dead):
        raise ValueError("secure aggregation: the server lists a node as both live and dropped")
    shares = [state.rd_seed_share_dict[nid] for nid in active]
    shares += [state.sk1_share_dict[nid] for nid in dead]
    return {Key.NODE_ID_LIST: [*active, *dead], Key.SHARE_LIST: shares}
