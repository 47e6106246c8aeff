"""``python -m groundkit``: the ``grk`` command line, for environments without its script."""

from __future__ import annotations

import sys

from groundkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
