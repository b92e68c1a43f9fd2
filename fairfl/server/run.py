"""Run a federation on any Flower Grid: the body of the ServerApp and the in-process runner."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from fairfl.contract import keys
from fairfl.data import dataset_info
from fairfl.models import build_model
from fairfl.server.checkpoint import load_checkpoint, restore_random_state
from fairfl.server.results import RoundLog
from fairfl.settings import RunSettings
from fairfl.strategies import FairStrategy, build_strategy

logger = logging.getLogger(__name__)


FINAL_MODEL_FILE = "final_model.npz"


def save_model(arrays: ArrayRecord, path: Path) -> None:
    """Save a global model as ``.npz`` (no pickle), keyed by state-dict name."""
    np.savez(path, **{key: array.numpy() for key, array in arrays.items()})


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run leaves: the final global model and the summary."""

    arrays: ArrayRecord
    summary: dict[str, Any]
    strategy: FairStrategy


def initial_arrays(settings: RunSettings) -> ArrayRecord:
    """The initial global model, deterministic from the run seed."""
    info = dataset_info(settings.dataset)
    model = build_model(settings.model, info.input_shape, info.num_classes, seed=settings.seed)
    return ArrayRecord(model.state_dict())


def make_strategy(settings: RunSettings, run_config: Mapping[str, Any]) -> FairStrategy:
    """Build the configured rule, waiting for all ``num-partitions`` nodes by default."""
    min_available = settings.min_available_nodes or settings.num_partitions
    return build_strategy(
        settings.strategy,
        # The lr the clients are sent (q-FFL's L = 1/lr), also when the key is defaulted.
        {**run_config, keys.LR: settings.lr},
        fraction_train=settings.fraction_train,
        fraction_evaluate=settings.fraction_evaluate,
        evaluate_every=settings.evaluate_every,
        min_train_nodes=1,
        min_evaluate_nodes=1 if settings.fraction_evaluate > 0 else 0,
        min_available_nodes=min_available,
    )


def run_federation(grid: Grid, run_config: Mapping[str, Any]) -> RunOutcome:
    """Run the configured rule for ``num-server-rounds`` on ``grid`` and write results.

    Raises
    ------
    ValueError
        If a run-config value is invalid (the message names the key and the choices).
    """
    settings = RunSettings.from_run_config(run_config)
    strategy = make_strategy(settings, run_config)
    arrays = initial_arrays(settings)
    previous_rounds: list[dict[str, Any]] = []
    # Flower samples nodes with the global `random`: seed it so a run is reproducible.
    random.seed(settings.seed)
    np.random.seed(settings.seed)
    if settings.resume_from:
        checkpoint = load_checkpoint(Path(settings.resume_from))
        strategy.load_state_dict(checkpoint.strategy_state)
        strategy.round_offset = checkpoint.server_round
        restore_random_state(checkpoint.python_random, checkpoint.numpy_random)
        arrays = checkpoint.arrays
        previous_rounds = checkpoint.rounds
        logger.info(
            "resuming after round %d from %s", checkpoint.server_round, settings.resume_from
        )
    round_log = RoundLog(
        Path(settings.out_dir),
        strategy,
        run_config,
        checkpoint=settings.checkpoint,
        previous_rounds=previous_rounds,
    )
    train_config = ConfigRecord(
        {
            keys.LR: settings.lr,
            keys.LOCAL_EPOCHS: settings.local_epochs,
            keys.BATCH_SIZE: settings.batch_size,
        }
    )
    remaining = settings.num_server_rounds - strategy.round_offset
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        num_rounds=max(remaining, 0),
        timeout=settings.round_timeout,
        train_config=train_config,
        evaluate_config=ConfigRecord(),
        evaluate_fn=round_log.on_round_end,
    )
    final_arrays = result.arrays if remaining > 0 and len(result.arrays) else arrays
    save_model(final_arrays, Path(settings.out_dir) / FINAL_MODEL_FILE)
    summary = round_log.finish(strategy.settings())
    final = summary["final_metrics"]
    if final:
        logger.info(
            "final: acc mean %.2f | worst-10%% %.2f | std %.2f over %d clients -> %s",
            final["acc-mean"],
            final["acc-worst-10"],
            final["acc-std"],
            int(final["num-clients"]),
            settings.out_dir,
        )
    return RunOutcome(arrays=final_arrays, summary=summary, strategy=strategy)
