"""README's "Plug a rule into your own Flower app": every ```python block in it runs.

The blocks are executed in order in one namespace, as if they were the files of one
app, with the example app's own ``Net`` and ``load_data`` (its ``task.py``) standing in
for the user's. Then the README's ServerApp ``main`` drives the README's ClientApp for
two rounds through fairfl's in-memory Grid, for rules that exercise each client branch.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from flwr.app import Context, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

import fairfl.strategies
from fairfl._compat import server_task_identity
from fairfl.simulation import InMemoryGrid, node_configs_for

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quickstart-pytorch-fairfl"
SECTION = "## Plug a rule into your own Flower app"


def section_blocks() -> list[str]:
    """The ```python blocks of the section, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end >= 0 else len(text)]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def run_blocks() -> tuple[ServerApp, object, ClientApp]:
    """Execute the blocks; return the ServerApp, its main function and the ClientApp."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from fairfl_quickstart.task import Net, load_data
    finally:
        sys.path.remove(str(EXAMPLE))
    namespace: dict[str, object] = {"Net": Net, "load_data": load_data, "torch": torch}
    apps: dict[type, object] = {}
    main = None
    for block in section_blocks():
        exec(compile(block, "README.md", "exec"), namespace)
        app = namespace.get("app")
        if isinstance(app, ServerApp | ClientApp):
            apps[type(app)] = app
            if isinstance(app, ServerApp) and main is None:
                main = namespace["main"]
    return apps[ServerApp], main, apps[ClientApp]


def test_section_has_server_client_and_train_blocks():
    blocks = section_blocks()
    assert len(blocks) == 3
    assert "ServerApp()" in blocks[0] and "fair_train(" in blocks[1] and "def train(" in blocks[2]


@pytest.mark.parametrize("rule", ["equitable", "qffl"])
def test_readme_server_and_client_run_two_rounds(rule, monkeypatch):
    built = []

    def recording_build_strategy(*args, **kwargs):
        built.append(fairfl.strategies.registry.build_strategy(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(fairfl.strategies, "build_strategy", recording_build_strategy)
    _, main, client_app = run_blocks()
    torch.manual_seed(0)
    grid = InMemoryGrid(client_app, node_configs_for(2), {})
    context = Context(
        run_id=grid.run_id,
        node_id=0,
        node_config={},
        state=RecordDict(),
        run_config={"strategy": rule},
    )
    with server_task_identity(grid.run_id):
        main(grid, context)
    (strategy,) = built
    for server_round in (1, 2):
        record = strategy.train_records[server_round]
        assert record.dropped == {} and len(record.accepted) == 2
    assert len(strategy.evaluations[2]) == 2
