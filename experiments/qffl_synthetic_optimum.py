"""Exact optima of q-FFL's objective on fairfl's Synthetic(1, 1) federations (issue #16).

Li, Sanjabi, Beirami and Smith ("Fair Resource Allocation in Federated
Learning", ICLR 2020, https://openreview.net/pdf?id=ByexElSYDr), eq. (2):

    min_w f_q(w) = Σ_k p_k F_k(w)^{q+1} / (q + 1),    p_k = n_k / n,

with F_k device k's mean cross-entropy on its train split. q-FedAvg
(``docs/results/qffl-synthetic``) runs 2,000 rounds of sampled local SGD towards this
minimum; this script computes the minimum itself, so that the fairness of each
objective can be told apart from how far the federated runs got. For each seed and
device-size σ it loads the 100 devices exactly as the ``qffl-synthetic`` recipes do
(`fairfl.data.load_client_data` with ``partitioner="natural"``, ``test_fraction=0.2``:
the same train and test splits as the committed runs), and minimises f_q for q = 0 and
q = 1 over multinomial logistic regression (W 60 x 10, b 10, no regularisation), full
batch, in float64, with scipy's L-BFGS-B and the analytic gradient
∇f_q = Σ_k p_k F_k^q ∇F_k, started from zeros.

σ = 2 is the reference generator's ``n_k = floor(LogNormal(4, 2)) + 50`` (data set
``synthetic``); σ = 0.75 the light-tailed ``synthetic-1-1-sigma0.75`` (the same
devices with fewer samples).

Convergence: ``ftol=0`` and ``gtol=1e-10``, so a run stops only when L-BFGS-B can no
longer lower f_q (or at ``--maxiter``); the final gradient norm is recorded. Then each
solution is handed to a second L-BFGS-B run with another ``--maxiter`` iterations (the
iteration budget doubled, curvature memory cleared): its per-device test accuracies
must not change. A fresh run from zeros with twice ``--maxiter`` would repeat the
first run's iterates exactly (L-BFGS-B is deterministic) whenever the first stopped
before its cap, which is why the continuation is the check.

Reported per (σ, q, seed) and as mean ± std over seeds (population std), on the
devices' test splits: Average (unweighted mean of device accuracies), Pooled (correct
predictions over all test samples), Worst 10 % and Best 10 % (mean of the 10 lowest /
highest device accuracies), Variance (population variance of the device accuracies,
%²), all from `fairfl.metrics.fairness_metrics`, and f_q at the solution. Each seed's
device sizes are recorded too (total samples, the largest device and its share).

Usage (a few minutes on 2 busy cores; one BLAS thread is enough)::

    OMP_NUM_THREADS=1 nice .venv/bin/python experiments/qffl_synthetic_optimum.py \
        --results docs/results/qffl-synthetic-optimum.md

``--results PATH`` writes the tables as Markdown to ``PATH`` and every number (with
each run's per-device correct counts) as JSON to ``PATH`` with the suffix ``.json``;
the README's paragraph on the optima is checked against that JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import OptimizeResult, minimize

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fairfl.data import load_client_data  # noqa: E402 (after sys.path)
from fairfl.data.synthetic import NUM_CLASSES  # noqa: E402
from fairfl.metrics import fairness_metrics, in_percent  # noqa: E402
from fairfl.sweep.recipes import QFFL_SYNTHETIC  # noqa: E402

#: Data set of each device-size σ (``n_k = floor(LogNormal(4, σ)) + 50``).
DATASETS: dict[float, str] = {2.0: "synthetic", 0.75: "synthetic-1-1-sigma0.75"}
#: The statistics reported, as `fairfl.metrics.fairness_metrics` names them.
METRICS: tuple[str, ...] = (
    "acc-mean",
    "acc-weighted-mean",
    "acc-worst-10",
    "acc-best-10",
    "acc-variance",
)
TITLES: dict[str, str] = {
    "acc-mean": "Average (%)",
    "acc-weighted-mean": "Pooled (%)",
    "acc-worst-10": "Worst 10 % (%)",
    "acc-best-10": "Best 10 % (%)",
    "acc-variance": "Variance (%²)",
}
#: Li et al.'s columns (the recipe's reference table) by metric.
PAPER_COLUMNS: dict[str, str] = {
    "acc-mean": "Average",
    "acc-worst-10": "Worst 10%",
    "acc-best-10": "Best 10%",
    "acc-variance": "Variance",
}
#: L-BFGS-B tolerances: stop only when f_q no longer decreases or the projected
#: gradient's largest entry is below ``GTOL``.
FTOL = 0.0
GTOL = 1e-10


@dataclass(frozen=True)
class Federation:
    """Every device's train and test samples, stacked, with each sample's device index.

    Attributes
    ----------
    x_train, y_train, device_train : NDArray
        float64 train samples ``(N, d)``, int64 labels ``(N,)`` and device indices
        ``(N,)`` of all devices, device 0 first.
    x_test, y_test, device_test : NDArray
        The same for the test splits.
    num_devices : int
        Number of devices m.
    num_classes : int
        Number of classes C (labels are in ``[0, C)``).
    """

    x_train: NDArray[np.float64]
    y_train: NDArray[np.int64]
    device_train: NDArray[np.int64]
    x_test: NDArray[np.float64]
    y_test: NDArray[np.int64]
    device_test: NDArray[np.int64]
    num_devices: int
    num_classes: int

    @property
    def train_counts(self) -> NDArray[np.int64]:
        """n_k: each device's number of train samples."""
        return np.bincount(self.device_train, minlength=self.num_devices)

    @property
    def test_counts(self) -> NDArray[np.int64]:
        """Each device's number of test samples."""
        return np.bincount(self.device_test, minlength=self.num_devices)


def load_federation(
    dataset: str, seed: int, num_devices: int = 100, test_fraction: float = 0.2
) -> Federation:
    """Load every device of a synthetic data set as the ``qffl-synthetic`` recipes do.

    Device k is ``load_client_data(dataset=dataset, partitioner="natural",
    num_partitions=num_devices, partition_id=k, seed=seed, test_fraction=test_fraction)``:
    the splits a ClientApp of those runs trains and evaluates on, cast to float64.
    """
    parts = [
        load_client_data(
            dataset=dataset,
            partitioner="natural",
            num_partitions=num_devices,
            partition_id=k,
            seed=seed,
            test_fraction=test_fraction,
        )
        for k in range(num_devices)
    ]
    devices = np.arange(num_devices)
    return Federation(
        x_train=np.concatenate([p.x_train for p in parts]).astype(np.float64),
        y_train=np.concatenate([p.y_train for p in parts]).astype(np.int64),
        device_train=np.repeat(devices, [len(p.y_train) for p in parts]),
        x_test=np.concatenate([p.x_test for p in parts]).astype(np.float64),
        y_test=np.concatenate([p.y_test for p in parts]).astype(np.int64),
        device_test=np.repeat(devices, [len(p.y_test) for p in parts]),
        num_devices=num_devices,
        num_classes=NUM_CLASSES,
    )


def unpack(theta: NDArray[np.float64], num_features: int) -> tuple[NDArray, NDArray]:
    """Split θ into W (``num_features`` x C, row-major first) and b (C, last).

    θ has ``(num_features + 1) * C`` entries; C is worked out from its length.
    """
    num_classes = theta.size // (num_features + 1)
    if theta.size != (num_features + 1) * num_classes:
        raise ValueError(
            f"theta must have (num_features + 1) * num_classes entries with "
            f"num_features={num_features}, got {theta.size}"
        )
    weights = theta[: num_features * num_classes].reshape(num_features, num_classes)
    return weights, theta[num_features * num_classes :]


def cross_entropy_and_residuals(
    theta: NDArray[np.float64], x: NDArray[np.float64], y: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Each sample's cross-entropy ℓ_i and its gradient with respect to the logits.

    Multinomial logistic regression, z_i = x_i W + b:

        ℓ_i = log Σ_c exp(z_ic) − z_{i y_i},    ∂ℓ_i / ∂z_i = softmax(z_i) − e_{y_i}.

    Returns
    -------
    tuple[NDArray, NDArray]
        ℓ, shape ``(N,)``, and the residuals softmax(z) − onehot(y), shape ``(N, C)``.
    """
    weights, bias = unpack(theta, x.shape[1])
    logits = x @ weights + bias
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    total = exp.sum(axis=1)
    rows = np.arange(y.size)
    losses = np.log(total) - logits[rows, y]
    residuals = exp / total[:, None]
    residuals[rows, y] -= 1.0
    return losses, residuals


def qffl_objective(
    theta: NDArray[np.float64],
    x: NDArray[np.float64],
    y: NDArray[np.int64],
    device: NDArray[np.int64],
    p: NDArray[np.float64],
    q: float,
) -> tuple[float, NDArray[np.float64]]:
    """q-FFL's objective and its gradient (Li et al., ICLR 2020, eq. 2), full batch.

        f_q(w) = Σ_k p_k F_k(w)^{q+1} / (q + 1),    ∇f_q(w) = Σ_k p_k F_k(w)^q ∇F_k(w),

    with F_k(w) = (1 / n_k) Σ_{i ∈ k} ℓ_i(w) the mean cross-entropy of device k
    (`cross_entropy_and_residuals`) and ∇F_k = (1 / n_k) Σ_{i ∈ k} x̃_i (softmax(z_i) −
    e_{y_i})ᵀ, x̃_i = (x_i, 1). q = 0 is FedAvg's Σ_k p_k F_k.

    Parameters
    ----------
    theta : NDArray
        (W, b) flattened as in `unpack`.
    x, y, device : NDArray
        Samples ``(N, d)``, labels ``(N,)`` and each sample's device in ``[0, m)``.
    p : NDArray
        p_k, shape ``(m,)``: the devices' weights (paper: n_k / n).
    q : float
        q >= 0.

    Returns
    -------
    tuple[float, NDArray]
        f_q(θ) and ∇f_q(θ) in θ's layout.

    Raises
    ------
    ValueError
        If q < 0 or a device of ``p`` has no sample.
    """
    if q < 0:
        raise ValueError(f"q must be >= 0, got {q}")
    counts = np.bincount(device, minlength=p.size)
    if counts.size != p.size or not counts.all():
        empty = [int(k) for k in np.flatnonzero(counts[: p.size] == 0)]
        raise ValueError(
            f"every device of p (m={p.size}) needs a sample and no sample may name a "
            f"device >= m; devices without samples: {empty}, largest device index "
            f"{int(device.max())}"
        )
    losses, residuals = cross_entropy_and_residuals(theta, x, y)
    device_loss = np.bincount(device, weights=losses, minlength=p.size) / counts
    value = float(np.sum(p * device_loss ** (q + 1.0)) / (q + 1.0))
    # Each sample of device k enters ∇f_q with weight p_k F_k^q / n_k.
    residuals *= (p * device_loss**q / counts)[device][:, None]
    gradient = np.concatenate([(x.T @ residuals).ravel(), residuals.sum(axis=0)])
    return value, gradient


def device_test_results(
    theta: NDArray[np.float64], federation: Federation
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Each device's correct test predictions (argmax of the logits) and mean test loss."""
    losses, _ = cross_entropy_and_residuals(theta, federation.x_test, federation.y_test)
    weights, bias = unpack(theta, federation.x_test.shape[1])
    correct = np.argmax(federation.x_test @ weights + bias, axis=1) == federation.y_test
    m = federation.num_devices
    return (
        np.bincount(federation.device_test, weights=correct, minlength=m).astype(np.int64),
        np.bincount(federation.device_test, weights=losses, minlength=m) / federation.test_counts,
    )


def minimise_qffl(
    federation: Federation, q: float, maxiter: int, start: NDArray[np.float64] | None = None
) -> OptimizeResult:
    """Minimise f_q over the train splits with L-BFGS-B, p_k = n_k / n, from ``start``.

    ``start`` defaults to zeros (W = 0, b = 0).
    """
    counts = federation.train_counts
    p = counts / counts.sum()
    size = (federation.x_train.shape[1] + 1) * federation.num_classes
    x0 = np.zeros(size) if start is None else start
    return minimize(
        qffl_objective,
        x0,
        args=(federation.x_train, federation.y_train, federation.device_train, p, q),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": maxiter, "maxfun": 20 * maxiter, "ftol": FTOL, "gtol": GTOL},
    )


def solve_and_evaluate(federation: Federation, q: float, maxiter: int) -> dict[str, Any]:
    """Minimise f_q, check the solution with a continued run, evaluate on the test splits."""
    started = time.perf_counter()
    result = minimise_qffl(federation, q, maxiter)
    correct, losses = device_test_results(result.x, federation)
    continued = minimise_qffl(federation, q, maxiter, start=result.x)
    correct_continued, _ = device_test_results(continued.x, federation)
    samples = federation.test_counts
    metrics = fairness_metrics(list(correct / samples), list(samples), list(losses))
    return {
        "objective": float(result.fun),
        "gradient_norm": float(np.linalg.norm(result.jac)),
        "gradient_max": float(np.abs(result.jac).max()),
        "parameter_norm": float(np.linalg.norm(result.x)),
        "iterations": int(result.nit),
        "evaluations": int(result.nfev),
        "stop": str(result.message),
        "reached_maxiter": bool(result.nit >= maxiter),
        "continued": {
            "iterations": int(continued.nit),
            "objective": float(continued.fun),
            "gradient_norm": float(np.linalg.norm(continued.jac)),
            "accuracies_unchanged": bool(np.array_equal(correct, correct_continued)),
        },
        "metrics": {name: metrics[name] for name in METRICS},
        "test_correct": [int(c) for c in correct],
        "test_samples": [int(n) for n in samples],
        "seconds": round(time.perf_counter() - started, 1),
    }


def size_statistics(dataset: str, seed: int, federation: Federation) -> dict[str, Any]:
    """Total samples (train + test), train samples, and the largest device with its share."""
    sizes = federation.train_counts + federation.test_counts
    largest = int(np.argmax(sizes))
    return {
        "dataset": dataset,
        "seed": seed,
        "total_samples": int(sizes.sum()),
        "train_samples": int(federation.train_counts.sum()),
        "largest_device": largest,
        "largest_samples": int(sizes[largest]),
        "largest_share": float(sizes[largest] / sizes.sum()),
    }


def mean_std(values: list[float], scale: float, digits: int) -> str:
    """``mean ± std`` (population std) of ``scale * values`` with ``digits`` decimals."""
    array = scale * np.asarray(values, dtype=np.float64)
    return f"{array.mean():.{digits}f} ± {array.std():.{digits}f}"


def metric_cell(runs: list[dict[str, Any]], metric: str) -> str:
    """One table cell: a metric's mean ± std over runs in % (variance: %², integers)."""
    if metric == "acc-variance":
        return mean_std([r["metrics"][metric] for r in runs], 1e4, 0)
    return mean_std([r["metrics"][metric] for r in runs], 100.0, 1)


def runs_of(results: dict[str, Any], sigma: float, q: float) -> list[dict[str, Any]]:
    """The runs of one (σ, q), in seed order."""
    return [r for r in results["runs"] if r["sigma"] == sigma and r["q"] == q]


def render_markdown(results: dict[str, Any]) -> str:
    """The Markdown report of a results dict (as written to and read from the JSON)."""
    config = results["config"]
    seeds = ", ".join(map(str, config["seeds"]))
    header = ["setting", *TITLES.values(), "f_q at the optimum"]
    lines = [
        "# Exact optima of q-FFL's objective on Synthetic(1, 1), 100 devices",
        "",
        f"f_q(w) = Σ_k p_k F_k(w)^(q+1) / (q+1), p_k = n_k / n over the train splits "
        f"(Li et al., ICLR 2020, eq. 2), multinomial logistic regression (no regularisation), "
        f"minimised full batch in float64 by L-BFGS-B from zeros (ftol {config['ftol']}, "
        f"gtol {config['gtol']:g}, maxiter {config['maxiter']}). Devices loaded as the "
        f"qffl-synthetic recipes load them (natural partition, test fraction "
        f"{config['test_fraction']}); test accuracy per device, mean ± std over seeds "
        f"{seeds}.",
    ]
    paper = QFFL_SYNTHETIC.reference[0]
    for sigma_key, dataset in config["datasets"].items():
        sigma = float(sigma_key)
        lines += ["", f"## σ = {sigma:g} (`{dataset}`)", ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + " --- |" * len(header))
        for row in paper["rows"]:
            by_column = dict(zip(paper["columns"], row["values"], strict=True))
            cells = [by_column.get(PAPER_COLUMNS.get(metric, ""), "–") for metric in TITLES]
            name = f"Li et al. (ICLR 2020), {row['name']}"
            lines.append(f"| {name} | " + " | ".join(cells) + " | – |")
        for q in config["qs"]:
            runs = runs_of(results, sigma, q)
            cells = [metric_cell(runs, metric) for metric in TITLES]
            objective = mean_std([r["objective"] for r in runs], 1.0, 4)
            lines.append(f"| optimum, q = {q:g} | " + " | ".join(cells) + f" | {objective} |")
    lines += [
        "",
        "Li et al.'s numbers come from its own federation and ~20,000 rounds of q-FedAvg, "
        "not from an exact optimum. Its code prints the pooled accuracy; its table's "
        "Average is shown beside both of ours.",
        "",
        "## q = 1 against q = 0, paired by seed (points; variance %²)",
        "",
        "| σ | Worst 10 %: q = 1 − q = 0 | Variance: q = 1 − q = 0 | Average: q = 1 − q = 0 |",
        "| --- | --- | --- | --- |",
    ]
    for sigma_key in config["datasets"]:
        differences = paired_differences(results, float(sigma_key))
        lines.append(
            f"| {float(sigma_key):g} | "
            + " | ".join(
                ", ".join(f"{d:+.{digits}f}" for d in differences[metric])
                for metric, digits in (("acc-worst-10", 1), ("acc-variance", 0), ("acc-mean", 1))
            )
            + " |"
        )
    lines += [
        "",
        "## Per run",
        "",
        "| σ | q | seed | Average (%) | Pooled (%) | Worst 10 % (%) | Best 10 % (%) | "
        "Variance (%²) | f_q | ‖∇f_q‖ | iterations | stop | continued: iterations, "
        "decrease of f_q, accuracies unchanged | time (s) |",
        "|" + " --- |" * 14,
    ]
    for run in results["runs"]:
        shown = in_percent(run["metrics"])
        lines.append(
            f"| {run['sigma']:g} | {run['q']:g} | {run['seed']} | "
            f"{shown['acc-mean']:.1f} | {shown['acc-weighted-mean']:.1f} | "
            f"{shown['acc-worst-10']:.1f} | {shown['acc-best-10']:.1f} | "
            f"{shown['acc-variance']:.0f} | {run['objective']:.6f} | "
            f"{run['gradient_norm']:.1e} | {run['iterations']} | {run['stop']} | "
            f"{run['continued']['iterations']}, "
            f"{run['objective'] - run['continued']['objective']:.1e}, "
            f"{'yes' if run['continued']['accuracies_unchanged'] else 'NO'} | "
            f"{run['seconds']:.0f} |"
        )
    lines += ["", convergence_note(results)]
    lines += [
        "",
        "## Device sizes (train + test samples)",
        "",
        "| σ | seed | total samples | train samples | largest device | its samples | its share |",
        "|" + " --- |" * 7,
    ]
    for size in results["sizes"]:
        lines.append(
            f"| {size['sigma']:g} | {size['seed']} | {size['total_samples']:,} | "
            f"{size['train_samples']:,} | {size['largest_device']} | "
            f"{size['largest_samples']:,} | {100 * size['largest_share']:.1f} % |"
        )
    lines += [
        "",
        f"Command: `{results['command']}`",
        "",
        f"Wall time: {results['wall_time_s']:.0f} s on {results['cpu_count']} cores (one process).",
    ]
    return "\n".join(lines) + "\n"


def convergence_note(results: dict[str, Any]) -> str:
    """One sentence on how the runs stopped, worked from the runs."""
    runs = results["runs"]
    capped = sum(run["reached_maxiter"] for run in runs)
    changed = sum(not run["continued"]["accuracies_unchanged"] for run in runs)
    note = (
        f"{capped} of {len(runs)} runs reached maxiter ({max(r['iterations'] for r in runs)} "
        f"iterations at most); the largest final ‖∇f_q‖ is "
        f"{max(r['gradient_norm'] for r in runs):.1e}. Continuing each solution for another "
        f"maxiter iterations changed the per-device test accuracies of {changed} runs."
    )
    if any(run["stop"].startswith("ABNORMAL") for run in runs):
        note += (
            " ABNORMAL: L-BFGS-B's line search found no lower f_q from the last iterate "
            "(machine precision), not a failure to converge."
        )
    return note


def paired_differences(results: dict[str, Any], sigma: float) -> dict[str, list[float]]:
    """Per seed, q = 1's metric minus q = 0's, in points (variance in %²)."""
    zero, one = runs_of(results, sigma, 0.0), runs_of(results, sigma, 1.0)
    differences: dict[str, list[float]] = {}
    for metric in ("acc-worst-10", "acc-variance", "acc-mean"):
        scale = 1e4 if metric == "acc-variance" else 100.0
        differences[metric] = [
            scale * (b["metrics"][metric] - a["metrics"][metric])
            for a, b in zip(zero, one, strict=True)
        ]
    return differences


def main(argv: list[str] | None = None) -> int:
    """Solve every (σ, q, seed), print one line per run and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument(
        "--sigmas", type=float, nargs="+", default=list(DATASETS), choices=list(DATASETS)
    )
    parser.add_argument("--qs", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--maxiter", type=int, default=5000)
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="write the report (Markdown) here and its numbers to the same path with .json",
    )
    args = parser.parse_args(argv)
    if args.maxiter < 1:
        parser.error(f"--maxiter must be >= 1, got {args.maxiter}")
    if any(q < 0 for q in args.qs):
        parser.error(f"--qs must be >= 0, got {args.qs}")
    if args.results is not None and not {0.0, 1.0} <= set(args.qs):
        parser.error("--results needs q = 0 and q = 1 (it pairs them by seed)")
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    sizes: list[dict[str, Any]] = []
    for sigma in args.sigmas:
        dataset = DATASETS[sigma]
        for seed in args.seeds:
            federation = load_federation(dataset, seed)
            sizes.append({"sigma": sigma, **size_statistics(dataset, seed, federation)})
            for q in args.qs:
                run = {"sigma": sigma, "dataset": dataset, "q": q, "seed": seed}
                run.update(solve_and_evaluate(federation, q, args.maxiter))
                runs.append(run)
                shown = in_percent(run["metrics"])
                print(
                    f"σ {sigma:g} seed {seed} q {q:g}: average {shown['acc-mean']:.1f} % "
                    f"pooled {shown['acc-weighted-mean']:.1f} % worst-10 "
                    f"{shown['acc-worst-10']:.1f} % variance {shown['acc-variance']:.0f} %² "
                    f"f_q {run['objective']:.6f} |∇| {run['gradient_norm']:.1e} "
                    f"{run['iterations']} it ({run['stop']}); continued "
                    f"{run['continued']['iterations']} it, accuracies unchanged: "
                    f"{run['continued']['accuracies_unchanged']} ({run['seconds']:.0f} s)",
                    flush=True,
                )
    wall_time = time.perf_counter() - started
    print(f"# total {wall_time:.0f} s")
    if args.results is not None:
        command = "python experiments/qffl_synthetic_optimum.py " + shlex.join(
            sys.argv[1:] if argv is None else argv
        )
        results = {
            "config": {
                "datasets": {f"{sigma:g}": DATASETS[sigma] for sigma in args.sigmas},
                "seeds": args.seeds,
                "qs": args.qs,
                "num_devices": 100,
                "test_fraction": 0.2,
                "method": "L-BFGS-B",
                "maxiter": args.maxiter,
                "ftol": FTOL,
                "gtol": GTOL,
            },
            "sizes": sizes,
            "runs": runs,
            "command": command,
            "wall_time_s": round(wall_time, 1),
            "cpu_count": os.cpu_count(),
        }
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.with_suffix(".json").write_text(
            json.dumps(results, indent=1) + "\n", encoding="utf-8"
        )
        args.results.write_text(render_markdown(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
