"""Secure aggregation (SecAgg+) for fairfl's rules on Flower's Message API.

The client half is a Flower mod (:func:`~fairfl.secagg.client.secaggplus_mod`, which a
ClientApp adds: ``ClientApp(mods=[secaggplus_mod])``); the server half runs each round's
stages over a ``Grid`` (:mod:`fairfl.secagg.server`); each rule declares its form
(:mod:`fairfl.secagg.forms`); both agree on :mod:`fairfl.secagg.protocol`. The package
imports only Flower, NumPy and the contract: servers without torch and clients without
the strategies both load it.
"""

from fairfl.secagg.client import secaggplus_mod
from fairfl.secagg.config import MODES, SecAggSettings
from fairfl.secagg.forms import SecureForm

__all__ = ["MODES", "SecAggSettings", "SecureForm", "secaggplus_mod"]
