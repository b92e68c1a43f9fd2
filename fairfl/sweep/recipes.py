"""Reproduction recipes: preset comparisons with the papers' numbers to print beside ours.

``fairfl compare --recipe NAME`` runs a recipe; any explicit ``--rules``, ``--seeds``,
``--grid`` replaces the recipe's, and ``--set`` items are applied after the recipe's.

- ``qffl-synthetic``: q-FFL (q-FedAvg) with q = 0 and q = 1 on Synthetic(1, 1), 100
  devices, multinomial logistic regression, 10 devices a round drawn ∝ n_k without
  replacement and summed uniformly (``sampling=size-proportional``, as the paper's
  code); Li et al. 2020's table (Average, Worst 10%, Best 10%, Variance) beside ours.
- ``qffl-synthetic-light``: the same with light-tailed device sizes
  (``synthetic-1-1-sigma0.75``) for the paper's 20,000 rounds.
- ``qffl-adult``: q-FFL (q-FedSGD, q = 2 and q = 5), AFL and FedAvg on UCI Adult split as AFL
  split it (partitioner ``phd``: the PhDs, everyone else), logistic regression, adult.data
  trains and adult.test tests; Hu, Shaloudegi, Zhang and Yu's (IEEE TNSE 2022) Table 7
  beside ours (the same split, their runs of AFL and q-FedAvg).
- ``fairfed-adult``: FairFed against FedAvg on UCI Adult, sensitive attribute sex, 5
  clients drawn with attribute heterogeneity Dir(α), α in {0.1, 0.2, 0.5, 10, 5000}
  (Ezzeldin et al., AAAI 2023); accuracy and the SPD / EOD gaps.
- ``qffl-adult-quick``, ``fairfed-adult-quick``: the same recipes cut to one seed and a
  few rounds (one α), to check in CI that they run end to end.
- ``flamby-heart``: FLamby's Fed-Heart-Disease (four hospitals, logistic regression,
  batch 4, 100 local steps, 15 rounds, seeds 42-46) for FedAvg, FedProx, FedAdam, FedYogi,
  the fair rules and Ditto, with FLamby's published per-hospital rows beside ours;
  ``flamby-heart-quick`` the same cut to two rules, one seed and two short rounds (CI).
- ``digits-table6``: every registered rule on scikit-learn's digits, 20 clients,
  Dirichlet α = 0.1, 3 seeds: the digits analogue of Malekmohammadi & Yu's Table 6 (and Table 2),
  with Malekmohammadi & Yu's CIFAR-10 and CIFAR-100 numbers as the reference pattern. Its rows
  include FedFa and FedFV (issue 34), which Malekmohammadi & Yu do not compare.

The papers' numbers are copied from ``docs/specs/spec-vred-qffl.md`` §14 (Malekmohammadi & Yu
Tables 2 and 6; Li et al. 2020's table).
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Malekmohammadi & Yu's names of the rules of Table 6, by fairfl registry name.
PAPER000_NAMES: dict[str, str] = {
    "fedavg": "FedAvg",
    "qffl": "q-FFL",
    "afl": "AFL",
    "gifair": "GiFair",
    "term": "TERM",
    "propfair": "PropFair",
    "deltafl": "Δ-FL",
    "vred": "VRed",
    "semivred": "Semi-VRed",
}

_TABLE6_TITLES = ["Mean", "Std", "Worst", "Worst 10%", "Worst 20%", "Best 10%"]

# [Malekmohammadi & Yu 2024] Table 6, CIFAR-10 (spec §14.1); "-" = diverged.
_TABLE6_CIFAR10 = {
    "fedavg": ["43.45±0.60", "14.33±0.62", "9.35±3.13", "18.86±0.99", "23.77±0.70", "68.97±0.81"],
    "qffl": ["45.46±0.74", "14.31±2.03", "18.71±3.36", "21.23±3.06", "25.95±3.51", "72.31±2.88"],
    "afl": ["-", "-", "-", "-", "-", "-"],
    "gifair": ["45.05±0.64", "12.93±0.44", "16.79±3.55", "22.65±2.03", "26.52±0.76", "65.62±2.59"],
    "term": ["45.61±1.03", "12.24±0.56", "13.80±5.25", "24.89±1.37", "29.34±0.61", "68.65±1.27"],
    "propfair": ["36.95±0.21", "15.16±1.33", "1.14±1.62", "12.49±0.28", "16.66±1.31", "66.04±4.24"],
    "deltafl": ["40.32±0.31", "16.51±1.26", "8.8±0.37", "16.94±0.55", "21.31±0.31", "72.35±2.11"],
    "vred": ["44.43±0.88", "13.05±1.32", "18.61±3.12", "24.28±2.22", "27.46±1.56", "69.31±3.48"],
    "semivred": [
        "45.47±0.10",
        "12.58±0.23",
        "19.04±6.73",
        "27.08±1.76",
        "30.34±1.05",
        "72.50±0.88",
    ],
}

# [Malekmohammadi & Yu 2024] Table 6, CIFAR-100 (spec §14.1).
_TABLE6_CIFAR100 = {
    "fedavg": ["20.20±0.31", "6.50±0.21", "10.36±0.69", "11.07±0.54", "12.49±0.51", "33.88±0.09"],
    "qffl": ["20.25±0.11", "6.30±0.27", "9.66±0.33", "11.09±0.67", "12.52±0.46", "33.96±0.90"],
    "afl": ["18.98±0.71", "4.91±0.37", "9.81±0.69", "11.31±0.18", "12.72±0.21", "28.68±1.71"],
    "gifair": ["19.81±0.32", "5.74±0.16", "9.35±0.34", "11.19±0.24", "12.59±0.49", "32.30±0.32"],
    "term": ["18.00±0.41", "6.05±0.18", "8.86±0.50", "10.02±0.44", "11.04±0.51", "31.58±0.98"],
    "propfair": ["14.97±0.68", "6.44±0.34", "5.40±1.28", "7.00±1.11", "8.06±1.07", "28.89±0.91"],
    "deltafl": ["18.39±0.15", "5.42±0.65", "8.11±0.84", "10.06±0.78", "11.28±0.81", "28.95±1.27"],
    "vred": ["20.42±0.36", "6.08±0.05", "9.43±1.01", "11.21±0.74", "12.81±0.85", "33.59±1.11"],
    "semivred": ["20.85±0.39", "6.26±0.18", "9.12±1.47", "11.86±0.74", "13.46±0.63", "34.57±1.20"],
}

# [Malekmohammadi & Yu 2024] Table 2, CIFAR-100 (spec §14.2).
_TABLE2_CIFAR100 = {
    "qffl": ["52.08±11.95 (+0.69)", "54.21±15.38 (−0.79)", "+0.04±0.41"],
    "afl": ["51.18±9.26 (+0.56)", "77.25±12.85 (−3.50)", "−1.22±0.95"],
    "gifair": ["60.55±6.17 (+0.86)", "68.22±16.13 (−2.03)", "−0.40±0.61"],
    "term": ["23.66±5.34 (−1.12)", "87.93±1.81 (−3.57)", "−2.20±0.66"],
    "propfair": ["8.33±1.69 (−4.05)", "92.41±4.28 (−6.74)", "−5.23±0.96"],
    "deltafl": ["46.55±6.75 (+0.14)", "78.75±2.32 (−4.31)", "−1.81±0.25"],
    "vred": ["60.50±12.52 (+1.11)", "60.62±7.53 (−0.94)", "+0.21±0.06"],
    "semivred": ["65.40±6.29 (+1.47)", "53.17±6.75 (−0.42)", "+0.64±0.30"],
}


def _summary_reference(title: str, numbers: dict[str, list[str]], note: str) -> dict[str, Any]:
    return {
        "title": title,
        "kind": "summary",
        "columns": _TABLE6_TITLES,
        "rows": [
            {"name": PAPER000_NAMES[rule], "label": rule, "values": values}
            for rule, values in numbers.items()
        ],
        "note": note,
    }


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A preset comparison.

    Parameters
    ----------
    name : str
        ``--recipe`` name.
    title : str
        Report title.
    description : str
        What it reproduces and how it departs from the paper (goes into report.md).
    rules : tuple[str, ...] | None
        Rules to run; None means every registered rule, in registry order.
    grid : tuple[str, ...]
        ``--grid`` items.
    settings : tuple[str, ...]
        ``--set`` items (``key=value`` or ``rule:key=value``).
    seeds : tuple[int, ...]
        Seeds.
    baseline, weights_label : str | None
        Table 2 baseline and the variant whose weights are plotted.
    columns : str
        Extra column set (``"qffl"``) or ``"table6"``.
    reference : tuple[dict, ...]
        The papers' tables (see :func:`fairfl.report.build.reference_markdown`).
    workers : int
        Default worker processes.
    """

    name: str
    title: str
    description: str
    rules: tuple[str, ...] | None
    grid: tuple[str, ...]
    settings: tuple[str, ...]
    seeds: tuple[int, ...]
    baseline: str | None
    weights_label: str | None
    columns: str
    reference: tuple[dict[str, Any], ...]
    workers: int = 2


QFFL_SYNTHETIC = Recipe(
    name="qffl-synthetic",
    title="q-FFL on Synthetic(1, 1): q = 0 vs q = 1",
    description=(
        "Li et al. (q-FFL, ICLR 2020), Synthetic row of its table: q-FedAvg "
        "with q = 0 (FedAvg's objective) and q = 1 on Synthetic(1, 1), 100 devices "
        "(FedProx / q-FFL generator), multinomial logistic regression, local SGD with "
        "batch 10 for one epoch, lr 0.1, seeds 1-5: each seed "
        "generates a new federation (devices, data and sizes), not a new partition of "
        "one. Devices as in the paper's code (fair_flearn, "
        "sampling=2): 10 a round drawn with probability proportional to n_k without "
        "replacement, their updates summed uniformly (sampling=size-proportional, "
        "qffl-weighting=uniform), so q = 0 minimises FedAvg's sum of p_k F_k. "
        "Departures: round 1 trains all 100 devices (the server learns each n_k from "
        "the replies; the paper's code knows them beforehand); 2,000 rounds instead of "
        "~20,000 (not converged: absolute accuracies stay below the paper's); federated "
        "evaluation every 100 rounds; a 20% test split per device (paper: 10% test + "
        "10% validation); 'Average' is the unweighted mean over devices (the reference "
        "code prints the pooled accuracy)."
    ),
    rules=("qffl",),
    grid=("qffl-q=0,1",),
    settings=(
        "dataset=synthetic",
        "partitioner=natural",
        "model=logreg",
        "num-partitions=100",
        "fraction-train=0.1",
        "sampling=size-proportional",
        "lr=0.1",
        "local-epochs=1",
        "batch-size=10",
        "test-fraction=0.2",
        "num-server-rounds=2000",
        "evaluate-every=100",
    ),
    seeds=(1, 2, 3, 4, 5),
    baseline="qffl[q=0]",
    weights_label="qffl[q=1]",
    columns="qffl",
    reference=(
        {
            "title": (
                "Li et al. 2020 (q-FFL), Synthetic: test accuracy %, mean ± std as the paper "
                "reports them"
            ),
            "kind": "summary",
            "columns": ["Average", "Worst 10%", "Best 10%", "Variance"],
            "rows": [
                {
                    "name": "q = 0",
                    "label": "qffl[q=0]",
                    "values": ["80.8 ± .9", "18.8 ± 5.0", "100.0 ± 0.0", "724 ± 72"],
                },
                {
                    "name": "q = 1",
                    "label": "qffl[q=1]",
                    "values": ["79.0 ± 1.2", "31.1 ± 1.8", "100.0 ± 0.0", "472 ± 14"],
                },
            ],
            "note": (
                "The claim to reproduce is relative: q = 1 raises the worst 10% and lowers "
                "the variance at a small cost in average accuracy."
            ),
        },
    ),
    workers=2,
)

QFFL_SYNTHETIC_LIGHT = dataclasses.replace(
    QFFL_SYNTHETIC,
    name="qffl-synthetic-light",
    title="q-FFL on Synthetic(1, 1) with light-tailed device sizes, 20,000 rounds",
    description=(
        "qffl-synthetic with two changes: the device sizes are drawn as "
        "floor(LogNormal(4, 0.75)) + 50 instead of the reference generator's "
        "LogNormal(4, 2) (dataset synthetic-1-1-sigma0.75: the same devices, W_k, b_k "
        "and v_k, with fewer samples; ~12,000 samples in all, 120-128 ± 60-74 per "
        "device, the largest under 5 %, where LogNormal(4, 2) gives one device "
        "with 12-43 % of all samples, drawn almost every round), and the paper's "
        "20,000 rounds, evaluated every 500. Everything else as qffl-synthetic: "
        "q-FedAvg with q = 0 and q = 1, 100 devices, 10 a round drawn proportional to "
        "n_k without replacement and summed uniformly, multinomial logistic "
        "regression, local SGD with batch 10 for one epoch, lr 0.1, seeds 1-5, a 20% "
        "test split per device; 'Average' is the unweighted mean over devices."
    ),
    settings=tuple(
        {
            "dataset=synthetic": "dataset=synthetic-1-1-sigma0.75",
            "num-server-rounds=2000": "num-server-rounds=20000",
            "evaluate-every=100": "evaluate-every=500",
        }.get(item, item)
        for item in QFFL_SYNTHETIC.settings
    ),
)

DIGITS_TABLE6 = Recipe(
    name="digits-table6",
    title="All rules on digits: the analogue of Malekmohammadi & Yu's Table 6",
    description=(
        "Every registered rule (at its default hyperparameters; with --tune, at the "
        "setting chosen on validation data, below) on scikit-learn's 8x8 digits "
        "(1,797 images), 20 clients, label-skew Dirichlet α = 0.1, a 30% local "
        "test split per client, an MLP (64-64-10), full participation, local SGD "
        "(lr 0.1, batch 32, 2 local epochs), 30 rounds, 3 seeds (each seed draws its own "
        "partition, split and initial model, shared by all rules). Malekmohammadi & Yu train "
        "ResNet-18 on CIFAR for 200 rounds, so only the pattern, not the numbers, can "
        "carry over. FedFa (Huang et al., arXiv 2012.10069) and FedFV (Wang et al., "
        "IJCAI 2021) run at their reference code's defaults (FedFa β = 0.5, γ = 0.9, "
        "η = 0.1; FedFV α = 0.1, τ = 1); Malekmohammadi & Yu have no row for them."
    ),
    rules=None,
    grid=(),
    settings=(
        "dataset=digits",
        "partitioner=dirichlet",
        "num-partitions=20",
        "dirichlet-alpha=0.1",
        "test-fraction=0.3",
        "model=mlp",
        "lr=0.1",
        "local-epochs=2",
        "batch-size=32",
        "num-server-rounds=30",
    ),
    seeds=(0, 1, 2),
    baseline="fedavg",
    weights_label="semivred",
    columns="table6",
    reference=(
        _summary_reference(
            "Malekmohammadi & Yu Table 6, CIFAR-10 (ResNet-18, 50 clients, Dir(0.05)), "
            "our digits rows below",
            _TABLE6_CIFAR10,
            'Malekmohammadi & Yu\'s AFL diverged on CIFAR-10 ("-").',
        ),
        _summary_reference(
            "Malekmohammadi & Yu Table 6, CIFAR-100, our digits rows below",
            _TABLE6_CIFAR100,
            "",
        ),
        {
            "title": "Malekmohammadi & Yu Table 2, CIFAR-100 (vs FedAvg), our digits rows below",
            "kind": "table2",
            "columns": [
                "Improved suffering % (avg Δacc)",
                "Degraded well-performing % (avg Δacc)",
                "Overall Δacc",
            ],
            "rows": [
                {"name": PAPER000_NAMES[rule], "label": rule, "values": values}
                for rule, values in _TABLE2_CIFAR100.items()
            ],
            "note": "",
        },
    ),
    workers=2,
)

# Hu, Shaloudegi, Zhang & Yu, IEEE TNSE 2022, Table 7 (Adult, PhD / non-PhD clients, no
# adversarial bias: the rows with bias 0), test accuracy %, mean ± std over 5 seeds.
_FEDMGDA_TABLE7_ADULT = {
    "afl": ["83.26±0.01", "77.90±0.00", "83.32±0.01"],
    "qffl[q=5]": ["83.26±0.18", "76.80±0.61", "83.33±0.19"],
    "qffl[q=2]": ["83.30±0.09", "76.46±0.56", "83.38±0.09"],
}

QFFL_ADULT = Recipe(
    name="qffl-adult",
    title="q-FFL, AFL and FedAvg on Adult's PhD / non-PhD clients",
    description=(
        "The comparison of q-FFL with AFL on UCI Adult (Li, Sanjabi, Beirami and Smith, "
        "ICLR 2020; its code, litian96/fair_flearn, data/adult), on AFL's split (Mohri, "
        "Sivek and Suresh, ICML 2019): two clients, the PhDs (education Doctorate, client 0) "
        "and everyone else (client 1); adult.data trains and adult.test tests, as in AFL "
        "and the q-FFL code. Logistic regression, full participation. As in the q-FFL "
        "code's Adult runs (q-FedSGD and AFL, learning rate 0.1), every rule takes one "
        "gradient step per round: q-FFL is fairfl's q-FedSGD (L = 1/lr) at q = 2 and q = 5 "
        "(q = 5 in the code's Adult command), and FedAvg and AFL train one local step on the "
        "client's whole training split (batch 32768, more than any client holds) with lr "
        "0.1; AFL's λ step is 0.1 (the code's learning_rate_lambda). 150 rounds, evaluated "
        "every 25; 5 seeds (the split is fixed: a seed draws the initial model). With two "
        "clients 'Worst' is the PhD client and 'Best 10%' the non-PhD one wherever the PhD "
        "client has the lower accuracy (check the per-run files); 'Pooled' is the accuracy "
        "over all test rows, the paper's 'Average'. Departures from the q-FFL code: rows "
        "with a '?' are dropped (fairfl's Adult preprocessing), so the clients train on "
        "375 and 29,787 rows and test on 169 and 14,891 (the code keeps them: 413 / 32,148 "
        "and 181 / 16,100); 105 features, the 6 numeric columns standardised beside the 99 "
        "one-hot ones (the code uses the 99 one-hot columns only); no L2 penalty (the "
        "code's 0.001); a 1-output logistic regression; full-batch gradients where the "
        "code draws batches of 10; 150 rounds where the code runs 600; AFL is "
        "Stochastic-AFL with averaged λ (fairfl's afl-variant mohri) aggregating the local "
        "models, where the code steps with the last λ and averages the model iterates. The "
        "q-FFL paper's own table (its comparison with AFL) could not be read in this "
        "session: the published numbers beside ours are Hu et al.'s runs of the same split."
    ),
    rules=("fedavg", "afl", "qfedsgd"),
    grid=("qfedsgd:qffl-q=2,5",),
    settings=(
        "dataset=adult",
        "partitioner=phd",
        "num-partitions=2",
        "data-root=../shared/data",
        "model=logreg",
        "lr=0.1",
        "local-epochs=1",
        "batch-size=32768",
        "num-server-rounds=150",
        "evaluate-every=25",
    ),
    seeds=(0, 1, 2, 3, 4),
    baseline="fedavg",
    weights_label="afl",
    columns="table6",
    reference=(
        {
            "title": (
                "Hu, Shaloudegi, Zhang and Yu (IEEE TNSE 2022), Table 7, Adult PhD / non-PhD "
                "without attack: test accuracy %, mean ± std over 5 seeds; their columns "
                "Uniform, PhD and Non-PhD stand under Pooled, Worst and Best 10%"
            ),
            "kind": "summary",
            "columns": ["Pooled", "Worst", "Best 10%"],
            "rows": [
                {"name": name, "label": label, "values": _FEDMGDA_TABLE7_ADULT[key]}
                for name, label, key in (
                    ("AFL", "afl", "afl"),
                    ("q-FedAvg, q = 5", "qfedsgd[qffl-q=5]", "qffl[q=5]"),
                    ("q-FedAvg, q = 2", "qfedsgd[qffl-q=2]", "qffl[q=2]"),
                )
            ],
            "note": (
                "Their setting: 99 binary features as the q-FFL code, each client's data "
                "split 80/10/10 into train, validation and test, logistic regression, 500 "
                "rounds, batch 10, one local epoch, local lr 0.01, AFL γ_λ = 0.5 and "
                "γ_w = 0.01; their q-FFL rows are q-FedAvg, ours q-FedSGD."
            ),
        },
    ),
    workers=1,
)

QFFL_ADULT_QUICK = dataclasses.replace(
    QFFL_ADULT,
    name="qffl-adult-quick",
    title="qffl-adult, cut to 1 seed and 3 rounds (a CI check, not a result)",
    settings=tuple(
        {
            "num-server-rounds=150": "num-server-rounds=3",
            "evaluate-every=25": "evaluate-every=1",
        }.get(item, item)
        for item in QFFL_ADULT.settings
    ),
    seeds=(0,),
    workers=1,
)

FAIRFED_ADULT = Recipe(
    name="fairfed-adult",
    title="FairFed against FedAvg on UCI Adult, sensitive attribute sex",
    description=(
        "FairFed (Ezzeldin, Yan, He, Ferrara and Avestimehr, AAAI 2023) on UCI Adult "
        "(adult.data and adult.test pooled, rows with a '?' dropped: 45,222 rows), "
        "sensitive attribute sex, 5 clients drawn with attribute heterogeneity: each "
        "client's share of each sex is Dir(α), α in {0.1, 0.2, 0.5, 10, 5000} (smaller: "
        "more heterogeneous; partitioner dirichlet on the attribute), 30 % of each "
        "client's rows held out as its test split. Logistic regression, full "
        "participation, 20 rounds of one local epoch of SGD (lr 0.1, batch 32), FairFed at "
        "its defaults (β = 1, fairness metric SPD), 5 seeds (a seed draws the partition, "
        "the splits and the initial model). FairFed runs without local debiasing (fairfl "
        "has none), so it is compared with FedAvg, not with the paper's FairFed rows that "
        "add local reweighting on the clients. The columns are computed from the pooled "
        "test predictions of all clients after the last round: 'DP gap' is |SPD| = "
        "|P(ŷ=1 | female) - P(ŷ=1 | male)| and 'EOpp gap' is |EOD| = |P(ŷ=1 | female, "
        "y=1) - P(ŷ=1 | male, y=1)| (FairFed's two metrics; the paper prints them "
        "signed), 'EO gap' the equalised-odds difference. Table 2 pairs every row with "
        "FedAvg at α = 0.1: only fairfed at α = 0.1 is paired with its own partition. The "
        "paper's printed numbers could not be read in this session, so none are shown "
        "beside ours."
    ),
    rules=("fedavg", "fairfed"),
    grid=("dirichlet-alpha=0.1,0.2,0.5,10,5000",),
    settings=(
        "dataset=adult",
        "partitioner=dirichlet",
        "num-partitions=5",
        "data-root=../shared/data",
        "model=logreg",
        "lr=0.1",
        "local-epochs=1",
        "batch-size=32",
        "num-server-rounds=20",
        "evaluate-every=5",
    ),
    seeds=(0, 1, 2, 3, 4),
    baseline="fedavg[dirichlet-alpha=0.1]",
    weights_label="fairfed[dirichlet-alpha=0.1]",
    columns="group",
    reference=(),
    workers=2,
)

FAIRFED_ADULT_QUICK = dataclasses.replace(
    FAIRFED_ADULT,
    name="fairfed-adult-quick",
    title="fairfed-adult, cut to 1 seed, α = 0.5 and 2 rounds (a CI check, not a result)",
    grid=("dirichlet-alpha=0.5",),
    settings=tuple(
        {"num-server-rounds=20": "num-server-rounds=2", "evaluate-every=5": "evaluate-every=1"}.get(
            item, item
        )
        for item in FAIRFED_ADULT.settings
    ),
    seeds=(0,),
    baseline="fedavg[dirichlet-alpha=0.5]",
    weights_label="fairfed[dirichlet-alpha=0.5]",
    workers=1,
)

# FLamby's Fed-Heart-Disease rows (Ogier du Terrail et al., NeurIPS 2022 Datasets and
# Benchmarks): the mean over its per-seed result files heart_seed42..46.csv (after the
# per-centre normalisation), accuracy %; worst centre as mean ± sd over the seeds.
_FLAMBY_HEART = [
    ("Pooled training", None, ["78.3", "76.4", "75.0", "64.4", "64.4 ± 0.0", "79.5"]),
    ("Local 0 (centre 0 only)", None, ["74.6", "76.0", "72.5", "65.8", "64.9 ± 2.1", "78.4"]),
    ("FedAvg100", "fedavg", ["73.1", "71.9", "65.0", "64.0", "59.5 ± 5.8", "74.8"]),
    ("FedProx100", "fedprox", ["73.1", "71.9", "65.0", "64.0", "59.5 ± 5.8", "74.8"]),
    ("FedAdam100", "fedadam", ["75.2", "74.6", "73.8", "66.7", "66.7 ± 4.0", "77.9"]),
    ("FedYogi100", "fedyogi", ["76.0", "75.3", "73.8", "67.6", "67.6 ± 3.6", "77.9"]),
    ("Scaffold100", None, ["72.7", "71.9", "65.0", "64.0", "59.5 ± 5.8", "74.8"]),
    ("Cyclic100", None, ["75.8", "76.2", "71.2", "64.0", "62.8 ± 3.6", "78.5"]),
]

FLAMBY_HEART = Recipe(
    name="flamby-heart",
    title="Fed-Heart-Disease: every rule against FLamby's published rows",
    description=(
        "FLamby's Fed-Heart-Disease (Ogier du Terrail et al., NeurIPS 2022 Datasets and "
        "Benchmarks): UCI Heart Disease's four hospitals as four clients (Cleveland 0, "
        "Hungary 1, Switzerland 2, Long Beach VA 3), FLamby's current preparation and "
        "66/34 train/test split per hospital (199/104, 172/89, 30/16, 85/45 samples), "
        "each hospital normalised by its own training statistics. FLamby's model and "
        "budget: logistic regression (13 -> 1, sigmoid, binary cross-entropy; model "
        "binary-logreg), batch 4, 100 local SGD steps per round (local-steps=100), 15 "
        "rounds, full participation, accuracy at 0.5 per hospital, seeds 42-46 as "
        "FLamby's result files (a seed draws the initial model and the batches; the "
        "split is fixed). Learning rates are FLamby's: FedAvg, FedProx (mu 0.01) and "
        "every fairfl rule SGD 1e-3; FedAdam client 1e-2, server 1e-2; FedYogi client "
        "10^-2.5, server 1e-2 (both beta1 0.9, beta2 0.999, tau 1e-8 as FLamby's files "
        "record). Every fairfl rule runs at its paper's default hyperparameters with "
        "FedAvg's learning rate. 'Worst centre' is each run's lowest hospital accuracy, "
        "'Pooled test' the accuracy over all 254 test samples together; mean ± sd over "
        "the seeds (population sd). Departures from FLamby: FLamby draws its 100 steps "
        "from a data loader that carries on across rounds, fairfl reshuffles at each "
        "round's start (both sample batches of 4 without replacement within a pass); "
        "the initial model is fairfl's seeded torch initialisation, not FLamby's; "
        "Flower's FedAdam / FedYogi server updates, not FLamby's own."
    ),
    rules=(
        "fedavg",
        "fedprox",
        "fedadam",
        "fedyogi",
        "afl",
        "deltafl",
        "fedfa",
        "fedfv",
        "fedmgda",
        "fedavg-n",
        "fedmgda-plain",
        "mgda-prox",
        "gifair",
        "propfair",
        "qffl",
        "qfedsgd",
        "rcfl",
        "semivred",
        "term",
        "vred",
        "equitable",
        "ditto",
        "ditto+qffl",
        "ditto+afl",
        "ditto+fedmgda",
        "ditto+fedyogi",
    ),
    grid=(),
    settings=(
        "dataset=fed-heart-disease",
        "partitioner=natural",
        "num-partitions=4",
        "data-root=../shared/data",
        "model=binary-logreg",
        "lr=0.001",
        "batch-size=4",
        "local-steps=100",
        "num-server-rounds=15",
        "evaluate-every=15",
        "fedprox:fedprox-mu=0.01",
        "fedadam:lr=0.01",
        "fedadam:fedadam-eta=0.01",
        "fedadam:fedadam-beta-2=0.999",
        "fedadam:fedadam-tau=1e-8",
        "fedyogi:lr=0.0031623",
        "fedyogi:fedyogi-eta=0.01",
        "fedyogi:fedyogi-beta-2=0.999",
        "fedyogi:fedyogi-tau=1e-8",
        "ditto+fedyogi:lr=0.0031623",
        "ditto+fedyogi:fedyogi-eta=0.01",
        "ditto+fedyogi:fedyogi-beta-2=0.999",
        "ditto+fedyogi:fedyogi-tau=1e-8",
    ),
    seeds=(42, 43, 44, 45, 46),
    baseline="fedavg",
    weights_label=None,
    columns="flamby-heart",
    reference=(
        {
            "title": (
                "FLamby's Fed-Heart-Disease rows (mean over heart_seed42..46.csv), "
                "ours on the line below each"
            ),
            "kind": "summary",
            "columns": [
                "Centre 0",
                "Centre 1",
                "Centre 2",
                "Centre 3",
                "Worst centre",
                "Pooled test",
            ],
            "rows": [
                {"name": name, "label": label, "values": values}
                for name, label, values in _FLAMBY_HEART
            ],
            "note": (
                "FLamby's pooled and local rows train one model on pooled or one "
                "hospital's data (Adam, 50 epochs): no fairfl row matches them."
            ),
        },
        {
            "title": (
                "Answer: does a rule lift the worst hospital above FLamby's best "
                "federated row without giving up FedAvg's pooled accuracy?"
            ),
            "kind": "question",
            "lift": {
                "column": "Worst centre",
                "above": "67.6",
                "source": "FLamby's FedYogi100 row, its best federated one",
            },
            "keep": {"column": "Pooled test"},
            "pairs": [["Personal worst centre", "Personal pooled test"]],
            "note": (
                "Written by `fairfl report` from the table above, so a rerun rewrites it. "
                "'Pooled test' is not FLamby's pooled test: ours is the accuracy over all "
                "254 test samples, each normalised by its own hospital's training "
                "statistics (what the clients see), i.e. the sample-weighted mean of the "
                "four hospital accuracies. FLamby's 74.8 evaluates the model on "
                "`FedHeartDisease(train=False, pooled=True)`, normalised by the pooled "
                "training statistics (`flamby/benchmarks/fed_benchmark.py`, "
                "`init_data_loaders(pooled=True)`); FLamby's own per-hospital FedAvg means "
                "weighted by the test sizes give 70.6, not 74.8. So pooled accuracy is "
                "held against fairfl's FedAvg on the same definition. Personal rows are "
                "Ditto's per-hospital models, which FLamby's table does not have: they "
                "answer what each hospital can deploy, not what one global model does. "
                "Two rows separate a longer server step from fair weighting: `fedavg-n` "
                "is FedMGDA+'s normalised unit step with uniform weights (ε = 0), so the "
                "distance from `fedavg` to `fedavg-n` is the step, and from `fedavg-n` "
                "to `fedmgda` the min-norm weighting. One Switzerland test sample is 6.2 "
                "points and five seeds with a fixed split give sd over initialisations "
                "and batches only."
            ),
        },
    ),
    workers=2,
)

FLAMBY_HEART_QUICK = dataclasses.replace(
    FLAMBY_HEART,
    name="flamby-heart-quick",
    title="flamby-heart, cut to FedAvg and q-FFL, 1 seed, 2 rounds of 10 steps (a CI check)",
    rules=("fedavg", "qffl"),
    settings=tuple(
        {
            "num-server-rounds=15": "num-server-rounds=2",
            "local-steps=100": "local-steps=10",
            "evaluate-every=15": "evaluate-every=1",
        }.get(item, item)
        for item in FLAMBY_HEART.settings
    ),
    seeds=(42,),
    workers=1,
)

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        QFFL_SYNTHETIC,
        QFFL_SYNTHETIC_LIGHT,
        DIGITS_TABLE6,
        QFFL_ADULT,
        QFFL_ADULT_QUICK,
        FAIRFED_ADULT,
        FAIRFED_ADULT_QUICK,
        FLAMBY_HEART,
        FLAMBY_HEART_QUICK,
    )
}
