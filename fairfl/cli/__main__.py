"""``python -m fairfl.cli``: the ``fairfl`` command."""

import sys

from fairfl.cli import main

if __name__ == "__main__":  # the API reference imports this module: it must not run
    sys.exit(main())
