"""Run by tests/project/test_packaging.py in a fresh venv holding fairfl's wheel and core deps only.

Imports every name of ``fairfl.strategies.__all__``, checks that no client, data or report
package is installed or loaded, and runs one ``configure_train`` + ``aggregate_train`` of
every registered rule on hand-made replies: each must give a finite new model. Only the
standard library, numpy, flwr and fairfl are used (the venv has no pytest).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from unittest.mock import Mock

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

import fairfl.strategies
from fairfl._compat import server_task_identity
from fairfl.contract import keys, write_train_reply
from fairfl.strategies.registry import STRATEGIES, build_strategy

#: Packages of the ``client``, ``data`` and ``report`` extras a server must not need.
HEAVY = ("torch", "torchvision", "sklearn", "pandas", "matplotlib", "flwr_datasets")
NODES = (1001, 1002, 1003, 1004)
SHAPES = {"fc.weight": (6, 5), "fc.bias": (5,)}
ACTIVATION_DIM = 8


def reply(node_id: int, content: RecordDict) -> Mock:
    """A train reply from ``node_id`` (a real Message needs a run)."""
    message = Mock(spec=Message)
    message.metadata.src_node_id = node_id
    message.has_error.return_value = False
    message.content = content
    return message


def replies(
    global_np: dict[str, np.ndarray], rng: np.random.Generator, arrays_key: str
) -> list[Mock]:
    """One reply per node: a model near ``global_np`` and every metric some rule reads.

    The arrays go under ``arrays_key``: the rule's ``reply_arrays_key`` (q-FedSGD reads
    them as the gradient).
    """
    out = []
    for partition_id, node_id in enumerate(NODES):
        local = ArrayRecord(
            {
                k: Array(v + (rng.normal(size=v.shape) * 0.1).astype(np.float32))
                for k, v in global_np.items()
            }
        )
        content = write_train_reply(
            local,
            num_examples=int(rng.integers(10, 100)),
            loss_before_training=float(rng.uniform(0.2, 3.0)),
            acc_before_training=float(rng.uniform(0.0, 1.0)),
            acc_after_training=float(rng.uniform(0.0, 1.0)),
            partition_id=partition_id,
            activation=(rng.normal(size=ACTIVATION_DIM) + partition_id % 2).tolist(),
            rcfl_eta=float(rng.uniform(0.0, 1.0)),
            # FairFed's counts: attribute value x label x prediction (2 x 2 x 2).
            group_counts=[int(c) for c in rng.integers(1, 10, size=8)],
        )
        if arrays_key != keys.ARRAYS:
            content[arrays_key] = content.pop(keys.ARRAYS)
        out.append(reply(node_id, content))
    return out


def one_round(name: str, rng: np.random.Generator) -> None:
    """Build rule ``name`` from its defaults, configure and aggregate one round."""
    run_config = {**STRATEGIES[name].defaults(), "lr": 0.1}
    strategy = build_strategy(name, run_config, min_available_nodes=1)
    global_np = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    global_record = ArrayRecord({k: Array(v) for k, v in global_np.items()})
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(NODES)
    with server_task_identity(1):
        sent = list(strategy.configure_train(1, global_record, ConfigRecord({"lr": 0.1}), grid))
    assert sent, f"{name}: configure_train sent nothing"
    arrays, _ = strategy.aggregate_train(1, replies(global_np, rng, strategy.reply_arrays_key))
    assert isinstance(arrays, ArrayRecord), f"{name}: no new model ({arrays!r})"
    new = {k: a.numpy() for k, a in arrays.items()}
    assert new.keys() == global_np.keys(), f"{name}: keys {sorted(new)}"
    for key, value in new.items():
        assert value.shape == global_np[key].shape, f"{name}: {key} shape {value.shape}"
        assert np.all(np.isfinite(value)), f"{name}: {key} not finite"
    assert any(not np.array_equal(new[k], global_np[k]) for k in new), f"{name}: model unchanged"


def main() -> int:
    logging.getLogger("flwr").setLevel(logging.WARNING)  # Flower logs every sampling
    exported = {name: getattr(fairfl.strategies, name) for name in fairfl.strategies.__all__}
    missing = {spec.name for spec in STRATEGIES.values() if spec.strategy not in exported.values()}
    assert not missing, f"registered but not in fairfl.strategies.__all__: {sorted(missing)}"
    installed = [name for name in HEAVY if importlib.util.find_spec(name) is not None]
    assert not installed, f"installed with the core dependencies: {installed}"
    rng = np.random.default_rng(0)
    for name in STRATEGIES:
        one_round(name, rng)
    loaded = [name for name in HEAVY if name in sys.modules]
    assert not loaded, f"loaded: {loaded}"
    print(f"fairfl from {fairfl.__file__}: {len(exported)} names, {len(STRATEGIES)} rules ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
