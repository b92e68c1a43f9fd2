"""ServerApp: one round of q-FFL; says where its fairfl came from."""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

import fairfl
from fairfl.strategies import QFFL
from recipeapp.client_app import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run one round; print fairfl's location and the rounds aggregated."""
    print(f"recipe-app: fairfl from {fairfl.__file__}")
    strategy = QFFL(min_available_nodes=2, fraction_evaluate=0.0)  # the ClientApp only trains
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        num_rounds=1,
        train_config=ConfigRecord({"lr": 0.1}),
    )
    print(f"recipe-app: aggregated-rounds={sorted(result.train_metrics_clientapp)}")
