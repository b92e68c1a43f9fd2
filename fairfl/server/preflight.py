"""Every check a run can make before it waits for a SuperNode or trains a round.

:func:`check_run` is the one validation path of a run: the ServerApp
(:func:`fairfl.server.run.run_federation`), the in-process runner
(:func:`fairfl.simulation.run_inprocess`), ``fairfl run`` and ``fairfl compare`` (every
run of a sweep, before the first starts) all call it. It checks, in this order, and
raises one ``ValueError`` naming the run-config key at the first problem:

1. the keys (an unknown key gets ``did you mean``) and every value
   (:class:`~fairfl.settings.RunSettings`, the rule's constructor);
2. values that leave the rule inert (``qffl-q`` so large that a loss within
   ``max-loss`` raised to it overflows float64);
3. every optional dependency the run imports in this process (:class:`MissingExtraError`
   names the ``pip install`` extra): the model (torch) always, the data extra and the
   data set when the clients run here, the telemetry sinks;
4. the partitions against the data set: enough samples for ``num-partitions`` clients
   of at least ``MIN_PARTITION_SIZE`` samples each, and a partitioner that can cut them;
5. the out-dir: not used by another run's results, creatable and writable;
6. ``resume-from``: the checkpoint exists, loads, and was written by a run with the same
   fingerprint (unless ``resume-force``).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairfl.contract import keys
from fairfl.extras import install_hint
from fairfl.settings import RunSettings, check_run_config_keys

if TYPE_CHECKING:
    from fairfl.strategies import FairStrategy

#: The module each telemetry sink imports (fairfl.telemetry.sinks).
SINK_MODULES = {
    "tensorboard": "tensorboard",
    "mlflow": "mlflow",
    "wandb": "wandb",
    "prometheus": "prometheus_client",
}
#: Partitioners that cut through flwr-datasets (fairfl.data.partition).
FLWR_DATASETS_PARTITIONERS = ("iid", "dirichlet")
#: Data sets torchvision reads (fairfl.data.vision).
TORCHVISION_DATASETS = ("mnist", "fashionmnist", "cifar10")
#: Rule keys raised to a power of the client's loss (q-FFL's ``(F_k + ε)^q``).
POWER_KEYS = ("qffl-q",)
#: ln of float64's largest finite value: x^q overflows once q ln x exceeds it.
LOG_FLOAT64_MAX = math.log(sys.float_info.max)


class MissingExtraError(ValueError):
    """An optional dependency the run imports is not installed (names the extra)."""


def extra_hint(module: str, why: str) -> str:
    """One line: what needs ``module`` and the ``pip install`` extra that brings it."""
    return f"{why} needs the Python module {module!r}, which is not installed: " + install_hint(
        module
    )


def require_modules(needed: Mapping[str, str]) -> None:
    """Raise :class:`MissingExtraError` for the first module of ``needed`` not installed.

    Parameters
    ----------
    needed : Mapping[str, str]
        Module name -> what needs it (``"run config dataset='mnist'"``).
    """
    for module, why in needed.items():
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(extra_hint(module, why))


@dataclass(frozen=True)
class CheckedRun:
    """A run config that passed :func:`check_run`.

    Attributes
    ----------
    settings : RunSettings
        The run's settings, every default filled in.
    strategy : Any
        The rule, built (a :class:`~fairfl.strategies.FairStrategy`).
    run_config : dict[str, Any]
        The run config as given.
    local_clients : bool
        Whether the checks covered ClientApps in this process (data, extras).
    """

    settings: RunSettings
    strategy: FairStrategy
    run_config: dict[str, Any]
    local_clients: bool = False

    def effective_config(self) -> dict[str, Any]:
        """Every run-config key the run reads with the value it uses (defaults resolved).

        The shared keys (:class:`RunSettings`), then the chosen rule's keys as the rule
        holds them (:meth:`~fairfl.strategies.FairStrategy.settings` where it reports
        them, else the run config or the constructor's default).
        """
        from fairfl.strategies.registry import STRATEGIES

        config: dict[str, Any] = {
            item.name.replace("_", "-"): getattr(self.settings, item.name)
            for item in fields(self.settings)
        }
        spec = STRATEGIES[self.settings.strategy]
        defaults = spec.defaults()
        for key in spec.parameters:
            if key not in config:
                config[key] = self.run_config.get(key, defaults.get(key))
        return config


def required_nodes(settings: RunSettings) -> int:
    """SuperNodes a run waits for: ``min-available-nodes``, or all ``num-partitions`` if 0."""
    return settings.min_available_nodes or settings.num_partitions


def make_strategy(settings: RunSettings, run_config: Mapping[str, Any]) -> FairStrategy:
    """Build the configured rule, waiting for all ``num-partitions`` nodes by default."""
    from fairfl.strategies import build_strategy
    from fairfl.strategies.core.identity import (
        NO_REGISTRATION,
        Claims,
        CountBounds,
        load_registration,
    )

    strategy = build_strategy(
        settings.strategy,
        # The lr the clients are sent (q-FFL's L = 1/lr), also when the key is defaulted.
        {**run_config, keys.LR: settings.lr},
        fraction_train=settings.fraction_train,
        fraction_evaluate=settings.fraction_evaluate,
        evaluate_every=settings.evaluate_every,
        min_train_nodes=1,
        min_evaluate_nodes=1 if settings.fraction_evaluate > 0 else 0,
        min_available_nodes=required_nodes(settings),
        max_abs_weight=settings.max_abs_weight,
        max_loss=settings.max_loss,
        loss_clip_mad=settings.loss_clip_mad,
        max_client_share=settings.max_client_share,
    )
    # Who a reply may speak for (fairfl.strategies.core.identity); the ServerApp sets the
    # bound on client keys once the federation's size is known, and the node lookup.
    strategy.client_keys.counts = CountBounds(
        settings.max_num_examples, settings.num_examples_clip, settings.count_flag_ratio
    )
    strategy.client_keys.claims = Claims(max_keys_per_node=settings.max_keys_per_node)
    if settings.privacy.enabled:
        from fairfl.strategies.private import attach_privacy

        attach_privacy(
            strategy, settings.privacy, sampling_rate=settings.fraction_train, seed=settings.seed
        )
    if settings.node_auth and not settings.client_registration:
        # Flower does not tell a ServerApp whether its SuperLink authenticates SuperNodes
        # (every node reports a key, authenticated or not), so the deploy scripts say so.
        raise ValueError(
            "run config node-auth is true (SuperNodes authenticate) but client-registration "
            "is empty: any registered SuperNode could claim any partition and sample count. "
            "Set client-registration to the file deploy/scripts/register-supernodes.sh "
            f"wrote, or client-registration='{NO_REGISTRATION}' to run without one knowingly"
        )
    if settings.client_registration not in ("", NO_REGISTRATION):
        strategy.client_keys.claims.registration = load_registration(settings.client_registration)
    return strategy


def check_rule_not_inert(settings: RunSettings, run_config: Mapping[str, Any]) -> None:
    """Refuse a loss exponent that overflows float64 for losses within ``max-loss``.

    q-FFL weighs a client by ``(F_k + ε)^q`` (Li et al. 2020, Alg. 1 l. 5). A loss may be as
    large as ``max-loss`` (larger replies are dropped), and ``max-loss^q`` is finite in
    float64 only while ``q ln(max-loss) <= ln(float64 max) ≈ 709.78``: beyond that a
    large loss weighs infinitely and a small one nothing, so the run trains nothing.
    """
    from fairfl.strategies.registry import STRATEGIES

    spec = STRATEGIES[settings.strategy]
    if settings.max_loss <= 1.0:  # every power of a loss <= 1 stays <= 1
        return
    bound = LOG_FLOAT64_MAX / math.log(settings.max_loss)
    for key in POWER_KEYS:
        if key not in spec.parameters or key not in run_config:
            continue
        q = float(run_config[key])
        if q > bound:
            raise ValueError(
                f"run config {key} (rule {settings.strategy}) must be <= {bound:.4g}, got "
                f"{run_config[key]!r}: a loss of max-loss={settings.max_loss:g} raised to it "
                "overflows float64, so the rule would weigh clients 0 or infinity and train "
                f"nothing; lower {key}, or lower max-loss to allow a larger one"
            )


def check_extras(settings: RunSettings, *, local_clients: bool) -> None:
    """Refuse a run whose optional dependencies are not installed (names the extra).

    Parameters
    ----------
    settings : RunSettings
        The run's settings.
    local_clients : bool
        Whether the ClientApps run in this process (the in-process runner, ``fairfl
        run``, ``fairfl compare``): then their data and training imports count too.
    """
    needed = {"torch": f"the model (run config model={settings.model!r})"}
    if local_clients:
        if settings.partitioner in FLWR_DATASETS_PARTITIONERS and not settings.dataset.startswith(
            "synthetic"
        ):
            why = f"run config partitioner={settings.partitioner!r}"
            needed.update({"datasets": why, "flwr_datasets": why})
        if settings.dataset in TORCHVISION_DATASETS:
            needed["torchvision"] = f"run config dataset={settings.dataset!r}"
    if settings.privacy.enabled:
        needed["dp_accounting"] = f"run config dp={settings.dp!r} (its accountant)"
    for sink in filter(None, (s.strip() for s in settings.telemetry.split(","))):
        if sink in SINK_MODULES:
            needed[SINK_MODULES[sink]] = f"run config telemetry={settings.telemetry!r}"
    require_modules(needed)


def check_partitions(settings: RunSettings) -> None:
    """Refuse ``num-partitions`` that the data set cannot fill (before any client tries).

    Every partition needs ``MIN_PARTITION_SIZE`` samples (2 train, 1 test); the
    partitioner itself then decides (a Dirichlet draw may leave one too small), with
    the error the clients would each have raised, once. A synthetic device holds at
    least ``synthetic.MIN_DEVICE_SIZE`` samples by construction, so there only the
    arguments are checked: drawing every device's size cost a ServerApp seconds at
    10,000 SuperNodes (``benchmarks/bench_engine_scale.py``).
    """
    from fairfl.data import partition_sizes, synthetic
    from fairfl.data.client_data import check_federation
    from fairfl.data.partition import MIN_PARTITION_SIZE
    from fairfl.data.sources import NATURAL_FEDERATIONS, load_pool, resolve_data_root

    if synthetic.parse_name(settings.dataset) is not None:
        assert synthetic.MIN_DEVICE_SIZE >= MIN_PARTITION_SIZE  # no device can be too small
        try:
            check_federation(**settings.data_kwargs())
        except ValueError as error:
            raise ValueError(
                f"run config num-partitions={settings.num_partitions}: {error}"
            ) from error
        return
    if settings.dataset not in NATURAL_FEDERATIONS and not settings.dataset.startswith("synthetic"):
        _, labels = load_pool(
            settings.dataset, resolve_data_root(settings.data_root), settings.download
        )
        most = len(labels) // MIN_PARTITION_SIZE
        if settings.num_partitions > most:
            raise ValueError(
                f"run config num-partitions must be <= {most} for dataset="
                f"{settings.dataset!r}, got {settings.num_partitions}: its {len(labels)} "
                f"samples give at most {most} partitions of {MIN_PARTITION_SIZE} samples "
                "(2 train, 1 test)"
            )
    try:
        partition_sizes(**settings.data_kwargs())
    except ValueError as error:
        raise ValueError(f"run config num-partitions={settings.num_partitions}: {error}") from error


def partitions_checkable(settings: RunSettings) -> bool:
    """Whether this process can cut the partitions cheaply without the clients' data.

    The bundled data sets (digits, synthetic) with the data extra installed where the
    partitioner needs it; a server without them leaves the check to the clients.
    """
    bundled = settings.dataset == "digits" or settings.dataset.startswith("synthetic")
    needs_flwr_datasets = (
        settings.partitioner in FLWR_DATASETS_PARTITIONERS and settings.dataset == "digits"
    )
    return bundled and (
        not needs_flwr_datasets
        or all(importlib.util.find_spec(m) is not None for m in ("datasets", "flwr_datasets"))
    )


class OutDirError(ValueError):
    """The run config's out-dir cannot be created or written."""


def prepare_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` (and its parents) and check that a file can be written there.

    Called before the run waits for SuperNodes, so that an out-dir the ServerApp cannot
    write fails the run at once instead of after set-up (or after training).

    Raises
    ------
    OutDirError
        Naming the run-config key, the folder and the operating system's reason.
    """
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".fairfl-write-check-"):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        if error.filename is not None and str(error.filename) != str(out_dir):
            reason = f"{reason} ({error.filename})"  # a parent, or the probe file
        raise OutDirError(
            f"run config out-dir: cannot create or write {out_dir}: {reason}. "
            "Choose a folder the ServerApp's user can write (-c 'out-dir=\"<folder>\"')."
        ) from error


def check_resume(
    settings: RunSettings, run_config: Mapping[str, Any], *, partitions_known: bool
) -> None:
    """Refuse a ``resume-from`` that is missing, unreadable or from another run.

    Parameters
    ----------
    settings : RunSettings
        The run's settings.
    run_config : Mapping[str, Any]
        The run config (the rule's keys).
    partitions_known : bool
        Whether ``num-partitions`` is final. On Flower's simulation engine the
        SuperNodes set it once they are there, so until then it is taken from the
        checkpoint and compared when the run starts
        (:func:`fairfl.server.run.run_federation`).
    """
    from fairfl.server.checkpoint import check_fingerprint, load_checkpoint, run_fingerprint

    if not settings.resume_from:
        return
    path = Path(settings.resume_from)
    if not path.is_file():
        raise FileNotFoundError(
            f"run config resume-from: no checkpoint file at {path} (a run's "
            "<out-dir>/checkpoint.npz; empty resume-from starts a new run)"
        )
    checkpoint = load_checkpoint(path)
    stored = checkpoint.fingerprint.get("config", {}).get("num-partitions")
    if not partitions_known and isinstance(stored, int) and stored >= 1:
        settings = replace(settings, num_partitions=stored)
    check_fingerprint(
        checkpoint,
        run_fingerprint(settings, fingerprint_config(settings, run_config)),
        path,
        force=settings.resume_force,
    )


def fingerprint_config(settings: RunSettings, run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The run config a fingerprint is taken of: ``lr`` as the clients are sent it.

    q-FFL and q-FedSGD read ``lr`` as a rule key (``L = 1/lr``); with the key defaulted
    the fingerprint would record the rule's ``None`` and refuse a resume that sets the
    same lr explicitly.
    """
    return {**run_config, keys.LR: settings.lr}


def check_run(
    run_config: Mapping[str, Any], *, local_clients: bool, check_out_dir_use: bool = True
) -> CheckedRun:
    """Check everything about a run that can be checked before it starts.

    Parameters
    ----------
    run_config : Mapping[str, Any]
        The run config.
    local_clients : bool
        Whether the ClientApps run in this process (:func:`check_extras`).
    check_out_dir_use : bool (default: True)
        Refuse an out-dir that holds another run's results (unless ``overwrite`` or a
        resume from it); ``fairfl compare`` checks its folders itself.

    Returns
    -------
    CheckedRun
        The settings and the built rule.

    Raises
    ------
    ValueError
        The first problem, naming the run-config key (:class:`MissingExtraError`
        names the extra, :class:`OutDirError` the folder).
    FileNotFoundError
        If ``resume-from`` names no file.
    FileExistsError
        If the out-dir holds another run's results.
    """
    from fairfl.server.checkpoint import check_out_dir
    from fairfl.strategies.registry import STRATEGIES
    from fairfl.strategies.secure import check_secure

    rule_keys = {name: spec.parameters for name, spec in STRATEGIES.items()}
    chosen = run_config.get("strategy")
    if isinstance(chosen, str) and chosen not in rule_keys and chosen in STRATEGIES:
        rule_keys[chosen] = STRATEGIES[chosen].parameters  # a pairing (ditto+qffl): built on use
    check_run_config_keys(run_config, rule_keys)
    settings = RunSettings.from_run_config(run_config)
    strategy = make_strategy(settings, run_config)
    if settings.secagg.enabled:
        check_secure(strategy)  # before anything waits: the rule's form, named if refused
    check_rule_not_inert(settings, run_config)
    check_extras(settings, local_clients=local_clients)
    if local_clients:
        check_partitions(settings)
    out_dir = Path(settings.out_dir)
    if check_out_dir_use:
        check_out_dir(out_dir, resume_from=settings.resume_from, overwrite=settings.overwrite)
    prepare_out_dir(out_dir)
    check_resume(settings, run_config, partitions_known=local_clients)
    return CheckedRun(
        settings=settings,
        strategy=strategy,
        run_config=dict(run_config),
        local_clients=local_clients,
    )
