"""``python -m fairfl``: the ``fairfl`` command without installing the console script."""

from fairfl.cli import main

raise SystemExit(main())
