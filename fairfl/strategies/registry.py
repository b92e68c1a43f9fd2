"""Rules by name, so a run config can choose one (``strategy = "semivred"``).

The registry is read from the rules' own declarations, not written by hand:

- every public module of :mod:`fairfl.strategies` is imported, and each class defined
  there that sets :attr:`~fairfl.strategies.core.base.FairStrategy.registry_name` in its own
  body is a built-in rule (listed FedAvg first, then by module and definition order);
- every entry point of the group ``fairfl.rules`` that another installed distribution
  declares (``myrule = mypkg.rules:MyRule``) is a rule too, under the entry point's name.
  An entry point that cannot be loaded (its import fails, its name clashes with a
  built-in, it names no rule) is set aside with its reason (:attr:`Rules.broken`,
  listed by ``fairfl rules``, one WARNING): it never blocks the other rules, and asking
  for it by name raises :class:`RuleRegistryError` with that reason;
- ``ditto+<rule>`` is Ditto with any of those rules as its global rule
  (:func:`fairfl.strategies.ditto.with_ditto`): built on first use, not listed when the
  registry is iterated (the rules are).

A rule's run-config keys, their defaults and their validation come from its parameters
dataclass (:mod:`fairfl.strategies.core.params`). The run config (``[tool.flwr.app.config]``
in pyproject.toml) must declare every built-in key with its default; a test checks that.
Everything is loaded on first use, so importing :mod:`fairfl.strategies` loads no other
distribution's code.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import pkgutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from fairfl.strategies.core.base import FairStrategy
from fairfl.strategies.core.params import ParameterError, RuleParameters

logger = logging.getLogger(__name__)

#: The run-config key of every rule's ``client_sampling`` (uniform or ∝ n_k).
SAMPLING_KEY = "sampling"
#: The entry-point group other distributions declare their rules in.
ENTRY_POINT_GROUP = "fairfl.rules"
#: Modules of :mod:`fairfl.strategies` that hold no rule (not imported by the scan).
_NOT_RULES = frozenset({"core", "registry"})


class RuleRegistryError(ValueError):
    """A rule declaration the registry refuses (a name clash, not a rule class)."""


@dataclass(frozen=True)
class RuleSpec:
    """A rule the registry can build.

    Parameters
    ----------
    name : str
        Registry name (the ``strategy`` run-config value).
    strategy : type[FairStrategy]
        The strategy class.
    source : str (default: "fairfl")
        Where the rule comes from: ``"fairfl"`` or the distribution declaring it.
    """

    name: str
    strategy: type[FairStrategy]
    source: str = "fairfl"

    @property
    def parameters(self) -> Mapping[str, str]:
        """Run-config key -> constructor keyword, for the rule's hyperparameters."""
        return self.strategy.Parameters.run_config_keys()

    def defaults(self) -> dict[str, Any]:
        """Defaults of the rule's hyperparameters, by run-config key."""
        return self.strategy.Parameters.defaults()


class Rules(Mapping[str, RuleSpec]):
    """The registry: a read-only mapping of rule name -> :class:`RuleSpec`, loaded on first use."""

    def __init__(self) -> None:
        self._rules: dict[str, RuleSpec] | None = None
        self._broken: dict[str, str] = {}

    def _loaded(self) -> dict[str, RuleSpec]:
        if self._rules is None:
            rules, broken = builtin_rules(), {}
            for entry in entry_points(group=ENTRY_POINT_GROUP):
                try:
                    spec = external_rule(entry, rules)
                except Exception as error:  # any plug-in's failure costs that plug-in only
                    broken[entry.name] = (
                        error.args[0]
                        if isinstance(error, RuleRegistryError)
                        else f"{entry_point_name(entry)}: cannot be loaded: "
                        f"{type(error).__name__}: {error}"
                    )
                    logger.warning("rule plug-in left out: %s", broken[entry.name])
                    continue
                rules[spec.name] = spec
            self._rules, self._broken = rules, broken
        return self._rules

    @property
    def broken(self) -> dict[str, str]:
        """The installed rule plug-ins that could not be loaded: why, by entry-point name."""
        self._loaded()
        return dict(self._broken)

    def __getitem__(self, name: str) -> RuleSpec:
        rules = self._loaded()
        if name in rules:
            return rules[name]
        if name in self._broken:
            raise RuleRegistryError(self._broken[name])
        paired = pairing(name, rules)
        if paired is None:
            raise KeyError(name)
        return paired

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a rule or a pairing (a broken plug-in's name is neither)."""
        rules = self._loaded()
        return name in rules or (isinstance(name, str) and pairing(name, rules) is not None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    def reload(self) -> None:
        """Read the declarations again on next use (after installing a distribution)."""
        self._rules = None


def builtin_rules() -> dict[str, RuleSpec]:
    """The rules declared in :mod:`fairfl.strategies`'s own modules.

    Raises
    ------
    RuleRegistryError
        If two classes declare one ``registry_name``.
    """
    package = importlib.import_module("fairfl.strategies")
    found: list[tuple[str, type[FairStrategy]]] = []
    for module_info in pkgutil.iter_modules(package.__path__):
        if module_info.name.startswith("_") or module_info.name in _NOT_RULES:
            continue
        module = importlib.import_module(f"fairfl.strategies.{module_info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, FairStrategy)
                and value.__module__ == module.__name__
                and vars(value).get("registry_name") is not None
            ):
                found.append((module_info.name, value))
    # FedAvg, every rule's baseline, first; the rest by module, then definition order.
    found.sort(key=lambda item: item[1].registry_name != "fedavg")
    rules: dict[str, RuleSpec] = {}
    for _, strategy in found:
        name = str(strategy.registry_name)
        if name in rules:
            raise RuleRegistryError(
                f"rule name {name!r} is declared by both {rules[name].strategy.__qualname__} "
                f"and {strategy.__qualname__}"
            )
        rules[name] = RuleSpec(name, strategy)
    return rules


def external_rule(entry: EntryPoint, builtins: Mapping[str, RuleSpec]) -> RuleSpec:
    """The rule another distribution declares in the ``fairfl.rules`` entry-point group.

    Raises
    ------
    RuleRegistryError
        If its name is already a rule's, or it does not load a
        :class:`~fairfl.strategies.core.base.FairStrategy` subclass with a parameters
        dataclass derived from :class:`~fairfl.strategies.core.params.RuleParameters`.
    """
    where = entry_point_name(entry)
    if entry.name in builtins:
        clash = builtins[entry.name]
        owner = "a built-in rule" if clash.source == "fairfl" else f"a rule of {clash.source}"
        raise RuleRegistryError(
            f"{where}: the name {entry.name!r} is already {owner} "
            f"({clash.strategy.__module__}.{clash.strategy.__qualname__}); "
            "rename the entry point"
        )
    strategy = entry.load()
    if not (isinstance(strategy, type) and issubclass(strategy, FairStrategy)):
        raise RuleRegistryError(f"{where}: must name a FairStrategy subclass, got {strategy!r}")
    if not issubclass(strategy.Parameters, RuleParameters):
        raise RuleRegistryError(f"{where}: its Parameters must subclass RuleParameters")
    source = entry.dist.name if entry.dist is not None else "an unknown distribution"
    return RuleSpec(entry.name, strategy, source)


def entry_point_name(entry: EntryPoint) -> str:
    """How errors name an entry point: its name, value, distribution and group."""
    source = entry.dist.name if entry.dist is not None else "an unknown distribution"
    return f"entry point {entry.name!r} = {entry.value!r} of {source} ({ENTRY_POINT_GROUP})"


def pairing(name: str, rules: Mapping[str, RuleSpec]) -> RuleSpec | None:
    """The spec of ``ditto+<rule>`` for a rule of ``rules`` that trains no personal model.

    ``None`` for any other name (not a pairing, an unknown rule, or a rule such as
    ``ditto`` that already keeps personal models).
    """
    from fairfl.strategies.ditto import PAIRING_PREFIX, DittoPersonalisation, with_ditto

    if not isinstance(name, str) or not name.startswith(PAIRING_PREFIX):
        return None
    rule = rules.get(name.removeprefix(PAIRING_PREFIX))
    if rule is None or issubclass(rule.strategy, DittoPersonalisation):
        return None
    return RuleSpec(name, with_ditto(rule.strategy, name), rule.source)


def did_you_mean(name: object) -> str:
    """The suggestion for a name close to a registered rule's, or an empty string.

    The suggestion ends an error message: ``Did you mean 'qffl'?`` for ``qfl``. A
    ``ditto+<rule>`` pairing is matched on its rule: ``ditto+qfl`` gives ``ditto+qffl``.
    """
    from fairfl.strategies.ditto import PAIRING_PREFIX

    if not isinstance(name, str):
        return ""
    stem = name.removeprefix(PAIRING_PREFIX)
    close = difflib.get_close_matches(stem, list(STRATEGIES), n=1, cutoff=0.6)
    if not close:
        return ""
    return f". Did you mean {name[: len(name) - len(stem)] + close[0]!r}?"


#: Every rule, built-in and installed, by name.
STRATEGIES: Rules = Rules()


def build_strategy(name: str, run_config: Mapping[str, Any], **common: Any) -> FairStrategy:
    """Build the rule ``name`` with its hyperparameters from ``run_config``.

    Parameters
    ----------
    name : str
        A key of :data:`STRATEGIES`.
    run_config : Mapping[str, Any]
        The run config; keys the rule does not use are ignored. Its ``sampling``
        (``"uniform"`` or ``"size-proportional"``) is every rule's ``client_sampling``
        (:class:`~fairfl.strategies.core.base.FairStrategy`).
    **common
        Keyword arguments every rule takes (``fraction_train``, ``min_available_nodes``).

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the valid names), is an installed
        plug-in that failed to load (the message says why) or a hyperparameter
        is refused: the message starts with the run-config key, then the rule's own
        check (``run config term-alpha (rule term): alpha must be >= 0, got -1.0``).
    """
    if name not in STRATEGIES:
        if isinstance(name, str) and name in STRATEGIES.broken:
            raise ValueError(f"run config strategy {name!r}: {STRATEGIES.broken[name]}")
        raise ValueError(
            f"run config strategy must be one of {tuple(sorted(STRATEGIES))} or ditto+<rule> "
            f"for one of them that trains no personal model (ditto+qffl), got {name!r}"
            + did_you_mean(name)
        )
    spec = STRATEGIES[name]
    kwargs = spec.strategy.Parameters.keywords(run_config)
    if SAMPLING_KEY in run_config:
        kwargs["client_sampling"] = run_config[SAMPLING_KEY]
    try:
        return spec.strategy(**common, **kwargs)
    except ParameterError as error:
        # The error carries its run-config key (ParameterError.key): a hyperparameter's,
        # or sampling's, which the run config gave this rule.
        key = error.key
        if key in run_config and (key in spec.parameters or key == SAMPLING_KEY):
            raise ValueError(f"run config {key} (rule {name}): {error}") from error
        raise
