"""The q-FFL figures of the README and the docs site's pages agree with their docs/results
files: the Synthetic(1, 1) table and its runs, the worst devices, the optima and the light
runs.
"""

import json

import numpy as np
import pytest

from tests.readme.readme_text import README, ROOT, readme_table

QFFL_SEEDS = (1, 2, 3, 4, 5)


def test_qffl_table_rounds_the_fractions_of_the_results_csv():
    # docs/results/qffl-synthetic/table_qffl.csv holds fractions (variance: a fraction
    # squared); the README shows them in % (one decimal) and %² (integers).
    import csv

    with (ROOT / "docs/results/qffl-synthetic/table_qffl.csv").open() as handle:
        rows = {row["label"]: row for row in csv.DictReader(handle)}
    readme = {row[0]: row[1:] for row in readme_table("| Synthetic(1, 1) | Average (%) |")}
    for q in ("0", "1"):
        row = rows[f"qffl[q={q}]"]
        assert row["seeds_ok"].split() == [str(seed) for seed in QFFL_SEEDS]

        def cell(metric: str, scale: float, digits: int, row: dict[str, str] = row) -> str:
            mean = round(scale * float(row[f"{metric} mean"]), digits)
            std = round(scale * float(row[f"{metric} std"]), digits)
            return f"{mean:.{digits}f} ± {std:.{digits}f}"

        assert readme[f"ours, q = {q}, round 2,000"][:3] == [
            cell("acc-mean", 100, 1),
            cell("acc-worst-10", 100, 1),
            cell("acc-variance", 1e4, 0),
        ]


def qffl_run(q: int, seed: int, folder: str = "qffl-synthetic") -> list[dict]:
    """The rounds.jsonl lines of one committed q-FFL run."""
    import gzip

    path = ROOT / f"docs/results/{folder}/runs/qffl_q_{q}/seed-{seed}/rounds.jsonl.gz"
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle]


def qffl_run_statistics(
    q: int, seed: int, folder: str = "qffl-synthetic"
) -> list[tuple[float, float, float, float]]:
    """(mean %, worst-10 % in %, variance in %², pooled %) of each evaluation of a run.

    Worked from the per-client ``eval_acc`` fractions and test-sample counts in the
    run's ``rounds.jsonl.gz`` with NumPy alone: the unweighted mean, the mean of the
    lowest ``ceil(10 %)`` of clients, the population variance (``fairfl.metrics``
    definitions) and the accuracy over all test samples together.
    """
    statistics = []
    for line in qffl_run(q, seed, folder):
        clients = line.get("clients")
        if not clients:
            continue
        acc = np.array([100.0 * c["eval_acc"] for c in clients])
        samples = np.array([c["num_examples"] for c in clients], dtype=float)
        worst = np.sort(acc)[: int(np.ceil(0.1 * acc.size))]
        pooled = float(np.dot(samples, acc) / samples.sum())
        statistics.append((acc.mean(), worst.mean(), acc.var(), pooled))
    return statistics


def test_qffl_late_round_rows_and_per_seed_figures_come_from_the_runs():
    # The README's pooled column, its "mean of rounds 1,100-2,000" rows and the per-seed
    # figures of the paragraph under the table, from the committed runs.
    readme = {row[0]: row[1:] for row in readme_table("| Synthetic(1, 1) | Average (%) |")}
    last_ten, final = {}, {}
    for q in (0, 1):
        runs = [qffl_run_statistics(q, seed) for seed in QFFL_SEEDS]
        assert all(len(run) == 20 for run in runs)  # every 100 rounds up to 2,000
        last_ten[q] = np.array([np.mean(run[-10:], axis=0) for run in runs])
        final[q] = np.array([run[-1] for run in runs])
        mean, worst, variance, pooled = last_ten[q].mean(axis=0)
        assert readme[f"ours, q = {q}, mean of rounds 1,100–2,000"] == [
            f"{mean:.1f}",
            f"{worst:.1f}",
            f"{variance:.0f}",
            f"{pooled:.1f}",
        ]
        pooled_final = final[q][:, 3]
        assert readme[f"ours, q = {q}, round 2,000"][3] == (
            f"{pooled_final.mean():.1f} ± {pooled_final.std():.1f}"
        )
    paragraph = " ".join(README.split())

    def pairs(values_0: np.ndarray, values_1: np.ndarray, digits: int) -> str:
        return ", ".join(
            f"{a:.{digits}f} → {b:.{digits}f}" for a, b in zip(values_0, values_1, strict=True)
        )

    assert f"every seed ({pairs(final[0][:, 2], final[1][:, 2], 0)} at round 2,000)" in paragraph
    assert f"(pooled, per seed: {pairs(final[0][:, 3], final[1][:, 3], 1)};" in paragraph
    drop = final[0].mean(axis=0) - final[1].mean(axis=0)
    assert f"the average falls {drop[0]:.1f} points and the pooled accuracy {drop[3]:.1f}" in (
        paragraph
    )
    assert not final[0][:, 1].any() and not final[1][:, 1].any()  # worst 10 %: 0 % always
    manifest = json.loads((ROOT / "docs/results/qffl-synthetic/manifest.json").read_text())
    assert manifest["seeds"] == list(QFFL_SEEDS)
    assert f"{round(manifest['wall_time_s']):,} s for the 10 runs on one worker" in paragraph


def test_qffl_worst_devices_claim_comes_from_the_run():
    # "seed 1's ten worst devices (q = 0) hold 10-30 test samples and, drawn in 37-101 of
    # the 2,000 rounds, still score 0 %": from the run's last evaluation and train weights.
    lines = qffl_run(0, 1)
    drawn: dict[int, int] = {}
    for line in lines[1:]:  # round 1 is the census: every device trains
        for weight in line["train"]["weights"]:
            drawn[weight["partition_id"]] = drawn.get(weight["partition_id"], 0) + 1
    last = [line for line in lines if line.get("clients")][-1]
    worst = sorted(last["clients"], key=lambda c: c["eval_acc"])[:10]
    samples = [c["num_examples"] for c in worst]
    counts = [drawn.get(c["partition_id"], 0) for c in worst]
    paragraph = " ".join(README.split())
    assert all(c["eval_acc"] == 0 for c in worst)
    assert (
        f"hold {min(samples)}–{max(samples)} test samples and, drawn in "
        f"{min(counts)}–{max(counts)} of the 2,000 rounds" in paragraph
    )


QFFL_OPTIMUM = ROOT / "docs/results/qffl-synthetic-optimum.json"
#: The README's row names of the optima table, by σ.
QFFL_OPTIMUM_ROWS = {2.0: "σ = 2 (`synthetic`)", 0.75: "σ = 0.75 (`synthetic-1-1-sigma0.75`)"}


def qffl_optimum() -> dict:
    """docs/results/qffl-synthetic-optimum.json (experiments/qffl_synthetic_optimum.py)."""
    return json.loads(QFFL_OPTIMUM.read_text())


def qffl_optimum_runs(result: dict, sigma: float, q: int) -> list[dict]:
    """The runs of one (σ, q), checked to be seeds 1-5 in order."""
    runs = [run for run in result["runs"] if run["sigma"] == sigma and run["q"] == q]
    assert [run["seed"] for run in runs] == list(QFFL_SEEDS)
    return runs


def qffl_optimum_statistics(run: dict) -> dict[str, float]:
    """A run's statistics in % (variance %²) from its per-device correct test counts.

    NumPy alone, q-FFL's definitions: the unweighted device mean, the means of the 10
    lowest and 10 highest of the 100 device accuracies, their population variance, and
    the correct predictions over all test samples together.
    """
    correct = np.array(run["test_correct"], dtype=float)
    samples = np.array(run["test_samples"], dtype=float)
    accuracy = 100.0 * correct / samples
    assert accuracy.size == 100
    return {
        "acc-mean": accuracy.mean(),
        "acc-worst-10": np.sort(accuracy)[:10].mean(),
        "acc-best-10": np.sort(accuracy)[-10:].mean(),
        "acc-variance": accuracy.var(),
        "acc-weighted-mean": 100.0 * correct.sum() / samples.sum(),
    }


def signed(value: float, digits: int) -> str:
    """``+3.4`` / ``−1.1``: a signed number with the README's minus sign."""
    return f"{value:+.{digits}f}".replace("-", "−")


def in_words(items: list[str]) -> str:
    """``a, b and c``."""
    return ", ".join(items[:-1]) + " and " + items[-1]


def test_qffl_optimum_statistics_are_the_per_device_counts_on_the_recipes_test_splits():
    # Each run's stored metrics (fairfl.metrics.fairness_metrics, fractions) are the
    # statistics of its per-device counts, and for σ = 2 the per-device test sizes are
    # those of the committed qffl-synthetic runs (same splits).
    result = qffl_optimum()
    assert result["config"]["seeds"] == list(QFFL_SEEDS)
    assert result["config"]["datasets"] == {"2": "synthetic", "0.75": "synthetic-1-1-sigma0.75"}
    assert len(result["runs"]) == 20
    for run in result["runs"]:
        for metric, value in qffl_optimum_statistics(run).items():
            scale = 1e4 if metric == "acc-variance" else 100.0
            assert scale * run["metrics"][metric] == pytest.approx(value, rel=1e-12, abs=1e-9)
    for seed in QFFL_SEEDS:
        clients = [line for line in qffl_run(0, seed) if line.get("clients")][-1]["clients"]
        sizes = {c["partition_id"]: c["num_examples"] for c in clients}
        for q in (0, 1):
            run = qffl_optimum_runs(result, 2.0, q)[seed - 1]
            assert run["test_samples"] == [sizes[k] for k in range(100)]


def test_qffl_optimum_runs_converged():
    # Every run stopped before maxiter, and continuing it changed no accuracy; the
    # README quotes the largest final gradient norm.
    result = qffl_optimum()
    assert not any(run["reached_maxiter"] for run in result["runs"])
    assert all(run["iterations"] < result["config"]["maxiter"] for run in result["runs"])
    assert all(run["continued"]["accuracies_unchanged"] for run in result["runs"])
    largest = max(run["gradient_norm"] for run in result["runs"])
    assert largest < 1e-6
    paragraph = " ".join(README.split())
    assert f"the largest final gradient norm is {largest:.1e}" in paragraph
    assert "continuing every solution for as many iterations again changes no device's" in (
        paragraph
    )


def test_qffl_optimum_table_and_paragraph_come_from_the_results_file():
    # The README's optima table (mean ± population std over seeds 1-5 of the statistics
    # worked from the per-device counts) and every number of the paragraph under it.
    from fairfl.sweep.recipes import QFFL_SYNTHETIC

    result = qffl_optimum()
    table = readme_table("| Optimum of f_q, test accuracy, mean ± std over seeds |")
    assert table[0][1:] == ["Average (%)", "Worst 10 % (%)", "Variance (%²)", "Pooled (%)"]
    rows = {row[0]: row[1:] for row in table[1:]}
    assert sorted(rows) == sorted(
        f"{name}, q = {q}" for name in QFFL_OPTIMUM_ROWS.values() for q in (0, 1)
    )
    means: dict[tuple[float, int], dict[str, float]] = {}
    for sigma, name in QFFL_OPTIMUM_ROWS.items():
        for q in (0, 1):
            stats = [qffl_optimum_statistics(r) for r in qffl_optimum_runs(result, sigma, q)]

            def cell(metric: str, digits: int, stats: list = stats) -> str:
                values = np.array([s[metric] for s in stats])
                return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}"

            assert rows[f"{name}, q = {q}"] == [
                cell("acc-mean", 1),
                cell("acc-worst-10", 1),
                cell("acc-variance", 0),
                cell("acc-weighted-mean", 1),
            ]
            means[(sigma, q)] = {m: np.mean([s[m] for s in stats]) for m in stats[0]}
    paragraph = " ".join(README.split())
    assert f"```bash\n{result['command']}\n```" in README
    assert f"{round(result['wall_time_s'])} s on {result['cpu_count']} cores" in paragraph

    # "All four optima score above both of the paper's rows on the average and the worst
    # 10 % and below them on the variance": against the recipe's copy of the paper table.
    reference = QFFL_SYNTHETIC.reference[0]
    paper = {
        row["name"]: {
            column: float(value.split(" ± ")[0])
            for column, value in zip(reference["columns"], row["values"], strict=True)
        }
        for row in reference["rows"]
    }
    for mean in means.values():
        for row in paper.values():
            assert mean["acc-mean"] > row["Average"]
            assert mean["acc-worst-10"] > row["Worst 10%"]
            assert mean["acc-variance"] < row["Variance"]
    assert "All four optima score above both of the paper's rows on the average and the " in (
        paragraph
    )

    # Paired by seed, q = 1's optimum minus q = 0's.
    def paired(sigma: float, metric: str) -> np.ndarray:
        zero, one = (
            [qffl_optimum_statistics(r)[metric] for r in qffl_optimum_runs(result, sigma, q)]
            for q in (0, 1)
        )
        return np.array(one) - np.array(zero)

    def listed(values: np.ndarray, digits: int) -> str:
        return ", ".join(signed(v, digits) for v in values)

    worst, variance, average = (
        {sigma: paired(sigma, m) for sigma in QFFL_OPTIMUM_ROWS}
        for m in ("acc-worst-10", "acc-variance", "acc-mean")
    )
    assert (worst[2.0] > 0).all() and (variance[2.0] < 0).all() and (variance[0.75] < 0).all()
    assert (
        f"With σ = 2 it raises the worst 10 % in every seed ({listed(worst[2.0], 1)} points) "
        f"and lowers the variance in every seed ({listed(variance[2.0], 0)} %²), the average "
        f"changing by {signed(average[2.0].mean(), 1)} points; with σ = 0.75 it lowers the "
        f"variance in every seed ({listed(variance[0.75], 0)} %²) and raises the worst 10 % "
        f"in {int((worst[0.75] > 0).sum())} of the 5 ({listed(worst[0.75], 1)}), the average "
        f"changing by {signed(average[0.75].mean(), 1)} (the paper: "
        f"{signed(paper['q = 1']['Worst 10%'] - paper['q = 0']['Worst 10%'], 1)} worst 10 %, "
        f"{signed(paper['q = 1']['Variance'] - paper['q = 0']['Variance'], 0)} %², "
        f"{signed(paper['q = 1']['Average'] - paper['q = 0']['Average'], 1)} average)." in paragraph
    )

    # Device sizes, per seed.
    def sizes(sigma: float) -> str:
        rows = [s for s in result["sizes"] if s["sigma"] == sigma]
        assert [s["seed"] for s in rows] == list(QFFL_SEEDS)
        totals = in_words([f"{s['total_samples']:,}" for s in rows])
        largest = in_words([f"{s['largest_samples']:,}" for s in rows])
        shares = in_words([f"{100 * s['largest_samples'] / s['total_samples']:.1f}" for s in rows])
        return (
            f"hold {totals}{' samples' if sigma == 2.0 else ''}, the largest device {largest}"
            f"{' of them' if sigma == 2.0 else ''} ({shares} %)"
        )

    assert f"with σ = 2 the federations {sizes(2.0)}; with σ = 0.75 they {sizes(0.75)}." in (
        paragraph
    )


def test_qffl_optimum_report_is_what_the_experiment_renders_from_the_json():
    # docs/results/qffl-synthetic-optimum.md is render_markdown of the committed JSON.
    import importlib.util
    import sys

    name = "qffl_synthetic_optimum"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            name, ROOT / "experiments" / "qffl_synthetic_optimum.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclass looks the module up there
        spec.loader.exec_module(module)
    committed = QFFL_OPTIMUM.with_suffix(".md").read_text()
    assert module.render_markdown(qffl_optimum()) == committed


QFFL_LIGHT = "qffl-synthetic-light"


def qffl_light_manifest() -> dict:
    """The light-tailed comparison's manifest (its seeds, runs and their wall times)."""
    return json.loads((ROOT / f"docs/results/{QFFL_LIGHT}/manifest.json").read_text())


def qffl_light_statistics(q: int) -> np.ndarray:
    """(seeds, 40 evaluations, 4) statistics of the committed light-tailed runs of q.

    Evaluations every 500 rounds up to 20,000; the statistics of
    :func:`qffl_run_statistics` (mean, worst 10 %, variance, pooled).
    """
    seeds = qffl_light_manifest()["seeds"]
    runs = np.array([qffl_run_statistics(q, seed, QFFL_LIGHT) for seed in seeds])
    assert runs.shape == (len(seeds), 40, 4)
    return runs


def test_qffl_light_table_and_paragraph_come_from_the_runs_and_the_optima():
    # The σ = 0.75 table: rounds 2,000 and 20,000 (mean ± population std over seeds), the
    # mean of the last four evaluations, and the optimum of f_q on the same devices and
    # splits (docs/results/qffl-synthetic-optimum.json); then the paragraph's figures.
    table = readme_table("| Synthetic(1, 1), σ = 0.75, mean ± std over seeds |")
    assert table[0][1:] == ["Average (%)", "Worst 10 % (%)", "Variance (%²)", "Pooled (%)"]
    rows = {row[0]: row[1:] for row in table[1:]}
    optimum = qffl_optimum()
    digits = (1, 1, 0, 1)

    def cells(values: np.ndarray) -> list[str]:
        return [
            f"{m:.{d}f} ± {s:.{d}f}"
            for m, s, d in zip(values.mean(axis=0), values.std(axis=0), digits, strict=True)
        ]

    manifest = qffl_light_manifest()
    assert manifest["seeds"] == list(QFFL_SEEDS)
    runs, optima = {}, {}
    for q in (0, 1):
        runs[q] = qffl_light_statistics(q)
        stats = [
            qffl_optimum_statistics(qffl_optimum_runs(optimum, 0.75, q)[seed - 1])
            for seed in manifest["seeds"]
        ]
        optima[q] = np.array(
            [
                [s[m] for m in ("acc-mean", "acc-worst-10", "acc-variance", "acc-weighted-mean")]
                for s in stats
            ]
        )
        assert rows[f"ours, q = {q}, round 2,000"] == cells(runs[q][:, 3])
        assert rows[f"ours, q = {q}, round 20,000"] == cells(runs[q][:, -1])
        late = runs[q][:, -4:].mean(axis=1).mean(axis=0)
        assert rows[f"ours, q = {q}, mean of rounds 18,500–20,000"] == [
            f"{v:.{d}f}" for v, d in zip(late, digits, strict=True)
        ]
        assert rows[f"optimum of f_{q}"] == cells(optima[q])
    assert len(rows) == 8

    # The runs' devices and test splits are the optimum's: same test sizes per device.
    for seed in manifest["seeds"]:
        clients = [line for line in qffl_run(0, seed, QFFL_LIGHT) if line.get("clients")][-1]
        sizes = {c["partition_id"]: c["num_examples"] for c in clients["clients"]}
        run = qffl_optimum_runs(optimum, 0.75, 0)[seed - 1]
        assert run["test_samples"] == [sizes[k] for k in range(100)]

    paragraph = " ".join(README.split())
    times = [run["wall_time_s"] for run in manifest["runs"]]
    assert all(time > 0 for time in times)
    # "seeds 4 and 5 ... added to seeds 1–3 by running the same command again with
    # --skip-existing": the manifest of that second run skipped seeds 1-3 and ran 4 and 5.
    statuses = {run["dir"]: run["status"] for run in manifest["runs"]}
    assert statuses == {
        f"runs/qffl_q_{q}/seed-{seed}": "skipped" if seed <= 3 else "ok"
        for q in (0, 1)
        for seed in QFFL_SEEDS
    }
    assert manifest["command"].endswith("--skip-existing")
    assert (
        "seeds 1–5, evaluated every 500 rounds" in paragraph
        and "seeds 4 and 5 beside a run of the whole test suite; they were added to seeds 1–3 "
        "by running the same command again with `--skip-existing`"
        in paragraph
    )
    assert f"each run took {min(times):,.0f}–{max(times):,.0f} s" in paragraph
    assert (
        f"```bash\nfairfl compare --recipe {QFFL_LIGHT} --out docs/results/{QFFL_LIGHT} "
        "--no-models --compress-runs\n```" in README
    )

    final = {q: runs[q][:, -1] for q in (0, 1)}

    def pairs(metric: int, digits: int) -> str:
        return ", ".join(
            f"{a:.{digits}f} → {b:.{digits}f}"
            for a, b in zip(final[0][:, metric], final[1][:, metric], strict=True)
        )

    assert (final[1][:, 1] > final[0][:, 1]).all()  # worst 10 % up in every seed
    assert (final[1][:, 2] < final[0][:, 2]).all()  # variance down in every seed
    assert f"raises the worst 10 % in every seed ({pairs(1, 1)})" in paragraph
    assert f"lowers the variance in every seed ({pairs(2, 0)})" in paragraph
    change = final[1].mean(axis=0) - final[0].mean(axis=0)
    assert (
        f"at a cost of {-change[0]:.1f} points of average and {-change[3]:.1f} of pooled accuracy"
        in paragraph
    )
    gap = {q: optima[q].mean(axis=0) - final[q].mean(axis=0) for q in (0, 1)}
    assert (
        f"the average {gap[0][0]:.1f} and {gap[1][0]:.1f} points below it and the worst 10 % "
        f"{gap[0][1]:.1f} and {gap[1][1]:.1f}" in paragraph
    )
    # From round 6,000 on, the seed-mean worst 10 % of each q stays within a band.
    for q in (0, 1):
        band = runs[q][:, 11:, 1].mean(axis=0)
        assert f"q = {q} between {band.min():.1f} and {band.max():.1f} %" in paragraph
