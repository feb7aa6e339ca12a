"""``python -m collector``: the command line."""

from __future__ import annotations

import sys

from collector.cli import main

if __name__ == "__main__":
    sys.exit(main())
