"""ServerApp: Flower's quickstart FedAvg, plus fairfl's per-client telemetry (2 lines)."""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fairfl.telemetry import with_telemetry  # added
from telemetry_quickstart.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run FedAvg; every client's result goes to rounds.jsonl and the telemetry sinks."""
    fraction_train = float(context.run_config["fraction-train"])
    num_rounds = int(context.run_config["num-server-rounds"])
    lr = float(context.run_config["lr"])
    arrays = ArrayRecord(Net().state_dict())
    strategy = with_telemetry(FedAvg(fraction_train=fraction_train), context)  # changed
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
    )
    accuracy = {
        round_: round(float(metrics["eval_acc"]), 4)
        for round_, metrics in sorted(result.evaluate_metrics_clientapp.items())
    }
    print(f"quickstart-telemetry: eval-acc={accuracy} records={strategy.out_dir}", flush=True)
