"""A sampling profiler for a process Flower starts: which thread runs which code.

py-spy is not available, and ``cProfile`` sees one thread, while Flower's simulation
process (``flwr-simulation``) runs the ServerApp in one thread and the simulation
engine's loops in others. :func:`start` samples every thread of the process in a daemon
thread: every ``interval`` seconds it reads each Python thread's stack
(``sys._current_frames``) and its scheduler state (``/proc/self/task/<tid>/stat``); a
thread found running (state ``R``) counts one sample for its innermost frame and one for
the innermost frame in Flower's, Ray's or fairfl's code (``site``). Each thread's CPU
seconds come from the same ``stat`` file. The result is rewritten as JSON every few
seconds (the process may be stopped by a signal) and at exit.

``bench_engine_scale.py --profile`` starts it in ``flwr-simulation`` through a generated
``sitecustomize.py`` (see :func:`sitecustomize_source`).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

#: Packages whose frames name a ``site`` (the first such frame from the top of the stack).
SITE_PACKAGES = ("/flwr/", "/fairfl/", "/ray/", "/grpc/", "/torch/")
#: Seconds between two rewrites of the result file.
WRITE_EVERY = 5.0
TICKS = os.sysconf("SC_CLK_TCK")


def _label(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for package in SITE_PACKAGES:
        if package in path:
            path = package.strip("/") + "/" + path.split(package, 1)[1]
            break
    else:
        path = Path(path).name
    return f"{path}:{getattr(code, 'co_qualname', code.co_name)}"


def _site(frame: FrameType | None) -> str:
    while frame is not None:
        if any(package in frame.f_code.co_filename for package in SITE_PACKAGES):
            return _label(frame)
        frame = frame.f_back
    return "(other)"


def _task_stat(native_id: int) -> tuple[str, float]:
    """A thread's scheduler state and its CPU seconds (user + system)."""
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return "?", 0.0
    return fields[0], (int(fields[11]) + int(fields[12])) / TICKS


class Sampler:
    """Samples every Python thread of this process; see the module docstring."""

    def __init__(self, out: Path, interval: float) -> None:
        self.out = out
        self.interval = interval
        self.started = time.time()
        self.samples = 0
        self.top: dict[str, Counter[str]] = {}
        self.site: dict[str, Counter[str]] = {}
        self.running: Counter[str] = Counter()
        self.cpu: dict[str, float] = {}
        self.lock = threading.Lock()

    def sample(self) -> None:
        """Take one sample of every thread but this one."""
        threads = {t.ident: t for t in threading.enumerate()}
        me = threading.get_ident()
        with self.lock:
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                thread = threads.get(ident)
                if ident == me or thread is None or thread.native_id is None:
                    continue
                state, cpu = _task_stat(thread.native_id)
                name = thread.name
                self.cpu[name] = max(self.cpu.get(name, 0.0), cpu)
                if state != "R":
                    continue
                self.running[name] += 1
                self.top.setdefault(name, Counter())[_label(frame)] += 1
                self.site.setdefault(name, Counter())[_site(frame)] += 1

    def write(self) -> None:
        """Write the samples so far (atomically) to :attr:`out`."""
        with self.lock:
            threads: dict[str, Any] = {
                name: {
                    "cpu_s": round(self.cpu.get(name, 0.0), 2),
                    "running_samples": self.running[name],
                    "top": dict(self.top.get(name, Counter()).most_common(15)),
                    "site": dict(self.site.get(name, Counter()).most_common(15)),
                }
                for name in sorted(self.cpu, key=lambda n: -self.cpu[n])
            }
            result = {
                "pid": os.getpid(),
                "interval_s": self.interval,
                "seconds": round(time.time() - self.started, 1),
                "samples": self.samples,
                "threads": threads,
            }
        partial = self.out.with_name(f".{self.out.name}.tmp")
        partial.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        partial.replace(self.out)

    def loop(self) -> None:
        """Sample until the process ends, writing every :data:`WRITE_EVERY` seconds."""
        next_write = time.monotonic() + WRITE_EVERY
        while True:
            self.sample()
            if time.monotonic() >= next_write:
                self.write()
                next_write = time.monotonic() + WRITE_EVERY
            time.sleep(self.interval)


def start(out: Path, interval: float = 0.05) -> Sampler:
    """Start sampling this process in a daemon thread; results go to ``out``."""
    sampler = Sampler(out, interval)
    threading.Thread(target=sampler.loop, name="thread-sampler", daemon=True).start()
    atexit.register(sampler.write)
    return sampler


def sitecustomize_source(program: str, out_env: str) -> str:
    """A ``sitecustomize.py`` that starts :func:`start` in processes running ``program``.

    The sample file is ``$<out_env>/<program>-<pid>.json``; other processes (Ray's
    workers see the same ``PYTHONPATH``) only read their command line.
    """
    here = str(Path(__file__).resolve().parent)
    return f"""import os, sys
_out = os.environ.get({out_env!r})
try:
    _argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
except OSError:
    _argv = []
if _out and any(os.path.basename(a.decode(errors="replace")) == {program!r} for a in _argv[:2]):
    sys.path.insert(0, {here!r})
    import _thread_sampler
    from pathlib import Path
    _thread_sampler.start(Path(_out) / f"{program}-{{os.getpid()}}.json")
"""
