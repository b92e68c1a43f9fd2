"""Issue #49: what client-level DP costs the worst-off client, per rule, at equal ε.

Runs ``fairfl compare`` for FedAvg, q-FFL, TERM and Ditto once per noise level (central DP,
``dp = "central-fixed"``, noise calibrated to each round's largest weight, so z_eff = z and
every rule has the same ε after the same rounds) and once without DP, five seeds each, on
FLamby's Fed-Heart-Disease (the ``flamby-heart`` recipe's settings: 4 hospitals, logistic
regression, 15 rounds; its rows without DP are the recipe's committed runs in
``docs/results/flamby-heart``), on scikit-learn's digits (10 clients, Dirichlet α = 0.3, an
MLP, 10 rounds) and on UCI Adult (below). Then it writes
``docs/results/dp-tradeoff/tradeoff.md`` and ``tradeoff.csv`` (mean, worst-client accuracy
and variance across clients, mean ± sd over seeds, against the ε each run's
``summary.json`` records) and ``worst-vs-epsilon.png`` (worst-client accuracy against ε per
rule; no DP drawn at the right edge). On digits two Ditto-only checks (``CHECKS``: clipping
with negligible noise, and ``ditto-lambda=0``) explain why its personal models score higher
under DP than without; the table's page says what they show.

Adult (``adult``): 20 clients drawn with FairFed's attribute heterogeneity (the
``fairfed-adult`` recipe's partitioner: each client's share of each sex is Dir(α), here α =
0.5; 30 % of each client's rows test it), logistic regression, one local epoch of SGD (lr
0.1, batch 32) as that recipe, but 10 rounds, not its 20: 60 runs of 20 rounds would not
have fitted the time on two busy cores, and at 10 rounds ε equals digits' at the same z. Not
the ``qffl-adult`` recipe's two clients (PhD / rest): client-level DP over m = 2 clients
noises the aggregate with the whole sensitivity of one client (the rest's weight is near 1),
which measures nothing but noise. Over 20 clients the largest weight, which sets the noise,
is a fraction of that (each round records it, ``dp-lambda-max``), and the Dirichlet draw
leaves the clients unequal in size and in sex mix, so a worst-off client exists without DP.
C = 0.25: chosen on one seed of FedAvg and q-FFL without noise (z = 1e-6) so that clipping
binds on most updates in the first rounds and on few by the tenth (each run's
``rounds.jsonl.gz`` records the clipped share, ``dp-clip-fraction``), untuned beyond that.
Its rows without DP are run here (no committed recipe has these settings).

Disparate impact of DP: Bagdasaryan, Poursaeed & Shmatikov, "Differential Privacy Has
Disparate Impact on Model Accuracy", NeurIPS 2019.

Command (Fed-Heart-Disease: 40 runs, about an hour on two busy cores; Adult: 60 runs, 21
minutes there; runs finished are kept, so it resumes; the table holds the data sets named)::

    nice -n 10 python experiments/dp_tradeoff.py --out docs/results/dp-tradeoff \
        --datasets fed-heart-disease digits adult

A rule or seed without a finished run is named in the table (its Seeds column, and a
list of rules not run at a noise level), never averaged over silently.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

RULES = ("fedavg", "qffl", "term", "ditto")
#: The table's rows: each rule's global model, and Ditto's personal models.
ROW_NAMES = (*RULES, "ditto (personal)")
#: Each data set: the compare flags, the run settings (KEY=VALUE, one ``--set`` together with
#: the DP keys: ``fairfl compare`` keeps only the last ``--set`` given), the seeds, the
#: clipping norm C and the noise levels z.
DATASETS: dict[str, dict[str, object]] = {
    "fed-heart-disease": {
        "flags": ["--recipe", "flamby-heart"],
        "settings": [],
        "seeds": ["42", "43", "44", "45", "46"],
        "clip": 0.2,
        "noise": ("4", "1"),
        # The no-DP rows: the flamby-heart recipe's committed runs (same settings, seeds).
        "baseline": "docs/results/flamby-heart",
    },
    "adult": {
        "flags": [],
        # FairFed's heterogeneity (the fairfed-adult recipe's partitioner: each client's
        # share of each sex is Dir(alpha)) over 20 clients, not the qffl-adult recipe's two
        # (PhD / rest): with m = 2 the largest weight is about 1 and the noise as large as
        # the clipped update itself. Its training settings otherwise (logistic regression,
        # one local epoch of SGD, lr 0.1, batch 32), 10 rounds; C = 0.25 (see the docstring).
        "settings": [
            "dataset=adult",
            "partitioner=dirichlet",
            "num-partitions=20",
            "dirichlet-alpha=0.5",
            "data-root=../shared/data",
            "model=logreg",
            "lr=0.1",
            "local-epochs=1",
            "batch-size=32",
            "num-server-rounds=10",
            "evaluate-every=10",
        ],
        "seeds": ["0", "1", "2", "3", "4"],
        "clip": 0.25,
        "noise": ("4", "1"),
    },
    "digits": {
        "flags": [],
        "settings": [
            "dataset=digits",
            "partitioner=dirichlet",
            "num-partitions=10",
            "dirichlet-alpha=0.3",
            "model=mlp",
            "lr=0.1",
            "local-epochs=1",
            "num-server-rounds=10",
            "evaluate-every=10",
        ],
        "seeds": ["0", "1", "2", "3", "4"],
        "clip": 1.0,
        "noise": ("4", "1"),
    },
}


#: Ditto-only checks of why its personal models gain under DP on digits (folder: settings
#: added to the data set's). clip-only: clipping at C with negligible noise (z must be > 0);
#: ditto-lambda-0: no pull towards the global model, each personal model trained locally.
CHECKS: dict[str, dict[str, list[str]]] = {
    "digits": {
        "clip-only": ["dp=central-fixed", "dp-noise-multiplier=1e-6", "dp-clipping-norm=1.0"],
        "ditto-lambda-0": ["ditto-lambda=0"],
    },
}


def run_compare(
    folder: Path, dataset: str, extra: list[str], rules: tuple[str, ...], workers: int
) -> Path:
    """One ``fairfl compare`` of ``rules`` with the data set's settings plus ``extra``."""
    spec = DATASETS[dataset]
    settings = [*spec["settings"], *extra]  # type: ignore[misc]
    command = [
        sys.executable, "-m", "fairfl", "compare", *spec["flags"],  # type: ignore[misc]
        "--rules", *rules, "--seeds", *spec["seeds"],  # type: ignore[misc]
        *(["--set", *settings] if settings else []),
        "--out", str(folder), "--workers", str(workers), "--no-models", "--compress-runs",
        "--skip-existing", "--no-progress",
    ]  # fmt: skip
    subprocess.run(command, check=True)
    check_settings(folder, settings)
    return folder


def dp_settings(dataset: str, level: str | None) -> list[str]:
    """The DP keys at noise multiplier ``level`` (None: no DP, no keys)."""
    if level is None:
        return []
    clip = DATASETS[dataset]["clip"]
    return ["dp=central-fixed", f"dp-noise-multiplier={level}", f"dp-clipping-norm={clip}"]


def same_value(given: object, value: str) -> bool:
    """Whether a run's recorded setting equals the command line's text (``1`` == ``1.0``)."""
    if str(given) == value:
        return True
    try:
        return float(str(given)) == float(value)
    except ValueError:
        return False


def check_settings(folder: Path, settings: list[str]) -> None:
    """Exit 2 unless every run in ``folder`` was given every KEY=VALUE of ``settings``.

    Guards the comparison: a run that silently fell back to a default (a lost ``--set``)
    would compare different settings, not DP against no DP.
    """
    summaries = sorted(folder.glob("runs/*/seed-*/summary.json"))
    if not summaries:
        sys.exit(f"{folder}: no run's summary.json to check")
    for path in summaries:
        given = json.loads(path.read_text())["config_given"]
        for key, value in (item.split("=", 1) for item in settings):
            if key not in given or not same_value(given[key], value):
                sys.exit(f"{path.parent}: {key}={given.get(key)!r}, the experiment sets {value}")


def epsilon_of_run(folder: Path, label: str, seed: str) -> float:
    """ε the run's summary.json records (``privacy.epsilon``; inf without DP)."""
    summary = json.loads((folder / "runs" / label / f"seed-{seed}" / "summary.json").read_text())
    privacy = summary.get("privacy")
    return math.inf if privacy is None else float(privacy["epsilon"])


def rows_of(folder: Path, dataset: str, level: str | None) -> list[dict[str, object]]:
    """Mean ± sd over seeds of each rule's mean, worst and variance (global model)."""
    with (folder / "runs.csv").open() as handle:
        runs = [r for r in csv.DictReader(handle) if r["status"] == "ok"]
    rows = []
    for name in ROW_NAMES:
        rule, prefix = (name.removesuffix(" (personal)"), "personal-") if "personal" in name else (
            name, "")  # fmt: skip
        mine = [r for r in runs if r["label"] == rule]
        if not mine:
            continue
        row: dict[str, object] = {"dataset": dataset, "rule": name, "z": level or "none"}
        epsilons = {epsilon_of_run(folder, rule, r["seed"]) for r in mine}
        row["epsilon"] = max(epsilons)
        row["seeds"] = len(mine)
        row["missing-seeds"] = " ".join(missing_seeds(dataset, [r["seed"] for r in mine]))
        for column in ("acc-mean", "acc-worst", "acc-variance"):
            scale = 1e4 if column == "acc-variance" else 100.0
            values = [scale * float(r[prefix + column]) for r in mine]
            row[column] = statistics.fmean(values)
            row[f"{column}-sd"] = statistics.pstdev(values)
        rows.append(row)
    return rows


def missing_seeds(dataset: str, finished: list[str]) -> list[str]:
    """The data set's seeds without a finished run (``finished``: the seeds that have one)."""
    return [seed for seed in DATASETS[dataset]["seeds"] if seed not in finished]  # type: ignore[attr-defined]


def unfinished(folder: Path, dataset: str, level: str | None) -> list[str]:
    """One line per rule of ``folder`` without any finished run (all of them without runs.csv)."""
    done: set[str] = set()
    if (folder / "runs.csv").exists():
        with (folder / "runs.csv").open() as handle:
            done = {r["label"] for r in csv.DictReader(handle) if r["status"] == "ok"}
    return [
        f"- {dataset}, z = {level or 'none'}: no finished run of {rule} (`{folder.name}`)."
        for rule in RULES
        if rule not in done
    ]


def personal_scores(folder: Path) -> str:
    """Ditto's personal models in ``folder``: "mean / worst" in %, means over the seeds."""
    with (folder / "runs.csv").open() as handle:
        runs = [r for r in csv.DictReader(handle) if r["status"] == "ok" and r["label"] == "ditto"]
    mean = statistics.fmean(100 * float(r["personal-acc-mean"]) for r in runs)
    worst = statistics.fmean(100 * float(r["personal-acc-worst"]) for r in runs)
    return f"{mean:.1f} / {worst:.1f} %"


def largest_clip_fraction(folder: Path) -> float:
    """The largest share of clipped updates over every round of every Ditto run in ``folder``."""
    fractions = [0.0]
    for path in folder.glob("runs/ditto/seed-*/rounds.jsonl.gz"):
        with gzip.open(path, "rt") as handle:
            for line in handle:
                diagnostics = json.loads(line)["train"]["diagnostics"]
                fractions.append(float(diagnostics.get("dp-clip-fraction", 0.0)))
    return max(fractions)


def noise_weight(folder: Path, rule: str, level: str, clip: float) -> float | None:
    """Mean over rounds and seeds of σ / (z·C): the weight the rule's noise was calibrated to.

    Under ``max-weight`` calibration that is the round's largest weight (q-FFL: S / C), so
    a rule whose weights are nearer uniform gets less noise at the same ε. None: no rounds.
    """
    ratios = []
    for path in folder.glob(f"runs/{rule}/seed-*/rounds.jsonl.gz"):
        with gzip.open(path, "rt") as handle:
            for line in handle:
                std = json.loads(line)["train"]["diagnostics"]["dp-noise-std"]
                ratios.append(float(std) / (float(level) * clip))
    return statistics.fmean(ratios) if ratios else None


def weight_notes(out: Path, datasets: list[str]) -> list[str]:
    """One line per data set: each rule's `noise_weight`, over the data set's noise levels."""
    lines = [
        "The weight each rule's noise is calibrated to (σ / (z·C) of every round, mean over",
        "rounds, seeds and noise levels, from the runs' `rounds.jsonl.gz`): at the same z,",
        "hence the same ε, a rule with a smaller largest weight gets less noise.",
        "",
    ]
    for dataset in datasets:
        spec = DATASETS[dataset]
        weights = []
        for rule in RULES:
            found = [
                noise_weight(out / dataset / f"z{level}", rule, level, float(spec["clip"]))  # type: ignore[arg-type]
                for level in spec["noise"]  # type: ignore[attr-defined]
            ]
            known = [w for w in found if w is not None]
            if known:
                weights.append(f"{rule} {statistics.fmean(known):.3f}")
        lines.append(f"- {dataset}: {', '.join(weights) or 'no DP run finished'}.")
    return [*lines, ""]


def check_notes(out: Path, dataset: str) -> list[str]:
    """The paragraph on why Ditto's personal models gain under DP, from the checks' runs."""
    base = out / dataset
    return [
        f"Why Ditto's personal models gain under DP on {dataset} (checks, Ditto only, the",
        "same settings and seeds): with clipping at C = 1.0 and negligible noise (z = 1e-6,",
        f"`{dataset}/clip-only`) no update is ever clipped (largest clipped share over all",
        f"rounds and seeds: {largest_clip_fraction(base / 'clip-only'):.2f}) and the personal",
        f"models score {personal_scores(base / 'clip-only')} (mean / worst), as without DP",
        f"({personal_scores(base / 'no-dp')}): clipping alone changes nothing; it binds at",
        "z = 1 only once noise has inflated the updates. With `ditto-lambda=0`",
        f"(`{dataset}/ditto-lambda-0`, each personal model trained on its own data alone) they",
        f"score {personal_scores(base / 'ditto-lambda-0')}, in mean close to z = 1",
        f"({personal_scores(base / 'z1')}): on this non-IID split (Dirichlet α = 0.3) the pull",
        "of λ = 1 towards the global model costs the personal models accuracy, and at z = 1",
        "the noise leaves a global model (the `ditto` row) too poor to pull them anywhere",
        "useful, so they end near local training. The gain is the loss of a harmful pull,",
        "not a benefit of noise.",
        "",
    ]


def write_table(out: Path, rows: list[dict[str, object]], command: str, notes: list[str]) -> None:
    """tradeoff.csv and tradeoff.md: by data set and rule, no DP first, then falling ε."""
    rows = sorted(
        rows,
        key=lambda r: (str(r["dataset"]), ROW_NAMES.index(str(r["rule"])), -float(r["epsilon"])),  # type: ignore[arg-type]
    )
    columns = ["dataset", "rule", "z", "epsilon", "seeds", "missing-seeds"]
    for column in ("acc-mean", "acc-worst", "acc-variance"):
        columns += [column, f"{column}-sd"]
    with (out / "tradeoff.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "# Client-level DP against fairness: mean, worst client and variance per ε",
        "",
        f"Command: `{command}` (script `experiments/dp_tradeoff.py`, which states the",
        "settings). Central DP (`dp=central-fixed`, `dp-calibration=max-weight`: σ = z·S with",
        "S the round's sensitivity under the rule's own weights, so every rule has the same ε",
        "at the same z and rounds), δ = 1e-5, full participation (no amplification claimed).",
        "Accuracy of the global model on each client's test split, in %; variance across",
        "clients in %²; mean ± sd over the seeds (population sd). ε is what each run's",
        "`summary.json` records (`privacy.epsilon`). `ditto`: its global model, which",
        "FedAvg's server step trains, so its rows equal FedAvg's (and its line hides FedAvg's",
        "in the plot); `ditto (personal)`: the clients' personal models, trained on their",
        "own data against the noised global model, never sent (post-processing: same ε).",
        "Every run's `config_given` is checked to hold the script's settings (no DP and DP",
        "runs differ only in the `dp` keys).",
        "",
        "| Data set | Rule | z | ε | Mean (%) | Worst client (%) | Variance (%²) | Seeds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        eps = float(row["epsilon"])  # type: ignore[arg-type]
        lines.append(
            f"| {row['dataset']} | {row['rule']} | {row['z']} | "
            f"{'∞ (no DP)' if math.isinf(eps) else f'{eps:.2f}'} | "
            f"{row['acc-mean']:.2f} ± {row['acc-mean-sd']:.2f} | "
            f"{row['acc-worst']:.2f} ± {row['acc-worst-sd']:.2f} | "
            f"{row['acc-variance']:.1f} ± {row['acc-variance-sd']:.1f} | {seeds_cell(row)} |"
        )
    lines += ["", *notes, "![worst-client accuracy against ε](worst-vs-epsilon.png)", ""]
    (out / "tradeoff.md").write_text("\n".join(lines))


def seeds_cell(row: dict[str, object]) -> str:
    """The Seeds column: how many seeds the row averages, and which are missing if any."""
    missing = str(row["missing-seeds"])
    return (
        f"{row['seeds']} (missing: {missing.replace(' ', ', ')})" if missing else str(row["seeds"])
    )


def plot(out: Path, rows: list[dict[str, object]]) -> None:
    """worst-vs-epsilon.png: one panel per data set, one line per rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({str(r["dataset"]) for r in rows})
    figure, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4), squeeze=False)
    for axis, dataset in zip(axes[0], datasets, strict=True):
        mine = [r for r in rows if r["dataset"] == dataset]
        finite = [float(r["epsilon"]) for r in mine if math.isfinite(float(r["epsilon"]))]  # type: ignore[arg-type]
        edge = 3 * max(finite) if finite else 1.0  # where "no DP" is drawn
        for rule in ROW_NAMES:
            points = sorted(
                (min(float(r["epsilon"]), edge), float(r["acc-worst"]), float(r["acc-worst-sd"]))  # type: ignore[arg-type]
                for r in mine
                if r["rule"] == rule
            )
            if points:
                xs, ys, sds = zip(*points, strict=True)
                axis.errorbar(xs, ys, yerr=sds, marker="o", capsize=3, label=rule)
        axis.set_xscale("log")
        axis.axvline(edge, color="grey", linestyle=":", linewidth=1)
        axis.set_title(f"{dataset} (rightmost: no DP)")
        axis.set_xlabel("ε at δ = 1e-5")
        axis.set_ylabel("worst-client accuracy (%)")
        axis.legend()
    figure.tight_layout()
    figure.savefig(out / "worst-vs-epsilon.png", dpi=120)


def main() -> None:
    """Run every comparison not finished yet, then write the table and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/dp-tradeoff"))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--table-only", action="store_true", help="only re-read finished runs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    notes: list[str] = []
    missing: list[str] = []  # rules at a noise level without any finished run
    for dataset in args.datasets:
        for level in (None, *DATASETS[dataset]["noise"]):  # type: ignore[misc]
            folder = args.out / dataset / ("no-dp" if level is None else f"z{level}")
            baseline = DATASETS[dataset].get("baseline")
            if level is None and baseline is not None:
                folder = Path(str(baseline))
            elif not args.table_only:
                run_compare(folder, dataset, dp_settings(dataset, level), RULES, args.workers)
            if (folder / "runs.csv").exists():
                rows += rows_of(folder, dataset, level)
            missing += unfinished(folder, dataset, level)
        for name, extra in CHECKS.get(dataset, {}).items():
            if not args.table_only:
                run_compare(args.out / dataset / name, dataset, extra, ("ditto",), args.workers)
        if dataset in CHECKS:
            notes += check_notes(args.out, dataset)
        command = " ".join(a for a in sys.argv if a != "--table-only")
        gaps = ["Not finished when this table was written:", "", *missing, ""] if missing else []
        weights = weight_notes(args.out, args.datasets[: args.datasets.index(dataset) + 1])
        write_table(args.out, rows, f"nice -n 10 python {command}", gaps + weights + notes)
    plot(args.out, rows)


if __name__ == "__main__":
    main()
