"""Run settings parsed from ``context.run_config`` into checked, frozen dataclasses.

The ServerApp and the ClientApp read the same run config; :class:`RunSettings` is what
both need (data, model, training), :class:`NodeSettings` what one SuperNode adds
(its partition, data root and device).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

from fairfl.contract.config import (
    check_known_keys,
    dataclass_fields_from_config,
    get_config_value,
)
from fairfl.data import PARTITIONERS
from fairfl.data.sources import NATURAL_FEDERATIONS, check_dataset
from fairfl.models.names import MODELS
from fairfl.privacy.config import PrivacySettings
from fairfl.secagg.config import SecAggSettings
from fairfl.telemetry.config import TelemetrySettings

#: Seeds are in [0, 2^32): NumPy's global seed (np.random.seed) takes no other.
MAX_SEED = 2**32 - 1


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"run config {name} must be one of {choices}, got {value!r}")


@dataclass(frozen=True)
class RunSettings:
    """Settings of a run shared by server and clients (run-config keys hyphenated).

    ``strategy`` is checked where the rule is built
    (:func:`fairfl.strategies.registry.build_strategy`): the registry sits above this
    module, which clients import without the strategies.
    """

    strategy: str = "fedavg"
    num_server_rounds: int = 20
    fraction_train: float = 1.0
    sampling: str = "uniform"
    fraction_evaluate: float = 1.0
    evaluate_every: int = 1
    min_available_nodes: int = 0
    lr: float = 0.1
    local_epochs: int = 2
    local_steps: int = 0
    batch_size: int = 32
    dataset: str = "digits"
    partitioner: str = "dirichlet"
    num_partitions: int = 20
    dirichlet_alpha: float = 0.3
    shards_per_partition: int = 2
    test_fraction: float = 0.3
    validation_fraction: float = 0.0
    evaluate_split: str = "test"
    model: str = "mlp"
    seed: int = 0
    out_dir: str = "outputs/latest"
    data_root: str = ""
    download: bool = False
    checkpoint: bool = True
    resume_from: str = ""
    resume_force: bool = False
    overwrite: bool = False
    round_timeout: float = 3600.0
    node_wait_timeout: float = 120.0
    max_failed_rounds: int = 0
    max_abs_weight: float = 1e6
    max_loss: float = 1e6
    loss_clip_mad: float = 0.0
    max_client_share: float = 1.0
    max_clients: int = 0
    max_num_examples: int = 10**9
    num_examples_clip: float = 0.0
    client_registration: str = ""
    max_keys_per_node: int = 1
    count_flag_ratio: float = 100.0
    node_auth: bool = False
    group_sizes: str = "4,6"
    group_labels: str = ""
    group_samples_per_class: int = 0
    # Telemetry sinks (fairfl.telemetry.config.TelemetrySettings, which checks them).
    telemetry: str = TelemetrySettings.telemetry
    telemetry_dir: str = TelemetrySettings.telemetry_dir
    telemetry_host: str = TelemetrySettings.telemetry_host
    telemetry_port: int = TelemetrySettings.telemetry_port
    telemetry_max_clients: int = TelemetrySettings.telemetry_max_clients
    telemetry_wandb_online: bool = TelemetrySettings.telemetry_wandb_online
    telemetry_key: str = TelemetrySettings.telemetry_key
    # Secure aggregation (fairfl.secagg.config.SecAggSettings, which checks them).
    secure_aggregation: str = SecAggSettings.secure_aggregation
    secagg_num_shares: float = SecAggSettings.secagg_num_shares
    secagg_reconstruction_threshold: float = SecAggSettings.secagg_reconstruction_threshold
    secagg_clipping_range: float = SecAggSettings.secagg_clipping_range
    secagg_quantization_range: int = SecAggSettings.secagg_quantization_range
    secagg_max_weight: float = SecAggSettings.secagg_max_weight
    # Differential privacy (fairfl.privacy.config.PrivacySettings, which checks them).
    dp: str = PrivacySettings.dp
    dp_clipping_norm: float = PrivacySettings.dp_clipping_norm
    dp_noise_multiplier: float = PrivacySettings.dp_noise_multiplier
    dp_delta: float = PrivacySettings.dp_delta
    dp_weight_cap: float = PrivacySettings.dp_weight_cap
    dp_calibration: str = PrivacySettings.dp_calibration
    dp_loss_noise_multiplier: float = PrivacySettings.dp_loss_noise_multiplier
    dp_loss_bound: float = PrivacySettings.dp_loss_bound
    dp_target_quantile: float = PrivacySettings.dp_target_quantile
    dp_clip_lr: float = PrivacySettings.dp_clip_lr
    dp_clipped_count_stddev: float = PrivacySettings.dp_clipped_count_stddev

    def __post_init__(self) -> None:
        """Check every value; the error names the run-config key."""
        TelemetrySettings(
            **{item.name: getattr(self, item.name) for item in fields(TelemetrySettings)}
        )
        SecAggSettings(**{item.name: getattr(self, item.name) for item in fields(SecAggSettings)})
        if self.privacy.enabled and self.secagg.enabled:
            raise ValueError(
                "run config dp and secure-aggregation are both on: central DP clips each "
                "client's update, which SecAgg+ hides from the server (distributed DP: not yet)"
            )
        try:
            check_dataset(self.dataset)
        except ValueError as error:
            raise ValueError(f"run config {error}") from None
        _check_choice("partitioner", self.partitioner, PARTITIONERS)
        _check_choice("model", self.model, MODELS)
        _check_choice("sampling", self.sampling, ("uniform", "size-proportional"))
        _check_choice("evaluate-split", self.evaluate_split, ("test", "validation"))
        if self.evaluate_split == "validation" and self.validation_fraction == 0:
            raise ValueError(
                "run config evaluate-split is 'validation' but validation-fraction is 0: "
                "set validation-fraction in (0, 1) to carve a validation split"
            )
        checks = {
            "num-server-rounds": self.num_server_rounds >= 1,
            "fraction-train": 0.0 < self.fraction_train <= 1.0,
            "fraction-evaluate": 0.0 <= self.fraction_evaluate <= 1.0,
            "evaluate-every": self.evaluate_every >= 1,
            "min-available-nodes": self.min_available_nodes >= 0,
            "lr": self.lr > 0,
            "local-epochs": self.local_epochs >= 1,
            "local-steps": self.local_steps >= 0,
            "batch-size": self.batch_size >= 1,
            "num-partitions": self.num_partitions >= 1,
            "dirichlet-alpha": self.dirichlet_alpha > 0,
            "shards-per-partition": self.shards_per_partition >= 1,
            "test-fraction": 0.0 < self.test_fraction < 1.0,
            "validation-fraction": 0.0 <= self.validation_fraction < 1.0,
            "round-timeout": self.round_timeout > 0,
            "node-wait-timeout": self.node_wait_timeout > 0,
            "max-failed-rounds": self.max_failed_rounds >= 0,
            "max-abs-weight": self.max_abs_weight > 0,
            "max-loss": self.max_loss > 0,
            "loss-clip-mad": self.loss_clip_mad >= 0,
            "max-client-share": 0.0 < self.max_client_share <= 1.0,
            "max-clients": self.max_clients >= 0,
            "max-num-examples": self.max_num_examples >= 1,
            "num-examples-clip": self.num_examples_clip == 0 or self.num_examples_clip >= 1,
            "max-keys-per-node": self.max_keys_per_node >= 1,
            "count-flag-ratio": self.count_flag_ratio == 0 or self.count_flag_ratio >= 1,
            "seed": 0 <= self.seed <= MAX_SEED,
            "out-dir": bool(self.out_dir.strip()),
        }
        bounds = {
            "num-server-rounds": ">= 1",
            "fraction-train": "in (0, 1]",
            "fraction-evaluate": "in [0, 1]",
            "evaluate-every": ">= 1",
            "min-available-nodes": ">= 0",
            "lr": "> 0",
            "local-epochs": ">= 1",
            "local-steps": ">= 0 (0: local-epochs; else minibatch steps per round)",
            "batch-size": ">= 1",
            "num-partitions": ">= 1",
            "dirichlet-alpha": "> 0",
            "shards-per-partition": ">= 1",
            "test-fraction": "in (0, 1)",
            "validation-fraction": "in [0, 1) (0: none)",
            "round-timeout": "> 0",
            "node-wait-timeout": "> 0",
            "max-failed-rounds": ">= 0 (0: any round that uses no train reply fails the run)",
            "max-abs-weight": "> 0",
            "max-loss": "> 0",
            "loss-clip-mad": ">= 0 (0: off)",
            "max-client-share": "in (0, 1] (1: off)",
            "max-clients": ">= 0 (0: num-partitions)",
            "max-num-examples": ">= 1",
            "num-examples-clip": "0 (off) or >= 1",
            "max-keys-per-node": ">= 1",
            "count-flag-ratio": "0 (off) or >= 1",
            "seed": f"in [0, {MAX_SEED}] (NumPy's seeds)",
            "out-dir": "a folder, not empty (results would land in the working directory)",
        }
        for item in fields(self):
            value = getattr(self, item.name)
            # inf passes every "> 0" check: an infinite lr or an unbounded wait is refused.
            if isinstance(value, float) and not math.isfinite(value):
                key = item.name.replace("_", "-")
                raise ValueError(f"run config {key} must be a finite number, got {value!r}")
        for key, ok in checks.items():
            if not ok:
                value = getattr(self, key.replace("-", "_"))
                raise ValueError(f"run config {key} must be {bounds[key]}, got {value!r}")
        if self.min_available_nodes > self.num_partitions:
            raise ValueError(
                f"run config min-available-nodes ({self.min_available_nodes}) is larger than "
                f"num-partitions ({self.num_partitions}): each SuperNode serves one partition, "
                f"so the run would wait for nodes that cannot exist; lower "
                f"min-available-nodes or raise num-partitions"
            )
        from fairfl.data import dataset_info
        from fairfl.data.groups import group_layout, parse_group_sizes

        # The "groups" partitioner's keys are checked whatever the partitioner (a
        # malformed value is refused, not ignored); only with "groups" must group-sizes
        # add up to num-partitions.
        sizes = parse_group_sizes(self.group_sizes)
        group_layout(
            self.group_sizes,
            self.group_labels,
            self.group_samples_per_class,
            num_partitions=self.num_partitions if self.partitioner == "groups" else sum(sizes),
            num_classes=dataset_info(self.dataset).num_classes,
        )

    @property
    def secagg(self) -> SecAggSettings:
        """The secure-aggregation settings (checked: the error names the key)."""
        return SecAggSettings(
            **{item.name: getattr(self, item.name) for item in fields(SecAggSettings)}
        )

    @property
    def privacy(self) -> PrivacySettings:
        """The differential-privacy settings (checked: the error names the key)."""
        return PrivacySettings(
            **{item.name: getattr(self, item.name) for item in fields(PrivacySettings)}
        )

    @classmethod
    def run_config_keys(cls) -> tuple[str, ...]:
        """The run-config keys of these settings (field names, hyphenated)."""
        return tuple(item.name.replace("_", "-") for item in fields(cls))

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> RunSettings:
        """Parse the keys this dataclass knows; others (rule hyperparameters) are ignored.

        A natural federation (`fairfl.data.sources.NATURAL_FEDERATIONS`, e.g. FLamby's
        four hospitals) takes its own ``num-partitions`` and ``partitioner = "natural"``
        where the run config leaves them out; a value it sets is checked as given.
        """
        values = dataclass_fields_from_config(cls, run_config)
        silos = NATURAL_FEDERATIONS.get(values.get("dataset", cls.dataset))
        if silos is not None:
            values.setdefault("num_partitions", silos)
            values.setdefault("partitioner", "natural")
        return cls(**values)

    def data_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`fairfl.data.load_client_data` except the partition."""
        return {
            "dataset": self.dataset,
            "partitioner": self.partitioner,
            "num_partitions": self.num_partitions,
            "seed": self.seed,
            "dirichlet_alpha": self.dirichlet_alpha,
            "shards_per_partition": self.shards_per_partition,
            "test_fraction": self.test_fraction,
            "validation_fraction": self.validation_fraction,
            "data_root": self.data_root,
            "download": self.download,
            "group_sizes": self.group_sizes,
            "group_labels": self.group_labels,
            "group_samples_per_class": self.group_samples_per_class,
        }


def check_run_config_keys(
    run_config: Mapping[str, Any], rule_keys: Mapping[str, Collection[str]]
) -> None:
    """Refuse a run-config key that neither the run settings nor any rule reads.

    A deployed run's config holds every key of ``[tool.flwr.app.config]``, so any
    rule's keys are accepted whatever ``strategy`` is; a typo (``qfl-q``) or a key
    that nothing reads (``bogus-key``) is an error instead of a run on defaults.

    Parameters
    ----------
    run_config : Mapping[str, Any]
        The run config.
    rule_keys : Mapping[str, Collection[str]]
        Each registered rule's run-config keys, by rule name (the registry sits
        above this module, so the server passes them).

    Raises
    ------
    fairfl.contract.config.UnknownKeyError
        A ``ValueError`` naming each unknown key, the closest valid keys (``did you
        mean 'qffl-q'?``) and the chosen rule's own keys.
    """
    known = set(RunSettings.run_config_keys()).union(*rule_keys.values())
    strategy = run_config.get("strategy", RunSettings.strategy)
    own = rule_keys.get(strategy, ()) if isinstance(strategy, str) else ()
    hint = (
        f"Rule {strategy} reads " + ", ".join(own)
        if own
        else f"Rule {strategy} reads no key of its own"
    )
    check_known_keys(
        run_config,
        known,
        hint=f"{hint}; every run reads the keys of [tool.flwr.app.config] in pyproject.toml.",
    )


@dataclass(frozen=True)
class NodeSettings:
    """What one SuperNode adds through ``--node-config`` (or the simulation engine).

    Attributes
    ----------
    partition_id : int
        This node's data partition.
    num_partitions : int
        How many partitions the data set is cut into.
    data_root : str
        Overrides the run config's ``data-root`` on this device ("" keeps it).
    device : str
        ``auto`` (CUDA when present), ``cpu`` or ``cuda[:N]``.
    """

    partition_id: int
    num_partitions: int
    data_root: str = ""
    device: str = "auto"

    def __post_init__(self) -> None:
        """Check the partition id against the partition count."""
        if not 0 <= self.partition_id < self.num_partitions:
            raise ValueError(
                f"node config partition-id must be in [0, {self.num_partitions}), "
                f"got {self.partition_id}"
            )

    @classmethod
    def from_node_config(
        cls, node_config: Mapping[str, Any], default_partitions: int
    ) -> NodeSettings:
        """Parse ``partition-id`` (required), ``num-partitions``, ``data-root``, ``device``."""
        num_partitions = (
            get_config_value(node_config, "num-partitions", int)
            if "num-partitions" in node_config
            else default_partitions
        )
        return cls(
            partition_id=get_config_value(node_config, "partition-id", int),
            num_partitions=num_partitions,
            data_root=str(node_config.get("data-root", "")),
            device=str(node_config.get("device", "auto")),
        )
