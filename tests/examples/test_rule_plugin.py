"""examples/fairfl-rule-plugin, a rule from another distribution, runs like a built-in.

The module builds a fresh virtual environment (no ``--system-site-packages``) and
installs the example into it offline (``pip install --no-index --no-deps
--no-build-isolation``, its build backend hatchling taken from this checkout's venv).
fairfl, Flower and torch are not installed again: a ``.pth`` file adds this venv's
site-packages (``site.addsitedir``, so fairfl's editable install is seen too), and
Flower's commands are copied with their first line pointing at the new interpreter. So
only the new environment sees the entry point ``myrule`` of group ``fairfl.rules``;
this test process does not.

The rules run with ``strategy = "myrule"`` and ``"worstclass"`` through the in-process
runner, and worstclass (a server half and a client step) through ``flwr run`` of fairfl's
app on Flower's local simulation (2 SuperNodes), on a local SuperLink of the fresh venv's
commands, started here by PID (``tests/examples/flower_run.py``, as for the other
examples) and stopped with everything it spawned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairfl.simulation.staging import stage_app
from fairfl.strategies.registry import STRATEGIES
from tests.examples.flower_run import BIN, flwr_run, local_superlink

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fairfl-rule-plugin"
#: Flower's commands the runs below start (the SuperLink spawns the others by name).
FLOWER_COMMANDS = (
    "flwr",
    "flower-superlink",
    "flower-superexec",
    "flower-supernode",
    "flwr-serverapp",
    "flwr-clientapp",
    "flwr-simulation",
)

IN_PROCESS = """
import json, sys
from fairfl.simulation import run_inprocess
from fairfl.strategies.registry import STRATEGIES
from fairfl_rule_plugin.rules import power_weights

seen = {}
def record(instruction, reply):
    metrics = reply.content.metric_records.get("metrics")
    if metrics is not None and "loss-before-training" in metrics:
        config = instruction.content.config_records["config"]
        seen.setdefault(int(config["server-round"]), {})[int(reply.metadata.src_node_id)] = (
            int(metrics["num-examples"]), float(metrics["loss-before-training"]))
    return reply

spec = STRATEGIES["myrule"]
out = run_inprocess(
    {"strategy": "myrule", "num-server-rounds": 2, "num-partitions": 3,
     "out-dir": sys.argv[1]},
    reply_filter=record,
)
weights = {}
for server_round, replies in seen.items():
    nodes = sorted(replies)
    expected = power_weights([replies[n][0] for n in nodes], [replies[n][1] for n in nodes], 1.0)
    got = out.strategy.train_records[server_round].weights
    weights[server_round] = max(abs(got[n] - e) for n, e in zip(nodes, expected))
paired = STRATEGIES["ditto+myrule"]  # Ditto with the plugin as its global rule
print(json.dumps({
    "paired": [paired.source, issubclass(paired.strategy, spec.strategy), paired.defaults()],
    "source": spec.source, "class": spec.strategy.__module__, "defaults": spec.defaults(),
    "rule": out.summary["config"]["strategy"], "rounds": sorted(seen), "weights-error": weights,
}))
"""


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the example, seeing this venv's packages; its bin/."""
    venv = tmp_path_factory.mktemp("plugin") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(site_dir) / "_fairfl_checkout.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n"
    )
    for name in FLOWER_COMMANDS:
        script = (BIN / name).read_text().split("\n", 1)[1]
        target = venv / "bin" / name
        target.write_text(f"#!{python}\n{script}")
        target.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            str(EXAMPLE),
        ],
        check=True,
        env=env,
        cwd=venv,
        timeout=300,
    )
    return venv / "bin"


@pytest.mark.integration
def test_this_environment_does_not_see_the_plugin():
    # The rule is installed in the fresh venv only: no leak into the checkout's venv.
    STRATEGIES.reload()
    assert "myrule" not in STRATEGIES
    assert "worstclass" not in STRATEGIES


@pytest.mark.integration
def test_the_plugin_rule_runs_in_process(plugin_venv, tmp_path):
    done = subprocess.run(
        [str(plugin_venv / "python"), "-c", IN_PROCESS, str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["source"] == "fairfl-rule-plugin"
    assert result["class"] == "fairfl_rule_plugin.rules"
    assert result["defaults"] == {"myrule-power": 1.0}
    assert result["paired"] == [
        "fairfl-rule-plugin",
        True,
        {
            "myrule-power": 1.0,
            "ditto-lambda": 1.0,
            "ditto-personal-epochs": 0,
            "ditto-personal-lr-scale": 1.0,
        },
    ]
    assert result["rule"] == "myrule"
    assert result["rounds"] == [1, 2]
    # The server weighed the replies by the plugin's own equation (1).
    assert all(error < 1e-12 for error in result["weights-error"].values())


CLIENT_REPORT = """
import json, sys
from fairfl.simulation import run_inprocess
from fairfl_rule_plugin.rules import power_weights

seen = {}
def record(instruction, reply):
    metrics = reply.content.metric_records.get("metrics")
    if metrics is not None and "worst-class-loss" in metrics:
        config = instruction.content.config_records["config"]
        seen.setdefault(int(config["server-round"]), {})[int(reply.metadata.src_node_id)] = (
            int(metrics["num-examples"]), float(metrics["worst-class-loss"]),
            float(metrics["loss-before-training"]))
    return reply

out = run_inprocess(
    {"strategy": "worstclass", "num-server-rounds": 2, "num-partitions": 3,
     "out-dir": sys.argv[1]},
    reply_filter=record,
)
weights, above = {}, True
for server_round, replies in seen.items():
    nodes = sorted(replies)
    expected = power_weights([replies[n][0] for n in nodes], [replies[n][1] for n in nodes], 1.0)
    got = out.strategy.train_records[server_round].weights
    weights[server_round] = max(abs(got[n] - e) for n, e in zip(nodes, expected))
    # The worst label's mean loss is at least the mean over all labels.
    above = above and all(r[1] >= r[2] - 1e-9 for r in replies.values())
print(json.dumps({"rounds": sorted(seen), "clients": [len(r) for r in seen.values()],
                  "weights-error": weights, "worst-above-mean": above}))
"""


@pytest.mark.integration
def test_a_plugin_rule_with_its_own_client_report_runs_in_process(plugin_venv, tmp_path):
    # worstclass's server half asks want-worst-class-loss; its client step, from the
    # entry-point group fairfl.client_steps, answers in fairfl's own ClientApp.
    done = subprocess.run(
        [str(plugin_venv / "python"), "-c", CLIENT_REPORT, str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rounds"] == [1, 2]
    assert result["clients"] == [3, 3]
    assert result["worst-above-mean"]
    # The server weighed the replies by equation (2) of the new report.
    assert all(error < 1e-12 for error in result["weights-error"].values())


@pytest.fixture
def flower(plugin_venv: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    """``flwr run``'s environment, the fresh venv's commands first; its SuperLink by PID."""
    yield from local_superlink(tmp_path / "flwr-home", bin_dir=plugin_venv)


@pytest.mark.integration
def test_the_plugin_rule_runs_with_flwr_run(plugin_venv, flower, tmp_path):
    # worstclass needs its client step on the SuperNodes: fairfl's ClientApp finds it.
    # (myrule, a server half only, takes the same path through the engine: its flwr run
    # cost CI a whole engine start and tested nothing the in-process test does not.)
    rule = "worstclass"
    out = tmp_path / "out"
    code, text = flwr_run(
        stage_app(ROOT, tmp_path / "app" / ROOT.name),
        flower,
        tmp_path / "flwr.log",
        "-c",
        f"strategy='{rule}' num-server-rounds=2 out-dir='{out}'",
        cwd=tmp_path,
        timeout=600,
        bin_dir=plugin_venv,
    )
    assert code == 0, text[-5000:]
    # `flwr run --stream` exits 0 whatever the run did: its results files say.
    assert (out / "summary.json").exists(), text[-5000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["strategy"] == rule
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2]
    assert "dropped reply" not in text
