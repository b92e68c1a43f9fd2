"""RC-FL (rFedFair): robust client-weighted FL with a dual variable η.

"Fairness-aware Federated Learning: A Robust Approach", anonymous ICML submission
(the RC-FL paper; docs/specs/spec-rcfl.md). RC-FL minimises the
worst-case mixture of client losses over the capped simplex ``λ_i = p_i q_i``,
``0 <= q_i <= 1/α_i`` (Def. 1, eq. (1)), through its variational form (Lemma 1, eq. (2))

    f_α(ω) = min_η  η + Σ_i (p_i/α_i) (f_i(ω) − η)_+,

smoothed with the softplus φ_μ (eq. (5)). rFedFair (Algorithm 1) is FedAvg on the pair
(ω, η): each client takes κ simultaneous gradient steps on its own
``(1/α_i) φ_μ(f̂ⁱ(ω) − η) + η`` (:mod:`fairfl.client.rcfl`) and the server averages the
new ω and η, weighted by ``p_i = n_i / n`` (full participation) or ``count_i / K`` over K
draws with replacement ∝ p_i (partial participation, Theorem 2).

The fairness weighting is implicit in the client gradient,
``q_i = σ((f̂ⁱ − η)/μ)/α_i``; the server reports the q_i it infers from each client's
loss before training (``train_loss_key``) as diagnostics. α_i = 1 for all clients is
FedAvg, α_i = p_i is AFL and a shared α = χ is CVaR_{1−χ} of the client losses (§3.1).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from numpy.typing import NDArray

from fairfl.contract import (
    ModelLayout,
    ReplyError,
    TrainReply,
    counts_from_state,
    keys,
    sorted_client_keys,
)
from fairfl.fields import ParameterError
from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core import intake
from fairfl.strategies.core._checks import check_real
from fairfl.strategies.core.aggregation import sample_weights
from fairfl.strategies.core.base import Aggregate, ConfigValue, RejectedReplies
from fairfl.strategies.core.params import RuleParameters, choice, flag, integer, real
from fairfl.strategies.core.reweighted import ReweightedStrategy
from fairfl.strategies.core.sampling import RCFL_SAMPLINGS, RCFLSampling, sample_nodes
from fairfl.strategies.rcfl_dual import (
    ALPHA_RULES,
    AlphaRule,
    aggregate_eta,
    client_alphas,
    draw_with_replacement,
    eta_reach,
    round_diagnostics,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RCFLParameters(RuleParameters):
    """RC-FL's hyperparameters (see :class:`RCFL`)."""

    alpha: float = real(0.5, key="rcfl-alpha", lower=0.0, lower_open=True, upper=1.0)
    mu: float = real(0.05, key="rcfl-mu", lower=0.0, lower_open=True)
    eta_init: float = real(0.0, key="rcfl-eta-init")
    eta_probe: bool = flag(False, key="rcfl-eta-probe")
    local_steps: int = integer(5, key="rcfl-local-steps", lower=1)
    batch_size: int = integer(0, key="rcfl-batch-size", lower=0)
    eta_lr_scale: float = real(1.0, key="rcfl-eta-lr-scale", lower=0.0, lower_open=True)
    alpha_rule: AlphaRule = choice("shared", ALPHA_RULES, key="rcfl-alpha-rule")
    sampling: RCFLSampling = choice("flower", RCFL_SAMPLINGS, key="rcfl-sampling")
    seed: int = integer(0, key="rcfl-seed", lower=0)
    check_eta_reach: bool = flag(False, key=None)


class RCFL(ReweightedStrategy):
    """RC-FL / rFedFair: average the clients' (ω, η) after κ joint local steps.

    Each round the server sends ω^t, η^t and a per-client α_i (one ConfigRecord per
    node); each client replies its new ω and η (``rcfl-eta``, required). The server sets
    ``ω^{t+1} = Σ_j W_j ω_j`` and ``η^{t+1} = Σ_j W_j η_j``.

    Parameters
    ----------
    alpha : float (default: 0.5)
        α ∈ (0, 1], the conservativeness of Def. 1: a client's mixture weight may be up
        to ``1/α_i`` times its data share. 1 is FedAvg; smaller is fairer. The paper
        reports no values; 0.5 is the spec's default when nothing is known.
    mu : float (default: 0.05)
        μ > 0, the softplus temperature of eq. (5), in loss units (smoothing bias
        ``<= μ τ_α log 2``, Lemma 2).
    eta_init : float (default: 0.0)
        η₀, Algorithm 1's initial dual variable (value not given in the paper; 0 is the
        fallback of Remark 2).
    eta_probe : bool (default: False)
        Not in the paper (docs/specs/spec-rcfl.md §4.6), off by default. ``True``: after the first
        round that updates the model, replace η by the smoothed optimum η*_μ of the
        clients' reported losses before training (``train_loss_key``) instead of
        Algorithm 1's average of the local η_j; later rounds average as the paper.
        It spares the rounds η needs to climb from η₀ to the loss scale.
    local_steps : int (default: 5)
        κ >= 1, local gradient steps per round (κ = 5 in all the paper's runs).
    batch_size : int (default: 0)
        Examples per local step; 0 is the whole local training split, the paper's
        gradient descent.
    eta_lr_scale : float (default: 1.0)
        β_η / β > 0: the η step size relative to the model step size ``lr`` (1 in
        Algorithm 1).
    alpha_rule : {"shared", "uniform-cap"} (default: "shared")
        How α_i follows from ``alpha`` and the data shares ``p_i = n_i / n``:
        ``"shared"`` gives every client α (CVaR_{1−α}); ``"uniform-cap"`` sets
        ``α_i = α n p_i`` so that every client's mixture weight is capped at the same
        ``1/(α n)``, whatever its size. Both are clipped to ``[p_i, 1]`` (Def. 1).
    sampling : {"flower", "with-replacement"} (default: "flower")
        ``"flower"``: Flower's FedAvg sampling (uniform, without replacement, by
        ``fraction_train``), weights ``n_i / Σ n`` over the round's replies (the paper's
        full-participation scheme at ``fraction_train = 1``). ``"with-replacement"``:
        K draws with replacement ∝ p_i, K from ``fraction_train`` as Flower computes its
        sample size, each drawn client trained once and weighted ``count_i / K``
        (the paper's partial-participation scheme, Theorem 2).
    seed : int (default: 0)
        Seeds the with-replacement draws.
    check_eta_reach : bool (default: False)
        Not in the paper. Drop a reply whose ``rcfl-eta`` is outside what κ plain SGD
        steps of size β_η from η^t can reach
        (:func:`~fairfl.strategies.rcfl_dual.eta_reach`): fairfl's client
        (``fair_train``, ``train_rcfl_loader``) takes exactly those steps, so a value
        outside is not the result of the protocol. Only when the round's config has
        ``lr`` (β_η is then sent); off for apps that step η with another optimiser.
        Every ``rcfl-eta`` must in any case lie in ``[-max_loss, max_loss]``.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`, except
        ``client_sampling``, which must stay ``"uniform"``: RC-FL samples by its own
        ``sampling`` (``"with-replacement"`` is the paper's draw ∝ p_i).

    Raises
    ------
    ValueError
        If a hyperparameter is out of range (the message names it), or
        ``client_sampling`` is not ``"uniform"``.

    Notes
    -----
    η^{t+1} is Algorithm 1's average ``Σ_j W_j η_j`` of the clients' η_j, with the
    weights W_j of ω (:func:`~fairfl.strategies.rcfl_dual.aggregate_eta`), unless ``eta_probe``.

    p_i needs every n_i before the first draw (docs/specs/spec-rcfl.md §9.9). The counts are learnt
    from the replies: with ``sampling="with-replacement"`` a round in which no count is
    known yet (the first) is a full-participation round weighted by ``n_i / Σ n``, and
    later rounds draw among the connected nodes whose count is known (a node that never
    replied is not drawn). Until the counts are known the α rule cannot use p: round 1
    sends the shared α to every client, unclipped from below.

    With ``sampling="flower"`` and ``fraction_train < 1`` the weights are ``n_i`` over
    the participants, as in FedAvg; the paper's theory covers only the with-replacement
    scheme (Theorem 2). Dropped replies are left out and the weights renormalised over
    the rest (docs/specs/spec-rcfl.md §9.19).

    The q_i in the diagnostics are computed by the server from the ``train_loss_key`` loss (f̂ⁱ at
    ω^t on the whole local split) and η^t: the gate of the client's first full-batch
    step. The output model is the last iterate (docs/specs/spec-rcfl.md §9.10).
    """

    required_train_metrics = (keys.RCFL_ETA,)
    rule_name = "RC-FL"
    registry_name = "rcfl"
    #: Under SecAgg+ (issue #48): W_j depends on no loss (the counts, or the server's
    #: own draws), so the server sends it and each client masks W_j Δω_j; η_j is a
    #: scalar reported in the clear, averaged with W by :meth:`aggregate_scalars`.
    secure_form = SecureForm.one_round(
        "broadcast",
        "the server sees n_k and η_k in the clear (W from the counts or its own draws)",
    )
    Parameters = RCFLParameters
    params: RCFLParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.client_sampling != "uniform":
            raise ParameterError(
                "client_sampling",
                f"client_sampling must be 'uniform' for RC-FL, got {self.client_sampling!r}: "
                "RC-FL draws clients itself; sampling='with-replacement' (run config "
                "rcfl-sampling) is the paper's draw with probability p_i",
                "sampling",
            )
        params = self.params
        self.alpha, self.mu, self.eta_init = params.alpha, params.mu, params.eta_init
        self.eta_lr_scale = params.eta_lr_scale
        self.check_eta_reach = params.check_eta_reach
        self.eta_probe = params.eta_probe
        self.local_steps = params.local_steps
        self.batch_size = params.batch_size
        self.alpha_rule: AlphaRule = params.alpha_rule
        self.sampling: RCFLSampling = params.sampling
        self.seed = params.seed
        #: η^t, the global dual variable (strategy state, see :meth:`state_dict`).
        self.eta = self.eta_init
        #: n_i by client key (:mod:`fairfl.contract.clients`), from each client's latest
        #: reply.
        self.client_counts: dict[str, int] = {}
        self.probe_done = not params.eta_probe
        self._rng = np.random.default_rng(params.seed)
        #: Each drawn round's draws with replacement by client key, for its W_j: a record
        #: of what the round sent, as α_i and β_η are read from its messages (:meth:`_sent`).
        self.draws: dict[int, dict[str, int]] = {}

    def settings(self) -> dict[str, Any]:
        """α, μ, η₀, κ and the sampling scheme."""
        return {
            "alpha": self.alpha,
            "alpha_rule": self.alpha_rule,
            "mu": self.mu,
            "eta_init": self.eta_init,
            "eta_probe": self.eta_probe,
            "local_steps": self.local_steps,
            "batch_size": self.batch_size or "full",
            "eta_lr_scale": self.eta_lr_scale,
            "sampling": self.sampling,
            "seed": self.seed,
            "check_eta_reach": self.check_eta_reach,
        }

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """JSON-able server state: η, the known counts, the probe flag, the RNG."""
        return {
            "eta": self.eta,
            "probe_done": self.probe_done,
            "counts": {
                key: self.client_counts[key] for key in sorted_client_keys(self.client_counts)
            },
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the state written by :meth:`state_dict`.

        Raises
        ------
        ValueError
            If ``eta`` is not a finite number, ``probe_done`` not a bool, ``counts`` not
            a mapping of client keys to ints >= 1, or ``rng`` not a generator
            state. The current state is left unchanged then.
        """
        eta = check_real("state['eta']", state.get("eta"))
        probe_done = state.get("probe_done")
        if not isinstance(probe_done, bool):
            raise ValueError(f"state['probe_done'] must be a bool, got {probe_done!r}")
        counts = counts_from_state(state.get("counts"))
        rng = np.random.default_rng()
        try:
            # The setter checks the value: a wrong one (None included) raises here.
            rng.bit_generator.state = cast("dict[str, Any]", state.get("rng"))
        except (TypeError, ValueError, KeyError):
            raise ValueError("state['rng'] must be a numpy PCG64 generator state") from None
        self.eta, self.probe_done, self.client_counts, self._rng = eta, probe_done, counts, rng

    # ------------------------------------------------------------------ training
    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Return the RC-FL keys every client gets: η^t, μ, κ and the batch size."""
        return {
            keys.RCFL_ETA: self.eta,
            keys.RCFL_MU: self.mu,
            keys.RCFL_LOCAL_STEPS: self.local_steps,
            keys.RCFL_BATCH_SIZE: self.batch_size,
        }

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample nodes and send each its own config (η^t and its α_i).

        Flower's FedAvg sends one RecordDict to all nodes; RC-FL needs a per-client α_i,
        so this builds one message per node. The caller's config is not changed.
        """
        server_round += self.round_offset
        self.current_arrays = arrays
        self.in_flight = []
        if self.fraction_train == 0.0:
            self.sampled.setdefault(server_round, {})["train"] = 0
            return []
        node_ids = self._sample(grid, server_round)
        base = dict(config)
        base[keys.SERVER_ROUND] = server_round
        base.update(self.train_config(server_round))
        lr = base.get(keys.LR)
        if isinstance(lr, int | float) and not isinstance(lr, bool):
            base[keys.RCFL_LR_ETA] = self.eta_lr_scale * float(lr)
        alphas = self._alphas_for(node_ids, self._keys_of(grid, node_ids))
        messages = []
        for node_id in node_ids:
            node_config = ConfigRecord({**base, keys.RCFL_ALPHA: alphas[node_id]})
            content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: node_config})
            messages.append(
                Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node_id)
            )
        self.sampled.setdefault(server_round, {})["train"] = len(messages)
        self.in_flight = messages
        logger.debug("configure_train: round %d alphas %s", server_round, alphas)
        return messages

    def _sample(self, grid: Grid, server_round: int) -> list[int]:
        num_nodes = int(len(list(grid.get_node_ids())) * self.fraction_train)
        sample_size = max(num_nodes, self.min_train_nodes)
        if self.sampling == "flower":
            node_ids, all_nodes = sample_nodes(
                grid,
                self.min_available_nodes,
                sample_size,
                timeout=self.sample_timeout,
                hook="configure_train",
            )
            logger.info(
                "configure_train: Sampled %s nodes (out of %s)", len(node_ids), len(all_nodes)
            )
            return sorted(node_ids)
        # Waits for min_available_nodes like Flower's sampler, then draws itself (K may
        # exceed the number of nodes: draws are with replacement).
        _, all_nodes = sample_nodes(
            grid, self.min_available_nodes, 0, timeout=self.sample_timeout, hook="configure_train"
        )
        # Draw over client keys in their stable order (a resumed run has new node ids).
        node_of: dict[str, int] = {}
        for node, key in sorted(self._keys_of(grid, all_nodes).items(), reverse=True):
            node_of[key] = node  # two nodes with one key: the lower node id is drawn
        known = [k for k in sorted_client_keys(node_of) if k in self.client_counts]
        if not known:
            logger.info(
                "configure_train: n_i unknown; full participation of %d nodes to learn them",
                len(all_nodes),
            )
            return sorted(all_nodes)
        if len(known) < len(all_nodes):
            logger.info(
                "configure_train: %d connected nodes have no known n_i and are not drawn",
                len(all_nodes) - len(known),
            )
        shares = sample_weights([self.client_counts[k] for k in known])
        drawn = draw_with_replacement(self._rng, list(range(len(known))), shares, sample_size)
        draws = self.draws[server_round] = {known[i]: count for i, count in drawn.items()}
        logger.info(
            "configure_train: %d draws with replacement ∝ p_i: %d distinct nodes (out of %d)",
            sample_size,
            len(draws),
            len(all_nodes),
        )
        return sorted(node_of[k] for k in draws)

    def _keys_of(self, grid: Grid, node_ids: Iterable[int]) -> dict[int, str]:
        """Client keys of ``node_ids``; none needed (empty) while no n_i is known."""
        return self.learn_client_keys(grid, node_ids) if self.client_counts else {}

    def _alphas_for(
        self, node_ids: Sequence[int], node_keys: Mapping[int, str]
    ) -> dict[int, float]:
        # A node whose n_i is not known yet (round 1) gets the shared α, unclipped
        # (Notes); the others get the rule's α_i from p over all known clients.
        alphas = {n: self.alpha for n in node_ids}
        known = sorted_client_keys(self.client_counts)
        asked = [n for n in node_ids if node_keys.get(n) in self.client_counts]
        if asked:
            shares = dict(
                zip(known, sample_weights([self.client_counts[k] for k in known]), strict=True)
            )
            values = client_alphas(
                [shares[node_keys[n]] for n in asked], self.alpha, self.alpha_rule, len(known)
            )
            alphas.update({n: float(a) for n, a in zip(asked, values, strict=True)})
        return alphas

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate as every rule does; with ``check_eta_reach``, also η_j's reach."""
        accepted, dropped = super().read_train_replies(server_round, replies, layout)
        lr_eta = next(iter(self._sent(keys.RCFL_LR_ETA).values()), None)
        if not self.check_eta_reach or lr_eta is None:
            return accepted, dropped
        error_of = partial(self._eta_error, lr_eta, self._sent(keys.RCFL_ALPHA))
        return intake.drop_failing("aggregate_train", accepted, dropped, error_of), dropped

    def _sent(self, key: str) -> dict[int, float]:
        """``key`` of the train config each node was sent this round (the messages in flight)."""
        configs = [m.content.config_records[self.configrecord_key] for m in self.in_flight]
        return {
            m.metadata.dst_node_id: float(cast(float, config[key]))
            for m, config in zip(self.in_flight, configs, strict=True)
            if key in config
        }

    def _eta_error(
        self, lr_eta: float, alphas: Mapping[int, float], reply: TrainReply
    ) -> ReplyError | None:
        """Why the reply's η_j is out of the reach of its local steps, or ``None``."""
        alpha = alphas.get(reply.node_id, self.alpha)
        low, high = eta_reach(self.eta, lr_eta, self.local_steps, alpha)
        eta = float(reply.metrics[keys.RCFL_ETA])  # type: ignore[arg-type]
        if low <= eta <= high:
            return None
        return ReplyError(
            reply.node_id,
            f"metrics['{keys.RCFL_ETA}']",
            f"is {eta:.6g}, outside [{low:.6g}, {high:.6g}] that {self.local_steps} SGD "
            f"steps of size {lr_eta:g} from eta {self.eta:.6g} reach (alpha {alpha:g})",
        )

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """W_j: ``n_j / Σ n`` over the replies, or ``count_j / K`` renormalised."""
        clients = [self.client_key(reply) for reply in replies]
        sizes = dict(zip(clients, [reply.num_examples for reply in replies], strict=True))
        counts_known = {**self.client_counts, **sizes}
        self.state_updates.set(self, client_counts=counts_known)
        draws = self.draws.get(server_round)
        if draws is None:
            return sample_weights([r.num_examples for r in replies])
        counts = np.array([draws.get(client, 0) for client in clients], dtype=np.float64)
        if counts.sum() <= 0:
            logger.warning(
                "aggregate_train: round %d: no reply from a drawn node; using n_i weights",
                server_round,
            )
            return sample_weights([r.num_examples for r in replies])
        if counts.sum() < sum(draws.values()):
            logger.info(
                "aggregate_train: round %d: %d of %d draws replied; weights renormalised",
                server_round,
                int(counts.sum()),
                sum(draws.values()),
            )
        weights: NDArray[np.float64] = counts / counts.sum()
        return weights

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """Average ω with W (unified form) and η with the same W; report q_i and η.

        η^{t+1} becomes the state with the new ω (never one without the other), and the
        η probe is spent by the first round that updates the model.
        """
        averaged = super().aggregate(server_round, global_arrays, replies)
        if isinstance(averaged, RejectedReplies):
            return averaged
        new_arrays, diagnostics = averaged
        diagnostics.update(self.aggregate_scalars(server_round, replies))
        return new_arrays, diagnostics

    def aggregate_scalars(self, server_round: int, replies: list[TrainReply]) -> dict[str, Any]:
        """η^{t+1} = Σ W_j η_j / Σ W_j from the clear ``rcfl-eta``; q_i and η diagnostics.

        Reads the replies' metrics and the round's recorded W only, never an array: under
        secure aggregation (:class:`fairfl.strategies.secure.SecureRounds`) it runs on the
        clear replies of the clients in the sum.
        """
        diagnostics: dict[str, Any] = {}
        record = self.train_records[server_round]
        weights = np.array([record.weights[r.node_id] for r in replies], dtype=np.float64)
        # The reply reader validated rcfl-eta as a finite number.
        etas = np.array(
            [float(cast(float, r.metrics[keys.RCFL_ETA])) for r in replies], dtype=np.float64
        )
        new_eta = aggregate_eta(etas, weights)
        sent = self._sent(keys.RCFL_ALPHA)
        alphas = np.array([sent.get(r.node_id, self.alpha) for r in replies], dtype=np.float64)
        diagnostics["rcfl-eta-sent"] = self.eta
        if all(self.has_loss(r) for r in replies):
            losses = self.losses_of(replies)
            q, summary, eta_star = round_diagnostics(losses, weights, alphas, self.eta, self.mu)
            diagnostics["rcfl-q"] = {r.node_id: float(v) for r, v in zip(replies, q, strict=True)}
            diagnostics.update(summary)
            if not self.probe_done:
                if eta_star is not None:
                    logger.info(
                        "aggregate_train: round %d: eta probe sets eta %.4g -> %.4g",
                        server_round,
                        new_eta,
                        eta_star,
                    )
                    new_eta = eta_star
                    diagnostics["rcfl-probe"] = 1
                else:
                    logger.warning(
                        "aggregate_train: eta probe has no finite root (all alpha_i = 1); "
                        "keeping the averaged eta"
                    )
        elif not self.probe_done:
            logger.warning(
                "aggregate_train: eta probe needs %s in every reply; keeping the averaged eta",
                self.train_loss_key,
            )
        diagnostics["rcfl-eta"] = new_eta
        self.state_updates.set(self, eta=new_eta, probe_done=True)
        return diagnostics
