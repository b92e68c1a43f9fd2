"""Stop signals: SIGTERM and SIGINT turned into a clean stop of what a runner started.

:func:`stop_on_signals` raises :class:`Stopped` in the runner's main thread;
:func:`exit_on_signals` stops every process this one started and exits, for programs
whose runs go on in worker threads or processes; :func:`signals_deferred` holds them
back while a cleanup runs; :func:`stopped_message` is what a stopped runner says.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fairfl.simulation.processes import stop_started_processes

#: The signals :func:`stop_on_signals` turns into a clean stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """A stop signal arrived (raised by :func:`stop_on_signals`'s handler).

    A ``BaseException``, like ``KeyboardInterrupt``, so that ``except Exception`` blocks
    do not swallow it while it unwinds through the ``finally`` blocks that stop the
    processes a run started.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def code(self) -> int:
        """The exit code: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Turn SIGTERM/SIGINT into a :class:`Stopped` exception inside the block.

    The first signal raises; later ones are ignored, so that the cleanup the exception
    runs (stopping a SuperLink and Ray by PID takes seconds) is not cut short. The
    previous handlers are restored on exit. Main thread only.
    """

    def handler(signum: int, frame: Any) -> None:
        for number in signums:
            signal.signal(number, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {number: signal.signal(number, handler) for number in signums}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


@contextlib.contextmanager
def exit_on_signals(program: str, signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """On SIGTERM/SIGINT inside the block: stop what this process started, exit 128 + signum.

    For programs whose runs go on in worker threads or processes (``fairfl compare``):
    an exception in the main thread would wait for them. The handler says so on stderr,
    runs :func:`~fairfl.simulation.processes.stop_started_processes` (a run's checkpoint
    of its last finished round stays on disk) and ends the process with ``os._exit``.
    Later signals are ignored while it stops things. The previous handlers are restored
    on exit from the block.
    """

    def handler(signum: int, frame: Any) -> None:
        for number in signums:
            signal.signal(number, signal.SIG_IGN)
        print(
            f"{program}: stopped by {signal.Signals(signum).name}; stopping every process "
            "it started",
            file=sys.stderr,
            flush=True,
        )
        stop_started_processes()
        sys.stdout.flush()
        os._exit(128 + signum)

    previous = {number: signal.signal(number, handler) for number in signums}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


@contextlib.contextmanager
def signals_deferred(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Hold back ``signums`` inside the block; one that arrived is delivered on exit."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stopped_message(stop: Stopped, out_dir: Path | None) -> str:
    """What a runner stopped by a signal says: the signal and the checkpoint to resume from."""
    text = f"{stop}; every process the run started is stopped"
    if out_dir is None:
        return text
    checkpoint = out_dir / "checkpoint.npz"
    if not checkpoint.is_file():
        return f"{text}; no round finished, so there is no checkpoint in {out_dir}"
    from fairfl.server.checkpoint import load_checkpoint

    finished = load_checkpoint(checkpoint).server_round
    return (
        f"{text}; checkpoint after round {finished}: {checkpoint} "
        f"(continue with -c \"resume-from='{checkpoint}'\")"
    )
