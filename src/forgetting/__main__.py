"""``python -m forgetting``: the command-line interface (see :mod:`forgetting.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
