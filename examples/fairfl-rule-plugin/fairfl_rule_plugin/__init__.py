"""A fair aggregation rule for fairfl, shipped by a distribution of its own."""

from fairfl_rule_plugin.rules import MyRule, MyRuleParameters, power_weights

__all__ = ["MyRule", "MyRuleParameters", "power_weights"]
