"""Who a reply may speak for: client claims, the node registration, sample-count bounds.

A train reply names its client by the ``partition-id`` it reports and weighs itself by
the ``num-examples`` it reports; both are the client's own claims. This module decides
which claims the server believes (:class:`ClientKeys` applies it to every round):

**With a registration** (run-config ``client-registration``; :func:`load_registration`),
the operator ties each SuperNode's public key, by its SSH fingerprint
(``ssh-keygen -lf key.pub``), to the partition id it serves, and may state each
partition's sample count. The SuperLink proves which key sent a reply (node
authentication, ``--enable-supernode-auth``) and reports each node's key to the
ServerApp (``Grid.get_nodes()``, flwr >= 1.42); a reply whose claimed id is not its
key's is dropped, naming both, and the registered node keeps its slot. Where the
registration states counts, a client weighs what its registered count says, whatever it
claims (a differing claim is recorded in the round's ``num-examples-claimed``).

**Without one** (:class:`Claims`), the first node to claim a client key holds it for
the run: a later claimant is dropped, naming the holder, and the holder keeps its slot
(also when both reply in one round). Two nodes claiming a key nobody holds yet in the
same round are both dropped, and neither holds it: on the train path and the client-key
query path alike. A partition id outside ``[0, num_partitions)`` is refused; a node
holds at most ``max_keys_per_node`` keys (1 by default: one device, one partition);
``max_clients`` bounds how many keys are ever admitted, so a node rotating its claimed id
cannot grow per-client state without end. The holders are checkpointed with the run; a
resumed run keeps the holders still connected and frees the keys of nodes that are gone
(a resumed simulation has new node ids). What this cannot stop: a device that claims a
free partition before its rightful owner does holds it for the run, and a device that
claims a second partition from another node id is a second client. Only a registration
binds a partition to a device.

**Sample counts** (:class:`CountBounds`): a reply claiming more than
``max_num_examples`` (:data:`MAX_NUM_EXAMPLES`, 10^9, by default) is dropped: no
federated client holds a billion examples (ImageNet-21k has 14 million), and the bound
keeps every sum of counts exact in float64. That stops absurd counts (2^64 − 1), not a
plausible lie (×10); the opt-in ``num_examples_clip`` = r clips each count to r times the
round's median count before any rule reads it, so while fewer than half of the replies
lie a liar weighs at most what an honest count of ``r · median`` would. Where no
registration binds the counts, a round whose largest count exceeds ``count_flag_ratio``
(:data:`COUNT_FLAG_RATIO`, 100) times its median is flagged in its record
(``num-examples-flag``), which the dashboard lists beside the dropped replies.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import serialization

from fairfl.contract import TrainReply, keys

logger = logging.getLogger(__name__)

#: Default bound on a reply's ``num-examples`` (run-config ``max-num-examples``).
MAX_NUM_EXAMPLES = 10**9
#: The largest ``max-num-examples``: counts are summed as int64, and a larger bound let a
#: count of 2^64 - 1 through to an OverflowError that ended the round under 10 rules.
MAX_NUM_EXAMPLES_BOUND = 2**63 - 1
#: Default of run-config ``count-flag-ratio``: a round whose largest unregistered count is
#: more than this many times its median is flagged (0: never). Honest federations stay far
#: below it: the largest train split over the median is 3.3 for the default run (digits,
#: Dirichlet(0.3), 20 partitions) and 11.3 for Synthetic(1,1) with 30 devices, whose sizes
#: follow a power law (``fairfl.data.partition_sizes``, seed 0).
COUNT_FLAG_RATIO = 100.0
#: ``client-registration`` value for a deployment the operator runs without a registration
#: knowingly (the ServerApp then warns once).
NO_REGISTRATION = "none"


class RegistrationError(ValueError):
    """The ``client-registration`` file cannot be read or is not a valid registration."""


def key_fingerprint(public_key: bytes) -> str:
    """The SSH fingerprint of a public key: ``SHA256:`` + base64 of its wire form's hash.

    The same text ``ssh-keygen -lf key.pub`` prints for the key, so an operator can
    check a registration by eye.

    Parameters
    ----------
    public_key : bytes
        A PEM ``SubjectPublicKeyInfo`` (how the SuperLink stores a SuperNode's key and
        ``Grid.get_nodes()`` reports it) or an OpenSSH public-key line (a ``.pub`` file).

    Raises
    ------
    ValueError
        If ``public_key`` is neither.
    """
    text = public_key.strip()
    if text.startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(text)
    else:
        key = serialization.load_ssh_public_key(text)
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


@dataclass(frozen=True)
class Registration:
    """The operator's registration: each SuperNode key's fingerprint -> its partition id.

    Attributes
    ----------
    partitions : dict[str, int]
        Partition id by key fingerprint (:func:`key_fingerprint`).
    source : str
        Where it was read from, for messages.
    num_examples : dict[int, int]
        Each registered partition's sample count, by partition id (empty: the clients'
        claims count, within :class:`CountBounds`).
    """

    partitions: dict[str, int]
    source: str = "client-registration"
    num_examples: dict[int, int] = field(default_factory=dict)


def load_registration(path: str | Path) -> Registration:
    """Read a registration file (TOML).

    The file holds the table ``[partitions]``, mapping each SuperNode key's fingerprint
    to its partition id, and optionally ``[num-examples]``, each registered partition's
    sample count (then every registered partition needs one)::

        [partitions]
        "SHA256:3mJ0...Q" = 0
        "SHA256:Yx9c...k" = 1

        [num-examples]
        "0" = 412
        "1" = 57

    ``deploy/scripts/register-supernodes.sh`` writes it while it registers the keys.

    Raises
    ------
    RegistrationError
        A ``ValueError`` naming ``client-registration``, the file and the entry: the file
        is missing or not TOML, has no ``[partitions]`` table, a fingerprint is not
        ``SHA256:...``, a partition id is not an integer >= 0, two keys share one, or a
        count is not an integer in ``[1, 2^63 - 1]`` for a registered partition, or is
        missing for one.
    """
    where = f"run config client-registration: {path}"
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise RegistrationError(f"{where} cannot be read ({error})") from None
    table = data.get("partitions")
    if not isinstance(table, dict) or not table:
        raise RegistrationError(f"{where} has no [partitions] table of fingerprint = id")
    holders: dict[int, str] = {}
    for fingerprint, partition in table.items():
        if not fingerprint.startswith("SHA256:") or len(fingerprint) != 50:
            raise RegistrationError(
                f"{where}: {fingerprint!r} is not a key fingerprint (SHA256:<43 characters>, "
                "as ssh-keygen -lf prints)"
            )
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise RegistrationError(
                f"{where}: {fingerprint} must map to a partition id (an integer >= 0), "
                f"got {partition!r}"
            )
        if partition in holders:
            raise RegistrationError(
                f"{where}: partition id {partition} is registered for two keys, "
                f"{holders[partition]} and {fingerprint}"
            )
        holders[partition] = fingerprint
    counts = _registered_counts(data.get("num-examples"), set(holders), where)
    return Registration(partitions=dict(table), source=str(path), num_examples=counts)


def _registered_counts(table: object, partitions: set[int], where: str) -> dict[int, int]:
    """The ``[num-examples]`` table of a registration, checked (:func:`load_registration`)."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise RegistrationError(f"{where}: num-examples must be a table of partition id = count")
    counts: dict[int, int] = {}
    for partition, count in table.items():
        if not (partition.isdigit() and int(partition) in partitions):
            raise RegistrationError(
                f"{where}: num-examples names {partition!r}, not a registered partition id"
            )
        if (
            isinstance(count, bool)
            or not isinstance(count, int)
            or not 1 <= count <= MAX_NUM_EXAMPLES_BOUND
        ):
            raise RegistrationError(
                f"{where}: num-examples of partition {partition} must be an integer from 1 "
                f"to 2^63 - 1, got {count!r}"
            )
        counts[int(partition)] = count
    missing = sorted(partitions - set(counts))
    if missing:
        raise RegistrationError(
            f"{where}: num-examples has no count for registered partition(s) {missing}"
        )
    return counts


def grid_fingerprints(get_nodes: Callable[[], Iterable[Any]]) -> Callable[[int], str | None]:
    """A node id -> key fingerprint lookup over the SuperLink's node list.

    ``get_nodes`` is ``Grid.get_nodes`` (flwr >= 1.42: ``NodeInfo`` with ``node_id`` and
    ``public_key``). A node not seen yet triggers one new call; known nodes are cached
    (a node id's key does not change).
    """
    known: dict[int, str | None] = {}

    def lookup(node_id: int) -> str | None:
        if node_id not in known:
            for info in get_nodes():
                key = bytes(getattr(info, "public_key", b"") or b"")
                known[int(info.node_id)] = key_fingerprint(key) if key else None
        return known.get(node_id)

    return lookup


@dataclass
class Claims:
    """Which node may speak for which client key (module docstring).

    Parameters
    ----------
    max_clients : int | None (default: None, unbounded)
        The most client keys ever admitted without a registration; the ServerApp sets it
        to run-config ``max-clients`` (default: ``num-partitions``).
    registration : Registration | None (default: None)
        The operator's registration; then ``fingerprint_of`` must be set too.
    fingerprint_of : Callable[[int], str | None] | None (default: None)
        Node id -> its key's fingerprint (:func:`grid_fingerprints`).
    num_partitions : int | None (default: None, unchecked)
        A claimed partition id must be in ``[0, num_partitions)``; the ServerApp sets it
        to run-config ``num-partitions``.
    max_keys_per_node : int (default: 1)
        The most client keys one node may hold without a registration (run-config
        ``max-keys-per-node``).
    """

    max_clients: int | None = None
    registration: Registration | None = None
    fingerprint_of: Callable[[int], str | None] | None = None
    num_partitions: int | None = None
    max_keys_per_node: int = 1
    #: Node id of the holder of each client key (first claims; checkpointed).
    holders: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check ``max_keys_per_node``; the error names the run-config key."""
        if isinstance(self.max_keys_per_node, bool) or self.max_keys_per_node < 1:
            raise ValueError(
                f"max-keys-per-node must be an integer >= 1, got {self.max_keys_per_node!r}"
            )

    def resolve(self, key: str, nodes: list[int]) -> tuple[int | None, dict[int, str]]:
        """Which of ``nodes`` (all claiming ``key`` this round) speaks for it.

        Returns
        -------
        tuple[int | None, dict[int, str]]
            The node admitted (``None``: none is), and the reason each other node is
            refused, naming the claimant and the node or key the id belongs to.
        """
        out_of_range = self._out_of_range(key)
        if out_of_range is not None:
            return None, {node: f"node {node} {out_of_range}" for node in nodes}
        if self.registration is not None:
            return self._registered(key, nodes)
        holder = self.holders.get(key)
        if holder is not None:
            refused = {
                node: f"node {node} claims client key {key!r} ({keys.PARTITION_ID}), held "
                f"by node {holder} since its first claim; dropped, node {holder} keeps it"
                for node in nodes
                if node != holder
            }
            return (holder if holder in nodes else None), refused
        # A node at its key limit is refused first, so that it cannot silence a rightful
        # first claimant by claiming the same free key in the same round.
        refused = {node: reason for node in nodes if (reason := self._at_key_limit(node, key))}
        claimants = [node for node in nodes if node not in refused]
        if len(claimants) > 1:
            reason = f"client key {key!r} ({keys.PARTITION_ID}) also sent by nodes {claimants}"
            return None, {**refused, **dict.fromkeys(claimants, reason)}
        if not claimants:
            return None, refused
        (node,) = claimants
        if self.max_clients is not None and len(self.holders) >= self.max_clients:
            refused[node] = (
                f"node {node} claims a new client key {key!r}, but max-clients="
                f"{self.max_clients} keys are held already; not admitted"
            )
            return None, refused
        self.holders[key] = node
        return node, refused

    def _at_key_limit(self, node: int, key: str) -> str | None:
        """Why ``node`` may not take the free ``key`` (it holds its limit), or ``None``."""
        held = sorted(k for k, holder in self.holders.items() if holder == node)
        if len(held) < self.max_keys_per_node:
            return None
        return (
            f"node {node} claims a new client key {key!r}, but it holds {held} already "
            f"(max-keys-per-node={self.max_keys_per_node}); not admitted"
        )

    def _out_of_range(self, key: str) -> str | None:
        """Why a partition key is outside ``[0, num_partitions)``, or ``None``."""
        if self.num_partitions is None or not key.isdigit() or int(key) < self.num_partitions:
            return None
        return (
            f"claims {keys.PARTITION_ID} {key}, outside [0, num-partitions="
            f"{self.num_partitions}); dropped"
        )

    def registered_count(self, key: str) -> int | None:
        """The registered sample count of a partition key, or ``None`` if there is none."""
        if self.registration is None or not key.isdigit():
            return None
        return self.registration.num_examples.get(int(key))

    def _registered(self, key: str, nodes: list[int]) -> tuple[int | None, dict[int, str]]:
        assert self.registration is not None
        if self.fingerprint_of is None:
            raise ValueError("a registration needs fingerprint_of (node id -> key fingerprint)")
        owner: int | None = None
        refused: dict[int, str] = {}
        source = self.registration.source
        for node in nodes:
            fingerprint = self.fingerprint_of(node)
            registered = self.registration.partitions.get(fingerprint or "")
            if fingerprint is None:
                refused[node] = (
                    f"node {node} claims client key {key!r}, but the SuperLink reports no "
                    "public key for it (node authentication off?)"
                )
            elif registered is None:
                refused[node] = (
                    f"node {node} (key {fingerprint}) claims client key {key!r}, but its key "
                    f"is not in {source}"
                )
            elif str(registered) != key:
                refused[node] = (
                    f"node {node} (key {fingerprint}) claims client key {key!r} "
                    f"({keys.PARTITION_ID}), but its key is registered for partition "
                    f"{registered} in {source}"
                )
            else:
                owner = node
                self.holders[key] = node
        return owner, refused

    def state_dict(self) -> dict[str, Any]:
        """The holders, for a checkpoint: ``{"holders": {client key: node id}}``."""
        return {"holders": dict(self.holders)}

    def load_state_dict(self, state: Mapping[str, Any], connected: Iterable[int]) -> None:
        """Restore :meth:`state_dict`, keeping only the holders still ``connected``.

        A resumed run keeps every claim whose node is connected when it resumes (a
        deployment's SuperNodes with stable keys); the keys of nodes that are gone (a
        resumed simulation, whose nodes have new ids) are free again. Each freed key is
        logged.
        """
        online = set(connected)
        holders = {str(k): int(v) for k, v in dict(state.get("holders", {})).items()}
        freed = sorted(k for k, node in holders.items() if node not in online)
        if freed:
            logger.info(
                "resume: client key(s) %s freed: their holding nodes are no longer connected",
                ", ".join(freed),
            )
        self.holders = {k: node for k, node in holders.items() if node in online}


@dataclass
class CountBounds:
    """Bounds on the ``num-examples`` a train reply may claim (module docstring).

    Parameters
    ----------
    max_num_examples : int (default: :data:`MAX_NUM_EXAMPLES`)
        A reply claiming more is dropped. An integer >= 1.
    num_examples_clip : float (default: 0.0, off)
        r >= 1 clips each count to ``floor(r · median)`` of the round's counts.
    count_flag_ratio : float (default: :data:`COUNT_FLAG_RATIO`)
        r >= 1 flags a round whose largest claimed count exceeds r · median (0: never).
    """

    max_num_examples: int = MAX_NUM_EXAMPLES
    num_examples_clip: float = 0.0
    count_flag_ratio: float = COUNT_FLAG_RATIO

    def __post_init__(self) -> None:
        """Check both values; the error names the run-config key."""
        if (
            isinstance(self.max_num_examples, bool)
            or not isinstance(self.max_num_examples, int)
            or not 1 <= self.max_num_examples <= MAX_NUM_EXAMPLES_BOUND
        ):
            raise ValueError(
                "max-num-examples must be an integer from 1 to 2^63 - 1, got "
                f"{self.max_num_examples!r}"
            )
        clip = self.num_examples_clip
        if not (math.isfinite(clip) and (clip == 0 or clip >= 1)):
            raise ValueError(f"num-examples-clip must be 0 (off) or a number >= 1, got {clip!r}")
        ratio = self.count_flag_ratio
        if not (math.isfinite(ratio) and (ratio == 0 or ratio >= 1)):
            raise ValueError(f"count-flag-ratio must be 0 (off) or a number >= 1, got {ratio!r}")

    def flag(self, replies: list[TrainReply]) -> str | None:
        """Why a round's claimed counts look forged, or ``None``.

        A round is flagged when its largest count is more than ``count_flag_ratio``
        times the median of its counts; the text names the node, its count and the
        median. Nothing is dropped or changed: the flag says that the counts weighing
        the round are claims no registration binds.
        """
        if self.count_flag_ratio == 0 or not replies:
            return None
        median = float(np.median([r.num_examples for r in replies]))
        largest = max(replies, key=lambda r: r.num_examples)
        if largest.num_examples <= self.count_flag_ratio * median:
            return None
        return (
            f"node {largest.node_id} claims {keys.NUM_EXAMPLES} {largest.num_examples}, "
            f"{largest.num_examples / median:.4g} x the round's median {median:g} (above "
            f"count-flag-ratio={self.count_flag_ratio:g}); counts are unregistered claims"
        )

    def refusal(self, reply: TrainReply) -> str | None:
        """Why a reply's count is refused (above ``max_num_examples``), or ``None``."""
        if reply.num_examples <= self.max_num_examples:
            return None
        return (
            f"{keys.NUM_EXAMPLES} {reply.num_examples} above max-num-examples="
            f"{self.max_num_examples} (node {reply.node_id})"
        )

    def clipped(self, replies: list[TrainReply]) -> list[TrainReply]:
        """The replies with each count clipped to ``floor(r · median)`` (r: the clip).

        ``median`` is the median of the round's counts, so the bound is >= 1 and >= the
        median; each clipped reply is logged at INFO with its node and both counts.
        """
        if self.num_examples_clip == 0 or not replies:
            return replies
        median = float(np.median([r.num_examples for r in replies]))
        bound = max(1, math.floor(self.num_examples_clip * median))
        out = []
        for reply in replies:
            if reply.num_examples <= bound:
                out.append(reply)
                continue
            logger.info(
                "aggregate_train: node %d reported %s %d, clipped to %d (%g x the median)",
                reply.node_id,
                keys.NUM_EXAMPLES,
                reply.num_examples,
                bound,
                self.num_examples_clip,
            )
            out.append(replace(reply, num_examples=bound))
        return out
