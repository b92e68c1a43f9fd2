"""The rule kit: parameters dataclasses, one validator family, a registry read from them."""

from __future__ import annotations

import math
import runpy
import tomllib
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from numpy.typing import NDArray

from fairfl.contract import ModelLayout, TrainReply, read_train_reply
from fairfl.strategies import TERM, EquitableFL, FedAvg, ReweightedStrategy
from fairfl.strategies import registry as registry_module
from fairfl.strategies.core.params import (
    NoParameters,
    ParameterError,
    RuleParameters,
    Spec,
    choice,
    flag,
    integer,
    real,
)
from fairfl.strategies.core.rounds import TrainRound
from fairfl.strategies.registry import (
    STRATEGIES,
    RuleRegistryError,
    Rules,
    build_strategy,
)
from tests.conftest import make_reply

ROOT = Path(__file__).resolve().parents[3]
LAYOUT = ModelLayout.of(ArrayRecord({"0": Array(np.zeros(2, np.float32))}))


def read(message: Any) -> TrainReply:
    """A validated reply, as intake hands it on."""
    return read_train_reply(
        message, LAYOUT, ("loss-before-training",), loss_key="loss-before-training"
    )


def run_config_defaults() -> dict[str, Any]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return pyproject["tool"]["flwr"]["app"]["config"]


# ------------------------------------------------------------------ one validator family
@pytest.mark.parametrize(
    ("spec", "value", "message"),
    [
        (Spec("real", lower=0.0), -1.0, "x must be >= 0, got -1.0"),
        (Spec("real", lower=0.0, lower_open=True), 0.0, "x must be > 0, got 0.0"),
        (Spec("real", upper=1.0), 1.5, "x must be <= 1, got 1.5"),
        (Spec("real", upper=1.0, upper_open=True), 1.0, "x must be < 1, got 1.0"),
        (Spec("real"), math.inf, "x must be a finite number, got inf"),
        (Spec("real"), math.nan, "x must be a finite number, got nan"),
        (Spec("real"), "0.1", "x must be a finite number, got '0.1'"),
        (Spec("real"), True, "x must be a finite number, got True"),
        (Spec("real"), None, "x must be a finite number, got None"),
        (Spec("integer", lower=1), 0, "x must be an int >= 1, got 0"),
        (Spec("integer", lower=1), 2.0, "x must be an int >= 1, got 2.0"),
        (Spec("integer", lower=0, upper=3), 4, r"x must be an int in \[0, 3\], got 4"),
        (Spec("integer"), False, "x must be an int, got False"),
        (Spec("flag"), 1, "x must be a bool, got 1"),
        (Spec("flag"), "yes", "x must be a bool, got 'yes'"),
        (Spec("choice", options=("a", "b")), "c", r"x must be one of \('a', 'b'\), got 'c'"),
        (Spec("choice", options=("a", "b")), True, r"x must be one of \('a', 'b'\), got True"),
        (Spec("text"), "", "x must be a non-empty str, got ''"),
    ],
)
def test_spec_refuses_with_one_message_family(spec, value, message):
    with pytest.raises(ParameterError, match=f"^{message}$") as caught:
        spec.check("x", value)
    assert caught.value.name == "x"


def test_spec_normalises_and_accepts_bounds():
    assert Spec("real", lower=0.0).check("x", 0) == 0.0
    assert isinstance(Spec("real").check("x", 3), float)
    assert Spec("real", optional=True).check("x", None) is None
    assert Spec("integer", lower=0, upper=3).check("x", 3) == 3
    assert Spec("choice", options=("a",)).check("x", "a") == "a"


@dataclass(frozen=True)
class ToyParameters(RuleParameters):
    """A rule's declaration as a rule author writes it."""

    rate: float = real(0.5, key="toy-rate", lower=0.0, upper=1.0, grid=(0.1, 0.5))
    steps: int = integer(2, key="toy-steps", lower=1)
    mode: str = choice("a", ("a", "b"), key="toy-mode")
    verbose: bool = flag(False, key=None)

    def check(self) -> None:
        if self.mode == "b" and self.rate > 0.5:
            raise ParameterError("rate", f"rate must be <= 0.5 in mode 'b', got {self.rate!r}")


def test_parameters_declare_keys_defaults_grid_and_settings():
    assert ToyParameters.run_config_keys() == {
        "toy-rate": "rate",
        "toy-steps": "steps",
        "toy-mode": "mode",
    }
    assert ToyParameters.defaults() == {"toy-rate": 0.5, "toy-steps": 2, "toy-mode": "a"}
    assert ToyParameters.specs()["rate"].grid == (0.1, 0.5)
    assert ToyParameters(rate=1).settings() == {
        "rate": 1.0,
        "steps": 2,
        "mode": "a",
        "verbose": False,
    }
    assert ToyParameters.keywords({"toy-rate": 0.2, "other": 1}) == {"rate": 0.2}
    with pytest.raises(FrozenInstanceError):
        ToyParameters().rate = 0.1  # type: ignore[misc]


def test_parameters_check_every_field_and_between_fields():
    with pytest.raises(ParameterError, match=r"^steps must be an int >= 1, got 0$"):
        ToyParameters(steps=0)
    with pytest.raises(ParameterError, match=r"^rate must be <= 0.5 in mode 'b', got 0.9$"):
        ToyParameters(rate=0.9, mode="b")


def test_a_field_declared_without_the_kit_is_refused():
    @dataclass(frozen=True)
    class Bare(RuleParameters):
        rate: float = 0.5

    with pytest.raises(TypeError, match=r"Bare.rate must be declared with"):
        Bare()


# ------------------------------------------------------------------ every rule alike
def real_fields() -> list[tuple[str, str, str]]:
    return [
        (name, field_name, spec.key)
        for name, rule in STRATEGIES.items()
        for field_name, spec in rule.strategy.Parameters.specs().items()
        if spec.kind == "real" and spec.key is not None
    ]


@pytest.mark.parametrize(("rule", "field_name", "key"), real_fields())
@pytest.mark.parametrize("value", [math.inf, math.nan, "0.1", True])
def test_every_rule_refuses_non_finite_and_wrong_types_naming_the_key(rule, field_name, key, value):
    with pytest.raises(ValueError, match=f"^{field_name} must be a finite number, got "):
        STRATEGIES[rule].strategy(**{field_name: value})
    expected = rf"^run config {key} \(rule {rule}\): {field_name} must be a finite number, got "
    with pytest.raises(ValueError, match=expected):
        build_strategy(rule, {key: value})


def test_the_issue_examples_are_refused_alike():
    # Before the kit: proximal_mu=inf built, "0.1" raised TypeError, TERM's inf ValueError.
    for build in (
        lambda: EquitableFL(proximal_mu=math.inf),
        lambda: EquitableFL(proximal_mu="0.1"),
    ):
        with pytest.raises(ValueError, match=r"^proximal_mu must be a finite number, got "):
            build()
    with pytest.raises(ValueError, match=r"^alpha must be a finite number, got inf$"):
        TERM(alpha=math.inf)


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_summary_settings_come_from_the_parameters(rule):
    strategy = STRATEGIES[rule].strategy()
    declared = strategy.params.settings()
    settings = strategy.settings()
    for name, value in declared.items():
        if name in settings and not isinstance(settings[name], str):
            assert settings[name] == value, name
        assert getattr(strategy.params, name) == value


def test_pyproject_run_config_is_in_step_with_the_declarations():
    # A rule's keys are all in [tool.flwr.app.config] with their declared defaults, or
    # none is (a rule added as one module takes its defaults from its dataclass).
    config = run_config_defaults()
    declared: dict[str, Any] = {}
    for name, rule in STRATEGIES.items():
        own = {key: default for key, default in rule.defaults().items() if key != "lr"}
        listed = [key for key in own if key in config]
        assert not listed or len(listed) == len(own), f"{name}: only {listed} in pyproject"
        for key in listed:
            assert config[key] == own[key], f"{name}: {key}"
        for key, default in own.items():
            assert declared.setdefault(key, default) == default, f"{key}: two defaults"
    prefixes = {key.split("-", 1)[0] for key in declared}
    stray = [k for k in config if k.split("-", 1)[0] in prefixes and k not in declared]
    assert not stray, f"[tool.flwr.app.config] keys no rule declares: {stray}"
    assert {"term-alpha", "rcfl-alpha", "fedmgda-epsilon"} <= config.keys()


# ------------------------------------------------------------------ the registry
def test_the_registry_is_read_from_the_modules_declarations():
    rules = registry_module.builtin_rules()
    assert next(iter(rules)) == "fedavg"
    assert rules["term"].strategy is TERM
    assert rules["term"].parameters == {"term-alpha": "alpha"}
    for name, spec in rules.items():
        assert spec.strategy.registry_name == name
        assert spec.source == "fairfl"


@dataclass(frozen=True)
class ThirdPartyParameters(RuleParameters):
    """A third-party rule's hyperparameter."""

    tilt: float = real(1.0, key="myrule-tilt", lower=0.0)


class ThirdPartyRule(ReweightedStrategy):
    """A rule another distribution declares: FedAvg weights scaled by (1 + tilt)."""

    rule_name = "MyRule"
    Parameters = ThirdPartyParameters
    params: ThirdPartyParameters

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        counts = np.array([r.num_examples for r in replies], dtype=np.float64)
        return counts / counts.sum()


class FakeDistribution:
    name = "mypkg"


class FakeEntryPoint:
    """What importlib.metadata yields for ``myrule = mypkg.rules:MyRule``."""

    dist = FakeDistribution()

    def __init__(self, name: str, target: object) -> None:
        self.name = name
        self.value = "mypkg.rules:MyRule"
        self.target = target

    def load(self) -> object:
        return self.target


def installed(monkeypatch, *entries: FakeEntryPoint) -> Rules:
    def entry_points(*, group: str) -> list[FakeEntryPoint]:
        assert group == "fairfl.rules"
        return list(entries)

    monkeypatch.setattr(registry_module, "entry_points", entry_points)
    rules = Rules()
    monkeypatch.setattr(registry_module, "STRATEGIES", rules)
    return rules


def test_an_installed_rule_is_built_like_a_builtin(monkeypatch):
    rules = installed(monkeypatch, FakeEntryPoint("myrule", ThirdPartyRule))
    assert rules["myrule"].source == "mypkg"
    assert rules["myrule"].defaults() == {"myrule-tilt": 1.0}
    strategy = registry_module.build_strategy("myrule", {"myrule-tilt": 2, "term-alpha": 9})
    assert isinstance(strategy, ThirdPartyRule)
    assert strategy.settings() == {"tilt": 2.0}
    with pytest.raises(
        ValueError, match=r"^run config myrule-tilt \(rule myrule\): tilt must be >= 0, got -1"
    ):
        registry_module.build_strategy("myrule", {"myrule-tilt": -1})


def test_an_installed_rule_clashing_with_a_builtin_is_refused(monkeypatch):
    rules = installed(monkeypatch, FakeEntryPoint("term", ThirdPartyRule))
    assert rules["term"].strategy is TERM  # the built-in stays
    assert rules.broken == {
        "term": "entry point 'term' = 'mypkg.rules:MyRule' of mypkg (fairfl.rules): the name "
        "'term' is already a built-in rule (fairfl.strategies.term.TERM); rename the entry point"
    }


def test_an_entry_point_that_is_no_rule_is_refused(monkeypatch):
    rules = installed(monkeypatch, FakeEntryPoint("myrule", len))
    with pytest.raises(RuleRegistryError, match="must name a FairStrategy subclass"):
        rules["myrule"]


class BrokenEntryPoint(FakeEntryPoint):
    """An installed plug-in whose module fails to import (a dependency is missing)."""

    def load(self) -> object:
        raise ModuleNotFoundError("No module named 'mypkg_dependency'")


def test_a_plugin_that_fails_to_import_never_blocks_the_other_rules(monkeypatch, capsys, caplog):
    # Issue 47, item 8: one broken plug-in made every rule raise and `fairfl rules` crash.
    from fairfl import cli

    rules = installed(
        monkeypatch, BrokenEntryPoint("badrule", None), FakeEntryPoint("myrule", ThirdPartyRule)
    )
    reason = (
        "entry point 'badrule' = 'mypkg.rules:MyRule' of mypkg (fairfl.rules): cannot be "
        "loaded: ModuleNotFoundError: No module named 'mypkg_dependency'"
    )
    assert "fedavg" in rules and "myrule" in rules and "ditto+myrule" in rules
    assert "badrule" not in rules and "badrule" not in list(rules)
    assert rules.broken == {"badrule": reason}
    assert f"rule plug-in left out: {reason}" in caplog.text
    assert isinstance(registry_module.build_strategy("fedavg", {}), FedAvg)
    with pytest.raises(RuleRegistryError, match="cannot be loaded: ModuleNotFoundError"):
        rules["badrule"]
    with pytest.raises(ValueError, match=r"^run config strategy 'badrule': entry point 'badrule'"):
        registry_module.build_strategy("badrule", {})
    assert cli.main(["rules"]) == 0
    out = capsys.readouterr().out
    listing = out.splitlines()
    assert listing[0].startswith("rule ") and listing[1].startswith("fedavg ")
    # The reason is wrapped to the listing's 100 columns.
    assert " ".join(f"badrule (broken) {reason}".split()) in " ".join(out.split())


def test_a_rule_without_hyperparameters_declares_none():
    assert FedAvg.Parameters is NoParameters
    assert STRATEGIES["fedavg"].defaults() == {}


# ------------------------------------------------------------------ the loss-reweighting base
def test_code_lines_leave_out_docstrings_comments_and_blank_lines():
    script = runpy.run_path(str(ROOT / "scripts" / "rule_code_lines.py"))
    source = (
        '"""Module."""\n\nimport os  # why\n\n\ndef f():\n    """Doc.\n\n    More."""\n'
        "    return 1\n"
    )
    assert script["code_lines"](source) == 3  # import, def, return


def test_each_loss_rule_module_is_at_most_40_code_lines():
    script = runpy.run_path(str(ROOT / "scripts" / "rule_code_lines.py"))
    for name in script["LOSS_RULES"]:
        source = (ROOT / "fairfl" / "strategies" / f"{name}.py").read_text()
        assert script["code_lines"](source) <= 40, name


def test_the_round_object_is_immutable():
    replies = [
        make_reply(1, [np.ones(2, np.float32)], {"num-examples": 1, "loss-before-training": 2.0}),
        make_reply(2, [np.ones(2, np.float32)], {"num-examples": 3, "loss-before-training": 1.0}),
    ]
    round_ = TrainRound.of(4, [read(r) for r in replies], "loss-before-training")
    np.testing.assert_array_equal(round_.shares, [0.25, 0.75])
    np.testing.assert_array_equal(round_.loss_values, [2.0, 1.0])
    assert round_.client_keys == ("node-1", "node-2")
    with pytest.raises(ValueError, match="read-only"):
        round_.shares[0] = 1.0
    with pytest.raises(FrozenInstanceError):
        round_.server_round = 5  # type: ignore[misc]


def test_a_weights_function_returns_its_diagnostics_and_the_base_records_them():
    # TERM with α = 0: the weights are p = (1/4, 3/4), the tilted loss the mean 0.25*2 + 0.75*1.
    strategy = TERM(alpha=0.0)
    replies = [
        make_reply(1, [np.ones(2, np.float32)], {"num-examples": 1, "loss-before-training": 2.0}),
        make_reply(2, [np.ones(2, np.float32)], {"num-examples": 3, "loss-before-training": 1.0}),
    ]
    round_ = TrainRound.of(1, [read(r) for r in replies], "loss-before-training")
    weights, diagnostics = strategy.weights(round_)
    np.testing.assert_allclose(weights, [0.25, 0.75])
    assert diagnostics == {"term-tilted-loss": pytest.approx(1.25)}
    assert strategy.train_records == {}  # returned, not written
    strategy.lambdas(1, [read(r) for r in replies])
    assert strategy.train_records[1].diagnostics == {"term-tilted-loss": pytest.approx(1.25)}
