"""Run settings parsed from ``context.run_config`` into checked, frozen dataclasses.

The ServerApp and the ClientApp read the same run config; :class:`RunSettings` is what
both need (data, model, training), :class:`NodeSettings` what one SuperNode adds
(its partition, data root and device).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any, ClassVar

from fairfl.contract.config import (
    check_known_keys,
    dataclass_fields_from_config,
    get_config_value,
)
from fairfl.contract.options import (
    EVALUATE_EVERY,
    FRACTION_EVALUATE,
    FRACTION_TRAIN,
    LOSS_CLIP_MAD,
    MAX_ABS_WEIGHT,
    MAX_CLIENT_SHARE,
    MAX_LOSS,
    MAX_LOSS_SPEC,
    MIN_AVAILABLE_NODES,
    SAMPLING,
)
from fairfl.data import PARTITIONERS
from fairfl.data.sources import NATURAL_FEDERATIONS, check_dataset
from fairfl.fields import Fields, ParameterError, Spec, choice, declared, integer, real
from fairfl.models.names import MODELS
from fairfl.privacy.config import NOISE_RANGE, PrivacySettings
from fairfl.secagg.config import SecAggSettings
from fairfl.telemetry.config import TelemetrySettings

#: Seeds are in [0, 2^32): NumPy's global seed (np.random.seed) takes no other.
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class RunSettings(Fields):
    """Settings of a run shared by server and clients (run-config keys hyphenated).

    ``strategy`` is checked where the rule is built
    (:func:`fairfl.strategies.registry.build_strategy`): the registry sits above this
    module, which clients import without the strategies.
    """

    states_type: ClassVar[bool] = False  # a run config's types are checked when parsed

    strategy: str = "fedavg"
    num_server_rounds: int = integer(20, key="num-server-rounds", lower=1)
    fraction_train: float = declared(1.0, FRACTION_TRAIN)
    sampling: str = declared("uniform", SAMPLING)
    fraction_evaluate: float = declared(1.0, FRACTION_EVALUATE)
    evaluate_every: int = declared(1, EVALUATE_EVERY)
    min_available_nodes: int = declared(0, MIN_AVAILABLE_NODES)
    lr: float = real(0.1, key="lr", lower=0.0, lower_open=True)
    local_epochs: int = integer(2, key="local-epochs", lower=1)
    local_steps: int = integer(
        0, key="local-steps", lower=0, note=" (0: local-epochs; else minibatch steps per round)"
    )
    batch_size: int = integer(32, key="batch-size", lower=1)
    dataset: str = "digits"
    partitioner: str = choice("dirichlet", PARTITIONERS, key="partitioner")
    num_partitions: int = integer(20, key="num-partitions", lower=1)
    dirichlet_alpha: float = real(0.3, key="dirichlet-alpha", lower=0.0, lower_open=True)
    shards_per_partition: int = integer(2, key="shards-per-partition", lower=1)
    test_fraction: float = real(
        0.3, key="test-fraction", lower=0.0, upper=1.0, lower_open=True, upper_open=True, span=True
    )
    validation_fraction: float = real(
        0.0, key="validation-fraction", lower=0.0, upper=1.0, upper_open=True, span=True,
        note=" (0: none)",
    )  # fmt: skip
    evaluate_split: str = choice("test", ("test", "validation"), key="evaluate-split")
    model: str = choice("mlp", MODELS, key="model")
    seed: int = integer(0, key="seed", lower=0, upper=MAX_SEED, note=" (NumPy's seeds)")
    out_dir: str = "outputs/latest"
    data_root: str = ""
    download: bool = False
    checkpoint: bool = True
    resume_from: str = ""
    resume_force: bool = False
    overwrite: bool = False
    round_timeout: float = real(3600.0, key="round-timeout", lower=0.0, lower_open=True)
    node_wait_timeout: float = real(120.0, key="node-wait-timeout", lower=0.0, lower_open=True)
    max_failed_rounds: int = integer(
        0,
        key="max-failed-rounds",
        lower=0,
        note=" (0: any round that uses no train reply fails the run)",
    )
    max_abs_weight: float = declared(1e6, replace(MAX_ABS_WEIGHT, optional=False, note=""))
    max_loss: float = declared(MAX_LOSS, MAX_LOSS_SPEC)
    # The rules' bounds (fairfl.contract.options), said with what the ends mean.
    loss_clip_mad: float = declared(0.0, replace(LOSS_CLIP_MAD, note=" (0: off)"))
    max_client_share: float = declared(1.0, replace(MAX_CLIENT_SHARE, span=True, note=" (1: off)"))
    max_clients: int = integer(0, key="max-clients", lower=0, note=" (0: num-partitions)")
    max_num_examples: int = integer(10**9, key="max-num-examples", lower=1)
    num_examples_clip: float = real(0.0, key="num-examples-clip", lower=1.0, off=0.0)
    client_registration: str = ""
    max_keys_per_node: int = integer(1, key="max-keys-per-node", lower=1)
    count_flag_ratio: float = real(100.0, key="count-flag-ratio", lower=1.0, off=0.0)
    node_auth: bool = False
    group_sizes: str = "4,6"
    group_labels: str = ""
    group_samples_per_class: int = 0
    # Telemetry sinks (fairfl.telemetry.config.TelemetrySettings, which checks them).
    telemetry: str = TelemetrySettings.telemetry
    telemetry_dir: str = TelemetrySettings.telemetry_dir
    telemetry_host: str = TelemetrySettings.telemetry_host
    telemetry_port: int = declared(
        TelemetrySettings.telemetry_port, TelemetrySettings.specs()["telemetry_port"]
    )
    telemetry_max_clients: int = declared(
        TelemetrySettings.telemetry_max_clients,
        TelemetrySettings.specs()["telemetry_max_clients"],
    )
    telemetry_wandb_online: bool = TelemetrySettings.telemetry_wandb_online
    telemetry_key: str = declared(
        TelemetrySettings.telemetry_key, TelemetrySettings.specs()["telemetry_key"]
    )
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
    dp_accuracy_noise_multiplier: float = PrivacySettings.dp_accuracy_noise_multiplier
    dp_loss_bound: float = PrivacySettings.dp_loss_bound
    dp_target_quantile: float = PrivacySettings.dp_target_quantile
    dp_clip_lr: float = PrivacySettings.dp_clip_lr
    dp_clipped_count_stddev: float = PrivacySettings.dp_clipped_count_stddev
    dp_dropout_tolerance: float = PrivacySettings.dp_dropout_tolerance

    @classmethod
    def subject(cls, name: str, spec: Spec) -> str:
        """A message is about the run-config key: ``run config lr must be > 0, got -1.0``."""
        return f"run config {spec.key}"

    def check(self) -> None:
        """Check what no one field's bound says; the error names the run-config key.

        Each field's bound is its declaration (:mod:`fairfl.fields`), checked first.
        """
        TelemetrySettings(
            **{item.name: getattr(self, item.name) for item in fields(TelemetrySettings)}
        )
        SecAggSettings(**{item.name: getattr(self, item.name) for item in fields(SecAggSettings)})
        privacy, secagg = self.privacy, self.secagg
        if privacy.dp == "distributed" and not secagg.enabled:
            raise ValueError(
                "run config dp='distributed' noises what SecAgg+ masks: it needs "
                "secure-aggregation='secagg+' (without it: dp='central-fixed' or 'local')"
            )
        if privacy.enabled and privacy.dp != "distributed" and secagg.enabled:
            raise ValueError(
                f"run config dp and secure-aggregation are both on: dp={privacy.dp!r} clips "
                "each client's update, which SecAgg+ hides from the server; use "
                "dp='distributed' (the clients clip and noise before masking)"
            )
        reach = privacy.dp_clipping_norm * (1 + NOISE_RANGE * privacy.dp_noise_multiplier)
        if privacy.dp == "distributed" and secagg.secagg_clipping_range < reach:
            raise ValueError(
                f"run config secagg-clipping-range ({secagg.secagg_clipping_range:g}) must be "
                f">= dp-clipping-norm (1 + {NOISE_RANGE:g} dp-noise-multiplier) = {reach:g} "
                "under dp='distributed', so that the clients' noise is not clipped"
            )
        try:
            check_dataset(self.dataset)
        except ValueError as error:
            raise ValueError(f"run config {error}") from None
        if self.evaluate_split == "validation" and self.validation_fraction == 0:
            raise ValueError(
                "run config evaluate-split is 'validation' but validation-fraction is 0: "
                "set validation-fraction in (0, 1) to carve a validation split"
            )
        for item in fields(self):
            value = getattr(self, item.name)
            # inf passes every "> 0" check: an infinite value of a key checked elsewhere
            # (secure aggregation's, DP's) is refused here.
            if isinstance(value, float) and not math.isfinite(value):
                key = item.name.replace("_", "-")
                raise ParameterError(
                    item.name, f"run config {key} must be a finite number, got {value!r}", key
                )
        if not self.out_dir.strip():
            raise ParameterError(
                "out_dir",
                "run config out-dir must be a folder, not empty (results would land in the "
                f"working directory), got {self.out_dir!r}",
                "out-dir",
            )
        if self.fraction_train == 0 and self.privacy.enabled:
            raise ParameterError(
                "fraction_train",
                "run config fraction-train is 0 with dp on: each round then trains one node "
                "(Flower's min_train_nodes), which the accountant's sampling rate cannot "
                "describe; set fraction-train in (0, 1]",
                "fraction-train",
            )
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
    def run_config_keys(cls) -> dict[str, str]:
        """Run-config key -> field name, for every field (declared or plain; hyphenated)."""
        return {item.name.replace("_", "-"): item.name for item in fields(cls)}

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
class NodeSettings(Fields):
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

    states_type: ClassVar[bool] = False  # a node config's types are checked when parsed

    partition_id: int = integer(MISSING, key="partition-id", lower=0)
    num_partitions: int = declared(MISSING, RunSettings.specs()["num_partitions"])
    data_root: str = ""
    device: str = "auto"

    @classmethod
    def subject(cls, name: str, spec: Spec) -> str:
        """A message is about the node-config key: ``node config partition-id ...``."""
        return f"node config {spec.key}"

    def check(self) -> None:
        """Check the partition id against the partition count."""
        if not 0 <= self.partition_id < self.num_partitions:
            raise ParameterError(
                "partition_id",
                f"node config partition-id must be in [0, {self.num_partitions}), "
                f"got {self.partition_id}",
                "partition-id",
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
