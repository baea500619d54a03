"""Keep scikit-learn's own import from importing pandas.

``import sklearn`` imports pandas whenever it is installed: ``sklearn.utils.fixes`` runs
``try: import pandas as pd / except ImportError: pd = None`` in its module body, for a name
nothing else in scikit-learn reads, and pandas costs more to import than the rest of the
estimators. The estimators never need pandas by themselves: a DataFrame only arrives from a
caller who has imported pandas, and scikit-learn finds pandas for its DataFrame checks in
``sys.modules`` (``sklearn.utils._dataframe``), so it sees the caller's.

:func:`install` (run by ``import forgetting``) puts a finder first on ``sys.meta_path`` that
answers that one import, made by the module body of ``sklearn.utils.fixes`` whoever imports
scikit-learn first, with ``ModuleNotFoundError`` (as if pandas were not installed), and then
removes itself; ``sklearn.utils.fixes.pd`` stays None. Every other import of pandas, by the
caller, by scikit-learn inside a function (``set_output(transform="pandas")``, ``fetch_*``),
or on another thread, proceeds as usual. tests/test_import_cost.py checks both sides.
"""

from __future__ import annotations

import sys
from typing import Any

#: The one module whose module-level ``import pandas`` is declined.
IMPORTER = "sklearn.utils.fixes"


class _DeclineEagerPandas:
    """A meta path finder for ``pandas``, consulted only while pandas is not imported."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name != "pandas" or not _imported_by_fixes_module_body():
            return None
        uninstall()
        raise ModuleNotFoundError(
            "pandas is imported by the caller that passes a DataFrame, not by "
            f"{IMPORTER} on import (see forgetting._sklearn_pandas)",
            name="pandas",
        )


def _imported_by_fixes_module_body() -> bool:
    """Whether the import in progress on this thread comes from the module body of
    :data:`IMPORTER` (the first frame outside the import machinery)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(
        ("importlib", "_frozen_importlib")
    ):
        frame = frame.f_back
    return (
        frame is not None
        and frame.f_globals.get("__name__") == IMPORTER
        and frame.f_code.co_name == "<module>"
    )


_FINDER = _DeclineEagerPandas()


def install() -> None:
    """Put the finder first on ``sys.meta_path``, unless scikit-learn or pandas is already
    imported (then there is nothing left to decline)."""
    if IMPORTER in sys.modules or "pandas" in sys.modules or _FINDER in sys.meta_path:
        return
    sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Take the finder off ``sys.meta_path`` (its one import declined)."""
    try:
        sys.meta_path.remove(_FINDER)
    except ValueError:  # already removed (another thread declined it first)
        pass
