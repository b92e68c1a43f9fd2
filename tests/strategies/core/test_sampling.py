"""Sampling: Flower's draw bounded by round-timeout, and draws ∝ n_k (q-FFL's sampling)."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterable, Sequence

import numpy as np
import pytest
from flwr.app import ConfigRecord
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.serverapp.strategy import strategy_utils
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl._compat import server_task_identity
from fairfl.settings import RunSettings
from fairfl.strategies import RCFL, FedAvg, build_strategy
from fairfl.strategies.core import sampling
from fairfl.strategies.core.sampling import (
    SAMPLINGS,
    SamplingTimeoutError,
    draw_size_proportional,
    sample_nodes,
)
from tests.conftest import arrays_of, make_reply


class ArrivingGrid:
    """A Grid stand-in whose connected nodes are read from a list of snapshots."""

    def __init__(self, snapshots: Sequence[list[int]]) -> None:
        self.snapshots = list(snapshots)
        self.looks = 0

    def get_node_ids(self) -> Iterable[int]:
        """The next snapshot (the last one repeats)."""
        nodes = self.snapshots[min(self.looks, len(self.snapshots) - 1)]
        self.looks += 1
        return list(nodes)

    def send_and_receive(self, messages: Iterable[object], *, timeout: float) -> list[object]:
        """Nobody answers."""
        list(messages)
        return []


NODES = [1007, 1003, 1011, 1002, 1009, 1005]


@pytest.mark.parametrize("sample_size", [0, 1, 3, 6])
def test_draws_the_same_nodes_as_flowers_sampler(sample_size):
    random.seed(11)
    expected = strategy_utils.sample_nodes(ArrivingGrid([NODES]), 2, sample_size)
    random.seed(11)
    assert sample_nodes(ArrivingGrid([NODES]), 2, sample_size, timeout=1.0) == expected


def test_gives_up_at_the_deadline_naming_the_keys():
    grid = ArrivingGrid([[1001]])
    started = time.monotonic()
    with pytest.raises(
        SamplingTimeoutError,
        match=r"configure_train: only 1 nodes connected, fewer than the 3 that "
        r"min-available-nodes=3 .* round-timeout=0.2 s",
    ):
        sample_nodes(grid, 3, 1, timeout=0.2, hook="configure_train")
    assert 0.2 <= time.monotonic() - started < 1.0


def test_waits_for_late_nodes_within_the_deadline(monkeypatch):
    monkeypatch.setattr(sampling, "POLL_INTERVAL", 0.01)
    grid = ArrivingGrid([[1001], [1001, 1002], [1001, 1002, 1003]])
    random.seed(0)
    sampled, connected = sample_nodes(grid, 3, 2, timeout=5.0)
    assert connected == [1001, 1002, 1003] and grid.looks == 3
    random.seed(0)
    assert sampled == random.sample([1001, 1002, 1003], 2)


@pytest.mark.parametrize("hook", ["configure_train", "configure_evaluate"])
def test_strategy_sends_what_flowers_fedavg_sends(hook):
    arrays = arrays_of([np.ones(3)])
    ours, flowers = (
        cls(fraction_train=0.5, fraction_evaluate=0.5, min_available_nodes=2)
        for cls in (FedAvg, FlowerFedAvg)
    )
    with server_task_identity(1):
        random.seed(5)
        sent = list(
            getattr(ours, hook)(3, arrays, ConfigRecord({"lr": 0.1}), ArrivingGrid([NODES]))
        )
        random.seed(5)
        expected = list(
            getattr(flowers, hook)(3, arrays, ConfigRecord({"lr": 0.1}), ArrivingGrid([NODES]))
        )
    assert [m.metadata.dst_node_id for m in sent] == [m.metadata.dst_node_id for m in expected]
    assert len(sent) == 3
    for ours_message, flower_message in zip(sent, expected, strict=True):
        assert ours_message.metadata.message_type == flower_message.metadata.message_type
        assert dict(ours_message.content["config"]) == dict(flower_message.content["config"])


def test_round_timeout_bounds_the_wait_for_min_available_nodes():
    strategy = FedAvg(min_available_nodes=3)
    started = time.monotonic()
    with pytest.raises(SamplingTimeoutError, match=r"only 2 nodes connected.*round-timeout=0.3"):
        strategy.start(ArrivingGrid([[1001, 1002]]), arrays_of([np.ones(2)]), 1, timeout=0.3)
    assert time.monotonic() - started < 2.0


def test_rcfl_sampling_is_bounded_too():
    strategy = RCFL(min_available_nodes=4)
    strategy.sample_timeout = 0.1
    with pytest.raises(SamplingTimeoutError, match=r"only 3 nodes connected.*=4"):
        strategy.configure_train(
            1, arrays_of([np.ones(2)]), ConfigRecord(), ArrivingGrid([[1, 2, 3]])
        )


# ------------------------------------------------------------ size-proportional draws
def successive_sampling_probabilities(
    counts: Sequence[float], sample_size: int
) -> tuple[dict[frozenset[int], float], np.ndarray]:
    """Exact law of drawing ``sample_size`` indices ∝ counts without replacement.

    NumPy's ``choice(replace=False, p=p)`` (the reference code's call) draws one index
    at a time ∝ p among those not drawn yet, so an ordered draw (i_1, ..., i_m) has
    probability ``Π_j p_{i_j} / (1 - Σ_{l<j} p_{i_l})``; summing over the orders of a
    set gives the set's probability, and over the sets holding k the inclusion π_k.
    """
    p = np.asarray(counts, dtype=np.float64) / float(np.sum(counts))
    subsets: dict[frozenset[int], float] = {}
    for order in itertools.permutations(range(p.size), sample_size):
        probability, used = 1.0, 0.0
        for index in order:
            probability *= p[index] / (1.0 - used)
            used += p[index]
        key = frozenset(order)
        subsets[key] = subsets.get(key, 0.0) + probability
    inclusion = np.array([sum(v for s, v in subsets.items() if k in s) for k in range(p.size)])
    return subsets, inclusion


def test_exact_inclusion_probabilities_by_hand():
    # p = (1/2, 1/3, 1/6), two draws. Device 3 is left out iff the draw is {1, 2}:
    # 1/2 · (1/3)/(1/2) + 1/3 · (1/2)/(2/3) = 1/3 + 1/4 = 7/12, so π_3 = 5/12 = 25/60.
    # {1, 3}: 1/2 · (1/6)/(1/2) + 1/6 · (1/2)/(5/6) = 1/6 + 1/10 = 16/60, so π_2 = 44/60.
    # {2, 3}: 1/3 · (1/6)/(2/3) + 1/6 · (1/3)/(5/6) = 1/12 + 1/15 = 9/60, so π_1 = 51/60.
    subsets, inclusion = successive_sampling_probabilities([3, 2, 1], 2)
    assert inclusion == pytest.approx([51 / 60, 44 / 60, 25 / 60], abs=1e-12)
    assert subsets[frozenset({0, 1})] == pytest.approx(7 / 12, abs=1e-12)
    assert inclusion.sum() == pytest.approx(2.0)  # every draw holds two devices


def test_draw_is_the_reference_codes_numpy_call():
    # fair_flearn fedbase.select_clients, sampling=2: np.random.seed(round + 4), then
    # np.random.choice(range(N), m, replace=False, p=[n_k * 1.0 / Σ n]).
    counts = [30, 5, 12, 80, 7, 41, 9, 16]
    total = np.sum(np.asarray(counts))
    np.random.seed(4 + 3)
    expected = np.random.choice(
        range(len(counts)), 3, replace=False, p=[n * 1.0 / total for n in counts]
    )
    np.random.seed(4 + 3)
    assert draw_size_proportional(counts, 3).tolist() == expected.tolist()
    generator, twin = np.random.default_rng(9), np.random.default_rng(9)
    expected = twin.choice(len(counts), size=3, replace=False, p=np.asarray(counts) / total)
    assert draw_size_proportional(counts, 3, generator).tolist() == expected.tolist()


def test_each_device_is_drawn_with_its_exact_frequency():
    counts = [1, 2, 3, 4, 6, 8]
    draws, sample_size = 20_000, 3
    subsets, inclusion = successive_sampling_probabilities(counts, sample_size)
    rng = np.random.default_rng(2026)
    seen: dict[frozenset[int], int] = dict.fromkeys(subsets, 0)
    for _ in range(draws):
        picks = draw_size_proportional(counts, sample_size, rng)
        assert len(set(picks.tolist())) == sample_size  # without replacement
        seen[frozenset(picks.tolist())] += 1
    # Each device's count is Binomial(draws, π_k): within 4 standard deviations.
    per_device = np.array([sum(c for s, c in seen.items() if k in s) for k in range(6)])
    sigma = np.sqrt(draws * inclusion * (1 - inclusion))
    assert np.all(np.abs(per_device - draws * inclusion) < 4 * sigma), (per_device, inclusion)
    # The 20 sets: Pearson's chi-square, 19 degrees of freedom, below the 0.999 quantile
    # (43.82); a uniform draw scores about 45,000 and one ∝ n_k^1.2 about 500.
    expected = np.array([draws * subsets[s] for s in seen])
    observed = np.array(list(seen.values()))
    assert float(np.sum((observed - expected) ** 2 / expected)) < 43.82
    # Not m · p_k: device 6 (p = 8/24) has m · p = 1, yet some draws leave it out.
    assert sample_size * 8 / 24 == 1.0 and per_device[5] < draws
    assert inclusion[5] < 0.9


@pytest.mark.parametrize(
    ("counts", "size", "message"),
    [
        ([], 0, "counts must be a non-empty vector of numbers > 0, got \\[\\]"),
        ([3, 0], 1, "counts must be a non-empty vector of numbers > 0, got \\[3.0, 0.0\\]"),
        ([3, 1], 3, "sample_size must be in \\[0, 2\\], got 3"),
        ([3, 1], 1.0, "sample_size must be an int, got 1.0"),
    ],
)
def test_bad_draws_are_refused(counts, size, message):
    with pytest.raises(ValueError, match=message):
        draw_size_proportional(counts, size)


SIZES = {1001: 10, 1002: 20, 1003: 30, 1004: 40}


def _train_round(
    strategy: FedAvg, server_round: int, values: dict[int, float]
) -> tuple[list[int], float]:
    """Configure a round on four nodes, answer it; the nodes sent to and the new model."""
    grid = ArrivingGrid([list(SIZES)])
    sent = list(
        strategy.configure_train(server_round, arrays_of([np.zeros(1)]), ConfigRecord(), grid)
    )
    nodes = sorted(m.metadata.dst_node_id for m in sent)
    replies = [
        make_reply(
            node,
            [np.array([values[node]])],
            {"num-examples": SIZES[node], "partition-id": node - 1001},
        )
        for node in nodes
    ]
    arrays, _ = strategy.aggregate_train(server_round, replies)
    assert arrays is not None
    return nodes, float(arrays["0"].numpy()[0])


def test_size_proportional_rounds_census_then_draw_then_sum_uniformly():
    strategy = FedAvg(
        fraction_train=0.5, min_available_nodes=4, client_sampling="size-proportional"
    )
    values = {1001: 0.0, 1002: 10.0, 1003: 20.0, 1004: 40.0}
    with server_task_identity(1):
        # Round 1: no n_k known, every node trains; FedAvg weighs by n_k:
        # (10·0 + 20·10 + 30·20 + 40·40) / 100 = 24.
        assert _train_round(strategy, 1, values) == ([1001, 1002, 1003, 1004], 24.0)
        assert strategy.size_sampler.counts == {"0": 10, "1": 20, "2": 30, "3": 40}
        # Round 2: two nodes drawn ∝ n_k and averaged uniformly (n_k counted as 1).
        np.random.seed(1)
        nodes, model = _train_round(strategy, 2, values)
    assert len(nodes) == 2
    assert model == pytest.approx(sum(values[n] for n in nodes) / 2)


def test_size_proportional_strategy_draws_nodes_with_the_exact_frequencies():
    strategy = FedAvg(
        fraction_train=0.5, min_available_nodes=4, client_sampling="size-proportional"
    )
    subsets, _ = successive_sampling_probabilities(list(SIZES.values()), 2)
    rounds = 3000
    with server_task_identity(1):
        _train_round(strategy, 1, dict.fromkeys(SIZES, 1.0))
        np.random.seed(12)
        seen: dict[frozenset[int], int] = dict.fromkeys(subsets, 0)
        grid = ArrivingGrid([list(SIZES)])
        for server_round in range(2, rounds + 2):
            sent = strategy.configure_train(
                server_round, arrays_of([np.zeros(1)]), ConfigRecord(), grid
            )
            seen[frozenset(m.metadata.dst_node_id - 1001 for m in sent)] += 1
    expected = np.array([rounds * subsets[s] for s in seen])
    observed = np.array(list(seen.values()))
    # 6 pairs, 5 degrees of freedom: the 0.999 quantile of chi-square is 20.52.
    assert float(np.sum((observed - expected) ** 2 / expected)) < 20.52


def test_sampling_is_a_run_config_key_of_every_rule():
    assert build_strategy("qffl", {"sampling": "size-proportional"}).client_sampling == (
        "size-proportional"
    )
    assert build_strategy("vred", {}).client_sampling == "uniform"
    assert RunSettings.from_run_config({"sampling": "size-proportional"}).sampling == (
        "size-proportional"
    )
    assert set(SAMPLINGS) == {"uniform", "size-proportional"}
    with pytest.raises(
        ValueError, match=r"run config sampling must be one of \('uniform', 'size-proportional'\)"
    ):
        RunSettings.from_run_config({"sampling": "by-size"})
    with pytest.raises(
        ValueError,
        match=r"run config sampling \(rule term\): client_sampling must be one of "
        r"\('uniform', 'size-proportional'\), got 'by-size'",
    ):
        build_strategy("term", {"sampling": "by-size"})


def test_rcfl_refuses_the_generic_size_proportional_sampling():
    with pytest.raises(
        ValueError,
        match=r"client_sampling must be 'uniform' for RC-FL, got 'size-proportional'.*"
        r"sampling='with-replacement'",
    ):
        RCFL(client_sampling="size-proportional")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 500), min_size=4, max_size=4),
    st.lists(st.floats(-100, 100, allow_nan=False), min_size=4, max_size=4),
    st.integers(0, 2**31 - 1),
    st.permutations(range(2)),
)
def test_drawn_rounds_sum_uniformly_whatever_the_sizes_and_reply_order(counts, values, seed, order):
    nodes = [2001, 2002, 2003, 2004]
    strategy = FedAvg(
        fraction_train=0.5, min_available_nodes=4, client_sampling="size-proportional"
    )
    grid = ArrivingGrid([nodes])
    value_of = dict(zip(nodes, values, strict=True))

    def answer(server_round: int, permute: bool) -> tuple[list[int], float]:
        sent = strategy.configure_train(
            server_round, arrays_of([np.zeros(1)]), ConfigRecord(), grid
        )
        drawn = sorted(m.metadata.dst_node_id for m in sent)
        replies = [
            make_reply(
                n,
                [np.array([value_of[n]])],
                {"num-examples": counts[nodes.index(n)], "partition-id": nodes.index(n)},
            )
            for n in drawn
        ]
        if permute:
            replies = [replies[i] for i in order]
        arrays, _ = strategy.aggregate_train(server_round, replies)
        assert arrays is not None
        return drawn, float(arrays["0"].numpy()[0])

    with server_task_identity(1):
        answer(1, permute=False)  # the census: every node, n_k learnt
        np.random.seed(seed)
        drawn, model = answer(2, permute=True)
    assert len(drawn) == 2
    assert model == pytest.approx(np.mean([value_of[n] for n in drawn]), abs=1e-9)
    assert strategy.train_records[2].weights == {n: pytest.approx(0.5) for n in drawn}
