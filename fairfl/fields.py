"""Declared settings: each value's key, default, range and message, written once.

A frozen dataclass of settings declares its fields with :func:`real`, :func:`integer`,
:func:`flag`, :func:`choice`, :func:`text` or :func:`function`. Each field's
:class:`Spec` is the one place its bound lives: building the dataclass (a subclass of
:class:`Fields`) checks every declared value with it and refuses a bad one
with a :class:`ParameterError` that names the field and the run-config key, whose
message is the bound's one text (``<subject> must be <bound>, got <value>``).

One family for every layer: a rule's hyperparameters
(:class:`fairfl.strategies.core.params.RuleParameters`), the options every rule takes
(:class:`fairfl.strategies.core.options.StrategyOptions`), the run settings
(:class:`fairfl.settings.RunSettings`) and the telemetry settings
(:class:`fairfl.telemetry.config.TelemetrySettings`). A class says only who a message is
about (:meth:`Fields.subject`: the field, or ``run config <key>``) and whether its
messages state an int's type (:attr:`Fields.states_type`). A leaf module: it imports
nothing of fairfl, so every layer may use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

#: Where a field's :class:`Spec` sits in its ``dataclasses.field`` metadata.
SPEC = "fairfl-spec"

Kind = Literal["real", "integer", "flag", "choice", "text", "function"]


class ParameterError(ValueError):
    """A setting's value refused; :attr:`name` is its field, :attr:`key` its run-config key.

    Parameters
    ----------
    name : str
        The field (constructor keyword) whose value is refused.
    message : str
        The whole message (``alpha must be >= 0, got -1.0``).
    key : str | None
        The field's run-config key (``term-alpha``), ``None`` if a run config cannot set
        it: callers name the key from this, never from the message's text.
    """

    def __init__(self, name: str, message: str, key: str | None = None) -> None:
        self.name = name
        self.key = key
        super().__init__(message)


@dataclass(frozen=True)
class Spec:
    """What a setting may be, and where a run config sets it.

    Attributes
    ----------
    kind : {"real", "integer", "flag", "choice", "text", "function"}
        A finite float, an int, a bool, one of :attr:`options`, a non-empty str, or a
        callable (``None`` allowed).
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
    note : str
        Said after the bound in a message (``" (0: off)"``).
    span : bool
        Whether a real bounded on both sides states its whole range (``in [0, 1]``)
        rather than the side it broke (``<= 1``).
    off : float | None
        A value outside the range that switches the setting off (``0 (off) or >= 1``).
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
    note: str = ""
    span: bool = False
    off: float | None = None

    def tuning(self) -> tuple[Any, ...]:
        """The values ``fairfl compare --tune`` searches by default (empty: none)."""
        return self.grid if self.tune is None else self.tune

    def check(self, name: str, value: Any, *, subject: str = "", typed: bool = True) -> Any:
        """Return ``value`` normalised (an int real as float), or raise :class:`ParameterError`.

        Messages start with ``subject`` (default ``name``) and end with ``got <value>``,
        the same for every setting: ``must be a finite number``, ``must be an int``,
        ``must be a bool``, ``must be one of (...)``, ``must be >= 0`` / ``> 0`` /
        ``<= 1`` / ``< 1`` / ``in [0, 1]``, then :attr:`note`. ``typed``: whether an
        int's message says ``an int`` (a run config's types are checked when parsed).
        """
        who = subject or name

        def refuse(requirement: str) -> ParameterError:
            return ParameterError(name, f"{who} must be {requirement}, got {value!r}", self.key)

        if value is None and self.optional:
            return None
        if self.off is not None and value == self.off and not isinstance(value, bool):
            return float(value) if self.kind == "real" else value
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise refuse("a bool")
            return value
        if self.kind == "text":
            if not isinstance(value, str) or not value:
                raise refuse("a non-empty str")
            return value
        if self.kind == "function":
            if value is not None and not callable(value):
                raise refuse("callable or None")
            return value
        if self.kind == "choice":
            if isinstance(value, bool) or value not in self.options:
                raise refuse(f"one of {self.options!r}")
            return value
        if self.kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int) or not self._within(value):
                kind = "an int" if typed or not isinstance(value, int) else ""
                raise refuse(f"{kind}{self._range()}{self.note}".strip())
            return value
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise refuse("a finite number")
        if not self._within(value):
            raise refuse(self._broken(value) + self.note)
        return float(value)

    def _broken(self, value: float) -> str:
        """The bound ``value`` breaks, for a message (the whole range if :attr:`span`)."""
        if self.span and self.lower is not None and self.upper is not None:
            return self._range().strip()
        low = self.lower is not None and (
            value < self.lower or (self.lower_open and value == self.lower)
        )
        if low:
            bound = f"{'>' if self.lower_open else '>='} {self.lower:g}"
        else:
            bound = f"{'<' if self.upper_open else '<='} {self.upper:g}"
        return f"{self.off:g} (off) or {bound}" if self.off is not None else bound

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
        elif self.kind == "function":
            text = "a callable"
        else:
            text = self._range().strip().removeprefix("in ") or "any finite number"
        return f"{text}, or unset" if self.optional else text

    def _number(self, bound: float) -> str:
        """A bound as a message shows it: an int's in full, a real's with ``:g``."""
        return str(int(bound)) if self.kind == "integer" else f"{bound:g}"

    def _range(self) -> str:
        if self.lower is not None and self.upper is not None:
            left, right = "(" if self.lower_open else "[", ")" if self.upper_open else "]"
            return f" in {left}{self._number(self.lower)}, {self._number(self.upper)}{right}"
        if self.lower is not None:
            return f" {'>' if self.lower_open else '>='} {self._number(self.lower)}"
        if self.upper is not None:
            return f" {'<' if self.upper_open else '<='} {self._number(self.upper)}"
        return ""


def declared(default: Any, spec: Spec) -> Any:
    """A field with ``spec``, declared once elsewhere and shared by two dataclasses."""
    return field(default=default, metadata={SPEC: spec})


def real(
    default: float | Any,
    *,
    key: str | None,
    lower: float | None = None,
    upper: float | None = None,
    lower_open: bool = False,
    upper_open: bool = False,
    optional: bool = False,
    grid: tuple[float, ...] = (),
    tune: tuple[float, ...] | None = None,
    note: str = "",
    span: bool = False,
    off: float | None = None,
) -> Any:
    """A finite float setting (an int is accepted and stored as a float).

    ``default`` may be ``None`` (with ``optional``) or :data:`dataclasses.MISSING`: a
    setting the caller must give.
    """
    spec = Spec(
        "real", key, lower, upper, lower_open, upper_open, (), optional, grid, tune, note, span, off
    )
    return field(default=default, metadata={SPEC: spec})


def integer(
    default: int | Any,
    *,
    key: str | None,
    lower: int | None = None,
    upper: int | None = None,
    grid: tuple[int, ...] = (),
    tune: tuple[int, ...] | None = None,
    note: str = "",
) -> Any:
    """An int setting in ``[lower, upper]`` (bools are refused).

    ``default`` may be :data:`dataclasses.MISSING`: a setting the caller must give.
    """
    spec = Spec("integer", key, lower, upper, grid=grid, tune=tune, note=note)
    return field(default=default, metadata={SPEC: spec})


def flag(default: bool, *, key: str | None) -> Any:
    """A bool setting (``1`` or ``"yes"`` are refused)."""
    return field(default=default, metadata={SPEC: Spec("flag", key)})


def choice(default: str, options: tuple[str, ...], *, key: str | None) -> Any:
    """One of ``options`` (a ``Literal`` in the field's annotation)."""
    return field(default=default, metadata={SPEC: Spec("choice", key, options=options)})


def text(default: str, *, key: str | None) -> Any:
    """A non-empty str whose allowed values are only known at run time (a QP backend)."""
    return field(default=default, metadata={SPEC: Spec("text", key)})


def function(*, key: str | None = None) -> Any:
    """A callable or ``None`` (default ``None``): a hook such as a metric aggregation."""
    return field(default=None, metadata={SPEC: Spec("function", key)})


@dataclass(frozen=True)
class Fields:
    """Base of a frozen dataclass of declared settings that checks itself when built.

    Fields declared with the functions of this module are checked, in declaration
    order, by their :class:`Spec` (ints given for reals stored as floats); fields
    without a spec are plain values checked elsewhere. :meth:`check` adds constraints
    between fields.
    """

    #: Set by the dataclass machinery; listed for type checkers.
    __dataclass_fields__: ClassVar[dict[str, Any]]
    #: Whether an integer's message says ``an int`` (a run config's types are checked
    #: when it is parsed, so its messages state the bound only).
    states_type: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for name, spec in self.specs().items():
            subject = self.subject(name, spec)
            value = spec.check(name, getattr(self, name), subject=subject, typed=self.states_type)
            object.__setattr__(self, name, value)
        self.check()

    def check(self) -> None:
        """Constraints between fields; raise :class:`ParameterError` naming one (none here)."""

    @classmethod
    def subject(cls, name: str, spec: Spec) -> str:
        """Who a message about field ``name`` is about: the field itself here."""
        return name

    @classmethod
    def spec(cls, name: str) -> Spec | None:
        """The :class:`Spec` of field ``name`` (``None``: a plain field)."""
        spec = cls.__dataclass_fields__[name].metadata.get(SPEC)
        return spec if isinstance(spec, Spec) else None

    @classmethod
    def specs(cls) -> dict[str, Spec]:
        """Each declared field's :class:`Spec`, by field name, in declaration order."""
        found = {item.name: cls.spec(item.name) for item in fields(cls)}
        return {name: spec for name, spec in found.items() if spec is not None}

    @classmethod
    def run_config_keys(cls) -> dict[str, str]:
        """Run-config key -> field name, for the declared fields a run config may set."""
        return {spec.key: name for name, spec in cls.specs().items() if spec.key is not None}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The default of each declared field a run config may set, by run-config key."""
        defaults = {item.name: item.default for item in fields(cls)}
        return {key: defaults[name] for key, name in cls.run_config_keys().items()}

    @classmethod
    def keywords(cls, run_config: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor keywords a run config sets (keys the class lacks are ignored)."""
        return {
            name: run_config[key]
            for key, name in cls.run_config_keys().items()
            if key in run_config
        }
