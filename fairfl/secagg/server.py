"""The server half of fairfl's SecAgg+: one round's stages over a Flower ``Grid``.

:class:`SecAggPlusDriver` runs the round's four stages through ``Grid.send_and_receive``
(Bell et al., CCS 2020, Algorithm 2, as Flower's ``SecAggPlusWorkflow`` runs them) and
returns a :class:`SecureSum`: the clients' clear train metrics and the unmasked weighted
mean of their payloads. No client's arrays reach it: a setup reply that carries any array
value is refused, and the masked vectors are summed as they arrive.

:class:`SecureGrid` puts the driver under a Message-API strategy: Flower's
``Strategy.start`` sends the round's train messages through it, and it answers with the
clear replies of the clients in the sum, keeping the sum for the strategy's secure half
(:class:`fairfl.strategies.secure.SecureRounds`). Other messages pass through unchanged.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    parameters_addition,
    parameters_mod,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.serverapp import Grid
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key
from numpy.typing import NDArray

from fairfl._grid import PassThroughGrid
from fairfl.secagg.config import MODULUS_RANGE, SecAggSettings
from fairfl.secagg.forms import weight_magnitude
from fairfl.secagg.protocol import (
    ARRAYS_KEY,
    CLIENT_PART,
    HIDDEN_METRICS,
    RECORD,
    REKEY,
    REPLY_ARRAYS_KEY,
    Key,
    Stage,
    dequantized_mean,
    signed_weight_total,
)

__all__ = ["ClientParts", "NextParts", "SecAggPlusDriver", "SecureGrid", "SecureSum"]

logger = logging.getLogger(__name__)

#: The strategy's screen: given the clear setup replies, each admitted node's client part
#: (the form's scalars, :func:`fairfl.secagg.forms.client_part`); others are left out.
ClientParts = Callable[[list[Message]], Mapping[int, Mapping[str, Any]]]


@dataclass
class SecureSum:
    """What the server learns from one secure round.

    Attributes
    ----------
    replies : list[Message]
        The clear train replies (metrics; ArrayRecords empty) of the clients in the sum.
    mean : list[NDArray[np.float64]] | None
        ``Σ_k r̂_k u_k / Σ_k r̂_k`` per array, in the global model's order; ``None`` if
        the round was skipped.
    weight_total : int
        ``Σ_k round(Q a_k / a_max)``, the unmasked sum of the quantised weights.
    abs_total : int | None
        A bound on ``Σ_k |round(Q a_k / a_max)|`` when a weight of the sum may be
        negative (:func:`fairfl.secagg.forms.weight_magnitude`); ``None``: none may.
    lost : dict[int, str]
        Each sampled node left out of the sum, and at which stage.
    skipped : str | None
        Why no sum came out (too few clients for the threshold), or ``None``.
    """

    replies: list[Message] = field(default_factory=list)
    mean: list[NDArray[np.float64]] | None = None
    weight_total: int = 0
    abs_total: int | None = None
    lost: dict[int, str] = field(default_factory=dict)
    skipped: str | None = None

    @property
    def num_clients(self) -> int:
        """The clients whose masked vectors are in the sum."""
        return len(self.replies)


#: A two-round form's next sum: given the last sum (its statistics), each client's part
#: of the next, or ``None`` when that sum was the round's last.
NextParts = Callable[[SecureSum], Mapping[int, Mapping[str, Any]] | None]


class _Round:
    """The state of one round: who is still in, each stage's bookkeeping."""

    def __init__(
        self,
        sampled: list[int],
        shares: int,
        threshold: int,
        group_id: str,
        lost: Mapping[int, str] | None = None,
    ) -> None:
        self.sampled = sampled
        self.threshold = threshold
        self.group_id = group_id  # the round's, as on its train messages
        ring = list(sampled)
        random.SystemRandom().shuffle(ring)  # the graph: a ring no client can predict
        half, n = shares // 2, len(ring)
        self.neighbours = {
            nid: {ring[(i + offset) % n] for offset in range(-half, half + 1)}
            for i, nid in enumerate(ring)
        }
        self.active: set[int] = set(sampled)
        self.public_keys: dict[int, list[bytes]] = {}
        self.share_holders: set[int] = set()  # nodes whose shares went out (masks involve them)
        # Encrypted shares to forward: destination -> (sources, ciphertexts).
        self.forward: dict[int, tuple[list[int], list[bytes]]] = {}
        self.lost: dict[int, str] = dict(lost or {})  # a later sum's: its round's so far

    def keep(self, stage: str, answered: Iterable[int]) -> None:
        """Keep the nodes that answered ``stage``; record the others as lost there."""
        answered = set(answered)
        for nid in self.active - answered:
            self.lost.setdefault(nid, stage)
        self.active &= answered

    def short(self, nodes: Iterable[int]) -> str | None:
        """Why the round cannot finish: a node of ``nodes`` with too few live neighbours."""
        for nid in sorted(nodes):
            live = len(self.neighbours[nid] & self.active)
            if live < self.threshold:
                return (
                    f"node {nid} keeps {live} live neighbours (itself included), fewer than "
                    f"the reconstruction threshold {self.threshold}"
                )
        return None


class SecAggPlusDriver:
    """Runs one round of SecAgg+ over a Grid (the server of Bell et al., Algorithm 2).

    Parameters
    ----------
    settings : SecAggSettings
        Shares, threshold, clipping and quantisation ranges, the largest weight.
    """

    def __init__(self, settings: SecAggSettings) -> None:
        self.settings = settings

    def run(
        self,
        grid: Grid,
        messages: list[Message],
        client_parts: ClientParts,
        *,
        arrays_key: str,
        reply_arrays_key: str | None = None,
        timeout: float | None = None,
        hidden: tuple[str, ...] = (),
        next_parts: NextParts | None = None,
    ) -> SecureSum:
        """Run the stages for the round's train ``messages``; the sum, or why none.

        ``client_parts`` screens the clear setup replies (the rule's reader and weights)
        and gives each admitted client its part. A stage after which some node keeps
        fewer live neighbours than the threshold ends the round without a sum. The
        clients read their update from the reply's ``reply_arrays_key`` record (default
        ``arrays_key``: the trained model, less the one sent).

        A two-round form keeps the train metrics ``hidden`` on the clients and runs
        several sums: after each, ``next_parts`` gives the next sum's parts from it (its
        public statistics), or ``None`` after the last (the update's). Each later sum
        starts with a setup that draws fresh keys and trains nothing; the round's answer
        is its last sum.

        Raises
        ------
        ValueError
            If the round samples more clients than one sum holds (2 n Q >= 2^32).
        """
        settings = self.settings
        sampled = [int(m.metadata.dst_node_id) for m in messages]
        if len(sampled) > settings.max_clients:
            raise ValueError(
                f"secure aggregation: {len(sampled)} clients in a round overflow the 2^32 "
                f"modulus at secagg-quantization-range {settings.secagg_quantization_range} "
                f"(at most {settings.max_clients}): lower secagg-quantization-range"
            )
        shares, threshold = settings.shares_and_threshold(len(sampled))
        if len(sampled) < 2 or threshold > len(sampled):
            return SecureSum(
                skipped=f"{len(sampled)} clients sampled: a secure sum needs at least "
                f"max(2, the threshold {threshold})"
            )
        state = _Round(sampled, shares, threshold, messages[0].metadata.group_id)
        keys = (arrays_key, reply_arrays_key or arrays_key)
        setup = self._setup(grid, messages, state, shares, timeout, keys, hidden=hidden)
        parts = client_parts([setup[nid] for nid in sorted(state.active)]) if state.active else {}
        while True:
            result = self._sum(grid, state, parts, setup, timeout)
            following = None if next_parts is None or result.skipped else next_parts(result)
            if following is None:
                break
            # A later sum of the round: fresh keys on a fresh graph, no training.
            state = _Round(sorted(state.active), shares, threshold, state.group_id, state.lost)
            rekey = [
                Message(
                    RecordDict(),
                    dst_node_id=nid,
                    message_type=MessageType.TRAIN,
                    group_id=state.group_id,
                )
                for nid in state.sampled
            ]
            self._setup(grid, rekey, state, shares, timeout, keys, rekey=True)
            parts = {nid: part for nid, part in following.items() if nid in state.active}
        if result.skipped is None:
            logger.info(
                "secure aggregation: summed %d of %d clients (lost: %s)",
                result.num_clients,
                len(sampled),
                result.lost or "none",
            )
        return result

    def _sum(
        self,
        grid: Grid,
        state: _Round,
        parts: Mapping[int, Mapping[str, Any]],
        setup: Mapping[int, Message],
        timeout: float | None,
    ) -> SecureSum:
        """One secure sum of the clients given ``parts``: share keys, collect, unmask."""
        settings = self.settings
        state.keep(Stage.SETUP + " (refused by the rule)", parts)
        if (why := state.short(state.active)) is not None:
            return self._skipped(state, why, setup)
        self._share_keys(grid, state, timeout)
        if (why := state.short(state.share_holders)) is not None:
            return self._skipped(state, why, setup)
        total = self._collect(grid, state, parts, timeout)
        if total is None or (why := state.short(state.share_holders)) is not None:
            return self._skipped(state, why or "no masked vector came back", setup)
        in_sum = sorted(state.active)
        total = self._unmask(grid, state, total, timeout)
        replies = [setup[nid] for nid in in_sum]
        if total is None:
            return self._skipped(state, "too few shares came back to unmask the sum", setup)
        quantization = settings.secagg_quantization_range
        residue = int(total[0].reshape(-1)[0])
        weight_total = signed_weight_total(residue, len(in_sum), quantization)
        if weight_total <= 0:
            return self._skipped(state, "the clients' weights sum to 0 or less", setup)
        magnitudes = [
            weight_magnitude(parts[nid], settings.secagg_max_weight, quantization)
            for nid in in_sum
        ]
        abs_total = None
        if any(m is not None for m in magnitudes):
            abs_total = sum(quantization if m is None else m for m in magnitudes)
        mean = dequantized_mean(
            total[1:],
            len(in_sum),
            weight_total,
            settings.secagg_clipping_range,
            settings.secagg_quantization_range,
        )
        lost = {nid: why for nid, why in state.lost.items() if nid not in in_sum}
        return SecureSum(replies, mean, weight_total, abs_total, lost)

    def _skipped(self, state: _Round, why: str, setup: Mapping[int, Message]) -> SecureSum:
        logger.warning("secure aggregation: round skipped: %s", why)
        replies = [setup[nid] for nid in sorted(state.active) if nid in setup]
        return SecureSum(replies=replies, lost=dict(state.lost), skipped=why)

    def _setup(
        self,
        grid: Grid,
        messages: list[Message],
        state: _Round,
        shares: int,
        timeout: float | None,
        arrays_keys: tuple[str, str],
        *,
        hidden: tuple[str, ...] = (),
        rekey: bool = False,
    ) -> dict[int, Message]:
        """Send the train instructions with the setup record; the clear replies by node.

        ``rekey``: a later sum's setup (no train instruction, fresh keys only).
        """
        settings = self.settings
        extra: dict[str, Any] = {REKEY: True} if rekey else {}
        if hidden:
            extra[HIDDEN_METRICS] = list(hidden)
        for message in messages:
            message.content.config_records[RECORD] = ConfigRecord(
                {
                    **extra,
                    Key.STAGE: Stage.SETUP,
                    Key.SAMPLE_NUMBER: len(state.sampled),
                    Key.SHARE_NUMBER: shares,
                    Key.THRESHOLD: state.threshold,
                    Key.CLIPPING_RANGE: settings.secagg_clipping_range,
                    Key.TARGET_RANGE: settings.secagg_quantization_range,
                    Key.MOD_RANGE: MODULUS_RANGE,
                    Key.MAX_WEIGHT: settings.secagg_max_weight,
                    ARRAYS_KEY: arrays_keys[0],
                    REPLY_ARRAYS_KEY: arrays_keys[1],
                }
            )
        replies: dict[int, Message] = {}
        for reply in grid.send_and_receive(messages, timeout=timeout):
            nid = int(reply.metadata.src_node_id)
            if reply.has_error():
                state.lost[nid] = f"{Stage.SETUP} (error: {_last_line(reply)})"
                continue
            problem = _setup_problem(reply)
            if problem is not None:
                state.lost[nid] = f"{Stage.SETUP} ({problem})"
                logger.warning(
                    "secure aggregation: node %d's setup reply refused: %s", nid, problem
                )
                continue
            keys = reply.content.config_records.pop(RECORD)
            state.public_keys[nid] = [
                cast(bytes, keys[Key.PUBLIC_KEY_1]),
                cast(bytes, keys[Key.PUBLIC_KEY_2]),
            ]
            replies[nid] = reply
        state.keep(Stage.SETUP, replies)
        return replies

    def _send(
        self,
        grid: Grid,
        state: _Round,
        stage: str,
        contents: Mapping[int, RecordDict],
        timeout: float | None,
    ) -> dict[int, ConfigRecord]:
        """Send each node its content; the protocol record of every good answer by node.

        A node whose ClientApp raised (a weight above ``max_weight``, shares that do not
        check out) is recorded as lost at ``stage`` with the error's last line.
        """
        messages = [
            Message(
                content=content,
                dst_node_id=nid,
                message_type=MessageType.TRAIN,
                group_id=state.group_id,
            )
            for nid, content in contents.items()
        ]
        answers: dict[int, ConfigRecord] = {}
        for reply in grid.send_and_receive(messages, timeout=timeout):
            nid = int(reply.metadata.src_node_id)
            if nid not in contents:
                continue
            if reply.has_error():
                state.lost[nid] = f"{stage} (error: {_last_line(reply)})"
            elif RECORD in reply.content.config_records:
                answers[nid] = reply.content.config_records[RECORD]
        return answers

    def _share_keys(self, grid: Grid, state: _Round, timeout: float | None) -> None:
        """Send each node its live neighbours' public keys; forward the encrypted shares."""
        contents = {}
        for nid in state.active:
            record = ConfigRecord(
                {str(n): state.public_keys[n] for n in state.neighbours[nid] & state.active}
            )
            record[Key.STAGE] = Stage.SHARE_KEYS
            contents[nid] = RecordDict({RECORD: record})
        answers = self._send(grid, state, Stage.SHARE_KEYS, contents, timeout)
        state.keep(Stage.SHARE_KEYS, answers)
        state.share_holders = set(state.active)
        state.forward = {nid: ([], []) for nid in state.active}
        for source, record in answers.items():
            destinations = cast(list[int], record[Key.DESTINATION_LIST])
            ciphertexts = cast(list[bytes], record[Key.CIPHERTEXT_LIST])
            for destination, ciphertext in zip(destinations, ciphertexts, strict=True):
                if destination in state.forward and destination in state.neighbours[source]:
                    state.forward[destination][0].append(source)
                    state.forward[destination][1].append(ciphertext)

    def _collect(
        self,
        grid: Grid,
        state: _Round,
        parts: Mapping[int, Mapping[str, Any]],
        timeout: float | None,
    ) -> list[NDArray[Any]] | None:
        """Forward the shares and each client's part; the masked vectors' sum mod 2^32."""
        contents = {}
        for nid in state.active:
            sources, ciphertexts = state.forward[nid]
            record = ConfigRecord(
                {
                    Key.STAGE: Stage.COLLECT_MASKED_VECTORS,
                    Key.CIPHERTEXT_LIST: ciphertexts,
                    Key.SOURCE_LIST: sources,
                }
            )
            part = ConfigRecord(dict(parts[nid]))
            contents[nid] = RecordDict({RECORD: record, CLIENT_PART: part})
        answers = self._send(grid, state, Stage.COLLECT_MASKED_VECTORS, contents, timeout)
        state.forward = {}
        total: list[NDArray[Any]] | None = None
        for record in answers.values():
            masked = cast(list[bytes], record[Key.MASKED_PARAMETERS])
            # Residues travel as uint32; summed as int64, n of them stay far below 2^63.
            vector = [bytes_to_ndarray(b).astype(np.int64) for b in masked]
            total = vector if total is None else parameters_addition(total, vector)
        state.keep(Stage.COLLECT_MASKED_VECTORS, answers)
        return None if total is None else parameters_mod(total, MODULUS_RANGE)

    def _unmask(
        self, grid: Grid, state: _Round, total: list[NDArray[Any]], timeout: float | None
    ) -> list[NDArray[Any]] | None:
        """Collect the shares; remove the live clients' own masks and the dropped ones' pairs.

        A live client's vector holds its own mask (seed b) and pairwise masks with every
        neighbour whose shares it received; those with live neighbours cancel in the sum,
        those with a neighbour that dropped after sharing are rebuilt from that
        neighbour's sk1 (Bonawitz et al. 2017, §4, Round 4). None if a secret lacks shares.
        """
        in_sum, dead = set(state.active), state.share_holders - state.active
        contents = {}
        for nid in in_sum:
            record = ConfigRecord(
                {
                    Key.STAGE: Stage.UNMASK,
                    Key.ACTIVE_NODE_ID_LIST: sorted(state.neighbours[nid] & in_sum),
                    Key.DEAD_NODE_ID_LIST: sorted(state.neighbours[nid] & dead),
                }
            )
            contents[nid] = RecordDict({RECORD: record})
        answers = self._send(grid, state, Stage.UNMASK, contents, timeout)
        collected: dict[int, list[bytes]] = {nid: [] for nid in in_sum | dead}
        for record in answers.values():
            owners = cast(list[int], record[Key.NODE_ID_LIST])
            shares = cast(list[bytes], record[Key.SHARE_LIST])
            for owner, share in zip(owners, shares, strict=True):
                if owner in collected:
                    collected[owner].append(share)
        shapes = [a.shape for a in total]
        for nid, shares in collected.items():
            if len(shares) < state.threshold:
                logger.warning(
                    "secure aggregation: %d shares of node %d's secret, threshold %d",
                    len(shares),
                    nid,
                    state.threshold,
                )
                return None
            secret = combine_shares(shares)
            if nid in in_sum:
                total = parameters_subtraction(
                    total, pseudo_rand_gen(secret, MODULUS_RANGE, shapes)
                )
                continue
            for other in sorted(state.neighbours[nid] & in_sum):
                shared = generate_shared_key(
                    bytes_to_private_key(secret), bytes_to_public_key(state.public_keys[other][0])
                )
                mask = pseudo_rand_gen(shared, MODULUS_RANGE, shapes)
                # ``other`` added the mask if other > nid, subtracted it otherwise: undo.
                if other > nid:
                    total = parameters_subtraction(total, mask)
                else:
                    total = parameters_addition(total, mask)
        return parameters_mod(total, MODULUS_RANGE)


def _last_line(reply: Message) -> str:
    """The last line of an error reply's reason (a traceback's: the exception)."""
    lines = (reply.error.reason or "").strip().splitlines()
    return lines[-1] if lines else "no reason given"


def _setup_problem(reply: Message) -> str | None:
    """Why a setup reply cannot enter the protocol: no keys, or arrays it should not send."""
    if RECORD not in reply.content.config_records:
        return (
            "no secure-aggregation record: its ClientApp lacks fairfl.secagg.secaggplus_mod "
            "(ClientApp(mods=[secaggplus_mod]))"
        )
    for name, arrays in reply.content.array_records.items():
        if len(arrays):
            return f"it sent arrays in content[{name!r}] (only metrics may travel in the clear)"
    keys = reply.content.config_records[RECORD]
    if Key.PUBLIC_KEY_1 not in keys or Key.PUBLIC_KEY_2 not in keys:
        return "its secure-aggregation record has no public keys"
    return None


class SecureGrid(PassThroughGrid):
    """A Grid that runs each batch of train messages as a SecAgg+ round.

    ``send_and_receive`` of train messages runs :meth:`SecAggPlusDriver.run` on the
    wrapped grid and returns the clear replies of the clients in the sum; the sum itself
    is :attr:`last`, for the strategy's secure half. Every other call is the wrapped
    grid's.

    Parameters
    ----------
    grid : Grid
        The Grid of the run.
    driver : SecAggPlusDriver
        The round's protocol.
    client_parts : ClientParts
        The strategy's screen (its reader and weights) for the setup replies.
    arrays_key : str
        The ArrayRecord of the strategy's train messages and replies (``arrays``).
    reply_arrays_key : str | None
        The replies' ArrayRecord where it differs (q-FedSGD's ``gradient``).
    hidden : tuple[str, ...]
        The train metrics the clients keep (a two-round form's).
    next_parts : NextParts | None
        A two-round form's later sums (:meth:`SecAggPlusDriver.run`).
    """

    def __init__(
        self,
        grid: Grid,
        driver: SecAggPlusDriver,
        client_parts: ClientParts,
        arrays_key: str,
        reply_arrays_key: str | None = None,
        *,
        hidden: tuple[str, ...] = (),
        next_parts: NextParts | None = None,
    ) -> None:
        super().__init__(grid)
        self.driver = driver
        self.client_parts = client_parts
        self.arrays_key = arrays_key
        self.reply_arrays_key = reply_arrays_key
        self.hidden = hidden
        self.next_parts = next_parts
        self.last: SecureSum | None = None

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """A secure round for train messages; the wrapped grid's answer for others."""
        batch = list(messages)
        if not batch:
            # Nothing sampled (an evaluate batch may be empty too: the next train sets it).
            self.last = SecureSum(skipped="no client was sent a train message")
            return []
        if any(m.metadata.message_type != MessageType.TRAIN for m in batch):
            return self.grid.send_and_receive(batch, timeout=timeout)
        self.last = self.driver.run(
            self.grid,
            batch,
            self.client_parts,
            arrays_key=self.arrays_key,
            reply_arrays_key=self.reply_arrays_key,
            timeout=timeout,
            hidden=self.hidden,
            next_parts=self.next_parts,
        )
        return list(self.last.replies)
