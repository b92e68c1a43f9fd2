"""SuperNode key fingerprints are looked up once per node, not once per round."""

from __future__ import annotations

import hashlib

from flwr.proto.node_pb2 import NodeInfo

from fairfl.telemetry.nodes import NodeKeys


class CountingGrid:
    """A Grid stand-in whose get_nodes() lists ``nodes`` (id -> key) and counts calls."""

    def __init__(self, nodes: dict[int, bytes]) -> None:
        self.nodes = nodes
        self.calls = 0

    def get_nodes(self) -> list[NodeInfo]:
        self.calls += 1
        return [NodeInfo(node_id=node, public_key=key) for node, key in self.nodes.items()]


def test_a_node_listed_without_a_key_does_not_list_the_federation_again():
    grid = CountingGrid({1: b"key of 1", 2: b""})
    keys = NodeKeys(grid)
    expected = {1: "sha256:" + hashlib.sha256(b"key of 1").hexdigest()}
    assert keys.lookup([1, 2]) == expected
    assert keys.lookup([1, 2]) == expected  # the next round: node 2 is known keyless
    assert grid.calls == 1
    grid.nodes[3] = b"key of 3"  # a node that joins later is asked about once
    assert keys.lookup([2, 3]) == {3: "sha256:" + hashlib.sha256(b"key of 3").hexdigest()}
    assert keys.lookup([3]) == {3: "sha256:" + hashlib.sha256(b"key of 3").hexdigest()}
    assert grid.calls == 2
