"""Waits that follow the machine: a measured round time with a generous ceiling (issue 41).

A fixed guess of how long a deployed round takes fails on a busy machine (2 cores beside
other work: rounds 3-5 times slower, nodes that missed a fixed 30 s round-timeout) and
wastes time on an idle one. :func:`calibrate` instead times one round of the federation
under test, on the machine as it is now: a 1-round run that waits for every SuperNode
(``min-available-nodes``) and no round-timeout below the ceiling, so its round is a
healthy one with the ClientApps' first start in it (the slowest round of a run). The
tests derive their round-timeouts and run limits from it (:class:`Pace`); the ceilings
only stop a run that hangs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from localfed import LocalFederation, read_rounds

#: The calibration run's own limits: a round that takes longer than this is a hang.
CALIBRATION_ROUND_CEILING = 600.0
CALIBRATION_RUN_CEILING = 1200.0


@dataclass(frozen=True)
class Pace:
    """How long this federation takes, as measured by :func:`calibrate`.

    Attributes
    ----------
    round_s : float
        The calibration run's round (training and evaluation of every node), seconds.
    run_s : float
        The whole calibration run (``flwr run`` to its end: the ServerApp's start, the
        round, the results), seconds.
    """

    round_s: float
    run_s: float

    def round_timeout(
        self, factor: float = 4.0, floor: float = 30.0, ceiling: float = 300.0
    ) -> float:
        """A ``round-timeout`` (per phase) a healthy node meets: ``factor`` rounds.

        ``floor`` keeps it above the polls' jitter on a fast machine (Flower polls every
        3 s); ``ceiling`` bounds how long a round waits for a node that never answers.
        """
        return min(ceiling, max(floor, factor * self.round_s))

    def run_timeout(self, rounds: int, extra: float = 0.0, ceiling: float = 3600.0) -> float:
        """A limit for a ``rounds``-round run: its start, then each phase at its timeout.

        ``extra`` adds waits the test causes (a crashed node answered only when its
        heartbeats lapse, a SuperLink restart); ``ceiling`` is where a run has hung.
        """
        return min(ceiling, 2 * self.run_s + 2 * rounds * self.round_timeout() + extra)


def calibrate(fed: LocalFederation, config: dict[str, Any], name: str = "calibration") -> Pace:
    """Time one round of ``config``'s rule on ``fed``, every SuperNode taking part.

    Raises
    ------
    AssertionError
        If the run fails or a node did not train or evaluate (the federation is not
        whole: every test's premise).
    """
    calibration = {
        **config,
        "num-server-rounds": 1,
        "evaluate-every": 1,
        "min-available-nodes": fed.supernodes,
        "round-timeout": CALIBRATION_ROUND_CEILING,
    }
    started = time.monotonic()
    done = fed.submit_run(calibration, name=name, timeout=CALIBRATION_RUN_CEILING)
    run_s = time.monotonic() - started
    assert done.returncode == 0, f"the calibration run failed\n{fed.log_tails()}"
    (line,) = read_rounds(fed.out_dir(name))
    assert len(line["train"]["weights"]) == len(line["clients"]) == fed.supernodes, line
    pace = Pace(round_s=float(line["wall_time"]), run_s=run_s)
    print(
        f"pace: a round {pace.round_s:.1f}s, a 1-round run {pace.run_s:.1f}s -> "
        f"round-timeout {pace.round_timeout():.0f}s"
    )
    return pace
