"""Client-level differential privacy calibrated to a fair rule's weights (issue #49).

:mod:`~fairfl.privacy.config` parses the ``dp-*`` run-config keys,
:mod:`~fairfl.privacy.central` clips the clients' updates and noises the new model with the
round's actual sensitivity, :mod:`~fairfl.privacy.accounting` keeps the RDP account. The
how-to page ``docs/site/howto/differential-privacy.md`` says what is protected and what is
not.
"""

from fairfl.privacy.config import CALIBRATIONS, MODES, PrivacySettings

__all__ = ["CALIBRATIONS", "MODES", "PrivacySettings"]
