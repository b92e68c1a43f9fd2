"""Signatures people and tools can read (issue 51, item 4).

Every rule's constructor takes ``**keywords``; its ``__signature__`` lists them (the
fields of its parameters dataclass, then :class:`StrategyOptions`'s), a misspelt one is a
``TypeError`` naming the rule, and a Ditto pairing is a class of
:mod:`fairfl.strategies.ditto` that can be imported, subclassed and pickled.

Not pinned, because it is not so: mypy does not flag ``TERM(alpah=1)``. The constructor
is one ``**keywords: Any`` for every rule, and mypy 2.4 can neither derive a rule's
keywords from its ``Parameters`` dataclass nor accept a TypedDict of the shared options
plus "any other keyword" (PEP 728's ``extra_items`` is not supported).
"""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal

import numpy as np
import pytest
from numpy.typing import NDArray

import fairfl.strategies.ditto as ditto_module
from fairfl.contract import TrainReply
from fairfl.strategies import QFFL, STRATEGIES, TERM, Ditto, ReweightedStrategy, build_strategy
from fairfl.strategies import registry as registry_module
from fairfl.strategies.core.options import StrategyOptions
from fairfl.strategies.core.params import ParameterError, RuleParameters, real
from fairfl.strategies.ditto import DittoPersonalisation, with_ditto
from fairfl.strategies.registry import Rules

OPTIONS = [item.name for item in fields(StrategyOptions)]


# ----------------------------------------------------------------- signatures
def test_terms_signature_lists_alpha_then_every_option_keyword_only():
    signature = inspect.signature(TERM)
    parameters = signature.parameters
    assert list(parameters) == ["alpha", *OPTIONS]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    alpha = parameters["alpha"]
    assert (alpha.default, alpha.annotation) == (0.5, float)
    assert (parameters["fraction_train"].default, parameters["fraction_train"].annotation) == (
        1.0,
        float,
    )
    assert parameters["train_loss_key"].default == "loss-before-training"
    assert parameters["train_loss_key"].annotation is str
    assert parameters["max_abs_weight"].annotation == float | None
    assert parameters["client_sampling"].annotation == Literal["uniform", "size-proportional"]
    assert signature.return_annotation is None
    assert str(signature).startswith("(*, alpha: float = 0.5, fraction_train: float = 1.0,")


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_rules_signature_is_its_parameters_then_the_options(name):
    rule = STRATEGIES[name].strategy
    parameters = inspect.signature(rule).parameters
    declared = [*fields(rule.Parameters), *fields(StrategyOptions)]
    assert list(parameters) == [item.name for item in declared]
    for item in declared:
        assert item.default is not MISSING
        assert parameters[item.name].default == item.default
        assert parameters[item.name].annotation is not inspect.Parameter.empty
    # The run-config defaults are the signature's defaults.
    keywords = STRATEGIES[name].parameters
    for key, default in STRATEGIES[name].defaults().items():
        assert parameters[keywords[key]].default == default


def test_a_pairings_signature_lists_both_rules_parameters():
    parameters = inspect.signature(STRATEGIES["ditto+term"].strategy).parameters
    assert list(parameters)[:4] == ["alpha", "lam", "personal_epochs", "personal_lr_scale"]
    assert parameters["lam"].default == 1.0 and parameters["personal_epochs"].annotation is int


def test_a_rule_with_a_constructor_of_its_own_keeps_that_signature():
    class WithOwnKeyword(TERM):
        def __init__(self, *, extra: int = 1, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.extra = extra

    assert list(inspect.signature(WithOwnKeyword).parameters) == ["extra", "kwargs"]
    assert WithOwnKeyword(extra=2, alpha=1.0).extra == 2


def test_an_annotation_only_type_checkers_can_resolve_keeps_its_text():
    @dataclass(frozen=True)
    class Unresolvable(RuleParameters):
        tilt: NotImportedHere = real(1.0, key=None)  # type: ignore[name-defined]  # noqa: F821

    class Rule(TERM):
        Parameters = Unresolvable

    parameters = inspect.signature(Rule).parameters
    assert parameters["tilt"].annotation == "NotImportedHere"
    assert parameters["fraction_train"].annotation is float  # the options' resolve apart


# ------------------------------------------------------------ wrong keywords
@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        (
            {"alpah": 1},
            r"^TERM\(\) got an unexpected keyword argument 'alpah'\. Did you mean 'alpha'\?$",
        ),
        (
            {"fraction_trian": 0.5},
            r"^TERM\(\) got an unexpected keyword argument 'fraction_trian'\. "
            r"Did you mean 'fraction_train'\?$",
        ),
        ({"zzz": 1}, r"^TERM\(\) got an unexpected keyword argument 'zzz'$"),
        # The keyword is refused before any value is checked.
        ({"alpha": -1, "alpah": 1}, r"'alpah'\. Did you mean 'alpha'\?$"),
    ],
)
def test_a_misspelt_keyword_is_a_type_error_naming_the_rule(keywords, message):
    with pytest.raises(TypeError, match=message):
        TERM(**keywords)


def test_a_pairing_names_its_own_class_and_suggests_dittos_keywords():
    with pytest.raises(TypeError, match=r"^DittoQFFL\(\) .* 'lamda'\. Did you mean 'lam'\?$"):
        STRATEGIES["ditto+qffl"].strategy(lamda=0.1)


def test_bad_values_are_refused_as_before():
    with pytest.raises(ParameterError, match=r"^alpha must be >= 0, got -1$") as caught:
        TERM(alpha=-1)
    assert caught.value.name == "alpha"
    with pytest.raises(ValueError, match=r"^fraction_train must be in \[0, 1\], got 2"):
        TERM(fraction_train=2)
    with pytest.raises(ValueError, match=r"^run config term-alpha \(rule term\): alpha"):
        build_strategy("term", {"term-alpha": -1.0})


# ------------------------------------------------------------- Ditto pairings
def test_a_pairing_is_importable_under_its_class_name():
    from fairfl.strategies.ditto import DittoQFFL, DittoQFFLParameters, DittoTERM

    assert DittoQFFL is STRATEGIES["ditto+qffl"].strategy
    assert DittoQFFLParameters is DittoQFFL.Parameters
    assert DittoTERM is STRATEGIES["ditto+term"].strategy
    assert (DittoQFFL.__module__, DittoQFFL.__qualname__) == (
        "fairfl.strategies.ditto",
        "DittoQFFL",
    )
    assert issubclass(DittoQFFL, QFFL) and issubclass(DittoQFFL, DittoPersonalisation)
    # The registry is as before: pairings are found by name, never listed.
    assert not any(name.startswith("ditto+") for name in STRATEGIES)
    assert STRATEGIES["ditto+fedavg"].strategy is Ditto


@pytest.mark.parametrize("name", ["DittoFedAvg", "DittoNoSuchRule", "DittoQFFLx", "__path__"])
def test_other_names_are_no_attribute_of_the_module(name):
    assert not hasattr(ditto_module, name)


def test_a_pairing_can_be_subclassed_and_pickled():
    from fairfl.strategies.ditto import DittoQFFL

    class MyDitto(DittoQFFL):
        rule_name = "MyDitto"

    mine = MyDitto(q=2.0, lam=0.3)
    assert (mine.params.q, mine.params.lam) == (2.0, 0.3)
    assert list(inspect.signature(MyDitto).parameters)[:2] == ["client_learning_rate", "q"]

    strategy = build_strategy("ditto+qffl", {"qffl-q": 2.0, "ditto-lambda": 0.3})
    assert pickle.loads(pickle.dumps(DittoQFFL)) is DittoQFFL
    copy = pickle.loads(pickle.dumps(strategy))
    assert type(copy) is DittoQFFL and copy.params == strategy.params


def test_a_pickled_pairing_loads_in_a_fresh_process():
    strategy = build_strategy("ditto+term", {"term-alpha": 0.1, "ditto-lambda": 0.2})
    script = (
        "import pickle, sys; s = pickle.load(sys.stdin.buffer); "
        "print(type(s).__module__, type(s).__qualname__, s.params.alpha, s.params.lam)"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(strategy),
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert loaded.stdout.decode().split() == ["fairfl.strategies.ditto", "DittoTERM", "0.1", "0.2"]


@dataclass(frozen=True)
class PluginParameters(RuleParameters):
    """A plug-in rule's hyperparameter."""

    tilt: float = real(1.0, key="plugin-tilt", lower=0.0)


class PluginRule(ReweightedStrategy):
    """A rule another distribution declares (FedAvg's weights)."""

    rule_name = "Plugin"
    Parameters = PluginParameters
    params: PluginParameters

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        counts = np.array([r.num_examples for r in replies], dtype=np.float64)
        return counts / counts.sum()


class PluginEntryPoint:
    """What importlib.metadata yields for ``plugin = mypkg.rules:PluginRule``."""

    name = "plugin"
    value = "mypkg.rules:PluginRule"
    dist = type("Distribution", (), {"name": "mypkg"})()

    def load(self) -> object:
        return PluginRule


def test_a_plugins_pairing_is_named_and_pickled_alike(monkeypatch):
    monkeypatch.setattr(registry_module, "entry_points", lambda *, group: [PluginEntryPoint()])
    monkeypatch.setattr(registry_module, "STRATEGIES", Rules())
    strategy = registry_module.build_strategy("ditto+plugin", {"plugin-tilt": 2.0})
    paired = type(strategy)
    assert (paired.__module__, paired.__qualname__) == (
        "fairfl.strategies.ditto",
        "DittoPluginRule",
    )
    assert ditto_module.DittoPluginRule is paired
    assert ditto_module.DittoPluginRuleParameters is paired.Parameters
    assert list(inspect.signature(paired).parameters)[:2] == ["tilt", "lam"]
    copy = pickle.loads(pickle.dumps(strategy))
    assert type(copy) is paired and copy.params.tilt == 2.0


def test_with_ditto_returns_the_registrys_class():
    assert with_ditto(QFFL, "ditto+qffl") is STRATEGIES["ditto+qffl"].strategy
