"""A list option given twice keeps both lists (``-c a=1 -c b=2``), as ``flwr run -c`` does.

With argparse's default store action a second ``--set`` replaced the first without a
word: an experiment that passed the data set's settings and then the DP keys as two
``--set`` lists ran every DP run on the defaults (20 clients instead of 10, 20 rounds
instead of 10), and published an ε for the wrong number of rounds.
"""

from __future__ import annotations

import pytest

from fairfl.cli import build_parser


@pytest.mark.parametrize(
    ("argv", "dest", "expected"),
    [
        (["run", "-c", "a=1", "-c", "b=2", "c=3"], "overrides", ["a=1", "b=2", "c=3"]),
        (["compare", "--out", "x", "--set", "a=1", "--set", "b=2"], "settings", ["a=1", "b=2"]),
        (["compare", "--out", "x", "--grid", "k=1,2", "--grid", "j=3"], "grid", ["k=1,2", "j=3"]),
        (
            ["compare", "--out", "x", "--rules", "fedavg", "--rules", "qffl"],
            "rules",
            ["fedavg", "qffl"],
        ),
        (["compare", "--out", "x", "--seeds", "1", "--seeds", "2", "3"], "seeds", [1, 2, 3]),
        (["compare", "--out", "x", "--tune-seeds", "7", "--tune-seeds", "8"], "tune_seeds", [7, 8]),
        (
            ["compare", "--out", "x", "--tune-grid", "k=1", "--tune-grid", "j=2"],
            "tune_grid",
            ["k=1", "j=2"],
        ),
    ],
)
def test_a_list_option_given_twice_keeps_both_lists(argv, dest, expected):
    assert getattr(build_parser().parse_args(argv), dest) == expected


def test_the_defaults_are_not_shared_between_parses():
    parser = build_parser()
    parser.parse_args(["compare", "--out", "x", "--set", "a=1"])
    assert parser.parse_args(["compare", "--out", "x"]).settings == []
