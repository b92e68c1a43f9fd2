"""The rule registry's errors: an unknown rule name gets a suggestion (issue 50)."""

from __future__ import annotations

import re

import pytest

from fairfl.strategies.registry import build_strategy


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("qfl", "qffl"), ("tem", "term"), ("ditto+qfl", "ditto+qffl"), ("FedAvg", "fedavg")],
)
def test_a_misspelt_rule_name_gets_a_suggestion(typed, meant):
    with pytest.raises(
        ValueError, match=rf"got '{re.escape(typed)}'\. Did you mean '{re.escape(meant)}'\?"
    ):
        build_strategy(typed, {})


def test_a_name_close_to_nothing_gets_no_suggestion():
    with pytest.raises(ValueError) as error:
        build_strategy("zzz", {})
    assert "Did you mean" not in str(error.value)
