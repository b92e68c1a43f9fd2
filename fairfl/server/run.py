"""Run a federation on any Flower Grid: the body of the ServerApp and the in-process runner."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from fairfl.contract import keys
from fairfl.data import dataset_info
from fairfl.metrics import PERCENT
from fairfl.models import build_model
from fairfl.server.checkpoint import (
    check_fingerprint,
    clear_results,
    load_checkpoint,
    restore_random_state,
    run_fingerprint,
)
from fairfl.server.preflight import (
    CheckedRun,
    check_partitions,
    check_run,
    fingerprint_config,
    partitions_checkable,
    required_nodes,
)
from fairfl.server.results import (
    COMPLETED,
    FAILED,
    SUMMARY_FILE,
    RoundLog,
    failed_round,
    personal_progress,
)
from fairfl.settings import RunSettings
from fairfl.strategies import FairStrategy
from fairfl.strategies.core.identity import NO_REGISTRATION, grid_fingerprints
from fairfl.strategies.core.records import TrainedNothingError, trained_nothing
from fairfl.strategies.secure import secure_rounds
from fairfl.telemetry.environment import environment
from fairfl.telemetry.ledger import json_safe, seal_summary

logger = logging.getLogger(__name__)


FINAL_MODEL_FILE = "final_model.npz"
#: Seconds between two looks at the connected SuperNodes while waiting for them.
NODE_POLL_INTERVAL = 0.5
#: Seconds between two "waiting for SuperNodes" log lines.
NODE_WAIT_LOG_INTERVAL = 5.0


def save_model(arrays: ArrayRecord, path: Path) -> None:
    """Save a global model as ``.npz`` (no pickle), keyed by state-dict name."""
    # numpy's stub also matches the ** names against savez's allow_pickle: bool.
    np.savez(path, **{key: array.numpy() for key, array in arrays.items()})  # type: ignore[arg-type]


class RunFailedError(RuntimeError):
    """The run went through its rounds but trained or evaluated nothing."""


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


def describe_run(summary: Mapping[str, Any], checked: CheckedRun) -> dict[str, Any]:
    """``summary`` with what makes it self-describing, sealed into the ledger head.

    ``config`` already holds the effective configuration (every default resolved);
    this adds the keys the run was given (``config_given``) and :func:`environment`,
    then seals the summary (:func:`fairfl.telemetry.ledger.seal_summary`) so that
    ``fairfl verify`` catches a later edit.
    """
    described = {
        **summary,
        "config_given": json_safe(checked.run_config),
        "environment": environment(),
    }
    return seal_summary(described)


def finish_run(
    round_log: RoundLog, checked: CheckedRun, *, status: str, error: str | None
) -> dict[str, Any]:
    """Close the run's log and write its self-describing, sealed ``summary.json``."""
    summary = describe_run(
        round_log.finish(checked.strategy.settings(), status=status, error=error), checked
    )
    path = round_log.out_dir / SUMMARY_FILE
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)  # a reader never sees half a summary
    return summary


def is_flower_simulation(grid: Grid) -> bool:
    """Whether ``grid`` is the Grid of Flower's simulation engine.

    ``flwr run`` on a simulation SuperLink, like ``flwr.simulation.run_simulation``, runs
    the ServerApp on flwr's ``InMemoryGrid``. The class moved between releases
    (``flwr.server.grid`` in older releases, ``flwr.superlink.grid`` in 1.42), so it is
    recognised by its name and top-level package rather than imported.
    """
    cls = type(grid)
    return cls.__name__ == "InMemoryGrid" and cls.__module__.split(".")[0] == "flwr"


def _connected(grid: Grid) -> int:
    return len(list(grid.get_node_ids()))


def simulated_federation_size(grid: Grid, deadline: float, timeout: float) -> int:
    """The number of SuperNodes Flower's simulation engine runs.

    The engine registers all of them in one go right after it starts the ServerApp:
    this waits until some are there and two looks ``NODE_POLL_INTERVAL`` apart agree.

    Parameters
    ----------
    grid : Grid
        The simulation engine's Grid.
    deadline : float
        ``time.monotonic()`` value after which it stops waiting.
    timeout : float
        The ``node-wait-timeout`` the deadline came from (for the error message).

    Raises
    ------
    TimeoutError
        If no SuperNode is registered by ``deadline``.
    """
    previous = -1
    while True:
        count = _connected(grid)
        if count and (count == previous or time.monotonic() >= deadline):
            return count
        if time.monotonic() >= deadline:
            raise TimeoutError(
                "Flower's simulation engine registered no SuperNode within "
                f"node-wait-timeout={timeout:g} s"
            )
        previous = count
        time.sleep(NODE_POLL_INTERVAL)


def _too_few_nodes_hint(
    settings: RunSettings, connected: int, required: int, simulation: bool
) -> str:
    """How to get past a run that lacks SuperNodes: the keys and options to change."""
    if simulation:
        return (
            f"Flower's simulation engine runs {connected} SuperNodes: pass "
            f"--federation-config 'num-supernodes={required}' to flwr run, "
            "or lower min-available-nodes."
        )
    needed = (
        f"min-available-nodes={settings.min_available_nodes}"
        if settings.min_available_nodes
        else f"min-available-nodes=0 waits for all num-partitions={settings.num_partitions}"
    )
    return (
        f"The run needs them because {needed}. Start the missing SuperNodes (one per "
        f"partition: --node-config 'partition-id=<i> num-partitions={settings.num_partitions}'"
        "), or start with fewer via -c 'min-available-nodes=<k>', or cut the data into as "
        "many partitions as there are SuperNodes via -c 'num-partitions=<k>' (their "
        "--node-config num-partitions must match); -c 'node-wait-timeout=<seconds>' waits "
        "longer."
    )


def wait_for_nodes(
    grid: Grid, required: int, settings: RunSettings, deadline: float, *, simulation: bool
) -> None:
    """Wait until ``required`` SuperNodes are connected, at most until ``deadline``.

    Logs how many are connected every ``NODE_WAIT_LOG_INTERVAL`` seconds, the first
    time with what to change.

    Parameters
    ----------
    grid : Grid
        The Grid the run uses.
    required : int
        How many SuperNodes must be connected.
    settings : RunSettings
        The run's settings (named in the log and the error).
    deadline : float
        ``time.monotonic()`` value after which it gives up.
    simulation : bool
        Whether ``grid`` is Flower's simulation engine (changes the advice given).

    Raises
    ------
    TimeoutError
        If fewer are connected at ``deadline``; the message names the run-config keys and
        the federation option that fix it.
    """
    next_log = time.monotonic()
    first_log = True
    while (connected := _connected(grid)) < required:
        now = time.monotonic()
        hint = _too_few_nodes_hint(settings, connected, required, simulation)
        if now >= deadline:
            raise TimeoutError(
                f"only {connected} of the {required} SuperNodes this run needs connected "
                f"within node-wait-timeout={settings.node_wait_timeout:g} s. {hint}"
            )
        if now >= next_log:
            logger.info(
                "waiting for SuperNodes: %d of %d connected; giving up in %.0f s "
                "(node-wait-timeout).%s",
                connected,
                required,
                deadline - now,
                f" {hint}" if first_log else "",
            )
            first_log = False
            next_log = now + NODE_WAIT_LOG_INTERVAL
        time.sleep(min(NODE_POLL_INTERVAL, deadline - now))


def await_federation(
    grid: Grid, settings: RunSettings, run_config: Mapping[str, Any]
) -> tuple[RunSettings, Mapping[str, Any]]:
    """Wait, at most ``node-wait-timeout`` seconds, for the SuperNodes the run needs.

    That is ``min-available-nodes`` of them, or all ``num-partitions`` when it is 0.
    In Flower's simulation engine the simulated SuperNodes define the partitions: node
    i gets ``partition-id=i`` and ``num-partitions=N`` (the number of SuperNodes,
    ``--federation-config num-supernodes``, 2 by default) in its node config, which
    the ClientApp follows. There ``num-partitions`` becomes N, with a warning when the
    run config says otherwise, so plain ``flwr run .`` runs on the nodes it has.

    Parameters
    ----------
    grid : Grid
        The Grid the run uses.
    settings : RunSettings
        The run's settings.
    run_config : Mapping[str, Any]
        The run config (recorded in the results files).

    Returns
    -------
    tuple[RunSettings, Mapping[str, Any]]
        ``settings`` and ``run_config`` with ``num-partitions`` as the SuperNodes see it.

    Raises
    ------
    TimeoutError
        If too few SuperNodes connect in time (the message says what to change).
    """
    deadline = time.monotonic() + settings.node_wait_timeout
    simulation = is_flower_simulation(grid)
    if simulation:
        nodes = simulated_federation_size(grid, deadline, settings.node_wait_timeout)
        if settings.min_available_nodes > nodes:
            # A simulation's SuperNodes are all there: waiting cannot help, fail now.
            deadline = time.monotonic()
        elif nodes != settings.num_partitions:
            logger.warning(
                "Flower's simulation engine runs %d SuperNodes, so the data is cut into %d "
                "partitions, one per SuperNode, instead of num-partitions=%d. For %d clients "
                "pass --federation-config 'num-supernodes=%d' to flwr run.",
                nodes,
                nodes,
                settings.num_partitions,
                settings.num_partitions,
                settings.num_partitions,
            )
            settings = replace(settings, num_partitions=nodes)
            run_config = {**run_config, "num-partitions": nodes}
    wait_for_nodes(grid, required_nodes(settings), settings, deadline, simulation=simulation)
    return settings, run_config


def bind_client_keys(strategy: FairStrategy, grid: Grid, settings: RunSettings) -> None:
    """Bound the client keys a run admits, and look registered nodes' keys up on ``grid``.

    ``max-clients`` (0: ``num-partitions``) bounds the keys first claims may take and a
    claimed partition id must be below ``num-partitions``; with a
    ``client-registration``, each node's key fingerprint comes from the SuperLink's node
    list (``Grid.get_nodes()``, :mod:`fairfl.strategies.core.identity`). Run without one
    knowingly (``client-registration = "none"``), the run says once what that leaves open.

    Raises
    ------
    ValueError
        If ``client-registration`` is set but this Flower's Grid reports no nodes' keys.
    """
    claims = strategy.client_keys.claims
    claims.max_clients = settings.max_clients or settings.num_partitions
    claims.num_partitions = settings.num_partitions
    if settings.client_registration == NO_REGISTRATION:
        logger.warning(
            "run config client-registration='%s': no registration binds SuperNodes to "
            "partitions, so a device can claim a free partition before its owner and weigh "
            "itself by any count up to max-num-examples (docs: explanation/threat-model)",
            NO_REGISTRATION,
        )
    if claims.registration is None:
        return
    if not hasattr(grid, "get_nodes"):
        raise ValueError(
            "run config client-registration needs a Flower whose Grid reports the "
            "SuperNodes' public keys (Grid.get_nodes(), flwr >= 1.42); upgrade flwr or "
            "leave client-registration empty"
        )
    claims.fingerprint_of = grid_fingerprints(grid.get_nodes)


def failure_reason(strategy: FairStrategy, rounds: int, max_failed_rounds: int = 0) -> str | None:
    """Why a run that went through ``rounds`` rounds failed, or ``None`` if it did not.

    It failed if no round of this run aggregated a reply into a new global model (every
    reply dropped, no node answered, or every new model rejected) while it trains, if
    more than ``max_failed_rounds`` of its rounds could use no client's train reply
    (:func:`~fairfl.server.results.failed_round`; the reason quotes the first one's
    errors), or if no client evaluation came back while it evaluates.
    """
    if rounds <= 0:
        return None
    mine = range(strategy.round_offset + 1, strategy.round_offset + rounds + 1)
    records = [strategy.train_records.get(r) for r in mine]
    if nothing := trained_nothing(strategy.train_records, mine):
        return f"{nothing.removesuffix(')')}; see 'train' in rounds.jsonl)"
    failed = {r: f for r, record in zip(mine, records, strict=True) if (f := failed_round(record))}
    if len(failed) > max_failed_rounds:
        first, entry = next(iter(failed.items()))
        quoted = [f"node {node}: {error}" for node, error in entry["errors"].items()]
        more = len(quoted) - 3
        errors = "; ".join(quoted[:3]) + (f"; and {more} more" if more > 0 else "")
        return (
            f"failed {len(failed)} of its {rounds} rounds, more than max-failed-rounds="
            f"{max_failed_rounds}: no client's train reply could be used in round(s) "
            f"{', '.join(map(str, failed))} (round {first}: {errors or entry['reason']}; see "
            "'failed' in rounds.jsonl)"
        )
    if strategy.fraction_evaluate > 0 and not any(strategy.evaluations.get(r) for r in mine):
        return f"evaluated nothing: no client evaluation came back in its {rounds} rounds"
    return None


def run_federation(
    grid: Grid, run_config: Mapping[str, Any], *, checked: CheckedRun | None = None
) -> RunOutcome:
    """Run the configured rule for ``num-server-rounds`` on ``grid`` and write results.

    Before it waits for the SuperNodes the run needs (:func:`await_federation`) every
    up-front check runs (:func:`fairfl.server.preflight.check_run`), unless the caller
    passes the result of that check as ``checked``. ``summary.json`` records the
    outcome (``status``, ``error``) under this run's id, also when a round raises, with
    the effective configuration and the versions it ran with (:func:`describe_run`).

    Raises
    ------
    ValueError
        If a run-config key is unknown (the message suggests the closest ones), a value
        is invalid (the message names the key and the choices), an extra the run needs
        is missing, or the out-dir cannot be created or written (:class:`OutDirError`).
    TimeoutError
        If too few SuperNodes connect within ``node-wait-timeout`` seconds, or fewer
        than ``min-available-nodes`` for a round within ``round-timeout``.
    RunFailedError
        If the run trained or evaluated nothing (:func:`failure_reason`).
    """
    if checked is None:
        checked = check_run(run_config, local_clients=False)
    settings, strategy = checked.settings, checked.strategy
    out_dir = Path(settings.out_dir)
    settings, run_config = await_federation(grid, settings, run_config)
    changed = settings.num_partitions != checked.settings.num_partitions
    if partitions_checkable(settings) and (changed or not checked.local_clients):
        check_partitions(settings)  # as the SuperNodes cut the data, once, not per client
    checked = replace(checked, settings=settings, run_config=dict(run_config))
    strategy.min_available_nodes = required_nodes(settings)
    strategy.client_key_timeout = settings.round_timeout
    bind_client_keys(strategy, grid, settings)
    arrays = initial_arrays(settings)
    previous_rounds: list[dict[str, Any]] = []
    fingerprint = run_fingerprint(settings, fingerprint_config(settings, run_config))
    # Flower samples nodes with the global `random`: seed it so a run is reproducible.
    random.seed(settings.seed)
    np.random.seed(settings.seed)
    if settings.resume_from:
        checkpoint = load_checkpoint(Path(settings.resume_from))
        check_fingerprint(
            checkpoint, fingerprint, Path(settings.resume_from), force=settings.resume_force
        )
        strategy.load_state_dict(checkpoint.strategy_state)
        if strategy.size_sampler is not None:  # size-proportional sampling's state
            strategy.size_sampler.load_state(checkpoint.sampling_state)
        if strategy.privacy is not None:
            strategy.privacy.load_state(checkpoint.privacy_state)
        strategy.client_keys.claims.load_state_dict(
            checkpoint.client_claims, connected=grid.get_node_ids()
        )
        strategy.round_offset = checkpoint.server_round
        restore_random_state(checkpoint.python_random, checkpoint.numpy_random)
        arrays = checkpoint.arrays
        previous_rounds = checkpoint.rounds
        logger.info(
            "resuming after round %d from %s", checkpoint.server_round, settings.resume_from
        )
    elif settings.overwrite:
        clear_results(out_dir)
    round_log = RoundLog(
        out_dir,
        strategy,
        checked.effective_config(),  # summary.json and every sink record it
        checkpoint=settings.checkpoint,
        previous_rounds=previous_rounds,
        fingerprint=fingerprint,
        grid=grid,
    )
    train_config = ConfigRecord(
        {
            keys.LR: settings.lr,
            keys.LOCAL_EPOCHS: settings.local_epochs,
            keys.BATCH_SIZE: settings.batch_size,
            # local-steps replaces the epochs only when set: a stock client never sees it.
            **({keys.LOCAL_STEPS: settings.local_steps} if settings.local_steps > 0 else {}),
        }
    )
    remaining = settings.num_server_rounds - strategy.round_offset
    # secagg+: the train rounds run SecAgg+ (the rule reads only the sum); else ``grid``.
    rounds_grid = secure_rounds(strategy, grid, settings.secagg)
    try:
        result = strategy.start(
            grid=rounds_grid,
            initial_arrays=arrays,
            num_rounds=max(remaining, 0),
            timeout=settings.round_timeout,
            train_config=train_config,
            evaluate_config=ConfigRecord(),
            evaluate_fn=round_log.on_round_end,
        )
    except TrainedNothingError:  # the strategy's own verdict: judged below, files written
        result = None
    except BaseException as error:  # also a stop signal: the summary says why it ended
        finish_run(round_log, checked, status=FAILED, error=f"{type(error).__name__}: {error}")
        raise
    trained = result is not None and remaining > 0 and len(result.arrays)
    final_arrays = result.arrays if trained and result is not None else arrays
    save_model(final_arrays, Path(settings.out_dir) / FINAL_MODEL_FILE)
    failure = failure_reason(strategy, max(remaining, 0), settings.max_failed_rounds)
    summary = finish_run(round_log, checked, status=FAILED if failure else COMPLETED, error=failure)
    if failure:
        raise RunFailedError(f"the run {failure}; results in {settings.out_dir}")
    final = summary["final_metrics"]
    if final.get("num-clients"):  # 0: no client evaluated in the last round
        logger.info(
            "final: accuracy (%%) mean %.2f | worst-10%% %.2f | std %.2f over %d clients%s -> %s",
            PERCENT * final["acc-mean"],
            PERCENT * final["acc-worst-10"],
            PERCENT * final["acc-std"],
            int(final["num-clients"]),
            personal_progress(summary.get("final_personal_metrics")),
            settings.out_dir,
        )
    return RunOutcome(arrays=final_arrays, summary=summary, strategy=strategy)
