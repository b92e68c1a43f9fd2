"""What the dashboard answers first: who is worst off, and who gains or loses between runs.

Pure functions of :class:`~fairfl.dashboard.follow.RunFollower` data, so the page and its
tests read the same numbers. Accuracies are fractions in [0, 1], as in ``rounds.jsonl``.

- :func:`headline` -- one run's worst client, worst 10 %, mean, and how each moved since
  the run's first evaluated round.
- :func:`compare_clients` -- each client's latest accuracy under two runs, and
  :func:`gainers_and_losers` -- the clients that moved most between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fairfl.dashboard.follow import RoundData, RunFollower
from fairfl.metrics import jain_index


@dataclass(frozen=True)
class Headline:
    """One run at a glance (accuracies as fractions; changes in the same unit).

    Parameters
    ----------
    run : str
        The run's label.
    round : int
        Its latest evaluated round.
    first_round : int
        Its first evaluated round (the changes are measured from it).
    clients : int
        Clients evaluated in the latest round.
    worst_client : int
        Key (partition id, else node id) of the latest round's worst client; ties go to
        the smallest key.
    worst_accuracy : float
        That client's accuracy.
    worst_10 : float
        Mean of the worst 10 % of clients (at least one) in the latest round.
    mean : float
        Unweighted mean client accuracy in the latest round.
    std : float
        Population standard deviation of the client accuracies in the latest round.
    jain : float
        Jain's index of the client accuracies in the latest round (1: all equal).
    change_worst, change_worst_10, change_mean : float
        Latest minus first evaluated round, of the worst accuracy (whoever is worst in
        each), the worst 10 % and the mean.
    """

    run: str
    round: int
    first_round: int
    clients: int
    worst_client: int
    worst_accuracy: float
    worst_10: float
    mean: float
    std: float
    jain: float
    change_worst: float
    change_worst_10: float
    change_mean: float


def _evaluated(run: RunFollower) -> list[RoundData]:
    """The run's rounds that evaluated at least one client with a known accuracy."""
    return [r for r in run.rounds if r.clients.size and not np.isnan(r.accuracy).all()]


def _worst_10(accuracy: NDArray[np.float64]) -> float:
    known = np.sort(accuracy[~np.isnan(accuracy)])
    return float(known[: max(1, math.floor(0.1 * known.size))].mean())


def headline(run: RunFollower) -> Headline | None:
    """The run's headline numbers; None while no round evaluated a client.

    Clients whose accuracy is missing (NaN) in a round are left out of that round's
    numbers, so one unreadable client does not blank the headline.
    """
    evaluated = _evaluated(run)
    if not evaluated:
        return None
    first, last = evaluated[0], evaluated[-1]
    known = ~np.isnan(last.accuracy)
    keys, accuracy = last.clients[known], last.accuracy[known]
    # lexsort's last key is the primary one: lowest accuracy, then smallest key
    worst = int(np.lexsort((keys, accuracy))[0])
    first_accuracy = first.accuracy[~np.isnan(first.accuracy)]
    return Headline(
        run=run.label,
        round=last.round,
        first_round=first.round,
        clients=int(keys.size),
        worst_client=int(keys[worst]),
        worst_accuracy=float(accuracy[worst]),
        worst_10=_worst_10(last.accuracy),
        mean=float(accuracy.mean()),
        std=float(accuracy.std()),
        jain=jain_index(accuracy),
        change_worst=float(accuracy[worst] - first_accuracy.min()),
        change_worst_10=_worst_10(last.accuracy) - _worst_10(first.accuracy),
        change_mean=float(accuracy.mean() - first_accuracy.mean()),
    )


def latest_accuracy(run: RunFollower) -> dict[int, float]:
    """Each client's latest known accuracy in the run (rounds that evaluated it)."""
    latest: dict[int, float] = {}
    for entry in run.rounds:
        for key, value in zip(entry.clients.tolist(), entry.accuracy.tolist(), strict=True):
            if not math.isnan(value):
                latest[int(key)] = float(value)
    return latest


@dataclass(frozen=True)
class ClientComparison:
    """Each client's latest accuracy under two runs (clients both runs evaluated).

    Parameters
    ----------
    run_a, run_b : str
        The two runs' labels.
    clients : NDArray[np.int64]
        Client keys, sorted.
    accuracy_a, accuracy_b : NDArray[np.float64]
        Their latest known accuracies under each run.
    """

    run_a: str
    run_b: str
    clients: NDArray[np.int64]
    accuracy_a: NDArray[np.float64]
    accuracy_b: NDArray[np.float64]

    @property
    def gain(self) -> NDArray[np.float64]:
        """Accuracy under run B minus under run A, per client."""
        return self.accuracy_b - self.accuracy_a


def compare_clients(run_a: RunFollower, run_b: RunFollower) -> ClientComparison:
    """Pair each client's latest accuracy under ``run_a`` with its accuracy under ``run_b``.

    Runs of the same federation (same data, partitions and seed) share client keys, so
    a client is the same device in both; clients evaluated by one run only are left out.
    """
    a, b = latest_accuracy(run_a), latest_accuracy(run_b)
    clients = np.array(sorted(a.keys() & b.keys()), dtype=np.int64)
    return ClientComparison(
        run_a=run_a.label,
        run_b=run_b.label,
        clients=clients,
        accuracy_a=np.array([a[c] for c in clients.tolist()], dtype=np.float64),
        accuracy_b=np.array([b[c] for c in clients.tolist()], dtype=np.float64),
    )


def gainers_and_losers(
    comparison: ClientComparison, count: int = 5
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The ``count`` clients that gain most and lose most under run B, with their change.

    Gainers have a positive change, largest first; losers a negative one, largest loss
    first; ties by client key. A client whose accuracy did not change is in neither.
    """
    gain = comparison.gain
    clients = comparison.clients.tolist()
    order = np.lexsort((comparison.clients, -gain))  # largest gain first, then key
    gainers = [(clients[i], float(gain[i])) for i in order if gain[i] > 0][:count]
    order = np.lexsort((comparison.clients, gain))  # largest loss first, then key
    losers = [(clients[i], float(gain[i])) for i in order if gain[i] < 0][:count]
    return gainers, losers
