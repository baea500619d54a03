"""``python -m forgetting_lab.bench.paper``: run the paper benchmark (see the package docstring)."""

from . import main

raise SystemExit(main())
