"""docs/results/liar-share.json (experiments/liar_share.py): a slice rerun, and FedAvg by hand.

The committed file is the 50-round grid of every registered rule; the docs' liar table
is rendered from it (docs/site/_ext/generate_results.py). Rerunning a slice for 5
rounds from the experiment's own code must give the committed numbers.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from fairfl.strategies.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "liar-share.json"


def _load_experiment():
    # Registered in sys.modules before it runs: its dataclass looks its module up there.
    name = "liar_share"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / "liar_share.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


liar_share = _load_experiment()


@pytest.fixture(scope="module")
def committed():
    return json.loads(RESULTS.read_text())


def _row(results, rule, defence, lie):
    row = liar_share._row(results, rule, defence, lie)
    assert row is not None, f"{rule} / {defence} / {lie} missing from {RESULTS.name}"
    return row


def test_the_committed_grid_covers_every_rule_lie_and_defence_over_50_rounds(committed):
    assert committed["horizons"] == [5, 20, 50]
    assert committed["command"].startswith("nice -n 10 python experiments/liar_share.py")
    assert committed["wall_s"] > 0
    for rule in STRATEGIES:
        for defence in liar_share.DEFENCES:
            for lie in liar_share.LIES:
                row = _row(committed, rule, defence, lie)
                if not (row["error"] or row["refused"]):
                    assert len(row["shares"]) == 50


@pytest.mark.parametrize("defence", ["none", "loss-clip-mad=3", "num-examples-clip=3"])
def test_afl_five_rounds_rerun_equals_the_committed_numbers(committed, defence):
    for lie in liar_share.LIES:
        row = _row(committed, "afl", defence, lie)
        rerun = liar_share.run("afl", lie, defence, 5, committed["seed"])
        assert rerun["error"] == row["error"]
        assert rerun["shares"] == pytest.approx(row["shares"][:5], rel=1e-9, abs=1e-12)


def test_fedavg_share_is_the_liars_fraction_of_the_counts(committed):
    # FedAvg weighs client k by p_k = n_k / Σ n (McMahan et al., eq. (1)); the counts
    # are the federation's, drawn from the seed. Honest: n_0 / Σ n; ×10: 10 n_0 /
    # (10 n_0 + Σ_{k>0} n_k); 2^64 − 1 under the default max-num-examples: dropped, 0.
    counts = liar_share.Federation.draw(committed["seed"]).counts
    others = sum(counts[1:])
    default = next(d for d in liar_share.DEFENCES if d.endswith("(default)"))
    clean = _row(committed, "fedavg", default, "clean")["shares"]
    x10 = _row(committed, "fedavg", default, "num-examples x10")["shares"]
    dropped = _row(committed, "fedavg", default, "num-examples 2^64-1")["shares"]
    assert clean == pytest.approx([counts[0] / (counts[0] + others)] * 50)
    assert x10 == pytest.approx([10 * counts[0] / (10 * counts[0] + others)] * 50)
    assert dropped == [0.0] * 50
    # num-examples-clip=3 caps every count at ⌊3 · median⌋ of the round's counts.
    reported = [10 * counts[0], *counts[1:]]
    bound = 3 * sorted(reported)[len(reported) // 2]
    capped = [min(count, bound) for count in reported]
    clipped = _row(committed, "fedavg", "num-examples-clip=3", "num-examples x10")["shares"]
    assert clipped == pytest.approx([capped[0] / sum(capped)] * 50)


def test_the_docs_table_shows_afl_under_loss_clip_mad_from_the_file(committed):
    table = liar_share.render(committed)
    afl = _row(committed, "afl", "loss-clip-mad=3", "loss x10")["shares"]
    stated = " / ".join(f"{100 * afl[h - 1]:.0f} %" for h in (5, 20, 50))
    said = "**AFL under `loss-clip-mad` is not fixed.** A ×10 liar's share in rounds 5 / 20 / 50"
    assert f"{said}: {stated}" in table
    assert committed["command"] in table
