"""FedFV: projecting conflicting gradients in order of loss (docs/specs/spec-fedfv.md)."""

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.strategies.fedfv import FedFV, fedfv_direction, kept_clients, window_rounds
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round


class ReferenceFedFV:
    """The official server loop (``Server.iterate`` of flgo/algorithm/fedfv.py, WwZzz/easyFL
    commit ea07f1d, lines 19-68; the same loop as algorithm/fedfv.py at e9df08d) on flat
    numpy vectors, statement for statement: the oracle. ``.dot`` is ``@``, ``.norm()`` is
    ``np.linalg.norm``, ``_model_average`` a uniform mean and ``_model_sum`` a sum."""

    def __init__(self, model: np.ndarray, num_clients: int, alpha: float, tau: int) -> None:
        self.model, self.alpha, self.tau = model, alpha, tau
        self.num_clients = num_clients
        self.client_last_sample_round = [-1 for i in range(num_clients)]
        self.client_grads_history = [0 for i in range(num_clients)]

    def iterate(self, current_round, received_clients, ws, losses):
        grads = [self.model - w for w in ws]
        for cid, gi in zip(received_clients, grads, strict=True):
            self.client_grads_history[cid] = gi
            self.client_last_sample_round[cid] = current_round
        order_grads = copy.deepcopy(grads)
        order = [_ for _ in range(len(order_grads))]
        tmp = sorted(list(zip(losses, order, strict=True)), key=lambda x: x[0])
        order = [x[1] for x in tmp]
        keep_original = []
        if self.alpha > 0:
            keep_original = order[math.ceil((len(order) - 1) * (1 - self.alpha)) :]
        for i in range(len(order_grads)):
            if i in keep_original:
                continue
            for j in order:
                if j == i:
                    continue
                dot = grads[j] @ order_grads[i]
                if dot < 0:
                    order_grads[i] = order_grads[i] - grads[j] * dot / (
                        np.linalg.norm(grads[j]) ** 2
                    )
        gt = np.mean(order_grads, axis=0)
        if current_round >= self.tau:
            for k in range(self.tau - 1, -1, -1):
                gcs = [
                    self.client_grads_history[cid]
                    for cid in range(self.num_clients)
                    if self.client_last_sample_round[cid] == current_round - k
                    and gt @ self.client_grads_history[cid] < 0
                ]
                if gcs:
                    g_con = np.sum(gcs, axis=0)
                    dot = gt @ g_con
                    if dot < 0:
                        gt = gt - g_con * dot / (np.linalg.norm(g_con) ** 2)
        gnorm = np.linalg.norm(np.mean(grads, axis=0))
        gt = gt / np.linalg.norm(gt) * gnorm
        self.model = self.model - gt
        return self.model


# ------------------------------------------------------------------------ by hand
G1, G2 = [1.0, 0.0], [-1.0, 1.0]  # g1 · g2 = -1: a conflict; losses 1 < 2


def test_internal_projection_by_hand():
    # α = 0, no client kept. g1 ⊥-projected off g2: (1,0) - (-1)/2·(-1,1) = (0.5, 0.5);
    # g2 off g1: (-1,1) - (-1)/1·(1,0) = (0, 1). g' = (0.25, 0.75), ‖g'‖ = √0.625;
    # the plain mean (0, 0.5) has norm 0.5: g^t = (0.25, 0.75)·0.5/√0.625.
    step = fedfv_direction([G1, G2], [1.0, 2.0], alpha=0.0)
    np.testing.assert_allclose(step.direction, [0.158114, 0.474342], atol=1e-6)
    assert (step.projections, step.kept, step.external_projections) == (2, 0, 0)


def test_the_highest_loss_client_keeps_its_gradient():
    # α = 0.5, m = 2: K = order[⌈1·0.5⌉:] = [client 2]. Only g1 moves, to (0.5, 0.5);
    # g' = ((0.5,0.5) + (-1,1))/2 = (-0.25, 0.75): g^t = (-0.25, 0.75)·0.5/√0.625.
    step = fedfv_direction([G1, G2], [1.0, 2.0], alpha=0.5)
    np.testing.assert_allclose(step.direction, [-0.158114, 0.474342], atol=1e-6)
    assert (step.projections, step.kept) == (1, 1)
    # Swap the losses: client 1 is kept, g2 moves to (0, 1): g' = (0.5, 0.5).
    step = fedfv_direction([G1, G2], [2.0, 1.0], alpha=0.5)
    np.testing.assert_allclose(step.direction, [0.5 / math.sqrt(2)] * 2)


def test_external_correction_with_the_current_round_by_hand():
    # τ = 1: the window is this round's own originals. With α = 0.5, g' = (-0.25, 0.75)
    # conflicts with g1 (g'·g1 = -0.25): g' - (1,0)·(-0.25)/1 = (0, 0.75); rescaled to 0.5.
    step = fedfv_direction([G1, G2], [1.0, 2.0], alpha=0.5, windows=[[G1, G2]])
    np.testing.assert_allclose(step.direction, [0.0, 0.5], atol=1e-15)
    assert step.external_projections == 1


def test_external_correction_with_an_absent_client_by_hand():
    # τ = 2, α = 0: g' = (0.25, 0.75). Window t-1 holds absent client 3's h3 = (0, -1):
    #   g'·h3 = -0.75: g' - (0,-1)·(-0.75)/1 = (0.25, 0).
    # Window t (g1, g2): g'·g2 = -0.25 < 0, g'·g1 = 0.25 >= 0: g_con = g2,
    #   g' - (-1,1)·(-0.25)/2 = (0.125, 0.125); rescaled to norm 0.5: (0.353553, 0.353553).
    step = fedfv_direction([G1, G2], [1.0, 2.0], alpha=0.0, windows=[[[0.0, -1.0]], [G1, G2]])
    np.testing.assert_allclose(step.direction, [0.353553, 0.353553], atol=1e-6)
    assert step.external_projections == 2


def test_agreeing_gradients_give_the_plain_average():
    gradients = [[1.0, 2.0], [3.0, 1.0], [0.5, 0.5]]
    for alpha in (0.0, 0.1, 1.0):
        step = fedfv_direction(gradients, [3.0, 1.0, 2.0], alpha, windows=[gradients])
        np.testing.assert_allclose(step.direction, np.mean(gradients, axis=0))
        assert step.projections == step.external_projections == 0


def test_alpha_one_keeps_every_gradient_and_one_client_is_fedavg():
    step = fedfv_direction([G1, G2], [1.0, 2.0], alpha=1.0)
    np.testing.assert_allclose(step.direction, [0.0, 0.5])  # mean, its own norm
    assert step.kept == 2
    step = fedfv_direction([[2.0, -1.0]], [0.3], alpha=0.0, windows=[[[2.0, -1.0]]])
    np.testing.assert_allclose(step.direction, [2.0, -1.0])


def test_cancelled_direction_is_zero_not_nan():
    # Opposite gradients, α = 0: each is projected onto 0; the reference divides 0 by 0.
    step = fedfv_direction([[1.0, 0.0], [-1.0, 0.0]], [1.0, 2.0], alpha=0.0)
    np.testing.assert_array_equal(step.direction, [0.0, 0.0])
    assert step.zero_direction


@pytest.mark.parametrize(
    ("m", "alpha", "kept"),
    [(10, 0.1, 1), (10, 0.0, 0), (5, 0.5, 3), (4, 1.0, 4), (1, 0.1, 1), (20, 0.2, 4)],
)
def test_kept_clients_count(m, alpha, kept):
    # ⌈(m-1)(1-α)⌉: (10, 0.1): ⌈8.1⌉ = 9 -> 1 kept; (5, 0.5): ⌈2⌉ -> 3; (20, 0.2): ⌈15.2⌉ -> 4.
    assert len(kept_clients(list(range(m)), alpha)) == kept


@pytest.mark.parametrize(
    ("gradients", "losses", "alpha", "match"),
    [
        ([], [], 0.1, r"gradients must be \(m, d\)"),
        ([[1.0]], [1.0, 2.0], 0.1, r"losses \(m,\)"),
        ([[math.nan]], [1.0], 0.1, "must be finite"),
        ([[1.0]], [1.0], 1.5, "alpha must be <= 1"),
    ],
)
def test_bad_input_is_refused(gradients, losses, alpha, match):
    with pytest.raises(ValueError, match=match):
        fedfv_direction(gradients, losses, alpha)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.1, 0.3, 1.0]))
def test_norm_is_the_plain_averages(seed, alpha):
    rng = np.random.default_rng(seed)
    gradients = rng.normal(size=(5, 4))
    step = fedfv_direction(gradients, rng.uniform(size=5), alpha, windows=[gradients])
    assert np.linalg.norm(step.direction) == pytest.approx(
        np.linalg.norm(gradients.mean(axis=0)), rel=1e-9
    )


# ------------------------------------------------------------------- reference oracle
@pytest.mark.parametrize(("alpha", "tau"), [(0.1, 1), (0.0, 0), (0.3, 3), (0.5, 2)])
def test_matches_the_official_loop_over_rounds(alpha, tau):
    rng = np.random.default_rng(11)
    clients, dim = 8, 5
    reference = ReferenceFedFV(rng.normal(size=dim), clients, alpha, tau)
    model = reference.model.copy()
    last_round: dict[int, int] = {}
    history: dict[int, np.ndarray] = {}
    for t in range(1, 7):
        chosen = sorted(int(c) for c in rng.choice(clients, size=4, replace=False))
        # Local models far apart, so that gradients conflict and every step is exercised.
        ws = [model + rng.normal(scale=2.0, size=dim) for _ in chosen]
        losses = rng.uniform(0.1, 3.0, size=4).tolist()
        expected = reference.iterate(t, chosen, [w.copy() for w in ws], losses)
        gradients = np.array([model - w for w in ws])
        for cid, g in zip(chosen, gradients, strict=True):
            last_round[cid], history[cid] = t, g
        windows = (
            [
                [history[c] for c in sorted(history) if last_round[c] == t - k]
                for k in range(tau - 1, -1, -1)
            ]
            if t >= tau
            else []
        )
        windows = [np.reshape(w, (-1, dim)) for w in windows]
        model = model - fedfv_direction(gradients, losses, alpha, windows).direction
        np.testing.assert_allclose(model, expected, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------- the strategy
SHAPES = ((2, 3), (3,))


def fv_reply(partition: int, arrays: list[np.ndarray], loss: float):
    """Partition ``partition``'s reply from node ``partition + 1``."""
    metrics = {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: loss, keys.PARTITION_ID: partition}
    return make_reply(partition + 1, arrays, metrics)


def split(vector: np.ndarray) -> list[np.ndarray]:
    """A flat vector as the arrays of SHAPES (float64)."""
    return [vector[:6].reshape(2, 3).copy(), vector[6:].copy()]


def flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays])


@pytest.mark.parametrize(("alpha", "tau"), [(0.1, 1), (0.3, 3)])
def test_strategy_matches_the_official_loop_over_rounds(alpha, tau):
    rng = np.random.default_rng(5)
    clients, dim = 8, 9
    reference = ReferenceFedFV(rng.normal(size=dim), clients, alpha, tau)
    strategy = FedFV(alpha=alpha, tau=tau, history="flgo")
    model = split(reference.model)
    for t in range(1, 6):
        chosen = sorted(int(c) for c in rng.choice(clients, size=4, replace=False))
        ws = [flat(model) + rng.normal(scale=2.0, size=dim) for _ in chosen]
        losses = rng.uniform(0.1, 3.0, size=4).tolist()
        expected = reference.iterate(t, chosen, [w.copy() for w in ws], losses)
        replies = [fv_reply(c, split(w), f) for c, w, f in zip(chosen, ws, losses, strict=True)]
        new, metrics = aggregate_round(strategy, replies, t, model)
        model = [new[str(i)].numpy() for i in range(2)]
        np.testing.assert_allclose(flat(model), expected, rtol=1e-10, atol=1e-12)
        assert metrics["num-replies"] == 4
    # Only the gradients the next round can read are remembered: rounds t - τ + 2 onwards.
    assert all(entry[0] >= 5 - tau + 2 for entry in strategy.history.values())


@pytest.mark.parametrize("tau", [0, 1])
def test_float32_replies_match_the_official_loop_in_float64(tau):
    # τ <= 1 works from the Gram of the replies (float32 blocks summed in float64) and one
    # weighted pass. The model equals the official loop's on float64 copies within half a
    # float32 ulp (its rounding to float32) plus 1e-9 (the float32 Gram's error: steps
    # here are ~0.05 per coordinate, so 1e-9 is ~2e-8 of them).
    rng = np.random.default_rng(11)
    clients, dim = 12, 5000
    start = rng.normal(size=dim).astype(np.float32)
    ws = [start + rng.normal(scale=0.05, size=dim).astype(np.float32) for _ in range(clients)]
    ws[3] = start - (ws[0] - start)  # g_3 = -g_0: a conflict F2 must project
    losses = rng.uniform(0.1, 3.0, size=clients).tolist()
    reference = ReferenceFedFV(start.astype(np.float64), clients, 0.1, tau)
    expected = reference.iterate(
        1, list(range(clients)), [w.astype(np.float64) for w in ws], losses
    )
    replies = [fv_reply(c, [ws[c]], losses[c]) for c in range(clients)]
    new, metrics = aggregate_round(FedFV(alpha=0.1, tau=tau, history="flgo"), replies, 1, [start])
    got = new["0"].numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=2**-24, atol=1e-9)
    assert metrics["fedfv-projections"] > 0


def test_strategy_keeps_the_model_where_the_projections_cancel():
    # g_1 = (1, 2) and g_2 = -g_1, α = 0: F2 takes g_1 - g_2 (g_2 · g_1) / ‖g_2‖² = 0 and
    # likewise g_2 -> 0, so g' = 0 and the round keeps w^t = (1, 1).
    start = [np.ones(2)]
    replies = [fv_reply(0, [np.array([0.0, -1.0])], 1.0), fv_reply(1, [np.array([2.0, 3.0])], 2.0)]
    new, metrics = aggregate_round(FedFV(alpha=0.0, tau=1), replies, 1, start)
    np.testing.assert_array_equal(new["0"].numpy(), [1.0, 1.0])
    assert metrics["fedfv-zero-direction"] == 1
    assert metrics["fedfv-projections"] == 2


def test_strategy_by_hand_with_an_absent_client_and_a_counter():
    # The absent-client round of test_external_correction_with_an_absent_client_by_hand,
    # through the strategy: τ = 2, α = 0. w^t = 0, so g_k = -w_k. Round 1: partition 2
    # sends w = (0, 1) (g = (0, -1)); round 2: partitions 0 and 1 send -g1 and -g2.
    strategy = FedFV(alpha=0.0, tau=2, history="flgo")
    start = [np.zeros(2), np.array([7], dtype=np.int64)]
    new, _ = aggregate_round(
        strategy, [fv_reply(2, [np.array([0.0, 1.0]), start[1]], 1.0)], 1, start
    )
    # Round 1 alone: g^t = g = (0, -1): w = (0, 1). Round 2 from w^t = 0 again.
    np.testing.assert_allclose(new["0"].numpy(), [0.0, 1.0])
    replies = [
        fv_reply(0, [np.array([-1.0, 0.0]), np.array([9], dtype=np.int64)], 1.0),
        fv_reply(1, [np.array([1.0, -1.0]), np.array([9], dtype=np.int64)], 2.0),
    ]
    new, metrics = aggregate_round(strategy, replies, 2, start)
    np.testing.assert_allclose(new["0"].numpy(), [-0.353553, -0.353553], atol=1e-6)
    np.testing.assert_array_equal(new["1"].numpy(), [7])  # the counter keeps w^t's value
    assert metrics["fedfv-external-projections"] == 2
    assert metrics["fedfv-projections"] == 2


@pytest.mark.parametrize("tau", [1, 2])
@pytest.mark.parametrize(
    ("value", "reason"),
    [(np.nan, "contains nan"), (-np.inf, "contains inf"), (1e30, "has |value| 1e+30 > 1e+06")],
)
def test_a_bad_value_found_in_the_rules_pass_drops_only_that_reply(tau, value, reason):
    # FedFV checks the values from ‖g_k‖² (the Gram's diagonal, or the float64 gradients'
    # norms at τ >= 2), not by a reader pass: the round with the bad reply is the round
    # without it, bit for bit, history included, and the drop names the array.
    rng = np.random.default_rng(8)
    start = [rng.normal(size=(2, 3)).astype(np.float32), np.zeros(3, np.float32)]
    honest = [
        (c, [a + rng.normal(size=a.shape).astype(np.float32) for a in start]) for c in (0, 1, 2)
    ]
    bad = [a.copy() for a in start]
    bad[1][2] = value
    losses = {0: 1.0, 1: 2.0, 2: 0.5, 3: 3.0}

    def round_of(with_bad: bool):
        strategy = FedFV(tau=tau, max_abs_weight=1e6)
        chosen = [*honest, (3, bad)] if with_bad else honest
        replies = [fv_reply(c, arrays, losses[c]) for c, arrays in chosen]
        new, _ = aggregate_round(strategy, replies, tau, start)
        return strategy, new

    attacked, got = round_of(True)
    clean, want = round_of(False)
    assert attacked.train_records[tau].dropped == {4: f"arrays['1'] {reason}"}
    assert attacked.state_dict() == clean.state_dict()
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())


def test_state_survives_a_checkpoint():
    rng = np.random.default_rng(2)
    start = [np.zeros((2, 3)), np.zeros(3)]
    first = [fv_reply(c, split(rng.normal(size=9)), float(c)) for c in (0, 1, 2)]
    second = [fv_reply(c, split(rng.normal(size=9)), float(3 - c)) for c in (0, 3)]
    uninterrupted = FedFV(tau=3)
    aggregate_round(uninterrupted, first, 1, start)
    resumed = FedFV(tau=3)
    resumed.load_state_dict(json.loads(json.dumps(uninterrupted.state_dict())))
    expected, _ = aggregate_round(uninterrupted, second, 2, start)
    got, _ = aggregate_round(resumed, second, 2, start)
    for key in expected:
        np.testing.assert_array_equal(got[key].numpy(), expected[key].numpy())
    FedFV().load_state_dict({})  # the base's stateless {} forgets every client


def test_registry_declaration():
    spec = STRATEGIES["fedfv"]
    assert spec.strategy is FedFV
    assert spec.defaults() == {"fedfv-alpha": 0.1, "fedfv-tau": 1, "fedfv-history": "experiments"}
    strategy = build_strategy(
        "fedfv", {"fedfv-alpha": 0.2, "fedfv-tau": 3, "fedfv-history": "flgo"}
    )
    assert strategy.settings() == {"alpha": 0.2, "tau": 3, "history": "flgo"}
    with pytest.raises(
        ValueError, match=r"run config fedfv-tau \(rule fedfv\): tau must be an int >= 0"
    ):
        build_strategy("fedfv", {"fedfv-tau": -1})
    with pytest.raises(ValueError, match=r"alpha must be <= 1, got 2\.0"):
        FedFV(alpha=2.0)


# ------------------------------------------------- the experiments' history window
class ReferenceFedFVExperiments:
    """The loop of the paper's experiments (``Server.iterate`` of method/fedfv.py on the
    ``easyFL_v1.0`` branch of WwZzz/easyFL, b721564, as in its first upload 7cd9273) on
    flat numpy vectors, statement for statement: the external step reads rounds
    t - τ, ..., t - 1 (``k = self.tau - k``), ``g_con`` starts from zeros, and its rounds
    count from 0 (``iterate(round)`` for ``round in range(num_rounds + 1)``)."""

    def __init__(self, model: np.ndarray, num_clients: int, alpha: float, tau: int) -> None:
        self.model, self.alpha, self.tau = model, alpha, tau
        self.num_clients = num_clients
        self.client_last_sample_round = [-1 for i in range(num_clients)]
        self.client_grads_history = [0 for i in range(num_clients)]

    def iterate(self, t, selected_clients, ws, losses):
        grads = []
        for cid, w in zip(selected_clients, ws, strict=True):
            gi = self.model - w
            grads.append(gi)
            self.client_grads_history[cid] = gi
            self.client_last_sample_round[cid] = t
        order_grads = copy.deepcopy(grads)
        order = [k for k in range(len(order_grads))]
        tmp = sorted(list(zip(losses, order, strict=True)), key=lambda x: x[0])
        order = [x[1] for x in tmp]
        if self.alpha > 0:
            keep_original = order[math.ceil((len(order) - 1) * (1 - self.alpha)) :]
        else:
            keep_original = []
        for i in range(len(order_grads)):
            if i in keep_original:
                continue
            for j in order:
                if j == i:
                    continue
                dot = grads[j] @ order_grads[i]
                if dot < 0:
                    order_grads[i] = order_grads[i] - grads[j] * (
                        1.0 * dot / (np.linalg.norm(grads[j]) ** 2)
                    )
        gt = np.mean(order_grads, axis=0)
        if t >= self.tau:
            for k in range(0, self.tau):
                k = self.tau - k
                g_con = np.zeros_like(gt)
                for cid in range(self.num_clients):
                    if self.client_last_sample_round[cid] == t - k:  # noqa: SIM102 (as there)
                        if self.client_grads_history[cid] @ gt < 0:
                            g_con = g_con + self.client_grads_history[cid]
                dot = gt @ g_con
                if dot < 0:
                    gt = gt - g_con * (1.0 * dot / (np.linalg.norm(g_con) ** 2))
        gnorm = np.linalg.norm(np.mean(grads, axis=0))
        gt = gt * (1.0 / np.linalg.norm(gt) * gnorm)
        self.model = self.model - gt
        return self.model


@pytest.mark.parametrize(
    ("server_round", "tau", "history", "rounds"),
    [
        (1, 1, "experiments", []),  # easyFL v1.0's t = 0 < τ: no correction yet
        (2, 1, "experiments", [1]),
        (3, 2, "experiments", [1, 2]),
        (2, 2, "experiments", []),
        (5, 3, "experiments", [2, 3, 4]),
        (1, 1, "flgo", [1]),
        (1, 2, "flgo", []),
        (3, 2, "flgo", [2, 3]),
        (4, 0, "experiments", []),
        (4, 0, "flgo", []),
    ],
)
def test_window_rounds(server_round, tau, history, rounds):
    assert window_rounds(server_round, tau, history) == rounds


def test_the_two_windows_by_hand_over_three_rounds():
    # τ = 1, α = 0, w^t = 0 every round (so g_k = -w_k). Partition 0 in round 1, 1 and 2
    # in round 2, 1 in round 3.
    # Round 1: g0 = (0, -1) alone: no projection, g^t = g0 in both (the experiments' window
    #   is empty in round 1; FLGo's is g0 itself, which agrees with g').
    # Round 2: g1 = (1, 0), g2 = (-1, 1), losses 1 < 2: F2 gives (0.5, 0.5) and (0, 1),
    #   g' = (0.25, 0.75); ‖mean g‖ = ‖(0, 0.5)‖ = 0.5.
    #   experiments: round 1's window holds g0 (partition 0, absent now): g'·g0 = -0.75, so
    #   g' - (0, -1)(-0.75)/1 = (0.25, 0), rescaled to 0.5: (0.5, 0).
    #   flgo: the window is g1, g2 (g'·g1 = 0.25, g'·g2 = 0.5): none conflicts, so
    #   g^t = (0.25, 0.75)·0.5/√0.625 = (0.158114, 0.474342).
    # Round 3: g1 = (0, -1) alone, g' = g1, ‖g‖ = 1.
    #   experiments: round 2's window holds g2 only (partition 1 was seen again now):
    #   g'·g2 = -1, so g' - (-1, 1)(-1)/2 = (-0.5, -0.5), rescaled to 1: -(1, 1)/√2.
    #   flgo: the window is g1 itself, no conflict: g^t = (0, -1).
    start = [np.zeros(2)]
    rounds = [
        [(0, [0.0, 1.0], 1.0)],
        [(1, [-1.0, 0.0], 1.0), (2, [1.0, -1.0], 2.0)],
        [(1, [0.0, 1.0], 1.0)],
    ]
    expected = {
        "experiments": [([0.0, 1.0], 0), ([-0.5, 0.0], 1), ([0.5**0.5, 0.5**0.5], 1)],
        "flgo": [([0.0, 1.0], 0), ([-0.158114, -0.474342], 0), ([0.0, 1.0], 0)],
    }
    for history, steps in expected.items():
        strategy = FedFV(alpha=0.0, tau=1, history=history)
        for t, (sent, (model, external)) in enumerate(zip(rounds, steps, strict=True), 1):
            replies = [fv_reply(c, [np.array(w)], f) for c, w, f in sent]
            new, metrics = aggregate_round(strategy, replies, t, start)
            np.testing.assert_allclose(new["0"].numpy(), model, atol=1e-6)
            assert metrics["fedfv-external-projections"] == external, (history, t)
    # The default is the experiments' window; it remembers round 3's gradients for
    # round 4 (partition 1's), FLGo's τ = 1 nothing.
    assert FedFV().params.history == "experiments"
    for history, remembered in (("experiments", {"1": 3}), ("flgo", {})):
        strategy = FedFV(alpha=0.0, tau=1, history=history)
        for t, sent in enumerate(rounds, 1):
            replies = [fv_reply(c, [np.array(w)], f) for c, w, f in sent]
            aggregate_round(strategy, replies, t, start)
        assert {key: entry[0] for key, entry in strategy.history.items()} == remembered


@pytest.mark.parametrize(("alpha", "tau"), [(0.1, 1), (0.3, 3), (0.5, 2), (0.0, 0)])
def test_default_matches_the_experiments_loop_over_rounds(alpha, tau):
    rng = np.random.default_rng(7)
    clients, dim = 8, 9
    reference = ReferenceFedFVExperiments(rng.normal(size=dim), clients, alpha, tau)
    strategy = FedFV(alpha=alpha, tau=tau)
    model = split(reference.model)
    external = 0
    for t in range(1, 9):
        chosen = sorted(int(c) for c in rng.choice(clients, size=4, replace=False))
        ws = [flat(model) + rng.normal(scale=2.0, size=dim) for _ in chosen]
        losses = rng.uniform(0.1, 3.0, size=4).tolist()
        # easyFL v1.0 counts rounds from 0, Flower from 1.
        expected = reference.iterate(t - 1, chosen, [w.copy() for w in ws], losses)
        replies = [fv_reply(c, split(w), f) for c, w, f in zip(chosen, ws, losses, strict=True)]
        new, metrics = aggregate_round(strategy, replies, t, model)
        model = [new[str(i)].numpy() for i in range(2)]
        np.testing.assert_allclose(flat(model), expected, rtol=1e-10, atol=1e-12)
        external += metrics["fedfv-external-projections"]
    assert (external > 0) == (tau > 0)  # the window was exercised


# ------------------------------------------------------------- a cancelled direction
# g2 = -3 g1 with g1 = (1/3, 1/7, 1/11): F2 (α = 0) projects each onto the other's plane,
# which cancels g' in exact arithmetic, and leaves ~1e-17 of ‖g_i‖ in float64.
NEAR_G1 = np.array([1 / 3, 1 / 7, 1 / 11])
NEAR = np.stack([NEAR_G1, -3.0 * NEAR_G1])


def test_a_near_cancelled_direction_is_cancelled():
    residue = NEAR[0] - NEAR[0] @ NEAR[1] / (NEAR[1] @ NEAR[1]) * NEAR[1]
    assert 0 < np.linalg.norm(residue) < 1e-15  # rounding, not a direction
    for windows in ([], [NEAR], [[[0.0, 0.0, 1.0]], NEAR]):
        step = fedfv_direction(NEAR, [1.0, 2.0], alpha=0.0, windows=windows)
        assert step.zero_direction
        np.testing.assert_array_equal(step.direction, np.zeros(3))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    ("tau", "history"), [(1, "experiments"), (1, "flgo"), (2, "experiments"), (2, "flgo")]
)
def test_the_strategy_keeps_the_model_where_g_is_near_cancelled(tau, history, dtype):
    # One rule for every τ and window, whether the round is computed from the Gram (τ = 1
    # with FLGo's window) or from float64 gradients: rounds 1 and 2 both send the pair.
    start = [np.full(3, 0.5, dtype=dtype)]
    strategy = FedFV(alpha=0.0, tau=tau, history=history)
    for t in (1, 2):
        replies = [fv_reply(c, [(start[0] - g).astype(dtype)], c + 1.0) for c, g in enumerate(NEAR)]
        new, metrics = aggregate_round(strategy, replies, t, start)
        np.testing.assert_array_equal(new["0"].numpy(), start[0])
        assert metrics["fedfv-zero-direction"] == 1, t
