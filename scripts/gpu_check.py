#!/usr/bin/env python
"""GPU placement check, to run on a machine with an NVIDIA GPU (issue 39 item 4).

Writes ``docs/results/gpu-check.json`` (``--out``) with the GPU named:

1. one client's local epoch on CUDA against the CPU: all of digits as one partition, the MLP
   and the CNN, the median of ``--repeats`` timed epochs after one warm-up, and the
   largest difference between the two trained models (float32 kernels differ, so the
   weights agree to rounding, not bit for bit);
2. the default federation through Flower's simulation engine with
   ``client-resources-num-gpus=0.25`` (four ClientApps share the GPU), via
   ``scripts/flwr_sim.py``: its exit code, wall time, final mean accuracy and the
   devices the clients report in ``rounds.jsonl``.

Refuses (exit 2) where CUDA is not available, so nothing is written without a GPU.
Everything runs offline (digits ships with scikit-learn). About 2 minutes on an H100::

    .venv/bin/python scripts/gpu_check.py --out docs/results/gpu-check.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def epoch_times(model_name: str, repeats: int) -> dict[str, Any]:
    """Median seconds of one local epoch on the CPU and on CUDA, and how far apart."""
    import torch

    from fairfl.client.training import train_local
    from fairfl.data import dataset_info, load_client_data
    from fairfl.models import build_model

    data = load_client_data(
        dataset="digits", partitioner="iid", partition_id=0, num_partitions=1, seed=0
    )
    info = dataset_info("digits")
    result: dict[str, Any] = {"model": model_name, "examples": len(data.x_train)}
    trained = {}
    for device in ("cpu", "cuda:0"):
        times = []
        for attempt in range(repeats + 1):  # the first is a warm-up (CUDA context, kernels)
            model = build_model(model_name, tuple(info.input_shape), info.num_classes, seed=0)
            model = model.to(device)
            if device != "cpu":
                torch.cuda.synchronize()
            started = time.perf_counter()
            train_local(
                model,
                data.x_train,
                data.y_train,
                epochs=1,
                batch_size=32,
                lr=0.1,
                device=torch.device(device),
                seed=0,
            )
            if device != "cpu":
                torch.cuda.synchronize()
            if attempt:
                times.append(time.perf_counter() - started)
        result[f"{device.split(':')[0]}_epoch_s"] = statistics.median(times)
        trained[device] = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    result["max_abs_weight_difference"] = max(
        float((trained["cpu"][k] - trained["cuda:0"][k]).abs().max()) for k in trained["cpu"]
    )
    result["cuda_speedup"] = result["cpu_epoch_s"] / result["cuda_epoch_s"]
    return result


def federation(gpus_per_client: float, timeout: float) -> dict[str, Any]:
    """The default federation on Flower's engine with ``gpus_per_client`` per ClientApp."""
    with tempfile.TemporaryDirectory(prefix="fairfl-gpu-") as temp:
        out = Path(temp) / "out"
        command = [
            sys.executable,
            str(ROOT / "scripts" / "flwr_sim.py"),
            "--gpus-per-client",
            str(gpus_per_client),
            "--flwr-home",
            str(Path(temp) / "flwr-home"),
            "-c",
            f"out-dir='{out}'",
        ]
        started = time.perf_counter()
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        result: dict[str, Any] = {
            "gpus_per_client": gpus_per_client,
            "exit_code": completed.returncode,
            "wall_s": time.perf_counter() - started,
        }
        rounds = out / "rounds.jsonl"
        lines = rounds.read_text().splitlines() if rounds.is_file() else []
        if lines:  # where each client evaluated, as its reply said
            last = json.loads(lines[-1])
            result["devices"] = sorted({str(c.get("device")) for c in last["clients"]})
        summary = out / "summary.json"
        if summary.is_file():
            final = json.loads(summary.read_text()).get("final_metrics", {})
            result["final_acc_mean"] = final.get("acc-mean")
        else:
            result["log_tail"] = (completed.stdout + completed.stderr)[-3000:]
        return result


def main() -> int:
    """Check CUDA is there, measure, write ``--out``; exit 1 if the federation failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/gpu-check.json")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gpus-per-client", type=float, default=0.25)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here; run it on a GPU machine", file=sys.stderr)
        return 2
    result = {
        "command": "python scripts/gpu_check.py " + " ".join(sys.argv[1:]),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "epochs": [epoch_times(name, args.repeats) for name in ("mlp", "cnn")],
        "federation": federation(args.gpus_per_client, args.timeout),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if result["federation"]["exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
