"""``python -m forgetting_lab.bench.analyses``: regenerate the paper's analyses."""

from . import main

raise SystemExit(main())
