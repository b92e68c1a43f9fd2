"""ServerApp: a fairfl rule, chosen by the run config's ``strategy``."""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from fairfl.strategies import build_strategy
from fairfl_quickstart.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-server-rounds`` rounds of the configured rule."""
    config = context.run_config
    nodes = int(config["min-nodes"])
    # build_strategy reads the rule's own hyperparameters (e.g. ``qffl-q``) from the run
    # config and keeps each constructor default when a key is absent.
    strategy = build_strategy(
        str(config["strategy"]),
        config,
        fraction_train=float(config["fraction-train"]),
        fraction_evaluate=float(config["fraction-evaluate"]),
        min_available_nodes=nodes,
        min_train_nodes=nodes,
        min_evaluate_nodes=nodes,
    )
    num_rounds = int(config["num-server-rounds"])
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        num_rounds=num_rounds,
        train_config=ConfigRecord(
            {
                "lr": float(config["lr"]),
                "local-epochs": int(config["local-epochs"]),
                "batch-size": int(config["batch-size"]),
            }
        ),
    )
    trained = sorted(result.train_metrics_clientapp)
    accuracy = {
        round_: round(float(metrics["eval_acc"]), 4)
        for round_, metrics in sorted(result.evaluate_metrics_clientapp.items())
    }
    print(
        f"quickstart-pytorch-fairfl: strategy={config['strategy']} "
        f"aggregated-rounds={trained} eval-acc={accuracy}",
        flush=True,
    )
