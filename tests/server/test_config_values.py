"""Run-config keys a rule does not read (issue 50): named, so `fairfl run` can warn."""

from __future__ import annotations

import pytest

from fairfl.server.config_values import keys_not_read


def test_another_rules_key_is_named_and_the_rules_own_and_shared_keys_are_not():
    given = ["ditto-lambda", "qffl-q", "lr", "term-alpha", "num-server-rounds"]
    assert keys_not_read("qffl", given) == ["ditto-lambda", "term-alpha"]


def test_a_ditto_pairing_reads_dittos_keys_and_its_rules():
    assert keys_not_read("ditto+qffl", ["ditto-lambda", "qffl-q", "term-alpha"]) == ["term-alpha"]


def test_unknown_keys_are_not_this_functions_business():
    # A typo is refused elsewhere (not a key of any rule); here only known keys count.
    assert keys_not_read("fedavg", ["qfl-q"]) == []


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="rule must be one of"):
        keys_not_read("qfl", ["lr"])
