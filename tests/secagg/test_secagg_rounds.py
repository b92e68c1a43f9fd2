"""Equality over several rounds: each secure round is the clear round from the same model.

The bound of fairfl.secagg.protocol.quantisation_bound is per round: after t rounds the
secure and clear runs have drifted apart by the rounds' errors, moved on by every later
round's training (Ditto after 2 rounds differed by 1.1e-4 against a per-round bound of
8.8e-6). The statement that holds at every round t (docs/site/howto/aggregate-securely.md,
"Several rounds") is the per-round one taken from the *secure* model: with ŵ^{t-1} the
secure run's model (and server state: moments, η, personal models on the clients) after
round t-1, and C_t(ŵ^{t-1}) the clear round t started from it,

    |ŵ^t - C_t(ŵ^{t-1})| <= bound_t        (each coordinate, every t)

where bound_t is round t's ``secagg-bound``. The test runs the secure run as a chain of
resumes (round t resumes round t-1's checkpoint: a resumed run equals one that never
stopped), and the clear round t as a resume of the same secure checkpoint with
``secure-aggregation = "none"`` (``resume-force``: the one key that differs).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fairfl.secagg.client import HELD
from fairfl.server.checkpoint import load_checkpoint, save_checkpoint
from fairfl.simulation import run_inprocess
from fairfl.strategies.fedopt import FedOptRule
from fairfl.strategies.registry import STRATEGIES, build_strategy
from fairfl.strategies.secure import secure_form_of

ROUNDS = 3
BASE = {"num-partitions": 4, "local-epochs": 1, "seed": 5}
ADULT = {"dataset": "adult-synthetic", "model": "logreg", "dirichlet-alpha": 0.5}
SUPPORTING = sorted(
    name
    for name, spec in STRATEGIES.items()
    if (form := secure_form_of(spec.strategy)) is not None and form.supported
)


def _run(tmp_path: Path, name: str, config: dict, rounds: int, resume: Path | None, secure: bool):
    out = tmp_path / name
    run_config = {
        **BASE,
        **config,
        "num-server-rounds": rounds,
        "out-dir": str(out),
        "secure-aggregation": "secagg+" if secure else "none",
    }
    if resume is not None:
        run_config.update({"resume-from": str(resume), "resume-force": True})
    return run_inprocess(run_config), out / "checkpoint.npz"


def _with_held_weights(checkpoint: Path) -> Path:
    """The secure checkpoint with FairFed's ω_k moved from its clients to the server.

    Under secure aggregation each client holds ω̄_k (FF6 before normalising) and the
    server none; the clear round reads them from the server's state, which renormalises
    them over the round's clients as the next secure round's Σ ω does.
    """
    stored = load_checkpoint(checkpoint)
    assert stored.strategy_state == {"weights": {}}  # the secure server held no ω_k
    weights = {
        str(key): float(state.config_records[HELD]["fairfed-weight"])
        for key, state in stored.client_state.items()
    }
    moved = checkpoint.with_name("clear-" + checkpoint.name)
    save_checkpoint(moved, replace(stored, strategy_state={"weights": weights}))
    return moved


def _gap(a, b) -> float:
    return max(
        float(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max())
        for x, y in zip(a, b, strict=True)
    )


def _slack(arrays) -> float:
    return max(float(np.spacing(np.abs(a.numpy()).max())) for a in arrays.values())


#: The rules whose round t reads state carried from earlier rounds: the server's
#: (``state_dict``: AFL's λ, FedAdam's moments, RC-FL's η, FedFa's momentum) or the
#: clients' (Ditto's personal models; FairFed's ω_k, which its clients hold under secure
#: aggregation and the clear round reads from the server: :func:`_with_held_weights`).
#: For a rule without any, round t from ŵ^{t-1} is the one-round statement from another
#: start model, which test_secagg_rules.py checks for every supporting rule.
CARRIES_STATE = sorted(
    name for name in SUPPORTING if name == "ditto" or build_strategy(name, {}).state_dict()
)
#: Ditto trains a personal model besides the global one on every client, FairFed reads
#: Adult: six runs of either take longer than a unit test should.
SLOW = {"ditto", "fairfed"}


def test_every_rule_with_state_across_rounds_is_checked_over_several_rounds():
    assert {"afl", "fedadam", "fedyogi", "rcfl", "fedfa", "fairfed", "ditto"} <= set(CARRIES_STATE)
    assert "fedavg" not in CARRIES_STATE


@pytest.mark.parametrize(
    "rule",
    [pytest.param(r, marks=pytest.mark.integration) if r in SLOW else r for r in CARRIES_STATE],
)
def test_every_secure_round_equals_the_clear_round_from_the_same_model(tmp_path, rule, monkeypatch):
    config = {"strategy": rule, **(ADULT if rule == "fairfed" else {})}
    averages: list[list[np.ndarray]] = []  # FedAdam/FedYogi: the average each step reads
    step = FedOptRule.step_from_average

    def spy(self, server_round, global_arrays, average):
        averages.append([np.asarray(a, dtype=np.float64).copy() for a in average])
        return step(self, server_round, global_arrays, average)

    monkeypatch.setattr(FedOptRule, "step_from_average", spy)
    checkpoint: Path | None = None
    gaps = []
    for t in range(1, ROUNDS + 1):
        start = checkpoint
        if rule == "fairfed" and checkpoint is not None:
            start = _with_held_weights(checkpoint)
        clear, _ = _run(tmp_path, f"clear-{t}", config, t, start, secure=False)
        secure, checkpoint = _run(tmp_path, f"secure-{t}", config, t, checkpoint, secure=True)
        diagnostics = secure.strategy.train_records[t].diagnostics
        assert diagnostics["secagg-clients"] == 4
        bound = diagnostics["secagg-bound"]
        if isinstance(secure.strategy, FedOptRule):
            clear_average, secure_average = averages[-2:]
            gap = _gap(clear_average, secure_average)
        else:
            gap = _gap(
                [a.numpy() for a in clear.arrays.values()],
                [a.numpy() for a in secure.arrays.values()],
            )
            gap = max(gap - _slack(clear.arrays), 0.0)
        assert gap <= bound, (t, gap, bound)
        gaps.append(gap)
        if rule == "rcfl":  # η_j in the clear: the same η from the same model
            assert secure.strategy.eta == pytest.approx(clear.strategy.eta, rel=1e-12)
    assert any(g > 0 for g in gaps)  # the rounds were secure: quantised, not exact
