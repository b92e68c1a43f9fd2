"""The rules guide: which fairness each rule aims at, and when to use it.

Keyed by the strategy class, as :data:`rule_math.RULE_MATH` is: the guide page and the
rules table's "aims at" column are generated from the registry (every registered rule,
its run-config keys, what its clients report) and these entries; a registered rule
missing here stops the docs build (:func:`guide_page`). The entries live here, not on
the rule classes, because the loss-reweighting rules' modules are held to 40 code
lines each (``scripts/rule_code_lines.py``).
"""

from __future__ import annotations

from typing import Any

#: Each fairness notion a rule aims at -> what it asks of the model, in the guide's order
#: (from plain averaging to ever stronger protection of the worst-off, then other kinds).
NOTIONS: dict[str, str] = {
    "none (average loss)": (
        "the sample-weighted average loss over all data, FedAvg's objective: the baseline "
        "every fair rule is compared with"
    ),
    "α-fairness (tunable)": (
        "a family between the average (q = 0) and the worst client (q → ∞): losses raised "
        "to a power, so clients the model serves badly weigh more"
    ),
    "tilted or tail risk": (
        "the average loss of the worst-off part of the federation, or a smooth version of "
        "it: more than the average, less than the single worst"
    ),
    "minimax (worst client)": (
        "the best model for the worst mixture of the clients: the worst-off client (or "
        "group) as well served as possible"
    ),
    "uniform losses": (
        "clients' losses close to each other: a penalty on their spread (variance, "
        "semi-variance above the mean, or pairwise gaps)"
    ),
    "proportional (Nash)": (
        "proportional fairness: no client's relative gain is given up for a smaller "
        "relative gain of others (the Nash bargaining solution)"
    ),
    "Pareto (no client worse off)": (
        "a common descent direction of every client's loss, so a round makes no client "
        "worse off (multi-objective optimisation)"
    ),
    "conflict-free updates": (
        "clients' updates whose directions conflict are projected so that a majority does "
        "not override a minority's direction"
    ),
    "accuracy parity": "clients' accuracies close: clients with low accuracy weigh more",
    "equity across client types": (
        "each cluster of similar clients (by the model's activations) weighs the same, so "
        "a large group of alike clients does not drown out a small one"
    ),
    "group fairness (sensitive attribute)": (
        "parity between groups of people (demographic parity, equal opportunity) over a "
        "sensitive attribute that spans the clients, not parity between clients"
    ),
    "personalisation": (
        "each client also keeps a personal model that fits its own data, regularised "
        "towards the global one; pairs with any rule as the global rule"
    ),
    "none (optimisation)": (
        "not a fairness rule: a server optimiser or a client proximal term for faster or "
        "steadier training on heterogeneous clients"
    ),
}

#: class __qualname__ -> (notion of :data:`NOTIONS`, when to use the rule).
RULE_GUIDE: dict[str, tuple[str, str]] = {
    "FedAvg": ("none (average loss)", "the baseline; when the average accuracy is what counts"),
    "QFFL": (
        "α-fairness (tunable)",
        "one knob (`qffl-q`) from FedAvg towards uniform accuracy; clients report their loss",
    ),
    "QFedSGD": (
        "α-fairness (tunable)",
        "q-FFL with one local gradient step a round (the paper's q-FedSGD)",
    ),
    "TERM": (
        "tilted or tail risk",
        "a smooth step from the average (α → 0) towards the worst client (α → ∞)",
    ),
    "DeltaFL": (
        "tilted or tail risk",
        "the mean loss of the worst fraction `deltafl-alpha` of clients (a superquantile)",
    ),
    "AFL": (
        "minimax (worst client)",
        "few clients or groups, where the worst-off one must be protected; sensitive to "
        "clients that overstate their loss",
    ),
    "RCFL": (
        "minimax (worst client)",
        "the test data is an unknown mixture of the clients' distributions (a robust bound)",
    ),
    "VRed": ("uniform losses", "penalise the variance of client losses (`vred-beta`)"),
    "SemiVRed": (
        "uniform losses",
        "lift the clients above the mean loss without pulling the others down",
    ),
    "GiFair": ("uniform losses", "penalise pairwise loss gaps between clients"),
    "PropFair": (
        "proportional (Nash)",
        "a balance between average and worst-off that gives up no client's relative gain",
    ),
    "FedMGDAPlus": (
        "Pareto (no client worse off)",
        "no client's loss should rise in a round; `fedmgda-epsilon` = 0 is plain averaging",
    ),
    "FedAvgN": ("Pareto (no client worse off)", "FedMGDA+'s ablation with ε = 0"),
    "FedMGDAPlain": ("Pareto (no client worse off)", "FedMGDA without normalisation (ablation)"),
    "MGDAProx": (
        "Pareto (no client worse off)",
        "FedMGDA+ with a proximal term on the clients, for clients that drift apart",
    ),
    "FedFV": ("conflict-free updates", "clients' updates point in conflicting directions"),
    "FedFa": (
        "accuracy parity",
        "clients report their accuracy; up-weight the clients served worst and the rarely seen",
    ),
    "EquitableFL": (
        "equity across client types",
        "a few large groups of similar clients would otherwise dominate the model",
    ),
    "FairFed": (
        "group fairness (sensitive attribute)",
        "fairness between groups of people (e.g. sex on Adult), not between clients",
    ),
    "Ditto": (
        "personalisation",
        "clients differ too much for one model to serve all of them well",
    ),
    "FedProx": ("none (optimisation)", "many local steps on heterogeneous clients"),
    "FedAdam": ("none (optimisation)", "FedAvg converges slowly; an adaptive server step"),
    "FedYogi": ("none (optimisation)", "as FedAdam, with Yogi's steadier second moment"),
}


def guide_entry(name: str, strategy: type) -> tuple[str, str]:
    """The rule's (notion, when to use it); an error names a rule that has none."""
    entry = RULE_GUIDE.get(strategy.__qualname__)
    if entry is None or entry[0] not in NOTIONS:
        from sphinx.errors import ExtensionError

        raise ExtensionError(
            f"rule {name!r} ({strategy.__qualname__}) has no fairness notion in "
            "docs/site/_ext/rule_guide.py; add its RULE_GUIDE entry"
        )
    return entry


def guide_page(specs: dict[str, Any]) -> str:
    """The rules guide: the rules grouped by the fairness they aim at, and when to use each."""
    lines = [
        "# Choosing a rule: what fairness each aims at",
        "",
        "Generated from the rule registry ({py:mod}`fairfl.strategies.registry`) when the "
        "docs build: every registered rule, grouped by the fairness notion it targets, "
        "from plain averaging to ever stronger protection of the worst-off clients, then "
        "the other kinds. Each rule's page has its objective, update and keys; "
        "{doc}`/explanation/fairness-metrics` defines the metrics every run reports. The "
        "committed comparisons ({doc}`/results/index`) show what each does on the same "
        "federation.",
        "",
    ]
    by_notion: dict[str, list[str]] = {notion: [] for notion in NOTIONS}
    for name, spec in specs.items():
        by_notion[guide_entry(name, spec.strategy)[0]].append(name)
    for notion, explanation in NOTIONS.items():
        if not by_notion[notion]:
            continue
        title = notion[0].upper() + notion[1:] if notion[0].isascii() else notion
        lines += [f"## {title}", "", f"Aims at {explanation}.", ""]
        lines += [
            "| rule | use it when | its keys | clients report |",
            "|---|---|---|---|",
        ]
        for name in by_notion[notion]:
            spec = specs[name]
            strategy = spec.strategy
            keys = ", ".join(f"`{key}`" for key in list(spec.parameters)[:3]) or "–"
            if len(spec.parameters) > 3:
                keys += ", ..."
            needs = ["weights"]
            if strategy.needs_loss:
                needs.append("F_k(w^t)")
            needs += [f"`{key}`" for key in strategy.required_train_metrics]
            when = guide_entry(name, strategy)[1]
            lines.append(f"| [`{name}`](rule-{name}) | {when} | {keys} | {', '.join(needs)} |")
        lines.append("")
    return "\n".join(lines)
