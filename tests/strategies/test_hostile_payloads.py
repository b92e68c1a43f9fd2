"""One hostile device never ends a run, under any registered rule (issue 21, item 1).

Hypothesis builds rounds in which honest replies sit beside hostile ones: array payloads
that are random bytes, truncated or oversized ``.npy`` headers, object (pickled) and
structured dtypes, shapes that are zero-size, huge or not what the header says, unknown
serialisation types, and metrics of every type in the wrong place. For each round:

- no exception escapes ``aggregate_train``;
- every hostile reply is dropped, with a reason that names the field;
- the new global model is bit-identical to the one the honest replies alone give;
- a pickled payload is never unpickled (its ``__reduce__`` would create a file).

Each rule sees at least ``PAYLOADS_PER_RULE`` hostile payloads, counted in its own test,
and every kind of hostile array among them. The suite sends 400 per rule (about 13,000 in
all, every kind ~20 times per rule); a longer fuzz sets ``FAIRFL_HOSTILE_PAYLOADS`` (2,000
per rule took 28 % of the unit phase's time: docs/site/howto/testing.md).

The extra reports the rules read (issue 47: ``group-counts``, ``activation``,
``acc-before-training``, ``rcfl-eta``, ``qffl-h``, and the loss and count they weigh)
get hostile values of every kind, in range and out of it (int64-wrapping and all-zero
counts, bounds, subnormals, NaN/Inf, huge ints), under every rule and every
``ditto+<rule>`` pairing: no exception leaves the round, honest replies are kept and
the model stays finite. Every hostile reply sent is counted; the session's last line
says how many were tried and how many rounds raised (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import pickle
import struct
import tempfile
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.strategies.ditto import DittoPersonalisation
from fairfl.strategies.registry import STRATEGIES
from tests.conftest import make_reply
from tests.strategies.test_bad_replies_all_rules import (
    HONEST_NODES,
    honest_arrays,
    honest_metrics,
    honest_replies,
    run_round,
)

PAYLOADS_PER_RULE = int(os.environ.get("FAIRFL_HOSTILE_PAYLOADS", "400"))
PICKLE_MARKER = Path(tempfile.gettempdir()) / f"fairfl-unpickled-{os.getpid()}"


class Exploit:
    """Unpickling this creates ``PICKLE_MARKER``: proof that a payload was unpickled."""

    def __reduce__(self):
        return (Path.touch, (PICKLE_MARKER,))


def npy_bytes(value: np.ndarray, *, allow_pickle: bool = False) -> bytes:
    buffer = BytesIO()
    np.save(buffer, value, allow_pickle=allow_pickle)
    return buffer.getvalue()


def npy_with_header(header: str, body: bytes = b"") -> bytes:
    """A ``.npy`` v1.0 file whose header says anything we like."""
    text = header.encode("latin1")
    padding = 64 - (10 + len(text) + 1) % 64
    text += b" " * padding + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + body


def raw_array(data: bytes, *, dtype: str = "float32", shape=(3, 4), stype="numpy.ndarray"):
    return Array(dtype=dtype, shape=tuple(shape), stype=stype, data=data)


#: The kinds of hostile array payload; every rule's test sees each of them.
ARRAY_KINDS = (
    "random-bytes",
    "truncated",
    "huge-header-shape",
    "header-shape-mismatch",
    "zero-size",
    "object-dtype",
    "pickled-exploit",
    "structured-dtype",
    "header-dtype-mismatch",
    "big-endian",
    "declared-huge-shape",
    "unknown-stype",
    "bad-magic",
    "npy-v3-header",
    "trailing-bytes",
)


@st.composite
def hostile_array(draw):
    """One hostile ``Array`` for key ``w`` (declared float32 (3, 4) unless said)."""
    honest = npy_bytes(np.ones((3, 4), np.float32))
    kind = draw(st.sampled_from(ARRAY_KINDS))
    if kind == "random-bytes":
        array = raw_array(draw(st.binary(max_size=200)))
    elif kind == "truncated":
        array = raw_array(honest[: draw(st.integers(0, len(honest) - 1))])
    elif kind == "huge-header-shape":
        dim = draw(st.sampled_from([10**6, 2**31, 2**62, 10**18]))
        header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({dim}, {dim}), }}"
        array = raw_array(npy_with_header(header, b"\0" * 48))
    elif kind == "header-shape-mismatch":
        shape = draw(st.sampled_from([(4, 3), (12,), (3, 4, 1), ()]))
        array = raw_array(npy_bytes(np.ones(shape, np.float32)))
    elif kind == "zero-size":
        array = raw_array(npy_bytes(np.ones((0, 4), np.float32)), shape=(0, 4))
    elif kind == "object-dtype":
        array = raw_array(npy_bytes(np.array([1.0, "x", None], dtype=object), allow_pickle=True))
    elif kind == "pickled-exploit":
        value = np.empty((3, 4), dtype=object)
        value[0, 0] = Exploit()
        array = raw_array(npy_bytes(value, allow_pickle=True))
    elif kind == "structured-dtype":
        value = np.zeros((3, 4), dtype=[("a", "<f2"), ("b", "<f2")])
        array = raw_array(npy_bytes(value))
    elif kind == "header-dtype-mismatch":
        dtype = draw(st.sampled_from(["<f8", "<f2", "<i4", "|u1", "<c8", "|b1"]))
        array = raw_array(npy_bytes(np.ones((3, 4), dtype)))
    elif kind == "big-endian":
        array = raw_array(npy_bytes(np.ones((3, 4), ">f4")))
    elif kind == "declared-huge-shape":
        array = raw_array(honest, shape=(2**40, 2**40))
    elif kind == "unknown-stype":
        array = raw_array(honest, stype=draw(st.sampled_from(["torch.Tensor", "", "pickle"])))
    elif kind == "bad-magic":
        array = raw_array(b"\x93NUMPX" + honest[6:])
    elif kind == "npy-v3-header":
        array = raw_array(honest[:6] + b"\x03\x00" + honest[8:])
    else:  # trailing-bytes
        array = raw_array(honest + draw(st.binary(min_size=1, max_size=16)))
    return kind, array


WRONG_METRIC_VALUES = st.one_of(
    st.just(float("nan")),
    st.just(float("inf")),
    st.just(-float("inf")),
    st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False),
    st.lists(st.floats(allow_nan=False), min_size=0, max_size=3),
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=3),
)


@st.composite
def hostile_reply(draw, node: int, rng_seed: int):
    """A reply with one hostile part; returns (kind, reply)."""
    rng = np.random.default_rng(rng_seed)
    arrays = honest_arrays(rng)
    metrics = honest_metrics(rng, node)
    where = draw(st.sampled_from(["array"] * 4 + ["metric", "records"]))
    if where == "array":
        kind, array = draw(hostile_array())
        record = ArrayRecord({"w": array, "b": Array(arrays["b"])})
        return kind, make_reply(node, record, metrics)
    if where == "metric":
        key = draw(st.sampled_from([keys.NUM_EXAMPLES, keys.LOSS_BEFORE_TRAINING]))
        value = draw(WRONG_METRIC_VALUES | st.just(0) | st.integers(max_value=-1))
        if key == keys.LOSS_BEFORE_TRAINING and isinstance(value, int):
            value = [value]  # an int loss is a valid float; a list of ints is not
        metrics[key] = value
        record = ArrayRecord({k: Array(v) for k, v in arrays.items()})
        return f"metric-{key}", make_reply(node, record, metrics)
    # Records of the wrong type under Flower's names.
    content = RecordDict()
    swap = draw(st.sampled_from(["metrics-as-config", "arrays-as-metrics"]))
    if swap == "metrics-as-config":
        content["arrays"] = ArrayRecord({k: Array(v) for k, v in arrays.items()})
        content["metrics"] = ConfigRecord({k: str(v) for k, v in metrics.items()})
    else:
        content["arrays"] = MetricRecord({"w": 1.0, "b": 2.0})
        content["metrics"] = MetricRecord(metrics)
    return swap, make_reply(node, content=content)


def as_bytes(arrays):
    return {k: v.numpy().tobytes() for k, v in arrays.items()}


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_hostile_payloads_are_dropped_and_change_nothing(rule, hostile_count):
    # The property runs inside the test that counts its payloads, so the count holds
    # whatever the order the tests run in (or the test alone).
    seen = 0
    kinds: set[str] = set()

    @settings(
        max_examples=PAYLOADS_PER_RULE // 20 + 5,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1), count=st.integers(20, 24))
    def hostile_payloads_are_dropped_and_change_nothing(data, seed, count):
        nonlocal seen
        rng = np.random.default_rng(seed)
        honest = honest_replies(rng)
        hostile_nodes = range(100, 100 + count)
        hostile = {n: data.draw(hostile_reply(n, seed + n)) for n in hostile_nodes}
        nodes = [*HONEST_NODES, *hostile_nodes]
        # Same sampling in both rounds: the same nodes are asked, only the replies differ.
        _, baseline = run_round(rule, honest, nodes)
        mixed = honest + [reply for _, reply in hostile.values()]
        order = rng.permutation(len(mixed))

        hostile_count["tried"] += count
        try:
            strategy, arrays = run_round(rule, [mixed[i] for i in order], nodes)
        except Exception:
            hostile_count["crashes"] += 1
            raise

        record = strategy.train_records[1]
        for node, (kind, _) in hostile.items():
            assert node in record.dropped, f"{rule}: {kind} reply from node {node} was accepted"
            reason = record.dropped[node]
            assert any(part in reason for part in ("arrays", "metrics", "content")), (kind, reason)
            seen += 1
            kinds.add(kind)
        assert set(HONEST_NODES) <= set(record.accepted), record.dropped
        assert baseline is not None and arrays is not None
        assert as_bytes(arrays) == as_bytes(baseline), f"{rule}: hostile replies changed the model"
        assert not PICKLE_MARKER.exists(), "a pickled payload was unpickled"

    hostile_payloads_are_dropped_and_change_nothing()
    assert seen >= PAYLOADS_PER_RULE, (rule, seen)
    assert set(ARRAY_KINDS) <= kinds, (rule, sorted(set(ARRAY_KINDS) - kinds))


#: Every rule and every ``ditto+<rule>`` pairing (the registry lists the rules only).
RULES_AND_PAIRINGS = sorted(
    [
        *STRATEGIES,
        *(
            f"ditto+{name}"
            for name, spec in STRATEGIES.items()
            if not issubclass(spec.strategy, DittoPersonalisation)
        ),
    ]
)
INT64_MAX = 2**63 - 1
#: Counts that wrapped FairFed's int64 sums or gave it NaN gaps, and the bounds.
EDGE_COUNTS = [0, 1, 10**9, 10**9 + 1, 2**31, 2**62, INT64_MAX, 2**64, 10**30]
EDGE_FLOATS = [
    0.0,
    -0.0,
    5e-324,
    1.0,
    1.0 + 2**-52,
    1e6,
    1e6 * (1 + 2**-52),
    1e300,
    1.7976931348623157e308,
]
ANY_FLOAT = (
    st.floats() | st.sampled_from(EDGE_FLOATS) | st.sampled_from(EDGE_FLOATS).map(lambda v: -v)
)
ANY_INT = st.integers(-(2**70), 2**70) | st.sampled_from(EDGE_COUNTS)
#: Hostile values of each extra report a rule reads (MetricRecord's types only: what can
#: arrive).
HOSTILE_REPORTS = {
    keys.GROUP_COUNTS: st.one_of(
        st.lists(st.sampled_from(EDGE_COUNTS), min_size=8, max_size=8),
        st.lists(ANY_INT, min_size=1, max_size=16),
        st.lists(ANY_FLOAT, min_size=1, max_size=8),
        ANY_INT,
    ),
    keys.ACTIVATION: st.one_of(
        st.integers(1, 9).flatmap(lambda n: st.lists(ANY_FLOAT, min_size=n, max_size=n)),
        st.lists(st.sampled_from([-1e6, 1e6, 5e-324]), min_size=5, max_size=5),
        st.lists(ANY_INT, min_size=1, max_size=6),
        ANY_FLOAT,
    ),
    keys.ACC_BEFORE_TRAINING: ANY_FLOAT | ANY_INT,
    keys.RCFL_ETA: ANY_FLOAT | ANY_INT | st.sampled_from([-1e6, 1e6]),
    keys.QFFL_H: ANY_FLOAT | ANY_INT | st.sampled_from([1e300, 5e-324, 1e-300]),
    keys.LOSS_BEFORE_TRAINING: ANY_FLOAT | ANY_INT,
    keys.NUM_EXAMPLES: ANY_INT,
}
REPORTS_PER_RULE = 100


@st.composite
def hostile_report(draw, node: int, rng_seed: int):
    """An honest reply but for one extra report; returns (key, value, reply)."""
    rng = np.random.default_rng(rng_seed)
    metrics = honest_metrics(rng, node)
    key = draw(st.sampled_from(sorted(HOSTILE_REPORTS)))
    value = draw(HOSTILE_REPORTS[key])
    metrics[key] = value
    arrays = ArrayRecord({k: Array(v) for k, v in honest_arrays(rng).items()})
    return key, value, make_reply(node, arrays, metrics)


def must_drop(rule: str, key: str, value: object) -> bool:
    """Whether a value is one no rule may use: not finite, or counts FairFed cannot sum."""
    values = value if isinstance(value, list) else [value]
    if not all(np.isfinite(float(v)) for v in values if isinstance(v, float)):
        return True
    if key == keys.GROUP_COUNTS and rule.removeprefix("ditto+") == "fairfed":
        is_counts = isinstance(value, list) and len(value) == 8
        is_counts = is_counts and all(isinstance(v, int) and v >= 0 for v in values)
        return not (is_counts and 1 <= sum(values) <= 10**9)  # type: ignore[arg-type]
    return False


@pytest.mark.parametrize("rule", RULES_AND_PAIRINGS)
def test_hostile_reports_never_end_a_round(rule, hostile_count):
    seen = 0

    @settings(
        max_examples=REPORTS_PER_RULE // 6 + 3,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1), count=st.integers(6, 9))
    def hostile_reports_never_end_a_round(data, seed, count):
        nonlocal seen
        rng = np.random.default_rng(seed)
        hostile = {}
        for node in range(100, 100 + count):
            try:
                hostile[node] = data.draw(hostile_report(node, seed + node))
            except TypeError:  # a value MetricRecord refuses cannot arrive
                continue
        replies = honest_replies(rng) + [reply for _, _, reply in hostile.values()]
        order = rng.permutation(len(replies))
        hostile_count["tried"] += len(hostile)
        try:
            strategy, arrays = run_round(
                rule, [replies[i] for i in order], [*HONEST_NODES, *hostile]
            )
        except Exception:
            hostile_count["crashes"] += 1
            raise

        record = strategy.train_records[1]
        for node, (key, value, _) in hostile.items():
            if node in record.dropped:
                assert key in record.dropped[node], (key, value, record.dropped[node])
            else:
                assert not must_drop(rule, key, value), f"{rule}: {key}={value!r} was accepted"
            seen += 1
        assert set(HONEST_NODES) <= set(record.accepted), record.dropped
        assert arrays is not None
        assert all(np.isfinite(a.numpy()).all() for a in arrays.values())

    hostile_reports_never_end_a_round()
    assert seen >= REPORTS_PER_RULE, (rule, seen)


def test_a_fortran_order_payload_is_read_as_the_same_values():
    # A transposed tensor is saved in Fortran order by np.save: an honest client may
    # send one. It is decoded to the same values as the C-order payload.
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    fortran = raw_array(npy_bytes(np.asfortranarray(value)))
    c_order = raw_array(npy_bytes(value))
    metrics = {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: 1.0}
    bias = Array(np.zeros(4, np.float32))
    _, from_fortran = run_round(
        "fedavg", [make_reply(1, ArrayRecord({"w": fortran, "b": bias}), metrics)], [1]
    )
    _, from_c = run_round(
        "fedavg", [make_reply(1, ArrayRecord({"w": c_order, "b": bias}), metrics)], [1]
    )
    assert as_bytes(from_fortran) == as_bytes(from_c)


def test_pickle_marker_works():
    # The exploit really does create the marker when unpickled: the check above can fail.
    pickle.loads(pickle.dumps(Exploit()))
    assert PICKLE_MARKER.exists()
    PICKLE_MARKER.unlink()
