"""LightGBM leaf contributions: the learned tabular encoder f of design.md §2.

Why contributions: raw tabular columns are badly scaled for nearest-centroid codebooks (one
standardized income column and a hundred 0/1 indicators). A small gradient-boosted model maps
each row to its per-feature contributions to the prediction (TreeSHAP, LightGBM's
``pred_contrib=True``): a dense, label-aware vector in which distances mean "affects the
prediction alike", which is what the residual-quantization codebook clusters well.

Why it must be fitted on D° only: the map is learned from labels. Under QSS-E everything that
shapes a row's features must depend on the schema subset D°, so the caller fits this encoder on
D° and refits it when a deletion hits D° (``learned = True`` says so).

Why these settings: the same D° must always give the same bits (design.md §5.1: the model state is a
pure function of the data and the configuration). LightGBM is deterministic with
``deterministic=True``, ``force_row_wise=True`` (no timing-based choice between histogram
layouts), ``num_threads=1`` (no thread-count-dependent reductions) and a fixed ``seed``; no row
or feature subsampling is used, so ``seed`` only matters for the bin-boundary sample on inputs
larger than LightGBM's ``bin_construct_sample_cnt`` (200 000 rows).

Output width, for ``d`` input features: ``d + 1`` columns for binary classification and
regression (one contribution per feature, then the bias = the model's expected raw score), and
``k * (d + 1)`` for ``k``-class classification (one such block per class, class-major). Nothing
is dropped: the bias column is constant for every row but keeps the layout LightGBM documents.
"""

from __future__ import annotations

from typing import Any, Literal, Self

import numpy as np

from .base import Encoder, EncoderUnavailableError

__all__ = ["LIGHTGBM_INSTALL", "LightGBMLeafContrib"]

LIGHTGBM_INSTALL = 'pip install "forgetting[tabular]"'

# Module-level so tests can simulate a missing install.
_LIGHTGBM_MODULE = "lightgbm"

Objective = Literal["auto", "binary", "multiclass", "regression"]


def _import_lightgbm() -> Any:
    """Import LightGBM, or raise :class:`EncoderUnavailableError` with the install command."""
    import importlib

    try:
        return importlib.import_module(_LIGHTGBM_MODULE)
    except ImportError as exc:
        raise EncoderUnavailableError(
            f"LightGBMLeafContrib needs LightGBM ({exc}); install it with: {LIGHTGBM_INSTALL}"
        ) from exc


def _as_matrix(X: Any) -> np.ndarray:
    """A 2-D float32/float64 array (LightGBM reads both natively; others become float64)."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D feature matrix, got shape {X.shape}")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    return np.ascontiguousarray(X)


class LightGBMLeafContrib(Encoder):
    """f(x) = a small LightGBM model's per-feature contributions for x (``pred_contrib=True``).

    A *learned* encoder: ``fit(X, y, seed)`` trains the model (on D° only, see the module
    docstring), ``transform(X)`` returns float32 contributions of width :attr:`output_dim`
    (``d + 1``, or ``k * (d + 1)`` for ``k > 2`` classes). Two fits on the same data, settings and
    seed give bit-identical transforms.

    Args:
        n_estimators: boosting rounds (trees per class); small on purpose -- D° is small and the
            encoder only needs to shape the space, not to be the final model.
        num_leaves: leaves per tree.
        learning_rate: shrinkage per round.
        min_child_samples: LightGBM ``min_data_in_leaf``.
        objective: ``"auto"`` picks ``"regression"`` for float targets, else ``"binary"`` for
            two classes and ``"multiclass"`` for more.
        n_classes: number of classes ``k`` (labels ``0..k-1``). Pass it when D° might miss a
            class, so the output width does not depend on which classes D° happened to hold;
            by default ``max(y) + 1``.
    """

    learned = True

    def __init__(
        self,
        *,
        n_estimators: int = 32,
        num_leaves: int = 15,
        learning_rate: float = 0.1,
        min_child_samples: int = 20,
        objective: Objective = "auto",
        n_classes: int | None = None,
    ) -> None:
        if objective not in ("auto", "binary", "multiclass", "regression"):
            raise ValueError(f"unknown objective {objective!r}")
        if n_estimators < 1 or num_leaves < 2 or min_child_samples < 1:
            raise ValueError("n_estimators >= 1, num_leaves >= 2 and min_child_samples >= 1")
        self.n_estimators = n_estimators
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.min_child_samples = min_child_samples
        self.objective = objective
        self.n_classes = n_classes
        self.booster_: Any = None
        self.n_features_in_: int | None = None
        self.objective_: str | None = None
        self.n_outputs_: int | None = None

    def _resolve_objective(self, y: np.ndarray) -> tuple[str, int]:
        """The LightGBM objective and the number of model outputs (classes for multiclass)."""
        objective = self.objective
        if objective == "auto":
            if np.issubdtype(y.dtype, np.floating):
                objective = "regression"
            else:
                k = self.n_classes if self.n_classes is not None else int(y.max()) + 1
                objective = "multiclass" if k > 2 else "binary"
        if objective == "regression":
            return objective, 1
        if y.size and (y.min() < 0 or y.max() != np.round(y.max())):
            raise ValueError("classification labels must be integers 0..k-1")
        k = self.n_classes if self.n_classes is not None else int(y.max()) + 1
        if objective == "binary":
            if k > 2:
                raise ValueError(f"binary objective but {k} classes")
            return objective, 1
        if y.size and int(y.max()) >= k:
            raise ValueError(f"labels must lie in 0..{k - 1} (n_classes={k})")
        return objective, k

    def _params(self, seed: int) -> dict[str, Any]:
        """The LightGBM parameters of a fit with ``seed`` (once the objective is resolved)."""
        return {
            "objective": self.objective_,
            **({"num_class": self.n_outputs_} if self.objective_ == "multiclass" else {}),
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_child_samples,
            "deterministic": True,
            "force_row_wise": True,
            "num_threads": 1,
            "seed": int(seed),
            "verbosity": -1,
        }

    def fit(self, X: Any, y: Any = None, seed: int = 0) -> Self:
        """Train the model on ``(X, y)`` -- which must be D° only for exact instance deletion."""
        lgb = _import_lightgbm()
        X = _as_matrix(X)
        if y is None:
            raise ValueError("LightGBMLeafContrib is supervised: fit needs y")
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must be 1-D with {X.shape[0]} entries, got shape {y.shape}")
        if X.shape[0] == 0:
            raise ValueError("cannot fit on zero rows")
        self.objective_, self.n_outputs_ = self._resolve_objective(y)
        params = self._params(seed)
        label = y.astype(np.float64)
        train = lgb.Dataset(X, label=label, params=params, free_raw_data=True)
        self.booster_ = lgb.train(params, train, num_boost_round=self.n_estimators)
        self.n_features_in_ = int(X.shape[1])
        return self

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the model as LightGBM's text dump, so equal models pickle to equal bytes.

        A ``Booster`` object pickles its bookkeeping too, which differs between a freshly
        trained and a reloaded booster; the model text does not. Callers hash pickles (the
        schema digest), and a model must hash the same before and after persistence.
        """
        state = self.__dict__.copy()
        if state.get("booster_") is not None:
            state["booster_"] = state["booster_"].model_to_string()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state.get("booster_"), str):
            lgb = _import_lightgbm()
            state = {**state, "booster_": lgb.Booster(model_str=state["booster_"])}
        self.__dict__.update(state)

    @property
    def output_dim(self) -> int:
        """Width of :meth:`transform`'s output: ``n_outputs * (n_features + 1)``."""
        if self.booster_ is None or self.n_features_in_ is None or self.n_outputs_ is None:
            raise RuntimeError("LightGBMLeafContrib is not fitted yet: call fit(X, y, seed)")
        return self.n_outputs_ * (self.n_features_in_ + 1)

    def transform(self, X: Any) -> np.ndarray:
        """Per-feature contributions (plus bias) of every row, float32 ``(n, output_dim)``.

        Row-wise (TreeSHAP on one row at a time), so a row's encoding does not depend on the
        other rows passed with it.
        """
        width = self.output_dim  # raises if not fitted
        X = _as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, the encoder was fitted with {self.n_features_in_}"
            )
        if X.shape[0] == 0:
            return np.zeros((0, width), dtype=np.float32)
        contrib = self.booster_.predict(X, pred_contrib=True, num_threads=1)
        out = np.ascontiguousarray(np.asarray(contrib), dtype=np.float32)
        if out.shape != (X.shape[0], width):
            raise RuntimeError(f"LightGBM returned shape {out.shape}, expected {(len(X), width)}")
        return out
