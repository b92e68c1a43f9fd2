"""Rules by name, so a run config can choose one (``strategy = "semivred"``).

Each entry maps the rule's run-config keys to its constructor's keyword arguments. The
run config (``[tool.flwr.app.config]`` in pyproject.toml) must declare every key with
the constructor's default; a test checks that.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairfl.strategies.afl import AFL
from fairfl.strategies.base import FairStrategy
from fairfl.strategies.deltafl import DeltaFL
from fairfl.strategies.equitable import EquitableFL
from fairfl.strategies.fedavg import FedAvg
from fairfl.strategies.fedmgda import FedAvgN, FedMGDAPlain, FedMGDAPlus, MGDAProx
from fairfl.strategies.gifair import GiFair
from fairfl.strategies.propfair import PropFair
from fairfl.strategies.qfedsgd import QFedSGD
from fairfl.strategies.qffl import QFFL
from fairfl.strategies.rcfl import RCFL
from fairfl.strategies.semivred import SemiVRed
from fairfl.strategies.term import TERM
from fairfl.strategies.vred import VRed

#: The run-config key of every rule's ``client_sampling`` (uniform or ∝ n_k).
SAMPLING_KEY = "sampling"


@dataclass(frozen=True)
class RuleSpec:
    """A rule the registry can build.

    Parameters
    ----------
    name : str
        Registry name (the ``strategy`` run-config value).
    strategy : type[FairStrategy]
        The strategy class.
    parameters : Mapping[str, str]
        Run-config key -> constructor keyword, for the rule's hyperparameters.
    """

    name: str
    strategy: type[FairStrategy]
    parameters: Mapping[str, str]

    def defaults(self) -> dict[str, Any]:
        """Constructor defaults of the rule's hyperparameters, by run-config key."""
        signature = inspect.signature(self.strategy.__init__)
        return {
            key: signature.parameters[keyword].default
            for key, keyword in self.parameters.items()
            if signature.parameters[keyword].default is not inspect.Parameter.empty
        }


STRATEGIES: dict[str, RuleSpec] = {
    spec.name: spec
    for spec in (
        RuleSpec("fedavg", FedAvg, {}),
        RuleSpec(
            "rcfl",
            RCFL,
            {
                "rcfl-alpha": "alpha",
                "rcfl-alpha-rule": "alpha_rule",
                "rcfl-mu": "mu",
                "rcfl-eta-init": "eta_init",
                "rcfl-eta-probe": "eta_probe",
                "rcfl-local-steps": "local_steps",
                "rcfl-batch-size": "batch_size",
                "rcfl-eta-lr-scale": "eta_lr_scale",
                "rcfl-sampling": "sampling",
                "rcfl-seed": "seed",
            },
        ),
        RuleSpec("afl", AFL, {"afl-lambda-lr": "lambda_lr", "afl-variant": "variant"}),
        RuleSpec("term", TERM, {"term-alpha": "alpha"}),
        RuleSpec("gifair", GiFair, {"gifair-coeff": "coeff"}),
        RuleSpec("deltafl", DeltaFL, {"deltafl-alpha": "alpha"}),
        RuleSpec(
            "propfair",
            PropFair,
            {"propfair-m": "M", "propfair-epsilon": "epsilon", "propfair-huber": "huber"},
        ),
        RuleSpec(
            "equitable",
            EquitableFL,
            {
                "equitable-num-clusters": "num_clusters",
                "equitable-scope": "scope",
                "equitable-affinity": "affinity",
                "equitable-intra-cluster": "intra_cluster",
                "equitable-proximal-mu": "proximal_mu",
                "equitable-server-lr": "server_lr",
                "equitable-max-client-weight": "max_client_weight",
                "equitable-seed": "seed",
                "equitable-activation-source": "activation_source",
                "equitable-activation-max-samples": "activation_max_samples",
                "equitable-activation-min-samples": "activation_min_samples",
                "equitable-activation-projection-dim": "activation_projection_dim",
                "equitable-activation-dp-clip": "activation_dp_clip",
                "equitable-activation-dp-noise": "activation_dp_noise",
            },
        ),
        RuleSpec(
            "qffl",
            QFFL,
            {"qffl-q": "q", "qffl-weighting": "weighting", "lr": "client_learning_rate"},
        ),
        RuleSpec(
            "qfedsgd",
            QFedSGD,
            {
                "qffl-q": "q",
                "qffl-weighting": "weighting",
                "qfedsgd-lipschitz": "lipschitz",
                "lr": "client_learning_rate",
            },
        ),
        RuleSpec(
            "vred",
            VRed,
            {"vred-beta": "beta", "vred-clip-negative": "clip_negative_weights"},
        ),
        RuleSpec(
            "semivred",
            SemiVRed,
            {"semivred-beta": "beta", "semivred-clip-negative": "clip_negative_weights"},
        ),
        RuleSpec(
            "fedmgda",
            FedMGDAPlus,
            {
                "fedmgda-epsilon": "epsilon",
                "fedmgda-global-lr": "global_lr",
                "fedmgda-global-lr-decay": "global_lr_decay",
                "fedmgda-decay-every": "decay_every",
                "fedmgda-normalize": "normalize",
                "fedmgda-prior": "prior",
                "fedmgda-proximal-mu": "proximal_mu",
                "fedmgda-qp-solver": "qp_solver",
            },
        ),
        RuleSpec(
            "fedavg-n",
            FedAvgN,
            {
                "fedmgda-global-lr": "global_lr",
                "fedmgda-global-lr-decay": "global_lr_decay",
                "fedmgda-decay-every": "decay_every",
                "fedmgda-prior": "prior",
            },
        ),
        RuleSpec("fedmgda-plain", FedMGDAPlain, {}),
        RuleSpec(
            "mgda-prox",
            MGDAProx,
            {
                "mgda-prox-mu": "proximal_mu",
                "fedmgda-epsilon": "epsilon",
                "fedmgda-global-lr": "global_lr",
                "fedmgda-global-lr-decay": "global_lr_decay",
                "fedmgda-decay-every": "decay_every",
                "fedmgda-prior": "prior",
                "fedmgda-qp-solver": "qp_solver",
            },
        ),
    )
}


def build_strategy(name: str, run_config: Mapping[str, Any], **common: Any) -> FairStrategy:
    """Build the rule ``name`` with its hyperparameters from ``run_config``.

    Parameters
    ----------
    name : str
        A key of :data:`STRATEGIES`.
    run_config : Mapping[str, Any]
        The run config; keys the rule does not use are ignored. Its ``sampling``
        (``"uniform"`` or ``"size-proportional"``) is every rule's ``client_sampling``
        (:class:`~fairfl.strategies.base.FairStrategy`).
    **common
        Keyword arguments every rule takes (``fraction_train``, ``min_available_nodes``).

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the valid names) or a hyperparameter
        is out of range: the rule's constructor names the keyword and the bound, and
        the message starts with the run-config key (``run config term-alpha (rule
        term): alpha must be >= 0, got -1.0``).
    """
    if name not in STRATEGIES:
        raise ValueError(
            f"run config strategy must be one of {tuple(sorted(STRATEGIES))}, got {name!r}"
        )
    spec = STRATEGIES[name]
    kwargs = {kw: run_config[key] for key, kw in spec.parameters.items() if key in run_config}
    if SAMPLING_KEY in run_config:
        kwargs["client_sampling"] = run_config[SAMPLING_KEY]
    try:
        return spec.strategy(**common, **kwargs)
    except ValueError as error:
        # The constructor names its keyword ("alpha must be >= 0, got -1.0"), or an
        # option object its field ("max_samples" of activation_max_samples); name the
        # run-config key the value came from too.
        message = str(error)
        first = message.split(" ", 1)[0]
        if first == "client_sampling" and SAMPLING_KEY in run_config:
            raise ValueError(f"run config {SAMPLING_KEY} (rule {name}): {message}") from error
        for key, keyword in spec.parameters.items():
            if key in run_config and first in (keyword, keyword.split("_", 1)[-1]):
                raise ValueError(f"run config {key} (rule {name}): {message}") from error
        raise
