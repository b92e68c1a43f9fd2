"""The SecAgg+ records on the wire against ``proto/fairfl/v1/secagg.proto``.

A secure round of each client weight (FedAvg's n_k, q-FFL's h_k, TERM's tilt, AFL's
broadcast λ) runs in process; every stage's record, both ways, must hold exactly the
keys of its proto message, with values of the field's type (the share-keys instruction
adds one entry per neighbour: its node id -> [pk1, pk2]).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Message
from flwr.common import bytes_to_ndarray
from google.protobuf.descriptor import FieldDescriptor

from fairfl._proto.fairfl.v1 import secagg_pb2
from fairfl.secagg.protocol import CLIENT_PART, RECORD, Stage
from fairfl.simulation import run_inprocess

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "fairfl" / "v1" / "secagg.proto"
PYTHON_TYPE = {
    FieldDescriptor.TYPE_INT64: int,
    FieldDescriptor.TYPE_DOUBLE: float,
    FieldDescriptor.TYPE_STRING: str,
    FieldDescriptor.TYPE_BYTES: bytes,
    FieldDescriptor.TYPE_BOOL: bool,
}
#: Each stage's instruction and reply record.
MESSAGES = {
    Stage.SETUP: (secagg_pb2.SecAggSetup, secagg_pb2.SecAggSetupReply),
    Stage.SHARE_KEYS: (secagg_pb2.SecAggShareKeys, secagg_pb2.SecAggShareKeysReply),
    Stage.COLLECT_MASKED_VECTORS: (secagg_pb2.SecAggCollect, secagg_pb2.SecAggCollectReply),
    Stage.UNMASK: (secagg_pb2.SecAggUnmask, secagg_pb2.SecAggUnmaskReply),
}


def check_record(record, message, *, optional: bool = False) -> None:
    """``record``'s keys are ``message``'s json names (all of them unless ``optional``)."""
    fields = {f.json_name: f for f in message.DESCRIPTOR.fields}
    if optional:
        assert set(record) <= set(fields), sorted(set(record) - set(fields))
    else:
        assert set(record) == set(fields), (message.DESCRIPTOR.name, sorted(record))
    for key, value in record.items():
        field = fields[key]
        kind = PYTHON_TYPE[field.type]
        # protobuf >= 5.28 has is_repeated (label() is deprecated there); older, only label.
        repeated = getattr(field, "is_repeated", None)
        if repeated is None:
            repeated = field.label == FieldDescriptor.LABEL_REPEATED
        if repeated:
            assert isinstance(value, list) and all(type(v) is kind for v in value), key
        else:
            assert type(value) is kind, (key, value)


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX shell")
def test_committed_generated_code_is_up_to_date(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(PROTO),
        ],
        check=True,
    )
    committed = ROOT / "fairfl" / "_proto" / "fairfl" / "v1"
    for name in ("secagg_pb2.py", "secagg_pb2.pyi"):
        assert (tmp_path / "fairfl" / "v1" / name).read_text() == (committed / name).read_text()


@pytest.mark.parametrize("rule", ["fedavg", "qffl", "term", "afl"])
def test_every_stage_record_matches_the_proto(tmp_path, rule):
    # Copies as they travel: the driver takes the keys out of a setup reply it reads.
    seen: dict[str, list[tuple[int, dict, dict, dict]]] = {stage: [] for stage in MESSAGES}

    def capture(instruction: Message, reply: Message) -> Message:
        records = instruction.content.config_records
        if RECORD in records:
            part = dict(records[CLIENT_PART]) if CLIENT_PART in records else {}
            sent = (dict(records[RECORD]), dict(reply.content.config_records[RECORD]), part)
            seen[str(records[RECORD]["stage"])].append((instruction.metadata.dst_node_id, *sent))
        return reply

    config = {
        "strategy": rule,
        "num-partitions": 3,
        "num-server-rounds": 1,
        "local-epochs": 1,
        "secure-aggregation": "secagg+",
        "out-dir": str(tmp_path),
    }
    run_inprocess(config, reply_filter=capture)
    for stage, (sent, answered) in MESSAGES.items():
        assert len(seen[stage]) == 3, stage
        for node, record, reply, part in seen[stage]:
            if stage == Stage.SHARE_KEYS:
                neighbours = {k: record.pop(k) for k in list(record) if k.isdigit()}
                assert str(node) in neighbours
                for pair in neighbours.values():
                    assert isinstance(pair, list) and [type(k) for k in pair] == [bytes, bytes]
            check_record(record, sent)
            check_record(reply, answered)
            if stage == Stage.COLLECT_MASKED_VECTORS:
                check_record(part, secagg_pb2.SecAggClientPart, optional=True)
                assert "weight-kind" in part
                for payload in reply["masked_params"]:
                    assert bytes_to_ndarray(payload).dtype == np.uint32
