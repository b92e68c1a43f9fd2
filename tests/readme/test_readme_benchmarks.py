"""The docs' benchmark tables are those generated from docs/results/benchmarks.json.

The site includes them from ``docs/site/_generated/benchmark-tables.md``, which its
extension writes from ``benchmarks/readme_tables.py`` when the docs build; no page keeps
a copy of its own.
"""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _benchmark_module(name: str):
    """``benchmarks/<name>.py`` as a module (the folder is not a package)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # run_all imports its sibling _report
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def _readme_tables():
    return _benchmark_module("readme_tables")


def test_the_docs_include_the_tables_generated_from_the_results_file():
    tables = _readme_tables()
    results = json.loads((ROOT / "docs/results/benchmarks.json").read_text(encoding="utf-8"))
    sys.path.insert(0, str(ROOT / "docs" / "site" / "_ext"))
    try:
        import generate_results
    finally:
        sys.path.remove(str(ROOT / "docs" / "site" / "_ext"))
    assert generate_results.benchmark_tables() == tables.render(results) + "\n"
    performance = (ROOT / "docs/site/explanation/performance.md").read_text(encoding="utf-8")
    assert "```{include} ../_generated/benchmark-tables.md\n```" in performance
    # Neither the README nor a page carries a hand-kept copy that could drift.
    for page in [ROOT / "README.md", *(ROOT / "docs" / "site").glob("[!_]*/**/*.md")]:
        assert tables.BEGIN not in page.read_text(encoding="utf-8"), page


def test_every_benchmark_of_run_all_is_in_the_results_file_with_its_command():
    results = json.loads((ROOT / "docs/results/benchmarks.json").read_text(encoding="utf-8"))
    tables = _readme_tables()
    run_all = _benchmark_module("run_all")
    assert set(results["benchmarks"]) == set(tables.RENDERERS) == set(run_all.BENCHMARKS)
    for name, entry in results["benchmarks"].items():
        # The stored command is the one run_all runs today, so the file can be regenerated.
        assert entry["command"] == run_all.command(name), name
        # Only the entries run with an environment name it, first, as a shell would.
        environment = entry.get("environment") or {}
        prefix = "".join(f"{key}={value} " for key, value in environment.items())
        assert prefix + "nice .venv/bin/python benchmarks/" in entry["command"], name
        # The name says the environment, and the environment is exactly what it says.
        expected = {}
        if "_numpy_gram" in name:
            expected["FAIRFL_GRAM_KERNEL"] = "numpy"
        if "_openblas_haswell" in name:
            expected["OPENBLAS_CORETYPE"] = "Haswell"
        assert environment == expected, name
        script = entry["command"].split(prefix + "nice .venv/bin/python ")[1].split()[0]
        assert (ROOT / script).is_file(), (name, script)


def test_before_and_after_entries_name_the_commit_they_compare_against():
    results = json.loads((ROOT / "docs/results/benchmarks.json").read_text(encoding="utf-8"))
    run_all = _benchmark_module("run_all")
    for name in run_all.WITH_BEFORE:
        entry = results["benchmarks"][name]
        assert entry["before_commit"] == run_all.BEFORE_COMMIT, name
        assert f"git archive {run_all.BEFORE_COMMIT} " in entry["command"], name
    start = results["benchmarks"]["client_start"]["result"]
    assert "fairfl-before" in start["best"]
    sizes = results["benchmarks"]["deployment_round_time"]["result"]["sizes"]
    assert any("fairfl-before" in size["deployed_s_per_round"] for size in sizes)


def test_deployment_table_shows_the_before_run_only_where_it_was_run():
    tables = _readme_tables()
    seconds = {"fairfl": 22.0, "flower-minimal": 24.0}
    entry = {
        "command": "cmd",
        "before_commit": "abc1234",
        "load_1min_before": 0.5,
        "load_1min_after": 0.7,
        "finished": "2026-11-27T15:00:00+00:00",
        "result": {
            "strategy": "fedavg",
            "rounds": 3,
            "floor_s_per_round": 6.0,
            "sizes": [
                {
                    "supernodes": 3,
                    "deployed_s_per_round": {**seconds, "fairfl-before": 30.0},
                    "ratio_fairfl_to_minimal": 22.0 / 24.0,
                    "ratio_before_to_minimal": 30.0 / 24.0,
                },
                {
                    "supernodes": 10,
                    "deployed_s_per_round": seconds,
                    "ratio_fairfl_to_minimal": 22.0 / 24.0,
                },
            ],
        },
    }
    lines = tables.deployment_round_time(entry)
    assert "| 3 | 22.0 | 24.0 | 0.92 | 3.7 | 30.0 | 1.25 |" in lines
    assert "| 10 | 22.0 | 24.0 | 0.92 | 3.7 | not run | |" in lines
    assert any("fairfl before (abc1234)" in line for line in lines)
    del entry["before_commit"]
    assert "| 3 | 22.0 | 24.0 | 0.92 | 3.7 |" in tables.deployment_round_time(entry)
