"""Client-level differential privacy calibrated to a fair rule's weights (issue #49).

:mod:`~fairfl.privacy.config` parses the ``dp-*`` run-config keys,
:mod:`~fairfl.privacy.central` clips the clients' updates and noises the new model with the
round's actual sensitivity (``dp = "central-fixed"``), :mod:`~fairfl.privacy.adaptive` adapts
the clipping norm to a quantile of the update norms (``"central-adaptive"``),
:mod:`~fairfl.privacy.local` is the server's side of ``"local"``,
:mod:`~fairfl.privacy.distributed` of ``"distributed"`` (the clients noise what SecAgg+
masks),
:mod:`~fairfl.privacy.signal` the clients' noise on their update and on the loss the fair
rules read, :mod:`~fairfl.privacy.accounting` keeps the RDP account. The
how-to page ``docs/site/howto/differential-privacy.md`` says what is protected and what is
not.
"""

from fairfl.privacy.config import CALIBRATIONS, MODES, PrivacySettings

__all__ = ["CALIBRATIONS", "MODES", "PrivacySettings"]
