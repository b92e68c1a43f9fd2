"""The documented ranges of every scalar a client reports, shared by client and server.

A reply value outside its range is refused where the reply is read
(:func:`fairfl.contract.read_train_reply`, :func:`fairfl.contract.read_evaluate_reply`)
with a :class:`~fairfl.contract.ReplyError` naming the node, the field and the bound,
so the reply is dropped and recorded like any other bad reply. Every value must also
be finite.

============================  ====================================  =====================
Reply metric                  Range                                 Overridable by
============================  ====================================  =====================
``loss-before-training``,     ``[0, MAX_LOSS]``                     ``max_loss`` of every
``train_loss``, the rule's                                          strategy
``train_loss_key``
``eval_loss``                 ``[0, inf)``                          (none)
``rcfl-eta``                  ``[-MAX_LOSS, MAX_LOSS]``             ``max_loss``
``qffl-h``                    ``(0, MAX_QFFL_H]``                   (checked against the
                                                                    server's own h_k)
``activation`` entries        ``[-MAX_ABS_ACTIVATION,               (none)
                              MAX_ABS_ACTIVATION]``
``eval_acc``                  ``[0, 1]``                            (none)
============================  ====================================  =====================

Why these numbers:

* ``MAX_LOSS = 1e6``. A mean loss is an average of per-example losses of the model
  the server sent. Cross-entropy over C classes starts near ``log C`` (< 12 for a
  million classes) and exceeds 1e6 only with logits of that size; a squared error of
  1e6 means predictions 1e3 off on every example. Such a value comes from a broken or
  malicious client, and the loss-aware rules (AFL, TERM, q-FFL, VRed, Semi-VRed,
  RC-FL) turn it straight into aggregation weight: a VRed reply whose loss is 1e4
  above the mean gets ``p_i (1 + 2β·1e4)``, 2,001 times its data share at β = 0.1.
  Losses must also be >= 0: the rules take powers (q-FFL's
  ``F^q``) and treat a lower loss as better. A federation whose honest losses are
  larger (unnormalised regression) raises ``max_loss``.
* ``eval_loss`` has no upper bound: it drives no rule's weights or state (only the
  loss statistics of the round's record), and a global model wrecked by an attack
  gives honest clients losses far above 1e6. Dropping those replies would hide the
  damage (no accuracy for the round) instead of reporting it.
* ``rcfl-eta`` is RC-FL's dual variable. Its optimum lies between the smallest and the
  largest client loss (the root of ``Σ p_i σ((f_i - η)/μ)/α_i = 1``, docs/specs/spec-rcfl.md §4.6),
  so ``|η| <= MAX_LOSS`` holds for every honest value the server can act on.
* ``MAX_QFFL_H = 1e300``. h_k (q-FFL) is ``q (F+ε)^{q-1} ‖Δw‖² + L (F+ε)^q``, which
  for large q legitimately spans many orders of magnitude; the server recomputes it
  and refuses a client h_k that differs by more than ``h_rtol``. The range only keeps
  the sum ``Σ h_k`` of a few hundred clients finite.
* ``MAX_ABS_ACTIVATION = 1e6``. An activation is a mean of a network's penultimate
  activations (log-softmax outputs by default: between ``-log`` of the smallest
  probability and 0). The same bound as the strategies' ``max_abs_weight``: no
  network that trains has activations of that size, and Equitable FL's affinities
  square them.
"""

from __future__ import annotations

#: Largest training loss a client may report (``loss-before-training``, ``train_loss``);
#: also the bound on ``|rcfl-eta|``. Strategies: ``max_loss``.
MAX_LOSS = 1e6

#: Largest q-FFL ``qffl-h`` a client may report.
MAX_QFFL_H = 1e300

#: Largest ``|entry|`` of a reported ``activation`` vector.
MAX_ABS_ACTIVATION = 1e6
