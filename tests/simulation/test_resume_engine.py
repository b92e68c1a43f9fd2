"""Resume through Flower's simulation engine is bit-identical for every stateful rule.

The engine gives the SuperNodes new node ids in every run, so a resumed run only ends
where the uninterrupted one does if per-client state is keyed by the partition id
(fairfl.contract.clients) and sums run in partition order. Per rule: a 4-round run, a
2-round run, and that run resumed for rounds 3 and 4, all through ``flwr run``
(scripts/flwr_sim.py), ``WORKERS`` at a time: they mostly wait on Ray and the SuperLink,
not on the CPU. ``flwr run`` packs the app
from a copy holding only what it needs (pyproject.toml, README.md, fairfl/, the
launcher): a smaller package, and no race with files changing elsewhere in the checkout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from fairfl.server.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fairfl.simulation.engine import toml_overrides

ROOT = Path(__file__).resolve().parents[2]
SUPERNODES = 3
#: Every rule with per-client or cross-round state, in a setting that exercises it.
#: (VRed and Semi-VRed keep none: their resume is pinned in process, in
#: tests/server/test_checkpoint_resume.py, and they cost this test 40 % of its time.)
STATEFUL_RULES = {
    "afl": {"afl-lambda-lr": 0.5},
    "rcfl": {"rcfl-sampling": "with-replacement", "rcfl-alpha-rule": "uniform-cap"},
    "equitable": {"equitable-scope": "registry", "equitable-num-clusters": 2},
}
BASE = {"num-partitions": SUPERNODES, "local-epochs": 1, "model": "logreg", "seed": 4}


def app_copy(folder: Path) -> Path:
    """The Flower app (pyproject.toml, README.md, fairfl/, the launcher) in ``folder``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "fairfl", folder / "fairfl", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "scripts/flwr_sim.py"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)
    return folder


def flwr_sim(app: Path, config: dict, flwr_home: Path) -> str:
    """Run one federation through the engine; return its output if it failed, else ""."""
    completed = subprocess.run(
        [
            sys.executable,
            str(app / "scripts" / "flwr_sim.py"),
            "--supernodes",
            str(SUPERNODES),
            "--flwr-home",
            str(flwr_home),
            # One ClientApp actor per run (another is one more process importing torch).
            "--init-arg",
            "num_cpus=1",
            "-c",
            toml_overrides(config),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if completed.returncode == 0:
        return ""
    return f"exit {completed.returncode}\n{completed.stdout[-6000:]}{completed.stderr[-6000:]}"


#: Engine runs at a time: each mostly waits on Ray and the SuperLink.
WORKERS = 3


def rule_runs(app: Path, root: Path, rule: str) -> list[str]:
    """A 2-round run, then the same resumed to round 4: the errors, if any."""
    config = {**BASE, **STATEFUL_RULES[rule], "strategy": rule}
    out = root / rule / "resumed"
    half = flwr_sim(
        app, {**config, "num-server-rounds": 2, "out-dir": str(out)}, root / rule / "h1"
    )
    if half:
        return [half]
    resume = {
        **config,
        "num-server-rounds": 4,
        "out-dir": str(out),
        "resume-from": str(out / CHECKPOINT_FILE),
    }
    return [e for e in [flwr_sim(app, resume, root / rule / "h2")] if e]


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory):
    """Per rule: (whole run's folder, resumed run's folder, errors)."""
    root = tmp_path_factory.mktemp("resume-engine")
    app = app_copy(root / "app")
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        resumed = {rule: pool.submit(rule_runs, app, root, rule) for rule in STATEFUL_RULES}
        whole = {
            rule: pool.submit(
                flwr_sim,
                app,
                {
                    **BASE,
                    **keys,
                    "strategy": rule,
                    "num-server-rounds": 4,
                    "out-dir": str(root / rule / "whole"),
                },
                root / rule / "h0",
            )
            for rule, keys in STATEFUL_RULES.items()
        }
        errors = {
            rule: [e for e in [whole[rule].result()] if e] + resumed[rule].result()
            for rule in STATEFUL_RULES
        }
    return {rule: (root / rule / "whole", root / rule / "resumed", errors[rule]) for rule in errors}


def lines(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "rounds.jsonl").read_text().splitlines()]


@pytest.mark.integration
@pytest.mark.parametrize("rule", sorted(STATEFUL_RULES))
def test_resume_through_the_engine_is_bit_identical(engine_runs, rule):
    whole, resumed, errors = engine_runs[rule]
    assert not errors, "\n".join(errors)
    whole_model = np.load(whole / "final_model.npz")
    resumed_model = np.load(resumed / "final_model.npz")
    assert sorted(resumed_model.files) == sorted(whole_model.files)
    for key in whole_model.files:
        np.testing.assert_array_equal(resumed_model[key], whole_model[key])
    # Per-client state (AFL's lambda, RC-FL's n_i and generator, the registry) by client.
    assert (
        load_checkpoint(resumed / CHECKPOINT_FILE).strategy_state
        == load_checkpoint(whole / CHECKPOINT_FILE).strategy_state
    )
    assert [x["round"] for x in lines(resumed)] == [1, 2, 3, 4]
    # Every reply of every round was taken (none dropped at intake) and every client
    # evaluated: the rule runs through the engine, not only resumes through it.
    for line in lines(whole) + lines(resumed):
        assert line["train"]["dropped"] == {}
        assert len(line["train"]["weights"]) == line["train"]["accepted"] > 0
        assert len(line["clients"]) == SUPERNODES
    # Node ids differ between the runs, partitions and every metric do not.
    assert [x["metrics"] for x in lines(resumed)] == [x["metrics"] for x in lines(whole)]
    by_partition = [
        sorted((c["partition_id"], c["eval_acc"]) for c in x["clients"]) for x in lines(whole)
    ]
    assert by_partition == [
        sorted((c["partition_id"], c["eval_acc"]) for c in x["clients"]) for x in lines(resumed)
    ]
    whole_nodes = {c["node_id"] for c in lines(whole)[-1]["clients"]}
    assert whole_nodes != {c["node_id"] for c in lines(resumed)[-1]["clients"]}
