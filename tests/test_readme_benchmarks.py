"""The README's benchmark tables are those generated from docs/results/benchmarks.json."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_tables():
    spec = importlib.util.spec_from_file_location(
        "readme_tables", ROOT / "benchmarks" / "readme_tables.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_benchmark_block_is_generated_from_the_results_file():
    tables = _readme_tables()
    results = json.loads((ROOT / "docs/results/benchmarks.json").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert tables.readme_block(readme) == tables.render(results), (
        "README's benchmark tables differ from docs/results/benchmarks.json: run "
        "`.venv/bin/python benchmarks/readme_tables.py --write`"
    )


def test_every_benchmark_of_run_all_is_in_the_results_file_with_its_command():
    results = json.loads((ROOT / "docs/results/benchmarks.json").read_text(encoding="utf-8"))
    tables = _readme_tables()
    assert set(results["benchmarks"]) == set(tables.RENDERERS)
    for name, entry in results["benchmarks"].items():
        # Only the entries run with an environment name it, first, as a shell would.
        environment = entry.get("environment") or {}
        prefix = "".join(f"{key}={value} " for key, value in environment.items())
        assert entry["command"].startswith(prefix + "nice .venv/bin/python benchmarks/"), name
        assert name.endswith("_openblas_haswell") == (
            environment == {"OPENBLAS_CORETYPE": "Haswell"}
        )
        script = entry["command"].removeprefix(prefix).split()[2]
        assert (ROOT / script).is_file(), (name, script)
