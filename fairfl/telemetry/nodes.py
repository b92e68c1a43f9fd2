"""SuperNode public-key fingerprints, from the Grid's node information (flwr >= 1.42).

A ServerApp can learn each SuperNode's public key in flwr 1.42: ``Grid.get_nodes()``
returns ``NodeInfo`` messages whose ``public_key`` the SuperLink fills from its link
state (in a deployment through the Runtime API's ``GetNodes``; in Flower's simulation
engine from the in-memory link state). What the key proves depends on the SuperLink:

- with node authentication on (``flower-superlink --enable-supernode-auth``, each
  SuperNode registered by ``flwr supernode register`` and started with
  ``--auth-supernode-private-key``), the key is the device's own and every request
  of that node is signed with it: the fingerprint ties an entry to a device;
- without it, a SuperNode makes up a new key pair each time it starts
  (``flwr.supernode``: ``generate_key_pairs()`` when no key is given), and the
  simulation engine registers random bytes: the fingerprint names one process only.

``NodeInfo`` says neither way which of the two holds (``owner_aid`` is Flower's no-op
account in both cases on a SuperLink without account authentication), so fairfl
records the fingerprint as ``node_key`` whenever the Grid gives one and documents that
it identifies a device only under node authentication; it cannot check that itself.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

logger = logging.getLogger(__name__)

#: Prefix of a ``node_key``: the hash names its algorithm.
NODE_KEY_PREFIX = "sha256:"


def public_key_fingerprint(public_key: bytes) -> str:
    """``sha256:<hex>`` of a SuperNode's public key bytes (as the link state holds them)."""
    return NODE_KEY_PREFIX + hashlib.sha256(public_key).hexdigest()


class NodeKeys:
    """Public-key fingerprints of the Grid's SuperNodes by node id, looked up as needed.

    Parameters
    ----------
    grid : Any
        A Flower ``Grid``. Without ``get_nodes`` (flwr < 1.42's ``Grid`` has one that
        yields node ids only) or without keys, :meth:`lookup` finds nothing.
    """

    def __init__(self, grid: Any):
        self.grid = grid
        self.known: dict[int, str] = {}
        #: Nodes the Grid listed without a public key (a node's key is fixed when it
        #: registers, so a keyless node stays keyless).
        self.keyless: set[int] = set()

    def refresh(self) -> None:
        """Ask the Grid for its nodes once and remember every key it gives."""
        get_nodes = getattr(self.grid, "get_nodes", None)
        if get_nodes is None:
            return
        try:
            nodes = list(get_nodes())
        except Exception as error:  # telemetry must not end the run
            logger.warning("telemetry: cannot read the SuperNodes' public keys: %s", error)
            return
        for info in nodes:
            key = getattr(info, "public_key", b"")
            if key:
                self.known[int(info.node_id)] = public_key_fingerprint(bytes(key))
            else:
                self.keyless.add(int(info.node_id))

    def lookup(self, node_ids: list[int]) -> dict[int, str]:
        """Fingerprints of ``node_ids``, refreshing once if one was never listed yet.

        A node listed without a key does not refresh again: ``get_nodes`` lists every
        node of the federation, and asking each round cost the in-process runner one
        ``NodeInfo`` per node per round (``benchmarks/bench_engine_scale.py``).
        """
        if any(node not in self.known and node not in self.keyless for node in node_ids):
            self.refresh()
        return {node: self.known[node] for node in node_ids if node in self.known}
