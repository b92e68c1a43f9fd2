"""Time of a second docs build with nothing changed, against the first (issue #50).

``bash scripts/docs.sh`` caches executed blocks' outputs by their program and everything
they run (``$FAIRFL_DOCS_CACHE``), and Sphinx keeps its own doctrees, so a build with
nothing changed should run no block again; the goal is warm / cold < 1/5. This benchmark
checks the revision out into a temporary clone (so that edits in the checkout meanwhile
change nothing between the two builds, and the checkout's ``build/docs`` and docs cache
are left alone), points ``FAIRFL_DOCS_CACHE`` at an empty temporary folder, runs
``bash scripts/docs.sh`` there twice (cold, then warm) and records both wall times, their
ratio, the machine, the load average and the revision. The clone uses the checkout's
``.venv`` and imports its own ``fairfl`` (``PYTHONPATH``). CI never runs this: a cold
build takes minutes and its time depends on the machine and its load.

    nice -n 10 .venv/bin/python benchmarks/bench_docs_build.py --json docs/results/docs-build.json
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`

from _report import load_1min, machine, write_json  # noqa: E402 (after sys.path)

GOAL = 0.2  # warm / cold
COMMAND = (
    "nice -n 10 .venv/bin/python benchmarks/bench_docs_build.py --json docs/results/docs-build.json"
)


def git(*args: str, cwd: Path = ROOT) -> str:
    """``git args`` in ``cwd``; its stdout, stripped."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def clone(revision: str, target: Path) -> None:
    """Check ``revision`` of this repository out into ``target``, with this ``.venv``.

    ``--shared`` borrows the objects of this repository (read only), so the clone takes
    seconds; nothing of this checkout is written.
    """
    git("clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(target))
    git("checkout", "--quiet", "--detach", revision, cwd=target)
    (target / ".venv").symlink_to((ROOT / ".venv").resolve(), target_is_directory=True)


def timed_build(source: Path, env: dict[str, str]) -> dict[str, float]:
    """Run ``bash scripts/docs.sh`` in ``source``; its wall time and the load around it.

    Raises
    ------
    SystemExit
        If the build fails (its output's tail is printed first).
    """
    load_before = load_1min()
    start = time.perf_counter()
    done = subprocess.run(
        ["bash", "scripts/docs.sh"], cwd=source, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        print(f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}", file=sys.stderr)
        raise SystemExit(f"bench_docs_build: the docs build exited with {done.returncode}")
    return {"seconds": seconds, "load_1min_before": load_before, "load_1min_after": load_1min()}


def render(result: dict[str, Any]) -> str:
    """The Markdown section of the benchmarks page for ``result``."""
    cold, warm = result["cold"], result["warm"]
    verdict = "meets" if result["ratio_warm_to_cold"] < result["goal"] else "misses"
    return "\n".join(
        [
            "**Docs build, a second with nothing changed**: `bash scripts/docs.sh` twice at "
            f"revision `{result['revision'][:12]}` ({result['date']}), with an empty "
            "executed-block cache before the first: "
            f"the second build took {result['ratio_warm_to_cold']:.3f} of the first "
            f"({verdict} the goal of < {result['goal']:g}).",
            "",
            "| build | wall time (s) | load average (1 min) before, after |",
            "| --- | ---: | --- |",
            f"| first (cold cache) | {cold['seconds']:.1f} | "
            f"{cold['load_1min_before']:.2f}, {cold['load_1min_after']:.2f} |",
            f"| second (nothing changed) | {warm['seconds']:.1f} | "
            f"{warm['load_1min_before']:.2f}, {warm['load_1min_after']:.2f} |",
            "",
            f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores. "
            f"From `docs/results/docs-build.json`, written by `{result['command']}`.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Build twice; print the ratio and return (and with ``--json``, write) the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revision", default="HEAD", help="the commit to build (default HEAD)")
    parser.add_argument("--json", dest="out", type=Path, default=None, help="write it here")
    args = parser.parse_args(argv)
    revision = git("rev-parse", "--verify", f"{args.revision}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="fairfl-docs-bench-") as scratch:
        source, cache = Path(scratch) / "src", Path(scratch) / "cache"
        cache.mkdir()
        clone(revision, source)
        env = {k: v for k, v in os.environ.items() if k not in ("FLWR_HOME", "PYTHONPATH")}
        env.update(FAIRFL_DOCS_CACHE=str(cache), PYTHONPATH=str(source))
        cold = timed_build(source, env)
        print(f"cold build: {cold['seconds']:.1f} s", flush=True)
        warm = timed_build(source, env)
    result = {
        "command": COMMAND,
        "revision": revision,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "cold": cold,
        "warm": warm,
        "ratio_warm_to_cold": warm["seconds"] / cold["seconds"],
        "goal": GOAL,
    }
    print(
        f"warm build: {warm['seconds']:.1f} s; warm / cold {result['ratio_warm_to_cold']:.3f} "
        f"(goal < {GOAL})"
    )
    if args.out is not None:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
