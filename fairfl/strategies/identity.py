"""Who a reply may speak for: client claims, the node registration, sample-count bounds.

A train reply names its client by the ``partition-id`` it reports and weighs itself by
the ``num-examples`` it reports; both are the client's own claims. This module decides
which claims the server believes (:class:`ClientKeys` applies it to every round):

**With a registration** (run-config ``client-registration``; :func:`load_registration`),
the operator ties each SuperNode's public key, by its SSH fingerprint
(``ssh-keygen -lf key.pub``), to the partition id it serves. The SuperLink proves which
key sent a reply (node authentication, ``--enable-supernode-auth``) and reports each
node's key to the ServerApp (``Grid.get_nodes()``, flwr >= 1.42); a reply whose claimed
id is not its key's is dropped, naming both, and the registered node keeps its slot.

**Without one** (:class:`Claims`), the first node to claim a client key holds it for
the run: a later claimant is dropped, naming the holder, and the holder keeps its slot
(also when both reply in one round). Two nodes claiming a key nobody holds yet in the
same round are both dropped, and neither holds it. ``max_clients`` bounds how many keys
are ever admitted, so a node rotating its claimed id cannot grow per-client state
without end. The holders are checkpointed with the run; a resumed run keeps the holders
still connected and frees the keys of nodes that are gone (a resumed simulation has new
node ids).

**Sample counts** (:class:`CountBounds`): a reply claiming more than
``max_num_examples`` (:data:`MAX_NUM_EXAMPLES`, 10^9, by default) is dropped: no
federated client holds a billion examples (ImageNet-21k has 14 million), and the bound
keeps every sum of counts exact in float64. That stops absurd counts (2^64 − 1), not a
plausible lie (×10); the opt-in ``num_examples_clip`` = r clips each count to r times the
round's median count before any rule reads it, so while fewer than half of the replies
lie a liar weighs at most what an honest count of ``r · median`` would.
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
    """

    partitions: dict[str, int]
    source: str = "client-registration"


def load_registration(path: str | Path) -> Registration:
    """Read a registration file (TOML).

    The file holds one table, ``[partitions]``, mapping each SuperNode key's fingerprint
    to its partition id::

        [partitions]
        "SHA256:3mJ0...Q" = 0
        "SHA256:Yx9c...k" = 1

    ``deploy/scripts/register-supernodes.sh`` writes it while it registers the keys.

    Raises
    ------
    RegistrationError
        A ``ValueError`` naming ``client-registration``, the file and the entry: the file
        is missing or not TOML, has no ``[partitions]`` table, a fingerprint is not
        ``SHA256:...``, a partition id is not an integer >= 0, or two keys share one.
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
    return Registration(partitions=dict(table), source=str(path))


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
    """

    max_clients: int | None = None
    registration: Registration | None = None
    fingerprint_of: Callable[[int], str | None] | None = None
    #: Node id of the holder of each client key (first claims; checkpointed).
    holders: dict[str, int] = field(default_factory=dict)

    def resolve(self, key: str, nodes: list[int]) -> tuple[int | None, dict[int, str]]:
        """Which of ``nodes`` (all claiming ``key`` this round) speaks for it.

        Returns
        -------
        tuple[int | None, dict[int, str]]
            The node admitted (``None``: none is), and the reason each other node is
            refused, naming the claimant and the node or key the id belongs to.
        """
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
        if len(nodes) > 1:
            reason = f"client key {key!r} ({keys.PARTITION_ID}) also sent by nodes {nodes}"
            return None, dict.fromkeys(nodes, reason)
        (node,) = nodes
        if self.max_clients is not None and len(self.holders) >= self.max_clients:
            return None, {
                node: f"node {node} claims a new client key {key!r}, but max-clients="
                f"{self.max_clients} keys are held already; not admitted"
            }
        self.holders[key] = node
        return node, {}

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
    """

    max_num_examples: int = MAX_NUM_EXAMPLES
    num_examples_clip: float = 0.0

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
