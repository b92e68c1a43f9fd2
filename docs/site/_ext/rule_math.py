"""Each rule's objective and server update in LaTeX, for its generated page (MathJax).

The strategies' docstrings give the same equations as plain text (the rule pages show
those docstrings too); these are the typeset forms. Keyed by the strategy class, so a
rule registered under another name keeps its page; a registered rule missing here stops
the docs build (:func:`fairfl_docs.rule_page`).
"""

from __future__ import annotations

#: class __qualname__ -> (paper and equation numbers, LaTeX display blocks).
RULE_MATH: dict[str, tuple[str, tuple[str, ...]]] = {
    "FedAvg": (
        "McMahan et al., AISTATS 2017; Malekmohammadi & Yu, Table 1 and Algorithm 1 with β = 0",
        (r"w^{t+1} = \sum_i p_i\, w_i^{t+1}, \qquad p_i = \frac{n_i}{\sum_j n_j}",),
    ),
    "AFL": (
        "Mohri, Sivek & Suresh, ICML 2019 (Stochastic-AFL, Algorithm 1); "
        "Malekmohammadi & Yu, Table 1",
        (
            r"\min_\theta \max_{\lambda \in \Delta_n} \sum_i \lambda_i f_i(\theta)",
            r"\lambda^{t} = \Pi_\Delta\!\left(\lambda^{t-1} + \gamma_\lambda"
            r" \left[f_1(\theta^t), \dots, f_n(\theta^t)\right]\right), \qquad"
            r" \theta^{t+1} = \sum_i \bar\lambda^{t}_i\, \theta_i^{t+1}",
        ),
    ),
    "TERM": (
        "Li, Beirami, Sanjabi & Smith, ICLR 2021; Malekmohammadi & Yu, Table 1 and App. B.2",
        (
            r"\frac{1}{\alpha} \log \sum_i p_i\, e^{\alpha f_i(\theta)}",
            r"w_i = \frac{p_i\, e^{\alpha f_i(\theta^t)}}{\sum_j p_j\, e^{\alpha f_j(\theta^t)}},"
            r" \qquad \theta^{t+1} = \sum_i w_i\, \theta_i^{t+1}",
        ),
    ),
    "GiFair": (
        "Yue, Nouiehed & Al Kontar, arXiv:2108.02741; Malekmohammadi & Yu, Table 1 and App. B.2",
        (
            r"\sum_i p_i f_i(\theta) + \lambda \sum_{i<j} \left|f_i(\theta) - f_j(\theta)\right|",
            r"w_i = p_i + \lambda \sum_{j \ne i} \operatorname{sign}\!\left(f_i(\theta^t)"
            r" - f_j(\theta^t)\right), \qquad \lambda = \mathrm{coeff}\cdot"
            r"\frac{\min_i p_i}{n-1}",
        ),
    ),
    "DeltaFL": (
        "Pillutla, Laguel, Malick & Harchaoui, arXiv:2112.09429; Malekmohammadi & Yu, "
        "Table 1, §2.1",
        (
            r"\mathrm{CVaR}_{1-\alpha}\big(f_1(\theta), \dots, f_n(\theta)\big)"
            r" = \max_{\pi \in \Delta_n,\ \pi_i \le p_i/\alpha} \sum_i \pi_i f_i(\theta)",
            r"\theta^{t+1} = \sum_i \pi^\star_i\, \theta_i^{t+1}",
        ),
    ),
    "PropFair": (
        "Zhang, Malekmohammadi, Chen & Yu, TMLR 2023; Malekmohammadi & Yu, Table 1",
        (
            r"-\sum_i p_i \log\big(M - f_i(\theta)\big)",
            r"\ell'_B = -\log\left(1 - \frac{\ell_B}{M}\right) \quad"
            r"\text{if } M - \ell_B \ge \epsilon",
        ),
    ),
    "Ditto": (
        "Li, Hu, Beirami & Smith, ICML 2021; Eq. (2) and Algorithm 1 (lines 6 and 9)",
        (
            r"\min_{v_k}\; h_k(v_k; w^\star) = F_k(v_k) + \frac{\lambda}{2}"
            r" \left\lVert v_k - w^\star \right\rVert^2",
            r"v_k \leftarrow v_k - \eta \left(\nabla F_k(v_k) + \lambda (v_k - w^t)\right),"
            r" \qquad w^{t+1} = \sum_i p_i\, w_i^{t+1}",
        ),
    ),
    "EquitableFL": (
        "Upadhyay & Hashemi, arXiv:2410.19207 (Equitable FL), Algorithm 1, eqs. (4), (6), (7)",
        (
            r"w^{t+1} = \sum_{c=1}^{C} \frac{1}{C} \sum_{i \in c} \frac{1}{|c|}\, w_i^{t+1}"
            r" \quad\text{(equal weight per activation cluster, uniform within it)}",
            r"\min_w F_i(w) + \frac{\mu}{2} \left\lVert w - w^t \right\rVert^2"
            r" \quad\text{(FedProx local objective, eq. 4)}",
        ),
    ),
    "QFFL": (
        "Li, Sanjabi, Beirami & Smith, ICLR 2020, eq. (2), Lemma 3 eq. (3), Algorithm 2",
        (
            r"\min_w f_q(w) = \sum_k \frac{p_k}{q+1} F_k^{q+1}(w)",
            r"\Delta w_k = L\,(w^t - \bar w_k), \quad \Delta_k = F_k^q\, \Delta w_k, \quad"
            r" h_k = q F_k^{q-1} \lVert \Delta w_k \rVert^2 + L F_k^q",
            r"w^{t+1} = w^t - \frac{\sum_k \Delta_k}{\sum_k h_k}, \qquad L = 1/\eta",
        ),
    ),
    "QFedSGD": (
        "Li, Sanjabi, Beirami & Smith, ICLR 2020, eq. (2), Lemma 3 eq. (3), Algorithm 1",
        (
            r"\Delta_k = F_k^q\, \nabla F_k(w^t), \qquad h_k = q F_k^{q-1}"
            r" \lVert \nabla F_k(w^t) \rVert^2 + L F_k^q",
            r"w^{t+1} = w^t - \frac{\sum_k \Delta_k}{\sum_k h_k}",
        ),
    ),
    "VRed": (
        "Malekmohammadi & Yu, arXiv:2406.16193, eqs. (3), (5), Lemma 1 eq. (8)",
        (
            r"F_{\mathrm{VRed}}(\theta) = \sum_i p_i f_i(\theta)"
            r" + \beta \sum_i p_i \big(f_i(\theta) - \bar f(\theta)\big)^2",
            r"\theta^{t+1} = \sum_i w_i \theta_i, \qquad"
            r" w_i = p_i \big(1 + 2\beta (f_i - \bar f)\big)",
        ),
    ),
    "SemiVRed": (
        "Malekmohammadi & Yu, arXiv:2406.16193, eqs. (9), (10), Lemma 2 eq. (12)",
        (
            r"F_{\mathrm{SVRed}}(\theta) = \sum_i p_i f_i(\theta)"
            r" + \beta \sum_i p_i \big(f_i(\theta) - \bar f(\theta)\big)_+^2",
            r"w_i = p_i \big(1 + 2\beta (a_i - A)\big), \quad a_i = (f_i - \bar f)_+,"
            r" \quad A = \sum_j p_j a_j",
        ),
    ),
    "FedMGDAPlus": (
        "Hu, Shaloudegi, Zhang & Yu, IEEE TNSE 2022, Algorithm 1, eqs. (22)-(25)",
        (
            r"\lambda^\star = \operatorname*{argmin}_{\lambda \in \Delta,"
            r" \ \lVert \lambda - \lambda_0 \rVert_\infty \le \epsilon}"
            r" \Big\lVert \sum_i \lambda_i \bar g_i \Big\rVert^2, \qquad"
            r" \bar g_i = \frac{w_t - w_i}{\lVert w_t - w_i \rVert}",
            r"w_{t+1} = w_t - \eta_t \sum_i \lambda^\star_i \bar g_i, \qquad"
            r" \eta_t = \eta_g\, \beta^{\lfloor t/100 \rfloor}",
        ),
    ),
    "FedAvgN": (
        "Hu et al., IEEE TNSE 2022: FedMGDA+ with ε = 0 (FedAvg-n)",
        (r"w_{t+1} = w_t - \eta_t \sum_i \lambda_{0,i}\, \bar g_i",),
    ),
    "FedMGDAPlain": (
        "Hu et al., IEEE TNSE 2022: FedMGDA, no normalisation, ε = 1, η = 1",
        (
            r"w_{t+1} = w_t - \sum_i \lambda^\star_i g_i, \qquad \lambda^\star ="
            r" \operatorname*{argmin}_{\lambda \in \Delta} \Big\lVert \sum_i"
            r" \lambda_i g_i \Big\rVert^2",
        ),
    ),
    "MGDAProx": (
        "Hu et al., IEEE TNSE 2022: FedMGDA+ with a proximal term on the clients",
        (
            r"\min_w F_i(w) + \frac{\mu}{2} \lVert w - w_t \rVert^2, \qquad"
            r" w_{t+1} = w_t - \eta_t \sum_i \lambda^\star_i \bar g_i",
        ),
    ),
    "RCFL": (
        "Fairness-aware Federated Learning: A Robust Approach (anonymous ICML submission), "
        "Def. 1 eq. (1), "
        "Lemma 1 eq. (2), eq. (5), Algorithm 1",
        (
            r"f_\alpha(\omega) = \min_\eta\; \eta + \sum_i \frac{p_i}{\alpha_i}"
            r" \big(f_i(\omega) - \eta\big)_+",
            r"\text{client } i:\ \min_{\omega, \eta}\; \frac{1}{\alpha_i}"
            r" \varphi_\mu\big(\hat f^i(\omega) - \eta\big) + \eta, \qquad"
            r" (\omega, \eta)^{t+1} = \sum_i p_i\, (\omega_i, \eta_i)",
        ),
    ),
    "FedFV": (
        "Wang et al., Federated Learning with Fair Averaging, IJCAI 2021; steps (F1)-(F7) "
        "of the official code as numbered in spec-fedfv",
        (
            r"g_i \leftarrow g_i - \frac{g_j \cdot g_i}{\lVert g_j \rVert^2}\, g_j"
            r" \quad\text{for } g_j \cdot g_i < 0,\ i \notin K \qquad \text{(F2)}",
            r"g' = \frac{1}{m} \sum_i g_i, \qquad g^t = g'\,"
            r" \frac{\lVert \frac{1}{m} \sum_i g_i^{\text{orig}} \rVert}{\lVert g' \rVert},"
            r" \qquad w^{t+1} = w^t - g^t \qquad \text{(F3, F6, F7)}",
        ),
    ),
    "FedFa": (
        "Huang et al., Fairness and Accuracy in Federated Learning, arXiv:2012.10069; "
        "formulas (F1)-(F8) of FLGo's implementation as numbered in spec-fedfa",
        (
            r"p_i = (1 - \beta) \frac{I^{acc}_i}{\sum_j I^{acc}_j}"
            r" + \beta \frac{I^{f}_i}{\sum_j I^{f}_j}, \quad"
            r" I^{acc}_i = -\log_2(a_i + 10^{-6}) \qquad \text{(F2-F5)}",
            r"\bar w = \sum_i p_i w_i, \quad m^t = \gamma m^{t-1} + (1 - \gamma)"
            r"(\bar w - w^t), \quad w^{t+1} = \bar w - \eta\, m^t \qquad \text{(F6-F8)}",
        ),
    ),
    "FairFed": (
        "Ezzeldin, Yan, He, Ferrara & Avestimehr, FairFed, AAAI 2023; Algorithm 1 as "
        "numbered (FF1)-(FF7) in spec-fairfed",
        (
            r"F = P(\hat y = 1 \mid A = 0) - P(\hat y = 1 \mid A = 1), \qquad"
            r" \Delta_k = \left| F_{\text{global}} - F_k \right| \qquad \text{(FF1, FF4)}",
            r"\omega_k^0 = \frac{n_k}{n}, \qquad \bar\omega_k^t = \omega_k^{t-1} - \beta"
            r" \Big(\Delta_k - \frac{1}{K} \sum_i \Delta_i\Big), \qquad"
            r" \omega_k^t = \frac{\bar\omega_k^t}{\sum_i \bar\omega_i^t} \qquad \text{(FF5, FF6)}",
            r"w^{t+1} = \sum_k \omega_k^t\, w_k^{t+1} \qquad \text{(FF7)}",
        ),
    ),
    "FedProx": (
        "Li, Sahu, Zaheer, Sanjabi, Talwalkar & Smith, Federated Optimization in "
        "Heterogeneous Networks, MLSys 2020; Algorithm 2",
        (
            r"\text{client } k:\ \min_w\; F_k(w) + \frac{\mu}{2} \lVert w - w^t \rVert^2",
            r"w^{t+1} = \sum_k p_k\, w_k^{t+1}, \qquad p_k = \frac{n_k}{\sum_j n_j}",
        ),
    ),
    "FedAdam": (
        "Reddi et al., Adaptive Federated Optimization, ICLR 2021; Algorithm 2 (FedAdam), "
        "with Flower's bias correction",
        (
            r"\Delta_t = \sum_i p_i\, w_i^{t+1} - w^t, \quad m_t = \beta_1 m_{t-1}"
            r" + (1 - \beta_1) \Delta_t, \quad v_t = \beta_2 v_{t-1} + (1 - \beta_2) \Delta_t^2",
            r"w^{t+1} = w^t + \eta\, \frac{\sqrt{1 - \beta_2^{t+1}}}{1 - \beta_1^{t+1}}\,"
            r" \frac{m_t}{\sqrt{v_t} + \tau}",
        ),
    ),
    "FedYogi": (
        "Reddi et al., Adaptive Federated Optimization, ICLR 2021; Algorithm 2 (FedYogi)",
        (
            r"\Delta_t = \sum_i p_i\, w_i^{t+1} - w^t, \quad m_t = \beta_1 m_{t-1}"
            r" + (1 - \beta_1) \Delta_t",
            r"v_t = v_{t-1} - (1 - \beta_2)\, \Delta_t^2\, \operatorname{sign}(v_{t-1}"
            r" - \Delta_t^2), \qquad w^{t+1} = w^t + \eta\, \frac{m_t}{\sqrt{v_t} + \tau}",
        ),
    ),
}
