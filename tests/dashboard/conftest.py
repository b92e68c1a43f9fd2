"""Fixtures of the dashboard tests: rounds.jsonl lines, and headless Chromium."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dash", reason="the dashboard needs the 'dashboard' extra (Dash, Plotly)")


def round_line(
    number: int,
    accuracies: Sequence[float | None],
    sizes: Sequence[int] | None = None,
    *,
    run_id: str = "run-a",
    **extra: Any,
) -> dict[str, Any]:
    """A rounds.jsonl entry: client i is partition i on node 1001 + i."""
    sizes = sizes or [10] * len(accuracies)
    return {
        "run_id": run_id,
        "round": number,
        "wall_time": 0.5 * number,
        "clients": [
            {
                "node_id": 1001 + i,
                "partition_id": i,
                "num_examples": n,
                "eval_acc": a,
                "eval_loss": 1.0,
            }
            for i, (a, n) in enumerate(zip(accuracies, sizes, strict=True))
        ],
        "metrics": {},
        "sampled": {"train": len(accuracies), "evaluate": len(accuracies)},
        "evaluate_dropped": {},
        **extra,
    }


def encode(*entries: dict[str, Any]) -> bytes:
    """JSON lines, each ending in a newline."""
    return b"".join(json.dumps(entry).encode() + b"\n" for entry in entries)


def write_comparison(
    folder: Path,
    seeds: Mapping[str, int],
    rounds: int,
    accuracies: Callable[[str, int, int], Sequence[float]],
    **manifest: Any,
) -> Path:
    """A ``fairfl compare`` folder: ``runs/<rule>/seed-<s>/rounds.jsonl`` and its manifest.

    ``seeds``: how many seeds each rule ran; ``accuracies(rule, seed, round)``: the
    clients' accuracies of that round; ``manifest``: further manifest keys (``baseline``).
    """
    runs = []
    for rule, count in seeds.items():
        for seed in range(count):
            run = folder / "runs" / rule / f"seed-{seed}"
            run.mkdir(parents=True)
            entries = [round_line(r, accuracies(rule, seed, r)) for r in range(1, rounds + 1)]
            (run / "rounds.jsonl").write_bytes(encode(*entries))
            runs.append(
                {
                    "label": rule,
                    "rule": rule,
                    "seed": seed,
                    "status": "ok",
                    "dir": f"runs/{rule}/seed-{seed}",
                    "config": {"strategy": rule, "seed": seed},
                }
            )
    (folder / "manifest.json").write_text(json.dumps({"version": 1, **manifest, "runs": runs}))
    return folder


@pytest.fixture
def line() -> Callable[..., dict[str, Any]]:
    return round_line


@pytest.fixture
def lines() -> Callable[..., bytes]:
    return encode


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Debian Chromium; skipped only where it is missing outside root CI."""
    from fairfl.dashboard.browser import chromium, find_chromium

    pytest.importorskip("selenium", reason="Selenium is in the 'dev' extra")
    if find_chromium() is None:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(
                "chromium and chromedriver are missing, although CI runs scripts/test.sh as "
                "root, which installs them (apt-get install chromium chromium-driver)"
            )
        pytest.skip(
            "no chromium/chromedriver: install Debian's chromium and chromium-driver "
            "(scripts/test.sh does, as root)"
        )
    driver = chromium(1280, 900)
    try:
        yield driver
    finally:
        driver.quit()
