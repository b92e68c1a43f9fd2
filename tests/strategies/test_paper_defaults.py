"""Defaults are the papers': FedMGDA+'s step schedule (paper 001, Table 8)."""

import pytest

from fairfl.strategies import FedAvgN, FedMGDAPlain, FedMGDAPlus, MGDAProx
from fairfl.strategies.fedmgda_qp import PAPER_DECAY_FACTOR, paper_decay_factor, step_size


def test_fedmgda_defaults_are_table_8s_rows_eta_1_decay_one_tenth():
    # Table 8 (CIFAR-10, b = 10, p = 0.1, T = 2000): η_g = 1.0, decay 1/10 shared by the
    # FedMGDA+, MGDA-Prox and FedAvg-n rows; β = 0.1^(100/2000) = 10^-0.05 = 0.891251.
    beta = paper_decay_factor(0.1, 2000)
    assert beta == pytest.approx(0.891251, abs=1e-6)
    assert beta == PAPER_DECAY_FACTOR
    for rule in (FedMGDAPlus(), FedAvgN(), MGDAProx()):
        assert (rule.global_lr, rule.global_lr_decay, rule.decay_every) == (
            1.0,
            PAPER_DECAY_FACTOR,
            100,
        )
    plus = FedMGDAPlus()
    assert (plus.epsilon, plus.normalize, plus.prior) == (1.0, True, "uniform")
    # The paper's FedMGDA is not decayed (η ≡ 1, the authors' --global_lr_decay=1).
    assert FedMGDAPlain().global_lr_decay == 1.0


@pytest.mark.parametrize(
    ("server_round", "expected"),
    [
        (1, 1.0),  # t = 0
        (100, 1.0),  # t = 99: no decay in the first 100 rounds
        (101, 0.891251),  # t = 100: β
        (2000, 0.112202),  # t = 1999: β^19 = 10^-0.95
    ],
)
def test_default_schedule_reaches_about_a_tenth_by_round_2000(server_round, expected):
    rule = FedMGDAPlus()
    step = step_size(server_round, rule.global_lr, rule.global_lr_decay, rule.decay_every)
    assert step == pytest.approx(expected, abs=1e-6)
