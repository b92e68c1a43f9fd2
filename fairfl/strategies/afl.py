"""AFL: Agnostic Federated Learning, as Mohri et al. run it, or as the PropFair code does.

Mohri, Sivek and Suresh, *Agnostic Federated Learning*, ICML 2019,
https://arxiv.org/abs/1902.00146. Objective (Malekmohammadi & Yu, Table 1):
``min_θ max_{λ∈Δ_n} Σ_i λ_i f_i(θ)``, solved by projected descent in θ and projected
ascent in λ. Every round the clients report ``f_i(θ^t)`` and train locally, and the
server takes one ascent step on λ:

    λ^{t} = Π_Δ( λ^{t-1} + γ_λ · [f_1(θ^t), …, f_n(θ^t)] )                (projected ascent)

``Π_Δ`` is the Euclidean projection onto the probability simplex (Wang and
Carreira-Perpiñán, arXiv:1309.1541, Algorithm 1). The two variants (``variant``):

``"mohri"`` (default), Stochastic-AFL (Algorithm 1 of Mohri et al.): λ starts uniform,
``λ^0 = 1/n``, and the algorithm's output weights are the running average of the
iterates, ``λ^A = (1/t) Σ_{s=1}^{t} λ^s``; round t aggregates the local models with them:

    θ^{t+1} = Σ_i λ^A_i θ_i^{t+1}

``"propfair-code"``: the server rule of the PropFair/Semi-VRed reference code (``AFL`` in
``huawei-noah/Federated-Learning/FairFL/algs/algorithms.py``; docs/specs/spec-vred-qffl.md §6),
probably what Malekmohammadi & Yu's AFL rows ran: λ starts at the data shares, ``λ^0 = p``, and
round t aggregates with the last iterate, ``θ^{t+1} = Σ_i λ^t_i θ_i^{t+1}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairfl.strategies.afl_lambdas import (  # noqa: F401 (the math, re-exported)
    VARIANTS,
    ClientLambdas,
    Variant,
    admit_clients,
    afl_lambda_update,
    project_to_simplex,
    running_average,
)
from fairfl.strategies.core.params import RuleParameters, choice, real
from fairfl.strategies.core.reweighted import LossRule, TrainRound, Weights


@dataclass(frozen=True)
class AFLParameters(RuleParameters):
    """AFL's hyperparameters: the λ step size and the variant (see :class:`AFL`)."""

    # Malekmohammadi & Yu (App. B.2) fixes γ_λ = 0.1 without a grid, so `fairfl compare
    # --tune` keeps it (tune=()); the grid is Hu et al.'s (FedMGDA+, Table 5), where AFL is
    # a baseline: `--tune-grid afl:afl-lambda-lr=0.01,0.1,0.2,0.5` searches it.
    lambda_lr: float = real(
        0.1, key="afl-lambda-lr", lower=0.0, grid=(0.01, 0.1, 0.2, 0.5), tune=()
    )
    variant: Variant = choice("mohri", VARIANTS, key="afl-variant")


class AFL(ClientLambdas, LossRule):
    """Agnostic FL: a projected-ascent weight λ per client, kept across rounds.

    Each client reports f_i(θ^t), measured before local training, under ``train_loss_key``
    (default ``loss-before-training``). The server raises each participant's λ_i by
    ``lambda_lr · f_i``, projects λ onto the simplex, and averages the local models with
    the running average of the λ iterates (``"mohri"``) or the new λ
    (``"propfair-code"``).

    Parameters
    ----------
    lambda_lr : float (default: 0.1)
        γ_λ, the step size of the λ ascent (Malekmohammadi & Yu, App. B.2; ``step_size_lambda``
        in the PropFair code). 0 keeps λ at its start value: the plain mean of the
        local models (``"mohri"``) or FedAvg (``"propfair-code"``).
    variant : {"mohri", "propfair-code"} (default: "mohri")
        ``"mohri"``: Stochastic-AFL, Algorithm 1 of Mohri et al.: ``λ^0`` uniform, the
        round's weights are the running average ``λ^A`` of the iterates (the
        algorithm's output weights). ``"propfair-code"``: the PropFair reference code's
        rule, ``λ^0 = p`` (data shares) and the last iterate as the weights.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``lambda_lr`` is not a finite number >= 0 or ``variant`` is unknown.

    Notes
    -----
    ``"mohri"``. Algorithm 1 steps θ and λ from the same ``(θ^{t-1}, λ^{t-1})`` and
    returns the averages ``θ^A`` and ``λ^A`` of the iterates; it runs one gradient step
    per round. Here clients train locally, and round t's global model is the
    ``λ^A``-weighted average of their models, λ^A taken after the round's λ step
    (:func:`running_average`): the departure is that θ itself is not averaged over
    rounds (each round's model is the one evaluated and sent).

    ``"propfair-code"``. Choices where Malekmohammadi & Yu are silent follow that code (spec
    §15.14): λ^0 = p, the λ update comes *before* the aggregation of the same round, the
    output model is the last iterate, and the projection is the sort-based one.

    λ (and λ^A) is server state keyed by the stable client key (the partition id,
    :mod:`fairfl.contract.clients`), not the node id. It is kept for every client ever
    seen, so a client that leaves and returns keeps its λ, also under a new node id;
    :meth:`state_dict` and :meth:`load_state_dict` carry it through a checkpoint.

    Partial participation (not in either paper's runs, which use full participation):
    only the participants' entries are raised by ``γ_λ f_i``, then the *whole* vector
    over all known clients is projected (spec §6, [REC]); the round's aggregation
    weights are the participants' entries renormalised to sum 1. Should every
    participant's weight be 0, the round falls back to FedAvg weights and logs a
    WARNING.

    A client seen for the first time enters λ (and λ^A) at its start value over the
    grown set: ``1/N`` (``"mohri"``) or ``n_k / N`` with N the summed training-set
    sizes of all known clients (``"propfair-code"``), the existing entries scaled by
    ``N_before / N`` (:func:`~fairfl.strategies.afl_lambdas.admit_clients`). λ stays on the
    simplex and equals its
    start value over all known clients while ``lambda_lr = 0``, under any participation
    pattern; under full participation this is exactly λ^0.
    """

    rule_name = "AFL"
    registry_name = "afl"
    Parameters = AFLParameters
    params: AFLParameters

    def settings(self) -> dict[str, Any]:
        """γ_λ, the variant, the λ initialisation and the weights used."""
        return {**self.params.settings(), **self.lambda_settings()}

    def weights(self, round: TrainRound) -> Weights:
        """Take the λ step with the round's losses; the participants' share of λ^A or λ."""
        clients = [self.client_key(reply) for reply in round.replies]
        lr = self.params.lambda_lr
        used, known, state = self.step(clients, round.num_examples, round.loss_values, lr)
        self.state_updates.set(self, **state)
        weights, mass = self.participant_share(round, [used[client] for client in clients])
        return weights, {"afl-known-clients": known, "afl-participant-mass": mass}
