"""docs/figures/tensorboard.png: per-client accuracy and worst-10 % of a real run in TensorBoard.

Runs a small real federation in this process (FedAvg on digits, ``--clients`` clients
with a Dirichlet(0.3) split, ``--rounds`` rounds, ``telemetry = "tensorboard"``), starts
``tensorboard --logdir`` on a free loopback port, opens its scalars page in headless
Chromium (selenium, Debian's ``chromium`` and ``chromium-driver``) filtered to the
tags ``acc-worst-10`` and ``client-acc/*``, saves the screenshot, then stops TensorBoard
and the driver by PID and removes the run folder.

    nice .venv/bin/python scripts/tensorboard_screenshot.py --out docs/figures/tensorboard.png
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

from fairfl.simulation import run_inprocess  # noqa: E402
from fairfl.simulation.engine import free_port, stop, wait_for_port  # noqa: E402


def take(logdir: Path, out: Path, width: int, height: int) -> None:
    """Serve ``logdir`` with TensorBoard and screenshot its filtered scalars page."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    port = free_port()
    board = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "tensorboard"),
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, board, timeout=120.0)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
            options.add_argument(flag)
        options.add_argument(f"--window-size={width},{height}")
        service = Service(executable_path="/usr/bin/chromedriver")
        driver = webdriver.Chrome(service=service, options=options)
        try:
            driver.get(
                f"http://127.0.0.1:{port}/?darkMode=false#scalars&_smoothingWeight=0&tagFilter=worst-10%7Cclient-acc"
            )
            time.sleep(15)  # TensorBoard loads the runs, then draws each chart
            driver.save_screenshot(str(out))
        finally:
            driver.quit()
            if service.process is not None and service.process.poll() is None:
                stop(service.process)
    finally:
        stop(board)


def main(argv: list[str] | None = None) -> Path:
    """Run, screenshot, clean up; return the PNG's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "tensorboard.png")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1400)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="fairfl-tensorboard-"))
    try:
        run_inprocess(
            {
                "strategy": "fedavg",
                "dataset": "digits",
                "num-partitions": args.clients,
                "dirichlet-alpha": 0.3,
                "num-server-rounds": args.rounds,
                "local-epochs": 1,
                "lr": 0.05,
                "out-dir": str(work / "run"),
                "telemetry": "tensorboard",
            }
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        take(work / "run" / "telemetry" / "tensorboard", args.out, args.width, args.height)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"screenshot: {args.out}")
    return args.out


if __name__ == "__main__":
    main()
