"""Wire contract v1: readers/writers against the .proto, and every violation named."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import MetricRecord, RecordDict
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from fairfl._proto.fairfl.v1 import contract_pb2
from fairfl.contract import (
    EVALUATE_METRICS,
    TRAIN_METRICS,
    ModelLayout,
    ReplyError,
    keys,
    read_evaluate_reply,
    read_train_reply,
    write_evaluate_reply,
    write_train_reply,
)
from tests.conftest import arrays_of, make_reply

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "fairfl" / "v1" / "contract.proto"

KIND_OF_PROTO = {
    FieldDescriptor.TYPE_INT64: "int",
    FieldDescriptor.TYPE_DOUBLE: "float",
}


def proto_table(message) -> dict[str, str]:
    table = {}
    for f in message.DESCRIPTOR.fields:
        kind = KIND_OF_PROTO[f.type]
        if f.label == FieldDescriptor.LABEL_REPEATED:
            kind = f"{kind}-list"
        table[f.json_name] = kind
    return table


def test_train_metrics_table_matches_proto():
    assert proto_table(contract_pb2.TrainMetrics) == {k: s.kind for k, s in TRAIN_METRICS.items()}


def test_evaluate_metrics_table_matches_proto():
    assert proto_table(contract_pb2.EvaluateMetrics) == {
        k: s.kind for k, s in EVALUATE_METRICS.items()
    }


def test_train_config_keys_match_proto():
    names = {f.json_name for f in contract_pb2.TrainConfig.DESCRIPTOR.fields}
    assert names == {
        keys.SERVER_ROUND,
        keys.LR,
        keys.LOCAL_EPOCHS,
        keys.BATCH_SIZE,
        keys.WANT_ACTIVATION,
        keys.WANT_ACCURACY,
        keys.WANT_GROUP_COUNTS,
        keys.WANT_ACCURACY_AFTER_TRAINING,
    }
    records = {f.json_name for f in contract_pb2.TrainReply.DESCRIPTOR.fields}
    assert records == {keys.ARRAYS, keys.METRICS, keys.GRADIENT}
    assert {f.json_name for f in contract_pb2.TrainInstruction.DESCRIPTOR.fields} == {
        keys.ARRAYS,
        keys.CONFIG,
    }


def test_writers_output_parses_as_the_proto_messages():
    content = write_train_reply(
        arrays_of([np.zeros(2, np.float32)]),
        num_examples=7,
        loss_before_training=0.4,
        acc_before_training=0.75,
        acc_after_training=0.875,
        train_loss=0.5,
        partition_id=3,
        activation=[0.1, 0.2],
        qffl_h=2.0,
        rcfl_eta=0.3,
    )
    metrics = dict(content.metric_records[keys.METRICS])
    parsed = json_format.ParseDict(metrics, contract_pb2.TrainMetrics())  # unknown key raises
    assert parsed.num_examples == 7 and parsed.partition_id == 3
    assert json_format.MessageToDict(parsed) == {
        **metrics,
        keys.NUM_EXAMPLES: "7",  # proto3 JSON writes int64 as a string
        keys.PARTITION_ID: "3",
    }
    evaluation = write_evaluate_reply(num_examples=4, eval_loss=0.2, eval_acc=0.75)
    json_format.ParseDict(dict(evaluation[keys.METRICS]), contract_pb2.EvaluateMetrics())


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX shell")
def test_committed_generated_code_is_up_to_date(tmp_path):
    grpc_tools = pytest.importorskip("grpc_tools")
    assert grpc_tools
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
    for name in ("contract_pb2.py", "contract_pb2.pyi"):
        assert (tmp_path / "fairfl" / "v1" / name).read_text() == (committed / name).read_text()


LAYOUT = ModelLayout(keys=("0", "1"), shapes=((2, 2), (2,)), dtypes=("float32", "float32"))
GOOD_ARRAYS = [np.ones((2, 2), np.float32), np.zeros(2, np.float32)]
GOOD_METRICS = {keys.NUM_EXAMPLES: 10, keys.LOSS_BEFORE_TRAINING: 0.7, keys.PARTITION_ID: 2}


def test_good_train_reply_is_read():
    reply = read_train_reply(
        make_reply(5, GOOD_ARRAYS, GOOD_METRICS), LAYOUT, (keys.LOSS_BEFORE_TRAINING,)
    )
    assert reply.node_id == 5 and reply.num_examples == 10 and reply.partition_id == 2
    assert reply.metrics[keys.LOSS_BEFORE_TRAINING] == pytest.approx(0.7)
    np.testing.assert_array_equal(reply.arrays[0], GOOD_ARRAYS[0])


BAD_TRAIN_REPLIES = [
    # (description, arrays, metrics, required, expected field, reason fragment)
    (
        "nan weight",
        [np.full((2, 2), np.nan, np.float32), GOOD_ARRAYS[1]],
        GOOD_METRICS,
        (),
        "arrays['0']",
        "contains nan",
    ),
    (
        "inf weight",
        [GOOD_ARRAYS[0], np.array([np.inf, 0], np.float32)],
        GOOD_METRICS,
        (),
        "arrays['1']",
        "contains inf",
    ),
    (
        "wrong shape",
        [np.ones((3, 2), np.float32), GOOD_ARRAYS[1]],
        GOOD_METRICS,
        (),
        "arrays['0']",
        "has shape",
    ),
    (
        "wrong dtype",
        [np.ones((2, 2), np.float64), GOOD_ARRAYS[1]],
        GOOD_METRICS,
        (),
        "arrays['0']",
        "has dtype",
    ),
    ("missing key", [GOOD_ARRAYS[0]], GOOD_METRICS, (), "arrays", "missing ['1']"),
    (
        "zero count",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.NUM_EXAMPLES: 0},
        (),
        "metrics['num-examples']",
        "must be > 0",
    ),
    (
        "negative count",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.NUM_EXAMPLES: -3},
        (),
        "metrics['num-examples']",
        "must be > 0",
    ),
    (
        "float count",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.NUM_EXAMPLES: 2.5},
        (),
        "metrics['num-examples']",
        "must be an int",
    ),
    (
        "missing count",
        GOOD_ARRAYS,
        {keys.TRAIN_LOSS: 0.1},
        (),
        "metrics['num-examples']",
        "is missing",
    ),
    (
        "missing loss",
        GOOD_ARRAYS,
        {keys.NUM_EXAMPLES: 3},
        (keys.TRAIN_LOSS,),
        "metrics['train_loss']",
        "is missing",
    ),
    (
        "nan loss",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.TRAIN_LOSS: float("nan")},
        (),
        "metrics['train_loss']",
        "is nan",
    ),
    (
        "negative loss",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.TRAIN_LOSS: -1.0},
        (),
        "metrics['train_loss']",
        "must be >= 0",
    ),
    (
        "list loss",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.TRAIN_LOSS: [1.0]},
        (),
        "metrics['train_loss']",
        "must be a float",
    ),
    (
        "zero h",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.QFFL_H: 0.0},
        (),
        "metrics['qffl-h']",
        "must be > 0",
    ),
    (
        "inf activation",
        GOOD_ARRAYS,
        {**GOOD_METRICS, keys.ACTIVATION: [1.0, float("inf")]},
        (),
        "metrics['activation']",
        "is inf",
    ),
]


@pytest.mark.parametrize(
    ("arrays", "metrics", "required", "field", "reason"),
    [row[1:] for row in BAD_TRAIN_REPLIES],
    ids=[row[0] for row in BAD_TRAIN_REPLIES],
)
def test_bad_train_reply_names_node_and_field(arrays, metrics, required, field, reason):
    with pytest.raises(ReplyError, match="node 9") as info:
        read_train_reply(make_reply(9, arrays, metrics), LAYOUT, required)
    assert info.value.field == field
    assert reason in info.value.reason


def test_structural_violations_are_named():
    with pytest.raises(ReplyError, match=r"node 4: error reply is an error: boom"):
        read_train_reply(make_reply(4, error="boom"), LAYOUT)
    with pytest.raises(ReplyError, match=r"content\['arrays'\] is missing"):
        read_train_reply(make_reply(4, None, GOOD_METRICS), LAYOUT)
    with pytest.raises(ReplyError, match=r"content\['metrics'\] is missing"):
        read_train_reply(make_reply(4, GOOD_ARRAYS, None), LAYOUT)


def test_absurd_magnitude_rejected_when_bounded():
    arrays = [np.full((2, 2), 1e6, np.float32), GOOD_ARRAYS[1]]
    read_train_reply(make_reply(1, arrays, GOOD_METRICS), LAYOUT)  # unbounded: accepted
    with pytest.raises(ReplyError, match=r"\|value\| 1e\+06 > 1000"):
        read_train_reply(make_reply(1, arrays, GOOD_METRICS), LAYOUT, max_abs_weight=1e3)


def test_evaluate_reply_read_and_violations():
    good = {keys.NUM_EXAMPLES: 4, keys.EVAL_LOSS: 0.3, keys.EVAL_ACC: 0.5, keys.PARTITION_ID: 1}
    reply = read_evaluate_reply(make_reply(3, None, good))
    assert (reply.node_id, reply.num_examples, reply.eval_acc, reply.partition_id) == (3, 4, 0.5, 1)
    with pytest.raises(ReplyError, match=r"metrics\['eval_acc'\] must be <= 1"):
        read_evaluate_reply(make_reply(3, None, {**good, keys.EVAL_ACC: 1.5}))
    with pytest.raises(ReplyError, match=r"metrics\['eval_loss'\] is missing"):
        read_evaluate_reply(make_reply(3, None, {keys.NUM_EXAMPLES: 4, keys.EVAL_ACC: 0.5}))


def test_writer_reader_round_trip():
    content = write_train_reply(
        arrays_of(GOOD_ARRAYS), num_examples=10, loss_before_training=0.6, train_loss=0.7
    )
    reply = read_train_reply(make_reply(2, content=content), LAYOUT, (keys.LOSS_BEFORE_TRAINING,))
    assert reply.metrics == {
        keys.NUM_EXAMPLES: 10,
        keys.LOSS_BEFORE_TRAINING: 0.6,
        keys.TRAIN_LOSS: 0.7,
    }
    assert isinstance(content[keys.METRICS], MetricRecord)


def test_reader_takes_flowers_record_keys_and_a_loss_key_of_the_apps():
    # weighted_by_key / arrayrecord_key / train_loss_key of a strategy built with others.
    content = RecordDict(
        {
            "weights": arrays_of(GOOD_ARRAYS),
            "metrics": MetricRecord({"n": 4, "my-loss": 0.25, "other": 1.0}),
        }
    )
    reply = read_train_reply(
        make_reply(3, content=content),
        LAYOUT,
        ("my-loss",),
        loss_key="my-loss",
        weight_key="n",
        arrays_key="weights",
    )
    assert reply.num_examples == 4
    assert reply.metrics == {"n": 4, "my-loss": 0.25}  # unknown app keys are not kept
    with pytest.raises(ReplyError, match=r"metrics\['my-loss'\] must be >= 0, got -1"):
        bad = RecordDict(
            {"weights": arrays_of(GOOD_ARRAYS), "metrics": MetricRecord({"n": 4, "my-loss": -1.0})}
        )
        read_train_reply(make_reply(3, content=bad), LAYOUT, loss_key="my-loss", weight_key="n")
    with pytest.raises(ReplyError, match=r"metrics\['n'\] is missing") as info:
        read_train_reply(make_reply(3, GOOD_ARRAYS, GOOD_METRICS), LAYOUT, weight_key="n")
    assert info.value.missing_key == "n"
    with pytest.raises(ReplyError, match=r"content\['weights'\] is missing"):
        read_train_reply(make_reply(3, GOOD_ARRAYS, GOOD_METRICS), LAYOUT, arrays_key="weights")
    evaluation = {"n": 4, keys.EVAL_LOSS: 0.3, keys.EVAL_ACC: 0.5}
    assert read_evaluate_reply(make_reply(3, None, evaluation), weight_key="n").num_examples == 4
