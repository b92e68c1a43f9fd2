"""The plug-in snippets of the README and the docs site: every ```python block runs.

The README's "Plug a rule into your own Flower app" (a ServerApp and a ClientApp) and the
how-to page ``docs/site/howto/plug-a-rule-into-flower.md`` (the same, and a ``train``).
Each source's blocks are executed in order in one namespace, as if they were the files of
one app, with the example app's own ``Net``, ``load_data`` and ``train`` (its
``task.py``) standing in for the user's; the page's own ``train`` replaces the example's.
Then the ServerApp ``main`` drives the ClientApp for two rounds through fairfl's
in-memory Grid, for rules that exercise each client branch.
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

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "quickstart-pytorch-fairfl"
SECTION = "## Plug a rule into your own Flower app"
README = ROOT / "README.md"
HOWTO = ROOT / "docs" / "site" / "howto" / "plug-a-rule-into-flower.md"


def section_blocks(path: Path = README) -> list[str]:
    """The ```python blocks of the README's section, or of the whole docs page, in order."""
    text = path.read_text(encoding="utf-8")
    if path == README:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[start : end if end >= 0 else len(text)]
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def run_blocks(path: Path = README) -> tuple[ServerApp, object, ClientApp]:
    """Execute the blocks; return the ServerApp, its main function and the ClientApp."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from fairfl_quickstart.task import Net, load_data, train
    finally:
        sys.path.remove(str(EXAMPLE))
    namespace: dict[str, object] = {
        "Net": Net,
        "load_data": load_data,
        "train": train,
        "torch": torch,
    }
    apps: dict[type, object] = {}
    main = None
    for block in section_blocks(path):
        exec(compile(block, path.name, "exec"), namespace)
        app = namespace.get("app")
        if isinstance(app, ServerApp | ClientApp):
            apps[type(app)] = app
            if isinstance(app, ServerApp) and main is None:
                main = namespace["main"]
    return apps[ServerApp], main, apps[ClientApp]


def test_readme_has_server_and_client_blocks_and_the_page_a_train_block_too():
    blocks = section_blocks(README)
    assert len(blocks) == 2
    assert "ServerApp()" in blocks[0] and "fair_train(" in blocks[1]
    blocks = section_blocks(HOWTO)
    assert len(blocks) == 3
    assert "ServerApp()" in blocks[0] and "fair_train(" in blocks[1] and "def train(" in blocks[2]


@pytest.mark.parametrize("path", [README, HOWTO], ids=["README", "howto"])
@pytest.mark.parametrize("rule", ["equitable", "qffl"])
def test_snippets_server_and_client_run_two_rounds(rule, path, monkeypatch):
    built = []

    def recording_build_strategy(*args, **kwargs):
        built.append(fairfl.strategies.registry.build_strategy(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(fairfl.strategies, "build_strategy", recording_build_strategy)
    _, main, client_app = run_blocks(path)
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
