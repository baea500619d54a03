"""forgetting: exact machine unlearning with quantized sufficient statistics (QSS).

Public API: :class:`QSSClassifier`, :class:`QSSRegressor`, the :class:`Receipt` they return
from ``forget``/``insert``, and :class:`ModelFileError` raised by ``load``.
"""

from .estimators import QSSClassifier, QSSRegressor
from .munkey import package_getattr as __getattr__  # noqa: F401 (MUNKEYClassifier, lazy)
from .persistence import ModelFileError
from .receipts import Receipt

__all__ = ["QSSClassifier", "QSSRegressor", "Receipt", "ModelFileError", "MUNKEYClassifier"]
__version__ = "0.1.0"
