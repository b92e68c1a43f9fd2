"""The privacy account of a run: Google's ``dp-accounting`` RDP accountant, one event per round.

Each released round is a Poisson-subsampled Gaussian mechanism
(``PoissonSampledDpEvent(q, GaussianDpEvent(z_eff))``, add-or-remove-one adjacency),
composed in Rényi DP (Mironov, "Rényi Differential Privacy", CSF 2017) and converted to
(ε, δ) by ``dp_accounting.rdp.RdpAccountant`` (the moments accountant of Abadi et al.,
"Deep Learning with Differential Privacy", CCS 2016, in its RDP form).

Why these events: z_eff differs by round (the rule's weights change), which RDP composes
exactly, round by round. The sampling rate q is ``fraction-train``, as in McMahan et al.'s
DP-FedAvg accounting (ICLR 2018). Flower samples a *fixed-size* subset uniformly, not a
Poisson one, so for q < 1 the amplification is the conventional approximation that
McMahan et al. and TensorFlow Federated make, not an exact bound; with ``fraction-train =
1`` (q = 1) no amplification is claimed and the account is exact. The account's state is
the list of per-round (q, z_eff): JSON-able for a checkpoint, and recomposing it in order
gives the same ε bit for bit.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def round_event(sampling_rate: float, noise_multiplier: float) -> Any:
    """One round's DP event: the Gaussian mechanism, Poisson-subsampled when q < 1.

    Parameters
    ----------
    sampling_rate : float
        q in (0, 1], the chance a client takes part in the round.
    noise_multiplier : float
        z_eff > 0, the noise's standard deviation over the round's sensitivity.
    """
    import dp_accounting

    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sampling_rate >= 1:
        return gaussian
    return dp_accounting.PoissonSampledDpEvent(sampling_rate, gaussian)


def epsilon_of(rounds: list[tuple[float, float]], delta: float) -> float:
    """ε at ``delta`` of the composition of ``rounds`` ((q, z_eff) per round), RDP.

    Equal rounds are composed as one ``SelfComposedDpEvent`` (RDP adds up, so this is
    the same account): the subsampled Gaussian's RDP costs ~0.2 s per event, and a run
    with a fixed z_eff then costs one event whatever its length. 0 for no round; ``inf``
    when a round had no noise (z_eff = 0).
    """
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    if any(z <= 0 for _, z in rounds):
        return float("inf")
    counts = Counter(rounds)  # first-seen order: the same list composes the same way
    accountant = RdpAccountant()
    for (q, z), count in counts.items():
        accountant.compose(dp_accounting.SelfComposedDpEvent(round_event(q, z), count))
    return float(accountant.get_epsilon(delta))


@dataclass
class PrivacyAccount:
    """The rounds released so far and ε at δ after them.

    Attributes
    ----------
    delta : float
        δ at which ε is reported (``dp-delta``).
    rounds : list[tuple[float, float]]
        (q, z_eff) of each released round, in order.
    """

    delta: float
    rounds: list[tuple[float, float]] = field(default_factory=list)

    def compose(self, sampling_rate: float, noise_multiplier: float) -> float:
        """Add a released round; return ε so far."""
        self.rounds.append((float(sampling_rate), float(noise_multiplier)))
        return self.epsilon()

    def epsilon(self) -> float:
        """ε at :attr:`delta` after the rounds released so far (:func:`epsilon_of`)."""
        return epsilon_of(self.rounds, self.delta)

    def state(self) -> dict[str, Any]:
        """JSON-able state for a checkpoint."""
        return {"delta": self.delta, "rounds": [list(r) for r in self.rounds]}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` output (a checkpoint of a run without DP: nothing)."""
        self.rounds = [(float(q), float(z)) for q, z in state.get("rounds", [])]
