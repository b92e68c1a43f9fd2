"""fairfl's ServerApp: the rule from the run config, fairness metrics, results files."""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fairfl.logs import attach_flower_console
from fairfl.server.run import run_federation

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the federation configured by ``context.run_config``."""
    attach_flower_console()
    run_federation(grid, context.run_config)
