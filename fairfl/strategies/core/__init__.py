"""The round machinery every rule shares: the orchestrator and its collaborators.

:class:`~fairfl.strategies.core.base.FairStrategy` runs a round with one module per job:
:mod:`.options` (the settings every rule takes), :mod:`.params` (the rule kit: a rule's
hyperparameters), :mod:`.intake` (one pass over a phase's replies), :mod:`.client_keys`
and :mod:`.identity` (which client a reply speaks for), :mod:`.sampling` (which nodes
train), :mod:`.rounds` (the immutable :class:`~fairfl.strategies.core.rounds.TrainRound`
and the deferred state changes), :mod:`.reweighted` (the bases of the unified form),
:mod:`.aggregation`, :mod:`.records`, :mod:`.evaluation`, :mod:`.errors`,
:mod:`.defences` and :mod:`.private_rounds` (a round under central DP).

The rules (:mod:`fairfl.strategies`) import this package; it imports no rule
(``.importlinter``). A rule author imports the kit from :mod:`fairfl.strategies`.
"""
