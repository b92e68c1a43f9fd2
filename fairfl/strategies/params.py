"""The rule kit: a rule's hyperparameters, declared once as a frozen dataclass.

A rule declares its hyperparameters as a subclass of :class:`RuleParameters` whose
fields are made with :func:`real`, :func:`integer`, :func:`flag`, :func:`choice` or
:func:`text`.
Each field carries its default, its range or options, the paper's grid and the run-config
key it is read from. That one declaration drives

- validation (:meth:`RuleParameters.__post_init__`): one family of checks with the same
  messages for every rule (``alpha must be >= 0, got -1.0``); wrong types and non-finite
  numbers are refused naming the field, as :class:`ParameterError`;
- the rule's :meth:`~fairfl.strategies.base.FairStrategy.settings` and ``summary()``;
- the registry (:mod:`fairfl.strategies.registry`): run-config key -> keyword, the
  defaults, and the key named in an error (``run config term-alpha (rule term): ...``);
- the run-config defaults in ``pyproject.toml`` (a test keeps them in step).

Example (the whole declaration of TERM's one hyperparameter)::

    @dataclass(frozen=True)
    class TERMParameters(RuleParameters):
        alpha: float = real(0.5, key="term-alpha", lower=0.0, grid=(0.01, 0.1, 0.5, 1.0))
"""

from __future__ import annotations

import difflib
import inspect
import math
import typing
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

#: Where a field's :class:`Spec` sits in its ``dataclasses.field`` metadata.
SPEC = "fairfl-spec"

Kind = Literal["real", "integer", "flag", "choice", "text"]


class ParameterError(ValueError):
    """A hyperparameter value a rule refuses; :attr:`name` is the field it is about.

    Parameters
    ----------
    name : str
        The field (constructor keyword) whose value is refused.
    message : str
        The whole message, starting with ``name`` (``alpha must be >= 0, got -1.0``).
    """

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        super().__init__(message)


@dataclass(frozen=True)
class Spec:
    """What a hyperparameter may be, and where a run config sets it.

    Attributes
    ----------
    kind : {"real", "integer", "flag", "choice", "text"}
        A finite float, an int, a bool, one of :attr:`options`, or a non-empty str
        (checked further by the parameters' :meth:`RuleParameters.check`).
    key : str | None
        The run-config key (``term-alpha``); ``None`` for a constructor-only setting.
    lower, upper : float | None
        Bounds of a real or integer (``None``: unbounded), inclusive unless
        :attr:`lower_open` / :attr:`upper_open`.
    lower_open, upper_open : bool
        Whether the bound itself is refused.
    options : tuple[Any, ...]
        The allowed values of a choice.
    optional : bool
        Whether ``None`` is allowed (it stands for "not set", e.g. "take the run's lr").
    grid : tuple[Any, ...]
        The values the rule's paper searched (the docs, ``fairfl rules``); may be empty.
    tune : tuple[Any, ...] | None
        The values ``fairfl compare --tune`` searches by default when they are not
        :attr:`grid` (``None``: the paper's grid; ``()``: the default value only, not
        tuned); :meth:`tuning` gives the values searched.
    """

    kind: Kind
    key: str | None = None
    lower: float | None = None
    upper: float | None = None
    lower_open: bool = False
    upper_open: bool = False
    options: tuple[Any, ...] = ()
    optional: bool = False
    grid: tuple[Any, ...] = ()
    tune: tuple[Any, ...] | None = None

    def tuning(self) -> tuple[Any, ...]:
        """The values ``fairfl compare --tune`` searches by default (empty: none)."""
        return self.grid if self.tune is None else self.tune

    def check(self, name: str, value: Any) -> Any:
        """Return ``value`` normalised (an int real as float), or raise :class:`ParameterError`.

        Messages start with ``name`` and end with ``got <value>``, the same for every
        rule: ``must be a finite number``, ``must be an int``, ``must be a bool``,
        ``must be one of (...)``, ``must be >= 0`` / ``> 0`` / ``<= 1`` / ``< 1``.
        """
        if value is None and self.optional:
            return None
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise ParameterError(name, f"{name} must be a bool, got {value!r}")
            return value
        if self.kind == "text":
            if not isinstance(value, str) or not value:
                raise ParameterError(name, f"{name} must be a non-empty str, got {value!r}")
            return value
        if self.kind == "choice":
            if isinstance(value, bool) or value not in self.options:
                raise ParameterError(name, f"{name} must be one of {self.options!r}, got {value!r}")
            return value
        if self.kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParameterError(name, f"{name} must be an int{self._range()}, got {value!r}")
            if not self._within(value):
                raise ParameterError(name, f"{name} must be an int{self._range()}, got {value!r}")
            return value
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ParameterError(name, f"{name} must be a finite number, got {value!r}")
        if self.lower is not None and (
            value < self.lower or (self.lower_open and value == self.lower)
        ):
            relation = ">" if self.lower_open else ">="
            raise ParameterError(name, f"{name} must be {relation} {self.lower:g}, got {value!r}")
        if self.upper is not None and (
            value > self.upper or (self.upper_open and value == self.upper)
        ):
            relation = "<" if self.upper_open else "<="
            raise ParameterError(name, f"{name} must be {relation} {self.upper:g}, got {value!r}")
        return float(value)

    def _within(self, value: float) -> bool:
        low = (
            self.lower is None
            or value > self.lower
            or (not self.lower_open and value == self.lower)
        )
        high = (
            self.upper is None
            or value < self.upper
            or (not self.upper_open and value == self.upper)
        )
        return low and high

    def allowed(self) -> str:
        """The values a run config may give, for people: ``>= 0``, ``one of ('a', 'b')``."""
        if self.kind == "choice":
            text = f"one of {self.options!r}"
        elif self.kind == "flag":
            text = "true or false"
        elif self.kind == "text":
            text = "a non-empty string"
        else:
            text = self._range().strip().removeprefix("in ") or "any finite number"
        return f"{text}, or unset" if self.optional else text

    def _range(self) -> str:
        if self.lower is not None and self.upper is not None:
            left, right = "(" if self.lower_open else "[", ")" if self.upper_open else "]"
            return f" in {left}{self.lower:g}, {self.upper:g}{right}"
        if self.lower is not None:
            return f" {'>' if self.lower_open else '>='} {self.lower:g}"
        if self.upper is not None:
            return f" {'<' if self.upper_open else '<='} {self.upper:g}"
        return ""


def real(
    default: float | None,
    *,
    key: str | None,
    lower: float | None = None,
    upper: float | None = None,
    lower_open: bool = False,
    upper_open: bool = False,
    optional: bool = False,
    grid: tuple[float, ...] = (),
    tune: tuple[float, ...] | None = None,
) -> Any:
    """A finite float hyperparameter (an int is accepted and stored as a float)."""
    spec = Spec("real", key, lower, upper, lower_open, upper_open, (), optional, grid, tune)
    return field(default=default, metadata={SPEC: spec})


def integer(
    default: int,
    *,
    key: str | None,
    lower: int | None = None,
    upper: int | None = None,
    grid: tuple[int, ...] = (),
    tune: tuple[int, ...] | None = None,
) -> Any:
    """An int hyperparameter in ``[lower, upper]`` (bools are refused)."""
    spec = Spec("integer", key, lower, upper, grid=grid, tune=tune)
    return field(default=default, metadata={SPEC: spec})


def flag(default: bool, *, key: str | None) -> Any:
    """A bool hyperparameter (``1`` or ``"yes"`` are refused)."""
    return field(default=default, metadata={SPEC: Spec("flag", key)})


def choice(default: str, options: tuple[str, ...], *, key: str | None) -> Any:
    """One of ``options`` (a ``Literal`` in the field's annotation)."""
    return field(default=default, metadata={SPEC: Spec("choice", key, options=options)})


def text(default: str, *, key: str | None) -> Any:
    """A non-empty str whose allowed values are only known at run time (a QP backend)."""
    return field(default=default, metadata={SPEC: Spec("text", key)})


@dataclass(frozen=True)
class RuleParameters:
    """Base of every rule's hyperparameters: a frozen dataclass that checks itself.

    Subclasses declare fields with :func:`real`, :func:`integer`, :func:`flag` or
    :func:`choice` and may override :meth:`check` for constraints between fields
    (PropFair's ``epsilon < M``). Building one validates every field (raising
    :class:`ParameterError`, a ``ValueError``, naming it) and normalises ints given for
    reals to floats.
    """

    #: Set by the dataclass machinery; listed for type checkers.
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def __post_init__(self) -> None:
        for item in fields(self):
            value = spec_of(item.name, type(self)).check(item.name, getattr(self, item.name))
            object.__setattr__(self, item.name, value)
        self.check()

    def check(self) -> None:
        """Constraints between fields; raise :class:`ParameterError` naming one (none here)."""

    def settings(self) -> dict[str, Any]:
        """The values by field name, in declaration order (for ``summary()`` and results)."""
        return {item.name: getattr(self, item.name) for item in fields(self)}

    @classmethod
    def specs(cls) -> dict[str, Spec]:
        """Each field's :class:`Spec`, by field name, in declaration order."""
        return {item.name: spec_of(item.name, cls) for item in fields(cls)}

    @classmethod
    def run_config_keys(cls) -> dict[str, str]:
        """Run-config key -> field name, for the fields a run config may set."""
        return {spec.key: name for name, spec in cls.specs().items() if spec.key is not None}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The default of each field a run config may set, by run-config key."""
        defaults = {item.name: item.default for item in fields(cls)}
        return {key: defaults[name] for key, name in cls.run_config_keys().items()}

    @classmethod
    def tuning_grid(cls, num_server_rounds: int) -> dict[str, tuple[Any, ...]]:
        """The values ``fairfl compare --tune`` searches by default, by run-config key.

        Each field's declared grid (:meth:`Spec.tuning`), or the values
        :meth:`run_length_grid` gives for a run of ``num_server_rounds`` rounds, in
        declaration order; keys with no values are left out (not tuned). A plug-in
        rule's declared ``grid=`` is its default tuning grid like a built-in rule's.
        """
        by_length = cls.run_length_grid(num_server_rounds)
        grid = {}
        for spec in cls.specs().values():
            if spec.key is not None:
                values = by_length.get(spec.key, spec.tuning())
                if values:
                    grid[spec.key] = tuple(values)
        return grid

    @classmethod
    def run_length_grid(cls, num_server_rounds: int) -> dict[str, tuple[Any, ...]]:
        """Grid axes whose values depend on the run's length, by run-config key (none here).

        A rule whose paper searches a value over the whole run (FedMGDA+'s total step
        decay) overrides this; its values replace the field's declared grid.
        """
        return {}

    @classmethod
    def keywords(cls, run_config: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor keywords a run config sets (keys the rule lacks are ignored)."""
        return {
            name: run_config[key]
            for key, name in cls.run_config_keys().items()
            if key in run_config
        }


@dataclass(frozen=True)
class NoParameters(RuleParameters):
    """The parameters of a rule without hyperparameters of its own (FedAvg)."""


def keyword_parameters(settings: type[Any]) -> list[inspect.Parameter]:
    """A dataclass's fields as keyword-only parameters, with defaults and annotations.

    The pieces of a rule's constructor signature (its ``__signature__``): the fields of
    its :class:`RuleParameters` and of :class:`~fairfl.strategies.options.StrategyOptions`.
    Annotations are resolved to types; where one names something imported for type
    checkers only (a plug-in's ``if TYPE_CHECKING:``), every field keeps its annotation's
    text, as ``inspect`` shows an unresolved annotation, instead of failing.

    Parameters
    ----------
    settings : type
        A dataclass whose every field has a default.

    Returns
    -------
    list[inspect.Parameter]
        One per field, in declaration order.
    """
    try:
        hints = typing.get_type_hints(settings)
    except NameError:
        hints = {}
    return [
        inspect.Parameter(
            item.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=item.default,
            annotation=hints.get(item.name, item.type),
        )
        for item in fields(settings)
    ]


def check_keywords(owner: str, given: Iterable[str], accepted: Collection[str]) -> None:
    """Refuse a keyword that is not in ``accepted``, as Python refuses one of a signature.

    Parameters
    ----------
    owner : str
        The callable's name in the message (the rule class: ``TERM``).
    given : Iterable[str]
        The keywords received.
    accepted : Collection[str]
        The keywords the callable takes.

    Raises
    ------
    TypeError
        Naming ``owner`` and the first keyword not accepted, and the accepted keyword
        closest to it if one is close (``TERM() got an unexpected keyword argument
        'alpah'. Did you mean 'alpha'?``).
    """
    for name in given:
        if name not in accepted:
            close = difflib.get_close_matches(name, accepted, n=1)
            hint = f". Did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}{hint}")


def spec_of(name: str, parameters: type[RuleParameters]) -> Spec:
    """The :class:`Spec` of field ``name``.

    Raises
    ------
    TypeError
        If the field was declared without :func:`real`, :func:`integer`, :func:`flag`
        or :func:`choice` (a rule author's mistake, found when the class is used).
    """
    spec = parameters.__dataclass_fields__[name].metadata.get(SPEC)
    if not isinstance(spec, Spec):
        raise TypeError(
            f"{parameters.__name__}.{name} must be declared with fairfl.strategies.params's "
            "real(), integer(), flag() or choice()"
        )
    return spec
