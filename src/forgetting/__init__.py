"""forgetting: exact machine unlearning with quantized sufficient statistics (QSS).

Public API: :class:`QSSClassifier`, :class:`QSSRegressor`, the :class:`Receipt` they return
from ``forget``/``insert``, and :class:`ModelFileError` raised by ``load``.
``MUNKEYClassifier`` (approximate unlearning by key deletion, the optional ``munkey`` extra)
is imported on first use, so ``import forgetting`` never loads torch.
"""

from typing import Any

from .estimators import QSSClassifier, QSSRegressor
from .io.model_format import ModelFileError
from .receipts import Receipt

__all__ = ["QSSClassifier", "QSSRegressor", "Receipt", "ModelFileError", "MUNKEYClassifier"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``forgetting.MUNKEYClassifier``, imported on first use (PEP 562)."""
    if name == "MUNKEYClassifier":
        from .munkey import MUNKEYClassifier

        return MUNKEYClassifier
    raise AttributeError(f"module 'forgetting' has no attribute {name!r}")
