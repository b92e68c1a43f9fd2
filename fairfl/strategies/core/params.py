"""The rule kit: a rule's hyperparameters, declared once as a frozen dataclass.

A rule declares its hyperparameters as a subclass of :class:`RuleParameters` whose
fields are made with :func:`real`, :func:`integer`, :func:`flag`, :func:`choice` or
:func:`text`.
Each field carries its default, its range or options, the paper's grid and the run-config
key it is read from. That one declaration drives

- validation (building one: :class:`fairfl.fields.Fields`): one family of checks with the same
  messages for every rule (``alpha must be >= 0, got -1.0``); wrong types and non-finite
  numbers are refused naming the field, as :class:`ParameterError`;
- the rule's :meth:`~fairfl.strategies.core.base.FairStrategy.settings` and ``summary()``;
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
import typing
from collections.abc import Collection, Iterable
from dataclasses import dataclass, fields
from typing import Any

from fairfl.fields import (
    SPEC,
    Fields,
    Kind,
    ParameterError,
    Spec,
    choice,
    flag,
    integer,
    real,
    text,
)

__all__ = [
    "SPEC",
    "Kind",
    "NoParameters",
    "ParameterError",
    "RuleParameters",
    "Spec",
    "check_keywords",
    "choice",
    "flag",
    "integer",
    "keyword_parameters",
    "real",
    "spec_of",
    "text",
]


@dataclass(frozen=True)
class RuleParameters(Fields):
    """Base of every rule's hyperparameters: a frozen dataclass that checks itself.

    Subclasses declare fields with :func:`real`, :func:`integer`, :func:`flag` or
    :func:`choice` (the kit of :mod:`fairfl.fields`, shared with the run settings) and
    may override :meth:`check` for constraints between fields (PropFair's
    ``epsilon < M``). Building one validates every field (raising
    :class:`ParameterError`, a ``ValueError``, naming it) and normalises ints given for
    reals to floats. Every field must be declared with the kit.
    """

    @classmethod
    def spec(cls, name: str) -> Spec:
        """The :class:`Spec` of field ``name`` (:func:`spec_of`: every field has one)."""
        return spec_of(name, cls)

    def settings(self) -> dict[str, Any]:
        """The values by field name, in declaration order (for ``summary()`` and results)."""
        return {item.name: getattr(self, item.name) for item in fields(self)}

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


@dataclass(frozen=True)
class NoParameters(RuleParameters):
    """The parameters of a rule without hyperparameters of its own (FedAvg)."""


def keyword_parameters(settings: type[Any]) -> list[inspect.Parameter]:
    """A dataclass's fields as keyword-only parameters, with defaults and annotations.

    The pieces of a rule's constructor signature (its ``__signature__``): the fields of
    its :class:`RuleParameters` and of :class:`~fairfl.strategies.core.options.StrategyOptions`.
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
            f"{parameters.__name__}.{name} must be declared with fairfl.strategies.core.params's "
            "real(), integer(), flag() or choice()"
        )
    return spec
