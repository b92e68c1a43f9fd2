"""`fairfl compare`: parsing of rules, grids and settings; planning; a CLI smoke run."""

import json
from pathlib import Path

import pytest

from fairfl.cli import main
from fairfl.sweep.compare import (
    Assignment,
    execute,
    expand_variants,
    parse_assignment,
    parse_value,
    plan_runs,
    split_settings,
)


def test_values_take_the_type_of_the_keys_default():
    assert parse_value("lr", "1") == 1.0 and isinstance(parse_value("lr", "1"), float)
    assert parse_value("num-partitions", "3") == 3
    assert parse_value("semivred-clip-negative", "true") is True
    assert parse_value("dataset", "synthetic") == "synthetic"
    with pytest.raises(ValueError, match=r"num-partitions must be an int, got '3\.5'"):
        parse_value("num-partitions", "3.5")
    with pytest.raises(ValueError, match="vred-clip-negative must be true or false, got 'maybe'"):
        parse_value("vred-clip-negative", "maybe")


def test_parse_assignment_forms_and_errors():
    assert parse_assignment("semivred-beta=0.1,0.5", multi=True) == Assignment(
        None, "semivred-beta", (0.1, 0.5)
    )
    assert parse_assignment("qffl:lr=0.05", multi=False) == Assignment("qffl", "lr", (0.05,))
    # A Ditto pairing is a rule name too (ditto+<rule>).
    assert parse_assignment("ditto+qffl:ditto-lambda=0.1", multi=False) == Assignment(
        "ditto+qffl", "ditto-lambda", (0.1,)
    )
    with pytest.raises(ValueError, match="expected \\[rule:\\]key=value, got 'beta'"):
        parse_assignment("beta", multi=True)
    with pytest.raises(ValueError, match="unknown run-config key 'semivred-betta'"):
        parse_assignment("semivred-betta=1", multi=True)
    with pytest.raises(ValueError, match="seed is set per run; use --seeds"):
        parse_assignment("seed=3", multi=False)
    with pytest.raises(ValueError, match=r"rule must be one of .*, got 'nope'"):
        parse_assignment("nope:lr=1", multi=False)
    with pytest.raises(ValueError, match=r"empty value in 'lr=0\.1,'"):
        parse_assignment("lr=0.1,", multi=True)


def test_grid_expansion_labels_and_targets():
    grid = [
        parse_assignment("semivred-beta=0.1,0.5", multi=True),
        parse_assignment("qffl:lr=0.05,0.1", multi=True),
    ]
    fixed = [parse_assignment("qffl:qffl-q=1", multi=False)]
    variants = expand_variants(["fedavg", "semivred", "qffl"], grid, fixed)
    assert [v.label for v in variants] == [
        "fedavg",
        "semivred[beta=0.1]",
        "semivred[beta=0.5]",
        "qffl[lr=0.05]",
        "qffl[lr=0.1]",
    ]
    assert variants[3].overrides == {"qffl-q": 1.0, "lr": 0.05}
    assert variants[1].slug == "semivred_beta_0.1"


def test_shared_grid_key_varies_every_rule_and_axes_multiply():
    grid = [
        parse_assignment("lr=0.1,0.2", multi=True),
        parse_assignment("vred-beta=0,1", multi=True),
    ]
    labels = [v.label for v in expand_variants(["fedavg", "vred"], grid)]
    assert labels == [
        "fedavg[lr=0.1]",
        "fedavg[lr=0.2]",
        "vred[lr=0.1,beta=0]",
        "vred[lr=0.1,beta=1]",
        "vred[lr=0.2,beta=0]",
        "vred[lr=0.2,beta=1]",
    ]


def test_grid_for_a_rule_not_compared_is_an_error():
    with pytest.raises(ValueError, match="grid key 'semivred-beta' belongs to none of the rules"):
        expand_variants(["fedavg"], [parse_assignment("semivred-beta=1", multi=True)])
    with pytest.raises(ValueError, match=r"rule must be one of .*, got 'fedsgd'"):
        expand_variants(["fedsgd"])
    with pytest.raises(ValueError, match="duplicate variants \\['vred\\[beta=1\\]'\\]"):
        expand_variants(["vred"], [parse_assignment("vred-beta=1,1", multi=True)])


def test_plan_gives_every_variant_the_same_config_per_seed(tmp_path):
    base, per_rule = split_settings(["num-partitions=3", "lr=0.2", "num-partitions=4"])
    assert base == {"num-partitions": 4, "lr": 0.2} and per_rule == []
    variants = expand_variants(["fedavg", "rcfl"])
    plan = plan_runs(variants, [0, 5], base, tmp_path)
    assert [(r.label, r.seed, r.dir) for r in plan] == [
        ("fedavg", 0, "runs/fedavg/seed-0"),
        ("fedavg", 5, "runs/fedavg/seed-5"),
        ("rcfl", 0, "runs/rcfl/seed-0"),
        ("rcfl", 5, "runs/rcfl/seed-5"),
    ]
    assert plan[1].config == {
        "num-partitions": 4,
        "lr": 0.2,
        "strategy": "fedavg",
        "seed": 5,
        "out-dir": str(tmp_path / "runs/fedavg/seed-5"),
    }
    # A rule's own random stream follows the run's seed unless set explicitly.
    assert plan[3].config["rcfl-seed"] == 5
    with pytest.raises(ValueError, match="seeds must be distinct and >= 0, got \\[1, 1\\]"):
        plan_runs(variants, [1, 1], base, tmp_path)
    with pytest.raises(ValueError, match="run config num-server-rounds must be >= 1, got 0"):
        plan_runs(variants, [0], {"num-server-rounds": 0}, tmp_path)


def test_execute_rejects_bad_workers_and_engine(tmp_path):
    with pytest.raises(ValueError, match="workers must be in \\[1, 2\\], got 3"):
        execute([], workers=3)
    with pytest.raises(ValueError, match="engine must be one of \\('inprocess', 'flwr', 'ray'\\)"):
        execute([], engine="spark")  # type: ignore[arg-type]


def test_cli_compare_smoke_two_rules_one_seed_one_round(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = main(
        [
            "compare",
            "--rules",
            "fedavg",
            "semivred",
            "--seeds",
            "0",
            "--set",
            "num-partitions=3",
            "num-server-rounds=1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| fedavg |" in printed and "| semivred |" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(r["label"], r["seed"], r["status"]) for r in manifest["runs"]] == [
        ("fedavg", 0, "ok"),
        ("semivred", 0, "ok"),
    ]
    # Self-describing: versions, machine and each run's effective configuration.
    assert manifest["versions"]["fairfl"] == "0.1.0" and manifest["machine"]["cpu_count"] >= 1
    assert manifest["runs"][1]["effective_config"]["semivred-beta"] == 0.2
    for label in ("fedavg", "semivred"):
        lines = (out / "runs" / label / "seed-0" / "rounds.jsonl").read_text().splitlines()
        assert len(lines) == 1
        assert len(json.loads(lines[0])["clients"]) == 3
    # Same seed, same partition: both rules saw the same clients' test sets.
    sizes = {
        label: {
            c["partition_id"]: c["num_examples"]
            for c in json.loads((out / "runs" / label / "seed-0" / "rounds.jsonl").read_text())[
                "clients"
            ]
        }
        for label in ("fedavg", "semivred")
    }
    assert sizes["fedavg"] == sizes["semivred"]
    for name in ("table6.md", "table6.csv", "table2.md", "table2.csv", "report.md", "curves.png"):
        assert (out / name).is_file(), name
    # The report cites files of the repository and public papers only.
    assert (
        "Definitions: `fairfl/metrics.py`, after Malekmohammadi & Yu"
        in (out / "report.md").read_text()
    )
    # The re-run skips finished runs.
    assert (
        main(
            [
                "compare",
                "--rules",
                "fedavg",
                "--seeds",
                "0",
                "--set",
                "num-partitions=3",
                "num-server-rounds=1",
                "--out",
                str(out),
                "--no-progress",
                "--skip-existing",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runs"][0]["status"] == "skipped"
    # ... and keeps the time that the run recorded when it ran.
    run_dir = out / manifest["runs"][0]["dir"]
    recorded = json.loads((run_dir / "summary.json").read_text())["wall_time"]
    assert recorded > 0
    assert manifest["runs"][0]["wall_time_s"] == round(recorded, 2)


def test_cli_compare_reports_bad_input_without_running(tmp_path, capsys):
    code = main(["compare", "--rules", "fedavg", "--set", "nope=1", "--out", str(tmp_path)])
    assert code == 2
    assert "unknown run-config key 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "manifest.json").exists()


def test_cli_lists_rules_and_recipes(capsys):
    assert main(["rules"]) == 0
    assert "semivred" in capsys.readouterr().out
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    assert "qffl-synthetic" in out and "digits-table6" in out


def test_recipes_parse_and_plan(tmp_path):
    from fairfl.strategies.registry import STRATEGIES
    from fairfl.sweep.recipes import RECIPES

    for recipe in RECIPES.values():
        base, per_rule = split_settings(recipe.settings)
        grid = [parse_assignment(item, multi=True) for item in recipe.grid]
        variants = expand_variants(recipe.rules or list(STRATEGIES), grid, per_rule)
        labels = {v.label for v in variants}
        assert recipe.baseline in labels, recipe.name
        # None: no weights plot (a recipe whose rules mostly have no weights to show)
        assert recipe.weights_label is None or recipe.weights_label in labels, recipe.name
        assert plan_runs(variants, recipe.seeds, base, Path(tmp_path))


def test_the_digits_recipe_runs_fedfa_and_fedfv(tmp_path):
    from fairfl.strategies.registry import STRATEGIES
    from fairfl.sweep.recipes import RECIPES

    recipe = RECIPES["digits-table6"]
    base, per_rule = split_settings(recipe.settings)
    variants = expand_variants(recipe.rules or list(STRATEGIES), [], per_rule)
    runs = plan_runs(variants, recipe.seeds, base, Path(tmp_path))
    for rule in ("fedfa", "fedfv"):
        assert len([run for run in runs if run.rule == rule]) == len(recipe.seeds)
        assert rule in recipe.description.lower()


def test_a_recipe_run_with_changed_flags_says_so_in_its_description():
    # A report opens with its recipe's description; flags that narrow or change the
    # recipe are named after it, so "every registered rule" is not left unqualified.
    from fairfl.cli import _description, build_parser
    from fairfl.sweep.recipes import RECIPES

    recipe = RECIPES["digits-table6"]
    plain = build_parser().parse_args(["compare", "--recipe", "digits-table6", "--out", "x"])
    assert _description(recipe, plain) == recipe.description
    changed = build_parser().parse_args(
        [
            "compare",
            "--recipe",
            "digits-table6",
            "--out",
            "x",
            "--rules",
            "fedavg",
            "vred",
            "--tune",
            "--tune-grid",
            "vred:vred-beta=1,2",
            "--set",
            "num-server-rounds=5",
        ]
    )
    assert _description(recipe, changed) == (
        f"{recipe.description} This run departs from the recipe: --rules fedavg vred; "
        "--set num-server-rounds=5; --tune-grid vred:vred-beta=1,2."
    )
    assert _description(None, changed) == ""


def _compare(out: Path, *settings: str, rules: tuple[str, ...] = ("fedavg", "qffl")) -> int:
    return main(
        [
            "compare",
            "--rules",
            *rules,
            "--seeds",
            "0",
            "1",
            "--set",
            "num-partitions=3",
            "num-server-rounds=1",
            *settings,
            "--out",
            str(out),
            "--no-progress",
        ]
    )


def test_cli_compare_misspelt_key_gets_did_you_mean_and_no_class_name(tmp_path, capsys):
    assert _compare(tmp_path / "cmp", "qffl:qfl-q=0.5") == 2
    err = capsys.readouterr().err
    assert "unknown run-config key 'qfl-q' in 'qffl:qfl-q=0.5' (did you mean 'qffl-q'?)" in err
    assert "RunSettings" not in err and "Traceback" not in err
    assert not (tmp_path / "cmp" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        # digits' 1,797 samples make at most 1797 // 3 = 599 partitions of 3 samples
        ("num-partitions=5000", "run fedavg seed 0: run config num-partitions must be <= 599"),
        ("qffl:qffl-q=-1", "run qffl seed 0: run config qffl-q (rule qffl): q must be >= 0"),
        ("resume-from=/nowhere/checkpoint.npz", "run config resume-from: no checkpoint file"),
    ],
)
def test_cli_compare_checks_every_run_before_the_first_starts(tmp_path, capsys, setting, message):
    # One error, exit 2, and no run started (no run folder holds a rounds.jsonl).
    assert _compare(tmp_path / "cmp", setting) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not list((tmp_path / "cmp").rglob("rounds.jsonl"))
    assert not (tmp_path / "cmp" / "manifest.json").exists()


def test_cli_compare_unwritable_out_is_a_clear_usage_error(tmp_path, capsys):
    # Root may write anywhere: a regular file where the folder's parent must be.
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    assert _compare(blocker / "cmp") == 2
    err = capsys.readouterr().err
    assert (
        err == f"fairfl compare: error: --out {blocker / 'cmp'}: cannot create or write it: "
        "Not a directory\n"
    )


def test_manifest_records_each_runs_effective_config_and_versions(tmp_path):
    from fairfl.sweep.compare import check_plan

    variants = expand_variants(["qffl"])
    plan = check_plan(plan_runs(variants, [3], {"num-partitions": 3}, tmp_path), tmp_path)
    effective = plan[0].effective_config
    assert effective["dataset"] == "digits" and effective["model"] == "mlp"
    assert effective["lr"] == 0.1 and effective["seed"] == 3 and effective["qffl-q"] == 0.1
    assert "overwrite" not in effective


def test_committed_reports_cite_only_repository_files_and_public_papers():
    import re

    root = Path(__file__).resolve().parents[2]
    reports = sorted((root / "docs" / "results").rglob("report.md"))
    assert reports
    for report in reports:
        text = report.read_text(encoding="utf-8")
        assert "specs/" not in text and "papers/" not in text, report
        for cited in re.findall(r"`((?:fairfl|benchmarks|experiments|scripts)/[\w/.-]+)`", text):
            assert (root / cited).exists(), (report, cited)


def test_cli_compare_missing_data_extra_is_one_error_naming_it(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("datasets", "flwr_datasets") else real(name, *a),
    )
    assert _compare(tmp_path / "cmp") == 2
    assert capsys.readouterr().err == (
        "fairfl compare: error: run fedavg seed 0: run config partitioner='dirichlet' needs "
        "the Python module 'datasets', which is not installed: pip install \"fairfl[data]\"\n"
    )
    assert not list((tmp_path / "cmp").rglob("rounds.jsonl"))
