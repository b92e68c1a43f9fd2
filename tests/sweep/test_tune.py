"""`fairfl compare --tune`: the selection criteria, the default grids, and tuning that
never reads test data (poisoned test labels leave the choice unchanged)."""

import dataclasses
import json
import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairfl.client.app as client_app
from fairfl.cli import main
from fairfl.strategies import ReweightedStrategy
from fairfl.strategies.core.params import RuleParameters, real
from fairfl.strategies.registry import STRATEGIES, RuleSpec
from fairfl.sweep.tune import (
    Candidate,
    GridEdge,
    choose_settings,
    edge_side,
    grid_edges,
    paper_grid,
    select_setting,
    tune_and_compare,
    tuning_grid,
    warn_grid_edges,
    write_tuning_markdown,
)


def _candidate(name: str, mean: float, worst10: float, order: int, rule: str = "x") -> Candidate:
    return Candidate(
        label=f"{rule}[{name}]",
        rule=rule,
        overrides={f"{rule}-k": order},
        mean=mean,
        worst10=worst10,
        order=order,
    )


# Baseline validation mean 0.80 with tolerance 2 points: settings need mean >= 0.78.
A = _candidate("a", 0.85, 0.40, 0)  # best mean
B = _candidate("b", 0.79, 0.55, 1)  # eligible, best worst-10 among eligible (ties D, higher mean)
C = _candidate("c", 0.70, 0.60, 2)  # best worst-10 overall, mean 10 points below
D = _candidate("d", 0.781, 0.55, 3)  # eligible, ties B on worst-10 with a lower mean
NAN = _candidate("nan", math.nan, 0.99, 4)  # a failed tuning run: never chosen
GRID = [A, B, C, D, NAN]


def test_default_criterion_best_worst10_within_2_points_of_the_baseline():
    assert select_setting(GRID, baseline_mean=0.80) is B
    # 10 points of tolerance admit C (0.70 >= 0.80 - 0.10), whose worst-10 is highest.
    assert select_setting(GRID, baseline_mean=0.80, tolerance=10) is C
    # Nothing within 2 points of 0.95: fall back to the best mean.
    assert select_setting(GRID, baseline_mean=0.95) is A


def test_other_criteria_and_ties_by_mean_then_grid_order():
    assert select_setting(GRID, criterion="worst10") is C
    assert select_setting(GRID, criterion="mean") is A
    first, second = _candidate("e", 0.5, 0.5, 5), _candidate("f", 0.5, 0.5, 6)
    assert select_setting([second, first], criterion="mean") is first
    assert select_setting([second, first], criterion="worst10") is first
    # Equal worst-10: the higher mean (B 0.79 over D 0.781), whatever the order.
    assert select_setting([D, B], criterion="worst10") is B


def test_selection_errors_name_what_is_missing():
    with pytest.raises(ValueError, match="criterion must be one of"):
        select_setting(GRID, criterion="best")
    with pytest.raises(ValueError, match="baseline's finite validation mean"):
        select_setting(GRID)
    with pytest.raises(ValueError, match="rule x: no grid setting finished"):
        select_setting([NAN], criterion="mean")
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        select_setting(GRID, baseline_mean=0.8, tolerance=-1)


def test_choose_settings_uses_the_baselines_best_mean():
    fedavg = [_candidate("lr1", 0.80, 0.3, 0, "fedavg"), _candidate("lr2", 0.82, 0.2, 1, "fedavg")]
    chosen, baseline = choose_settings([*fedavg, *GRID])
    assert baseline == 0.82
    # floor 0.80: B (0.79) and D (0.781) drop out; A is the only eligible x setting.
    assert chosen["x"] is A
    # FedAvg under the same criterion: lr1's mean 0.80 is within 2 points of 0.82 and
    # its worst-10 0.3 beats lr2's 0.2.
    assert chosen["fedavg"] is fedavg[0]
    with pytest.raises(ValueError, match="add fedavg to the rules"):
        choose_settings(GRID)


def test_paper_grids_and_fedmgda_decay_only_past_the_decay_period():
    assert paper_grid("semivred", 30) == ("semivred:semivred-beta=0.01,0.05,0.1,0.2,0.5,1",)
    assert paper_grid("qffl", 30) == ("qffl:qffl-q=0.01,0.1,1",)
    assert paper_grid("fedavg", 30) == ()
    # Ditto: λ from its Appendix C, beside the global rule's own grid.
    assert paper_grid("ditto", 30) == ("ditto:ditto-lambda=0.05,0.1,0.2,1,2",)
    assert paper_grid("ditto+qffl", 30) == (
        "ditto+qffl:qffl-q=0.01,0.1,1",
        "ditto+qffl:ditto-lambda=0.05,0.1,0.2,1,2",
    )
    assert len(paper_grid("fedmgda", 100)) == 2  # 100 rounds: the step never decays
    decay = paper_grid("fedmgda", 200)[2]
    values = [float(v) for v in decay.split("=")[1].split(",")]
    # beta = decay^(100/T): T = 200, decay 1/10 -> 0.1^0.5 = 0.31623; none -> 1.
    assert values[0] == 1.0
    assert values[4] == pytest.approx(0.316227766, rel=1e-9)


@dataclasses.dataclass(frozen=True)
class _PowerParameters(RuleParameters):
    power: float = real(1.0, key="power-s", lower=0.0, grid=(0.0, 0.5, 2.0))
    floor: float = real(0.1, key="power-floor", lower=0.0, grid=(0.1, 0.2), tune=())


class _Power(ReweightedStrategy):
    """A third-party rule: λ_i ∝ p_i (its grid is all this test needs)."""

    Parameters = _PowerParameters

    def lambdas(self, server_round, replies):
        counts = np.array([r.num_examples for r in replies], dtype=np.float64)
        return counts / counts.sum()


@pytest.fixture
def power_plugin(monkeypatch):
    """``power``, a rule installed from another distribution, in the registry."""
    rules = {**STRATEGIES._loaded(), "power": RuleSpec("power", _Power, "a-plugin")}
    monkeypatch.setattr(STRATEGIES, "_rules", rules)


def test_a_plugin_rules_declared_grid_is_what_tune_searches(power_plugin, monkeypatch, tmp_path):
    # grid= is the default tuning grid; tune=() keeps power-floor at its default.
    assert paper_grid("power", 30) == ("power:power-s=0,0.5,2",)
    assert paper_grid("ditto+power", 30) == (
        "ditto+power:power-s=0,0.5,2",
        "ditto+power:ditto-lambda=0.05,0.1,0.2,1,2",
    )
    grids = []

    def tuning_phase(**options):
        grids.append(options["grid"])
        raise RuntimeError("stop after the tuning phase is planned")

    monkeypatch.setattr("fairfl.sweep.tune.compare", tuning_phase)
    with pytest.raises(RuntimeError, match="stop after"):
        tune_and_compare(rules=["fedavg", "power"], out_dir=tmp_path, seeds=[1], tuning_seeds=[2])
    assert grids == [["power:power-s=0,0.5,2"]]


def test_the_grids_tune_reads_are_the_committed_tuned_comparisons():
    # docs/results/flamby-heart-tuned's tuning.json grid, as tune.py's own table gave it
    # before the grids moved onto the rules' fields (issue 51): every rule it lists, in order.
    rules = [
        "fedavg", "fedprox", "afl", "deltafl", "fedmgda", "fedavg-n", "fedmgda-plain",
        "mgda-prox", "gifair", "ditto+afl", "ditto+fedmgda",
    ]  # fmt: skip
    assert tuning_grid(rules, None, 30) == [
        "deltafl:deltafl-alpha=0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9",
        "fedmgda:fedmgda-epsilon=0.05,0.1,0.5,1",
        "fedmgda:fedmgda-global-lr=0.5,1,1.5,2",
        "fedavg-n:fedmgda-global-lr=0.5,1,1.5,2",
        "mgda-prox:fedmgda-global-lr=0.5,1,1.5,2",
        "gifair:gifair-coeff=0.25,0.5,0.75,1",
        "ditto+afl:ditto-lambda=0.05,0.1,0.2,1,2",
        "ditto+fedmgda:fedmgda-epsilon=0.05,0.1,0.5,1",
        "ditto+fedmgda:fedmgda-global-lr=0.5,1,1.5,2",
        "ditto+fedmgda:ditto-lambda=0.05,0.1,0.2,1,2",
    ]


def test_explicit_tune_grid_replaces_the_default_of_the_rules_it_touches():
    grid = tuning_grid(["fedavg", "semivred", "qffl"], ["semivred-beta=0.1,1"], 30)
    assert grid == ["qffl:qffl-q=0.01,0.1,1", "semivred-beta=0.1,1"]
    # A shared key (lr) applies to every rule: no default grid is left.
    assert tuning_grid(["semivred", "qffl"], ["lr=0.05,0.1"], 30) == ["lr=0.05,0.1"]


SMALL = [
    "dataset=digits",
    "num-partitions=4",
    "num-server-rounds=2",
    "local-epochs=1",
    "dirichlet-alpha=0.5",
]


def _tune(out, **options):
    return tune_and_compare(
        rules=["fedavg", "semivred"],
        out_dir=out,
        seeds=[0],
        tuning_seeds=[7],
        tune_grid=["semivred-beta=0.1,1,5"],
        settings=SMALL,
        progress=False,
        **options,
    )


def _final_accuracies(out):
    lines = (out / "runs" / "fedavg" / "seed-0" / "rounds.jsonl").read_text().splitlines()
    return [c["eval_acc"] for c in json.loads(lines[-1])["clients"]]


def test_tuning_never_reads_test_data(tmp_path, monkeypatch):
    _tune(tmp_path / "clean")
    load = client_app.load_client_data

    def poisoned(**kwargs):
        """Every client's test labels shifted by one class: no test prediction is right."""
        data = load(**kwargs)
        return dataclasses.replace(data, y_test=(data.y_test + 1) % 10)

    client_app._client_data.cache_clear()
    monkeypatch.setattr(client_app, "load_client_data", poisoned)
    try:
        _tune(tmp_path / "poisoned")
    finally:
        client_app._client_data.cache_clear()
    clean, dirty = (
        json.loads((tmp_path / name / "tuning.json").read_text()) for name in ("clean", "poisoned")
    )
    # Same validation numbers for every setting, hence the same choice.
    assert dirty["candidates"] == clean["candidates"]
    assert dirty["chosen"] == clean["chosen"]
    # The poison did reach the test split: the reported (test) accuracies differ.
    assert not np.allclose(
        _final_accuracies(tmp_path / "clean"), _final_accuracies(tmp_path / "poisoned")
    )


def test_cli_tune_end_to_end(tmp_path, capsys):
    out = tmp_path / "tuned"
    code = main(
        [
            "compare",
            "--tune",
            "--rules",
            "fedavg",
            "semivred",
            "--seeds",
            "0",
            "--tune-seeds",
            "7",
            "--tune-grid",
            "semivred-beta=0.1,5",
            "--tune-criterion",
            "mean",
            "--set",
            *SMALL,
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    summary = json.loads((out / "tuning.json").read_text())
    assert summary["criterion"] == "mean"
    assert summary["tuning_seeds"] == [7] and summary["seeds"] == [0]
    assert [c["label"] for c in summary["candidates"]] == [
        "fedavg",
        "semivred[beta=0.1]",
        "semivred[beta=5]",
    ]
    best = max(summary["candidates"][1:], key=lambda c: (c["mean"], c["worst10"], -c["order"]))
    assert summary["chosen"]["semivred"]["label"] == best["label"]
    # Tuning runs evaluated on validation; the reported runs on test with the choice.
    tuning_rounds = (out / "tuning/runs/fedavg/seed-7/rounds.jsonl").read_text().splitlines()
    assert json.loads(tuning_rounds[-1])["eval_split"] == "validation"
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["label"] for r in manifest["runs"]] == ["fedavg", best["label"]]
    assert all(r["seed"] == 0 for r in manifest["runs"])
    assert "eval_split" not in (out / "runs/fedavg/seed-0/rounds.jsonl").read_text()
    assert manifest["tuning"]["chosen"]["semivred"]["label"] == best["label"]
    table = (out / "table6.md").read_text()
    assert f"| {best['label']} |" in table
    assert (
        "Tuned: each rule's setting chosen on validation splits" in (out / "report.md").read_text()
    )
    assert "| semivred[beta=5] |" in (out / "tuning.md").read_text()


def test_tune_refuses_overlapping_seeds_and_a_missing_baseline(tmp_path):
    with pytest.raises(ValueError, match="tuning seeds must differ"):
        tune_and_compare(rules=["fedavg"], out_dir=tmp_path, seeds=[0, 1], tuning_seeds=[1])
    with pytest.raises(ValueError, match="compares with fedavg"):
        tune_and_compare(rules=["semivred"], out_dir=tmp_path, seeds=[0], tuning_seeds=[1])
    with pytest.raises(ValueError, match="use --validation-fraction instead of --set"):
        tune_and_compare(
            rules=["fedavg"],
            out_dir=tmp_path,
            seeds=[0],
            tuning_seeds=[1],
            settings=["evaluate-split=validation"],
        )
    assert not any(tmp_path.iterdir())


def test_edge_side_flags_the_ends_of_a_numeric_axis_of_three_or_more_values():
    assert edge_side([0.01, 0.1, 1], 1.0) == "highest"
    assert edge_side([0.01, 0.1, 1], 0.01) == "lowest"
    assert edge_side([0.01, 0.1, 1], 0.1) is None
    # Order given does not matter; an int grid matches a float choice (2 == 2.0).
    assert edge_side([5, 2, 4, 3], 2.0) == "lowest"
    # Two values: every choice is an end, so nothing is flagged; nor with repeats that
    # leave two distinct values.
    assert edge_side([0.1, 1], 1) is None
    assert edge_side([1, 1, 2], 2) is None
    # Not numbers: no ends.
    assert edge_side([True, False, True], True) is None
    assert edge_side(["uniform", "num-examples", "x"], "x") is None
    assert edge_side([0.1, 0.5, 1], None) is None


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=3, max_size=10, unique=True),
    st.randoms(),
)
def test_edge_side_only_at_the_minimum_and_maximum(values, rng):
    shuffled = list(values)
    rng.shuffle(shuffled)
    for value in values:
        expected = "lowest" if value == min(values) else "highest" if value == max(values) else None
        assert edge_side(shuffled, value) == expected


# Rules fedavg, vred, fedmgda; `lr` is shared, so its axis applies to every rule.
EDGE_RULES = ["fedavg", "vred", "fedmgda"]
EDGE_GRID = ["lr=0.01,0.1,1", "vred:vred-beta=0.1,1", "fedmgda:fedmgda-epsilon=0.05,0.1,0.5,1"]
EDGE_CHOSEN = {
    "fedavg": {"lr": 0.1},  # inside
    "vred": {"lr": 1.0, "vred-beta": 1.0},  # lr at the top; beta's axis has two values
    "fedmgda": {"lr": 0.01, "fedmgda-epsilon": 0.05},  # both at the bottom
}


def test_grid_edges_in_rule_then_grid_order():
    assert grid_edges(EDGE_RULES, EDGE_GRID, EDGE_CHOSEN) == [
        GridEdge("vred", "lr", 1.0, "highest", (0.01, 0.1, 1.0)),
        GridEdge("fedmgda", "lr", 0.01, "lowest", (0.01, 0.1, 1.0)),
        GridEdge("fedmgda", "fedmgda-epsilon", 0.05, "lowest", (0.05, 0.1, 0.5, 1.0)),
    ]


def test_grid_edges_are_logged_as_warnings_naming_the_axis_and_the_fix(caplog):
    with caplog.at_level(logging.WARNING, logger="fairfl.sweep.tune"):
        edges = warn_grid_edges(EDGE_RULES, EDGE_GRID, EDGE_CHOSEN)
    assert len(edges) == 3
    messages = [r.getMessage() for r in caplog.records if r.name == "fairfl.sweep.tune"]
    assert messages[2] == (
        "tune_and_compare: fedmgda: fedmgda-epsilon=0.05 is the lowest value of its grid "
        "(0.05, 0.1, 0.5, 1); the best setting may lie beyond it: widen the grid "
        "(--tune-grid fedmgda:fedmgda-epsilon=...) and tune again"
    )
    assert messages[0].startswith("tune_and_compare: vred: lr=1 is the highest value")
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def _entry(label: str, rule: str, overrides: dict, mean: float, worst10: float, order: int):
    return {
        "label": label,
        "rule": rule,
        "overrides": overrides,
        "mean": mean,
        "worst10": worst10,
        "order": order,
    }


def _hand_made_tuning() -> dict:
    """A tuning.json written by hand: VRed chose β = 1, the top of 0.1, 0.5, 1 (an edge);
    q-FFL q = 1 of two values (no edge); TERM α = 0.1, inside 0.01, 0.1, 0.5, 1."""
    fedavg = _entry("fedavg", "fedavg", {}, 0.80, 0.40, 0)
    vred = [
        _entry(f"vred[beta={b:g}]", "vred", {"vred-beta": b}, m, w, i)
        for i, (b, m, w) in enumerate([(0.1, 0.81, 0.41), (0.5, 0.82, 0.45), (1.0, 0.83, 0.5)], 1)
    ]
    qffl = [
        _entry(f"qffl[q={q:g}]", "qffl", {"qffl-q": q}, m, w, i)
        for i, (q, m, w) in enumerate([(0.1, 0.80, 0.42), (1.0, 0.79, 0.46)], 4)
    ]
    term = [
        _entry(f"term[alpha={a:g}]", "term", {"term-alpha": a}, 0.8, w, i)
        for i, (a, w) in enumerate([(0.01, 0.40), (0.1, 0.47), (0.5, 0.44), (1.0, 0.41)], 6)
    ]
    return {
        "criterion": "worst10-near-baseline",
        "tolerance": 2.0,
        "baseline_rule": "fedavg",
        "baseline_mean": 0.8,
        "validation_fraction": 0.2,
        "tuning_seeds": [100],
        "seeds": [0],
        "grid": [
            "vred:vred-beta=0.1,0.5,1",
            "qffl:qffl-q=0.1,1",
            "term:term-alpha=0.01,0.1,0.5,1",
        ],
        "final_grid": ["vred:vred-beta=1.0", "qffl:qffl-q=1.0", "term:term-alpha=0.1"],
        "candidates": [fedavg, *vred, *qffl, *term],
        "chosen": {"fedavg": fedavg, "vred": vred[2], "qffl": qffl[1], "term": term[1]},
        "wall_time_s": {"tuning": 10.0, "final": 5.0, "total": 15.0},
        "command": "",
    }


def test_tuning_md_marks_and_lists_the_choices_at_a_grid_edge(tmp_path):
    (tmp_path / "tuning.json").write_text(json.dumps(_hand_made_tuning()))
    text = write_tuning_markdown(tmp_path).read_text()
    assert text == (tmp_path / "tuning.md").read_text()
    lines = text.splitlines()
    assert "- vred: `vred-beta=1`, the highest value of its grid (0.1, 0.5, 1)." in lines
    assert "| vred[beta=1] | 83.00 | 50.00 | yes, beta=1 (grid edge) |" in lines
    assert "| vred[beta=0.5] | 82.00 | 45.00 |  |" in lines
    # Two values (q-FFL) and an inside choice (TERM): chosen, not marked.
    assert "| qffl[q=1] | 79.00 | 46.00 | yes |" in lines
    assert "| term[alpha=0.1] | 80.00 | 47.00 | yes |" in lines
    assert text.count("grid edge") == 2  # the list's heading and VRed's row
    assert "widen these axes with `--tune-grid`" in text


def test_tuning_md_says_when_no_choice_is_at_an_edge(tmp_path):
    summary = _hand_made_tuning()
    summary["chosen"]["vred"] = summary["candidates"][2]  # beta = 0.5, inside the grid
    (tmp_path / "tuning.json").write_text(json.dumps(summary))
    text = write_tuning_markdown(tmp_path).read_text()
    assert "No chosen value is at an edge of a numeric grid axis of 3 or more values." in text
    assert "| vred[beta=0.5] | 82.00 | 45.00 | yes |" in text
    assert "(grid edge)" not in text


def test_report_command_rewrites_tuning_md_from_tuning_json(tmp_path, capsys):
    # A tuned folder: one saved run and a tuning.json; `fairfl report` rebuilds the
    # report and replaces a stale tuning.md without running anything.
    run = tmp_path / "runs" / "fedavg" / "seed-0"
    run.mkdir(parents=True)
    clients = [
        {"node_id": 1, "partition_id": 0, "num_examples": 10, "eval_acc": 0.5, "eval_loss": 1.0},
        {"node_id": 2, "partition_id": 1, "num_examples": 30, "eval_acc": 0.9, "eval_loss": 0.2},
    ]
    (run / "rounds.jsonl").write_text(json.dumps({"round": 1, "clients": clients}) + "\n")
    (tmp_path / "tuning.json").write_text(json.dumps(_hand_made_tuning()))
    (tmp_path / "tuning.md").write_text("stale\n")
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"tuning: {tmp_path / 'tuning.md'}" in out
    # Mean (0.5 + 0.9) / 2 = 70 %; pooled (5 + 27) / 40 = 80 %.
    assert "| fedavg | 70.00 | 80.00 |" in out
    assert "| vred[beta=1] | 83.00 | 50.00 | yes, beta=1 (grid edge) |" in (
        (tmp_path / "tuning.md").read_text()
    )


def test_write_tuning_markdown_needs_tuning_json(tmp_path):
    with pytest.raises(ValueError, match=r"tuning\.json: no such file"):
        write_tuning_markdown(tmp_path)


def test_ditto_is_tuned_on_its_personal_models(tmp_path):
    # λ leaves the global model unchanged (every λ ties there): the personal models'
    # validation accuracy chooses it, as in the paper's Appendix C.
    out = tmp_path / "tuned"
    command = ["compare", "--tune", "--rules", "fedavg", "ditto", "--seeds", "0"]
    command += ["--tune-seeds", "7", "--tune-grid", "ditto-lambda=0,5", "--tune-criterion"]
    command += ["mean", "--set", *SMALL, "--out", str(out), "--no-progress"]
    assert main(command) == 0
    summary = json.loads((out / "tuning.json").read_text())
    fedavg, *dittos = summary["candidates"]
    assert fedavg["models"] == "global"
    assert [c["label"] for c in dittos] == ["ditto[lambda=0]", "ditto[lambda=5]"]
    assert [c["models"] for c in dittos] == ["personal", "personal"]
    tuning = out / "tuning"
    run_dirs = {
        r["label"]: r["dir"] for r in json.loads((tuning / "manifest.json").read_text())["runs"]
    }
    finals = [
        json.loads((tuning / run_dirs[c["label"]] / "rounds.jsonl").read_text().splitlines()[-1])
        for c in dittos
    ]
    # The same global model under both λ; the personal models differ, and are scored.
    assert finals[0]["metrics"]["acc-mean"] == finals[1]["metrics"]["acc-mean"]
    for candidate, final in zip(dittos, finals, strict=True):
        assert candidate["mean"] == pytest.approx(final["personal_metrics"]["acc-mean"])
    assert dittos[0]["mean"] != dittos[1]["mean"]
    best = max(dittos, key=lambda c: (c["mean"], c["worst10"], -c["order"]))
    assert summary["chosen"]["ditto"]["label"] == best["label"]
    assert "| personal |" in (out / "tuning.md").read_text()
