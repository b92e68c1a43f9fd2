"""``python -m fairfl.cli``: the ``fairfl`` command."""

import sys

from fairfl.cli import main

sys.exit(main())
