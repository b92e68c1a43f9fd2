"""The ClientApp's local epoch against a bare PyTorch training loop, same model and data.

``fairfl.client.training.train_local`` (one epoch of minibatch SGD, seeded shuffling,
optional batch objective / proximal term off) is timed against the plainest loop that
does the same steps: ``randperm`` order, ``SGD``, ``cross_entropy``, ``backward``,
``step``. Both start from the same weights and see the same batches, so they also end
at the same weights (checked). Separately, the extra no-grad pass every loss-based rule
needs (``mean_loss``: F_k(w^t) on the whole local split, measured before training) is
timed and printed as a fraction of the epoch.

Each number is the best of ``--repeats`` CPU times (``time.process_time``), calls
interleaved; torch runs on ``--threads`` threads (1 by default: steadier on a shared
machine). Only ratios mean anything.

    nice .venv/bin/python benchmarks/bench_client_epoch.py
    nice .venv/bin/python benchmarks/bench_client_epoch.py --samples 5000 --repeats 9
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import load_1min, machine, write_json  # noqa: E402 (benchmarks/ on sys.path)

from fairfl.client.training import mean_loss, train_local  # noqa: E402 (after sys.path)
from fairfl.models import build_model  # noqa: E402

#: (model, input shape) pairs: the digits MLP and CNN, and Synthetic's logistic regression.
CASES = (("mlp", (64,)), ("cnn", (1, 8, 8)), ("logreg", (60,)))


def bare_epoch(
    model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int, lr: float, seed: int
):
    """One epoch of minibatch SGD with nothing else: the reference loop."""
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    for start in range(0, len(x), batch_size):
        index = order[start : start + batch_size]
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs[index]), labels[index])
        loss.backward()
        optimizer.step()


def cpu_seconds(fn, *args, **kwargs) -> float:
    start = time.process_time()
    fn(*args, **kwargs)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure; print a table and return (and with ``--json``, write) the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000, help="local training samples")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the run here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    rng = np.random.default_rng(0)

    print(
        f"{args.samples} samples, batch {args.batch_size}, 1 epoch, {args.threads} torch "
        f"thread(s), best of {args.repeats} CPU times"
    )
    load_before = load_1min()
    print(f"load average before: {os.getloadavg()}", flush=True)
    models: dict[str, dict[str, float]] = {}
    print(
        f"{'model':>7s} {'bare ms':>8s} {'fairfl ms':>9s} {'ratio':>6s} "
        f"{'train_loss pass ms':>18s} {'pass/epoch':>10s}"
    )
    for name, shape in CASES:
        x = rng.normal(size=(args.samples, *shape)).astype(np.float32)
        y = rng.integers(0, 10, size=args.samples).astype(np.int64)
        start = build_model(name, shape, 10, seed=0)
        best = {"bare": np.inf, "fairfl": np.inf, "loss": np.inf}
        for _ in range(args.repeats):
            bare_model, ours_model = copy.deepcopy(start), copy.deepcopy(start)
            best["bare"] = min(
                best["bare"], cpu_seconds(bare_epoch, bare_model, x, y, args.batch_size, 0.1, 7)
            )
            ours = cpu_seconds(
                train_local,
                ours_model,
                x,
                y,
                epochs=1,
                batch_size=args.batch_size,
                lr=0.1,
                device=device,
                seed=7,
            )
            best["fairfl"] = min(best["fairfl"], ours)
            probe = copy.deepcopy(start)
            best["loss"] = min(best["loss"], cpu_seconds(mean_loss, probe, x, y, device))
            for a, b in zip(bare_model.parameters(), ours_model.parameters(), strict=True):
                if not torch.allclose(a, b, atol=1e-6):
                    raise AssertionError(f"{name}: the two loops diverged")
        print(
            f"{name:>7s} {best['bare'] * 1e3:8.1f} {best['fairfl'] * 1e3:9.1f} "
            f"{best['fairfl'] / best['bare']:6.2f} {best['loss'] * 1e3:18.1f} "
            f"{best['loss'] / best['fairfl']:10.2f}"
        )
        models[name] = {
            "bare_cpu_ms": best["bare"] * 1e3,
            "fairfl_cpu_ms": best["fairfl"] * 1e3,
            "ratio": best["fairfl"] / best["bare"],
            "loss_pass_cpu_ms": best["loss"] * 1e3,
            "loss_pass_per_epoch": best["loss"] / best["fairfl"],
        }
    print(f"load average after: {os.getloadavg()}")
    result: dict[str, Any] = {
        "benchmark": "client_epoch",
        "machine": machine(),
        "load_1min_before": load_before,
        "load_1min_after": load_1min(),
        "samples": args.samples,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "repeats": args.repeats,
        "models": models,
    }
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
