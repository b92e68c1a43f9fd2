"""Equitable-FL: eq. (6) weights, similarity, clustering edge cases, the strategy plumbing."""

import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.contract.keys import PROXIMAL_MU
from fairfl.strategies import STRATEGIES, EquitableFL, FedAvg, build_strategy
from fairfl.strategies.core.aggregation import sample_weights
from fairfl.strategies.core.defences import cap_weights
from fairfl.strategies.equitable_clusters import (
    affinity_matrix,
    all_identical,
    canonical_labels,
    cluster_activations,
    equitable_weights,
    round_seed,
    spectral_labels,
)
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import configure

GLOBAL = [np.zeros((2, 2), np.float32), np.zeros(2, np.float32)]
GROUP_A = [1.0, 0.0, 0.0]
GROUP_B = [0.0, 0.0, 1.0]


def configured(strategy, nodes=(1, 2, 3, 4), server_round=1):
    return configure(strategy, nodes, server_round, GLOBAL, config={})


def local(value):
    return [np.full((2, 2), value, np.float32), np.full(2, value, np.float32)]


def reply(node, value, activation, num_examples=10):
    metrics = {keys.NUM_EXAMPLES: num_examples}
    if activation is not None:
        metrics[keys.ACTIVATION] = [float(v) for v in activation]
    return make_reply(node, local(value), metrics)


def jitter(vector, k):
    return [v + 0.01 * k for v in vector]


# --------------------------------------------------------------------------- eq. (6)
def test_spec_worked_example_one_against_three():
    # Spec §1.10: S_t = {1, 5, 7, 9}, clustered {1} and {5, 7, 9}: 1/2 and 1/6 each.
    p = equitable_weights([0, 1, 1, 1])
    np.testing.assert_allclose(p, [1 / 2, 1 / 6, 1 / 6, 1 / 6])
    # FedAvg with n = 3200 (group A) and 4800 (group B) gives A only 3200/17600 = 0.182.
    fedavg = sample_weights([3200, 4800, 4800, 4800])
    np.testing.assert_allclose(fedavg, [3200 / 17600] + [4800 / 17600] * 3)
    assert fedavg[0] == pytest.approx(0.182, abs=1e-3)


def test_single_cluster_and_singletons_are_uniform():
    np.testing.assert_allclose(equitable_weights([7, 7, 7, 7]), [0.25] * 4)
    np.testing.assert_allclose(equitable_weights([0, 1, 2, 3]), [0.25] * 4)


def test_samples_option_shares_a_clusters_mass_by_n():
    # Clusters {0, 1} and {2}: 1/2 each; inside the first 1:3, so 1/8 and 3/8.
    p = equitable_weights([0, 0, 1], num_examples=[1, 3, 5])
    np.testing.assert_allclose(p, [0.125, 0.375, 0.5])


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.integers(0, 5), min_size=1, max_size=25),
    use_counts=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_property_weights_sum_to_one_and_each_cluster_gets_one_over_c(labels, use_counts, seed):
    counts = np.random.default_rng(seed).integers(1, 100, size=len(labels)) if use_counts else None
    p = equitable_weights(labels, counts)
    assert p.sum() == pytest.approx(1.0)
    assert np.all(p > 0)
    present = sorted(set(labels))
    for c in present:
        mass = p[np.asarray(labels) == c].sum()
        assert mass == pytest.approx(1 / len(present))
    # Σ p² = (1/C²) Σ_c 1/n_c for uniform weights (spec §1.6).
    if counts is None:
        sizes = [labels.count(c) for c in present]
        expected = sum(1 / n for n in sizes) / len(present) ** 2
        assert float(np.sum(p**2)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("labels", "counts", "message"),
    [
        ([], None, "labels must be a non-empty 1-d array"),
        ([[0, 1]], None, "labels must be a non-empty 1-d array"),
        ([0, 1], [1], "num_examples must have one entry per label"),
        ([0, 1], [1, 0], "num_examples must all be > 0"),
    ],
)
def test_equitable_weights_rejects_bad_input(labels, counts, message):
    with pytest.raises(ValueError, match=message):
        equitable_weights(labels, counts)


# --------------------------------------------------------------------------- affinity
def test_rbf_median_by_hand():
    # 1-d points 0, 1, 3: D01 = 1, D02 = 3, D12 = 2; median s = 2, M = exp(-D² / 8).
    m = affinity_matrix([[0.0], [1.0], [3.0]], "rbf_median")
    expected = np.exp(-np.array([[0, 1, 9], [1, 0, 4], [9, 4, 0]]) / 8.0)
    np.testing.assert_allclose(m, expected)


def test_cosine_by_hand_is_clipped_at_zero():
    m = affinity_matrix([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]], "cosine")
    s = 1 / math.sqrt(2)
    np.testing.assert_allclose(m, [[1, s, 0], [s, 1, 0], [0, 0, 1]])


def test_cosine_centered_by_hand():
    # Mean (0, 1); centred rows (-1, 0), (1, 0), (0, 0): cos = -1 -> 0, zero row -> 0.5.
    m = affinity_matrix([[-1.0, 1.0], [1.0, 1.0], [0.0, 1.0]], "cosine_centered")
    np.testing.assert_allclose(m, [[1, 0, 0.5], [0, 1, 0.5], [0.5, 0.5, 1]])


def test_rbf_zero_median_uses_positive_distances():
    # 5 equal vectors + 1 at distance 1: 10 of 15 distances are 0, so the median is 0.
    vectors = [[0.0, 0.0]] * 5 + [[1.0, 0.0]]
    m = affinity_matrix(vectors, "rbf_median")
    assert np.all(np.isfinite(m))
    np.testing.assert_allclose(m[:5, :5], 1.0)
    np.testing.assert_allclose(m[:5, 5], math.exp(-0.5))


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 8),
    d=st.integers(1, 5),
    affinity=st.sampled_from(["rbf_median", "cosine", "cosine_centered"]),
    seed=st.integers(0, 10_000),
)
def test_property_affinity_is_symmetric_bounded_with_unit_diagonal(m, d, affinity, seed):
    vectors = np.random.default_rng(seed).normal(size=(m, d))
    matrix = affinity_matrix(vectors, affinity)
    np.testing.assert_allclose(matrix, matrix.T)
    np.testing.assert_allclose(np.diag(matrix), 1.0)
    assert np.all(matrix >= 0) and np.all(matrix <= 1 + 1e-12)


@pytest.mark.parametrize(
    ("vectors", "affinity", "message"),
    [
        ([[0.0]], "euclid", "affinity must be one of"),
        ([[np.nan, 0.0]], "rbf_median", "vectors must be finite"),
        ([1.0, 2.0], "rbf_median", r"vectors must be a non-empty 2-d array \(m, d\)"),
        (np.zeros((0, 3)), "cosine", "vectors must be a non-empty 2-d array"),
    ],
)
def test_affinity_rejects_bad_input(vectors, affinity, message):
    with pytest.raises(ValueError, match=message):
        affinity_matrix(vectors, affinity)


# --------------------------------------------------------------------------- clustering
def test_two_separated_groups_are_recovered_with_canonical_labels():
    vectors = [GROUP_B, jitter(GROUP_A, 1), jitter(GROUP_B, 2), jitter(GROUP_A, 3), GROUP_A]
    labels, degenerate = cluster_activations(vectors, 2, random_state=0)
    assert not degenerate
    assert labels.tolist() == [0, 1, 0, 1, 1]


@pytest.mark.parametrize("affinity", ["rbf_median", "cosine", "cosine_centered"])
def test_every_affinity_recovers_one_against_three(affinity):
    vectors = [GROUP_A, jitter(GROUP_B, 1), jitter(GROUP_B, 2), jitter(GROUP_B, 3)]
    labels, _ = cluster_activations(vectors, 2, affinity=affinity)
    assert labels.tolist() == [0, 1, 1, 1]


def test_identical_vectors_form_one_cluster_without_sklearn():
    # scikit-learn would split an all-ones affinity arbitrarily (spec §1.4).
    labels, degenerate = cluster_activations([[0.3, -1.0]] * 4, 2)
    assert labels.tolist() == [0, 0, 0, 0] and degenerate
    assert all_identical([[1.0, 2.0], [1.0, 2.0 + 1e-14]])
    assert not all_identical([[1.0, 2.0], [1.0, 2.001]])


def test_fewer_rows_than_clusters_gives_singletons_and_k1_one_cluster():
    labels, degenerate = cluster_activations([GROUP_A, GROUP_B], 3)
    assert labels.tolist() == [0, 1] and not degenerate
    labels, _ = cluster_activations([GROUP_A, GROUP_B, GROUP_A], 1)
    assert labels.tolist() == [0, 0, 0]
    labels, degenerate = cluster_activations([GROUP_A], 2)
    assert labels.tolist() == [0] and not degenerate


def test_clustering_is_deterministic_for_a_seed():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(9, 4))
    first = cluster_activations(vectors, 3, random_state=round_seed(5, 2))[0]
    second = cluster_activations(vectors, 3, random_state=round_seed(5, 2))[0]
    np.testing.assert_array_equal(first, second)
    assert round_seed(5, 2) != round_seed(5, 3)


def test_canonical_labels():
    assert canonical_labels([2, 2, 0, 1, 0]).tolist() == [0, 0, 1, 2, 1]


@pytest.mark.parametrize("k", [1, 3])
def test_spectral_labels_needs_two_to_m_minus_one_clusters(k):
    with pytest.raises(ValueError, match=r"num_clusters must be in \[2, 3\) for 3 rows"):
        spectral_labels(np.eye(3), k)


def test_spectral_labels_split_a_block_diagonal_affinity_into_its_blocks():
    # Two components {0, 2, 4} and {1, 3}: the normalised Laplacian has eigenvalue 0
    # twice, its eigenvectors are the component indicators (times sqrt degree), so after
    # dividing by sqrt degree the rows of one block coincide and K-means splits the blocks.
    affinity = np.array(
        [
            [1.0, 0.0, 0.9, 0.0, 0.8],
            [0.0, 1.0, 0.0, 0.7, 0.0],
            [0.9, 0.0, 1.0, 0.0, 0.6],
            [0.0, 0.7, 0.0, 1.0, 0.0],
            [0.8, 0.0, 0.6, 0.0, 1.0],
        ]
    )
    assert spectral_labels(affinity, 2).tolist() == [0, 1, 0, 1, 0]


def test_spectral_labels_agree_with_scikit_learn_on_planted_clusters():
    # Paper/spec: sklearn's SpectralClustering. Here: the same algorithm on scipy, so a
    # server install needs no scikit-learn. On planted groups both give the same labels.
    sklearn_cluster = pytest.importorskip("sklearn.cluster")
    rng = np.random.default_rng(7)
    for trial in range(20):
        k = int(rng.integers(2, 5))
        centres = rng.normal(size=(k, 6)) * 6.0
        groups = np.concatenate([np.arange(k), rng.integers(0, k, int(rng.integers(4, 30)))])
        vectors = centres[groups] + rng.normal(size=(groups.size, 6))
        affinity = affinity_matrix(vectors, "rbf_median")
        reference = sklearn_cluster.SpectralClustering(
            n_clusters=k,
            affinity="precomputed",
            assign_labels="kmeans",
            n_init=10,
            random_state=trial,
        ).fit_predict(affinity)
        ours = spectral_labels(affinity, k, random_state=trial)
        assert ours.tolist() == canonical_labels(reference).tolist(), trial
        assert ours.tolist() == canonical_labels(groups).tolist(), trial


def test_cluster_activations_rejects_zero_clusters():
    with pytest.raises(ValueError, match="num_clusters must be an int >= 1, got 0"):
        cluster_activations([GROUP_A], 0)


# --------------------------------------------------------------------------- capping
def test_cap_moves_the_excess_to_the_others():
    # 0.5 -> 0.3; the 0.2 excess goes to the three 1/6 in proportion: 7/30 each.
    p = cap_weights([0.5, 1 / 6, 1 / 6, 1 / 6], 0.3)
    np.testing.assert_allclose(p, [0.3, 7 / 30, 7 / 30, 7 / 30])


def test_cap_below_one_over_m_gives_uniform_with_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        p = cap_weights([0.7, 0.3], 0.4)
    np.testing.assert_allclose(p, [0.5, 0.5])
    assert "cannot hold" in caplog.text


@settings(max_examples=50, deadline=None)
@given(
    raw=st.lists(st.floats(0.01, 10), min_size=1, max_size=12),
    cap=st.floats(0.05, 1.0),
)
def test_property_cap_keeps_sum_and_order_and_respects_the_cap(raw, cap):
    p = np.asarray(raw) / np.sum(raw)
    capped = cap_weights(p, cap)
    assert capped.sum() == pytest.approx(1.0)
    if cap * len(p) >= 1:
        assert capped.max() <= cap + 1e-9
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(capped[order]) >= -1e-12)


@pytest.mark.parametrize(
    ("weights", "cap", "message"),
    [([1.0], 0.0, r"cap must be in \(0, 1\]"), ([1.5, -0.5], 1.0, "weights must be >= 0")],
)
def test_cap_rejects_bad_input(weights, cap, message):
    with pytest.raises(ValueError, match=message):
        cap_weights(weights, cap)


# --------------------------------------------------------------------------- strategy
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_clusters": 0}, "num_clusters must be an int >= 1, got 0"),
        ({"scope": "all"}, "scope must be one of"),
        ({"affinity": "l2"}, "affinity must be one of"),
        ({"intra_cluster": "weighted"}, "intra_cluster must be one of"),
        ({"proximal_mu": -0.1}, "proximal_mu must be >= 0, got -0.1"),
        ({"server_lr": 0.0}, "server_lr must be > 0, got 0.0"),
        ({"max_client_weight": 1.5}, "max_client_weight must be <= 1, got 1.5"),
        ({"seed": -1}, "seed must be an int >= 0, got -1"),
        ({"activation_source": "logits"}, "source must be one of"),
        ({"activation_max_samples": 0}, "max_samples must be an int >= 1, got 0"),
        ({"activation_dp_noise": 1.0}, "dp_noise > 0 needs dp_clip > 0"),
        ({"fraction_train": 2.0}, r"fraction_train must be in \[0, 1\], got 2.0"),
    ],
)
def test_constructor_validates_every_hyperparameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EquitableFL(**kwargs)


def test_train_config_asks_for_activation_and_sets_fedprox_mu():
    strategy = EquitableFL(proximal_mu=0.1, activation_projection_dim=8, seed=4)
    messages = configured(strategy)
    config = messages[0].content["config"]
    assert config[keys.WANT_ACTIVATION] is True
    assert config[PROXIMAL_MU] == 0.1
    assert config["activation-source"] == "penultimate_logsoftmax"
    assert config["activation-projection-dim"] == 8
    assert config["activation-projection-seed"] == 4
    assert EquitableFL.required_train_metrics == (keys.ACTIVATION,)


def test_aggregate_weights_one_against_three_and_records_clusters():
    strategy = EquitableFL()
    configured(strategy)
    replies = [
        reply(1, 4.0, GROUP_A, 3200),
        reply(2, 1.0, jitter(GROUP_B, 1), 4800),
        reply(3, 1.0, jitter(GROUP_B, 2), 4800),
        reply(4, 1.0, jitter(GROUP_B, 3), 4800),
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    # w = 1/2 · 4 + 3 · 1/6 · 1 = 2.5 (FedAvg would give 3200·4/17600 + 14400/17600 = 1.545).
    np.testing.assert_allclose(arrays["0"].numpy(), 2.5)
    record = strategy.train_records[1]
    assert record.weights == pytest.approx({1: 0.5, 2: 1 / 6, 3: 1 / 6, 4: 1 / 6})
    assert record.diagnostics["clusters"] == {1: 0, 2: 1, 3: 1, 4: 1}
    assert metrics["num-clusters"] == 2 and metrics["cluster-size-max"] == 3
    assert keys.ACTIVATION not in metrics and "clusters" not in metrics
    assert metrics["lambda-sum"] == pytest.approx(1.0)


def test_reply_order_does_not_matter():
    def run(order):
        strategy = EquitableFL()
        configured(strategy)
        replies = [
            reply(n, float(n), GROUP_A if n < 3 else jitter(GROUP_B, n)) for n in (1, 2, 3, 4, 5)
        ]
        arrays, _ = strategy.aggregate_train(1, [replies[i] for i in order])
        return arrays["0"].numpy(), strategy.train_records[1].weights

    first, weights = run([0, 1, 2, 3, 4])
    second, weights_shuffled = run([3, 0, 4, 2, 1])
    np.testing.assert_array_equal(first, second)
    assert weights == weights_shuffled


def test_fewer_replies_than_clusters_is_uniform():
    strategy = EquitableFL(num_clusters=3)
    configured(strategy, nodes=(1, 2))
    arrays, metrics = strategy.aggregate_train(1, [reply(1, 1.0, GROUP_A), reply(2, 3.0, GROUP_B)])
    np.testing.assert_allclose(arrays["0"].numpy(), 2.0)
    assert metrics["num-clusters"] == 2


def test_identical_vectors_give_uniform_weights_and_a_warning(caplog):
    strategy = EquitableFL()
    configured(strategy)
    replies = [reply(n, float(n), [0.5, 0.5]) for n in (1, 2, 3, 4)]
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        _, metrics = strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].weights == pytest.approx({n: 0.25 for n in (1, 2, 3, 4)})
    assert metrics["clusters-degenerate"] == 1 and metrics["num-clusters"] == 1
    assert "all identical" in caplog.text
    caplog.clear()
    configured(strategy, server_round=2)
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        strategy.aggregate_train(2, replies)
    assert "all identical" not in caplog.text  # once per run


def test_bad_activation_replies_are_dropped_with_reasons():
    strategy = EquitableFL()
    configured(strategy, nodes=(1, 2, 3, 4, 5))
    replies = [
        reply(1, 1.0, GROUP_A),
        reply(2, 1.0, GROUP_B),
        reply(3, 1.0, jitter(GROUP_B, 1)),
        reply(4, 9.0, None),  # no activation
        reply(5, 9.0, [np.nan, 0.0, 0.0]),  # non-finite
        reply(6, 9.0, [1.0, 0.0]),  # wrong length
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    dropped = strategy.train_records[1].dropped
    assert dropped == {
        4: "metrics['activation'] is missing",
        5: "metrics['activation'] is nan",
        6: "metrics['activation'] has length 2, expected 3",
    }
    assert metrics["dropped-replies"] == 3
    np.testing.assert_allclose(arrays["0"].numpy(), 1.0)


def test_projection_dimension_is_the_expected_length():
    strategy = EquitableFL(activation_projection_dim=2)
    configured(strategy, nodes=(1, 2, 3))
    replies = [reply(1, 1.0, [1.0, 0.0]), reply(2, 1.0, [0.0, 1.0]), reply(3, 1.0, GROUP_A)]
    strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].dropped == {
        3: "metrics['activation'] has length 3, expected 2"
    }


def test_registry_mode_gives_a_one_group_round_uniform_weights():
    # Round 1 sees both groups; round 2 only group B. Round mode must split group B
    # (0.5 / 1/6 / 1/6 / 1/6); the registry knows group A exists and keeps B together.
    round_one = [
        reply(1, 1.0, GROUP_A),
        reply(2, 1.0, jitter(GROUP_A, 1)),
        reply(3, 1.0, GROUP_B),
        reply(4, 1.0, jitter(GROUP_B, 1)),
    ]
    # Client 6 is a little apart from the rest of group B: round mode isolates it.
    round_two = [reply(n, 1.0, jitter(GROUP_B, k)) for n, k in ((3, 1), (4, 2), (5, 3), (6, 30))]
    weights = {}
    for scope in ("round", "registry"):
        strategy = EquitableFL(scope=scope)
        configured(strategy, server_round=1)
        strategy.aggregate_train(1, round_one)
        configured(strategy, server_round=2, nodes=(3, 4, 5, 6))
        strategy.aggregate_train(2, round_two)
        weights[scope] = sorted(strategy.train_records[2].weights.values())
        if scope == "registry":
            diagnostics = strategy.train_records[2].diagnostics
            assert diagnostics["registry-size"] == 6
            registry = diagnostics["registry-clusters"]
            assert registry[1] == registry[2] != registry[3] == registry[5]
    assert weights["round"] == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])
    assert weights["registry"] == pytest.approx([0.25] * 4)


def test_max_client_weight_and_server_lr():
    strategy = EquitableFL(max_client_weight=0.3, server_lr=0.5)
    configured(strategy)
    replies = [reply(1, 1.0, GROUP_A)] + [reply(n, 1.0, jitter(GROUP_B, n)) for n in (2, 3, 4)]
    strategy.aggregate_train(1, replies)
    weights = strategy.train_records[1].weights
    # Capped p = (0.3, 7/30, 7/30, 7/30), times the server step 0.5.
    assert weights == pytest.approx({1: 0.15, 2: 7 / 60, 3: 7 / 60, 4: 7 / 60})


def test_samples_intra_cluster_option():
    strategy = EquitableFL(intra_cluster="samples")
    configured(strategy)
    replies = [
        reply(1, 1.0, GROUP_A, 10),
        reply(2, 1.0, jitter(GROUP_B, 1), 10),
        reply(3, 1.0, jitter(GROUP_B, 2), 30),
    ]
    strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].weights == pytest.approx({1: 0.5, 2: 0.125, 3: 0.375})


def test_registry_entry_and_run_config_keys():
    spec = STRATEGIES["equitable"]
    assert all(key.startswith("equitable-") for key in spec.parameters)
    strategy = build_strategy(
        "equitable",
        {"equitable-num-clusters": 3, "equitable-scope": "registry", "equitable-proximal-mu": 0.0},
    )
    assert isinstance(strategy, EquitableFL)
    assert (strategy.num_clusters, strategy.scope, strategy.proximal_mu) == (3, "registry", 0.0)
    assert strategy.settings()["activation_source"] == "penultimate_logsoftmax"


def test_equal_clusters_reduce_to_fedavg_with_equal_counts():
    # Two clusters of two clients with equal n: eq. (6) is 1/4 each, as FedAvg.
    replies = [
        reply(1, 1.0, GROUP_A),
        reply(2, 2.0, jitter(GROUP_A, 1)),
        reply(3, 3.0, GROUP_B),
        reply(4, 6.0, jitter(GROUP_B, 1)),
    ]
    ours, baseline = EquitableFL(), FedAvg()
    configured(ours)
    configured(baseline)
    np.testing.assert_allclose(
        ours.aggregate_train(1, replies)[0]["0"].numpy(),
        baseline.aggregate_train(1, replies)[0]["0"].numpy(),
    )


def test_registry_state_round_trips_through_json():
    import json

    strategy = EquitableFL(scope="registry")
    configured(strategy)
    strategy.aggregate_train(1, [reply(1, 1.0, GROUP_A), reply(2, 1.0, GROUP_B)])
    state = json.loads(json.dumps(strategy.state_dict()))
    # Replies made here carry no partition id: the client key is "node-<id>".
    assert state == {"registry": {"node-1": GROUP_A, "node-2": GROUP_B}}
    restored = EquitableFL(scope="registry")
    restored.load_state_dict(state)
    assert sorted(restored.registry) == ["node-1", "node-2"]
    np.testing.assert_array_equal(restored.registry["node-2"], GROUP_B)
    restored.load_state_dict({})
    assert restored.registry == {}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"registry": [1, 2]}, "must be a mapping of client key to vector"),
        ({"registry": {"x": [1.0]}}, "needs client keys and float lists, got 'x'"),
        ({"registry": {"1": []}}, r"state\['registry'\]\['1'\] must be a finite non-empty"),
        ({"registry": {"1": [float("nan")]}}, "must be a finite non-empty vector"),
        ({"registry": {"1": [1.0], "2": [1.0, 2.0]}}, "must all have the same length"),
    ],
)
def test_bad_registry_state_is_rejected_and_state_kept(state, message):
    strategy = EquitableFL(scope="registry")
    strategy.registry = {"5": np.ones(2)}
    with pytest.raises(ValueError, match=message):
        strategy.load_state_dict(state)
    assert list(strategy.registry) == ["5"]
