"""QSS estimators: QSSClassifier and QSSRegressor (quantized sufficient statistics).

The surface every family shares — ids, validation at the edge, atomic fit, receipts, the
forget that makes a class vanish, ``partial_fit``, snapshots and files — is
:class:`~.base.UnlearningEstimator`'s. Here is what QSS adds: its parameters and their
resolution into the engine's configuration (:mod:`forgetting.parameters`), label mode
(``y == -1`` / NaN unlabeled, ``forget(..., erase_inputs=True)``), a raw DataFrame's exact
encoding (:class:`~.tables.RawTables`), fits on a dask cluster (:meth:`_QSSBase.fit_from`),
certified labels, ``mode="dp"``'s report and the content audit.

Guarantee (``mode="exact"``): after ``fit(D)`` and ``forget(R)`` and once
``wait_for_rebuilds()`` returns, predictions and ``state_digest()`` are bit-for-bit those of
``fit(D \\ R)`` with the same parameters. In ``mode="label"`` the codebook is trained on all
inputs, so ``forget`` removes a row's *label* exactly (≡ refitting with that label set to
unlabeled) but its input keeps shaping the codebook; erasing inputs needs
``forget(ids, erase_inputs=True)``, which rebuilds every instance. See docs/design.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ..distributed import fit_distributed, is_distributed_input
from ..engine import EngineConfig, QSSEngine
from ..ids import normalize_ids
from ..labels import user_unlabeled
from ..parameters import PARAMETER_CONSTRAINTS, check_params, engine_config, resolve_partition
from ..preprocessing.frames import wants_encoding
from ..preprocessing.table import refuse_unreadable
from ..privacy import PrivacyReport
from ..receipts import Receipt
from ..rows.hashing import canonical_floats
from ..snapshots import ModelSnapshot, SnapshotError
from .base import UnlearningEstimator
from .tables import RawTables, _float32
from .targets import ClassifierTargets, RegressorTargets


class RowSource(Protocol):
    """Rows that fill the engine themselves (:meth:`_QSSBase.fit_from`): a dask collection
    whose row work runs on a cluster (forgetting.distributed) is one. The estimator asks for
    the shape, labels and ids (in this order, after validating its parameters), makes the
    engine, and hands it to :meth:`build`."""

    def shape(self) -> tuple[int, int]:
        """(rows, features); raises for an unusable collection."""

    def labels(self) -> Any:
        """The targets, in memory, as ``fit``'s ``y``."""

    def ids(self) -> Any:
        """The ids, in memory, as ``fit``'s ``ids`` (None: ``range(n)``)."""

    def feature_names(self) -> np.ndarray | None:
        """String column names (``feature_names_in_``), or None."""

    def build(self, engine: QSSEngine, ids: list, targets: np.ndarray) -> None:
        """Fill the unfitted ``engine`` with the rows (``engine.fit``), the normalized
        ``ids`` and the encoded ``targets``."""


class _QSSBase(RawTables, UnlearningEstimator):
    """QSS's parameters, its engine, label mode, raw tables and dask fits."""

    _task: str
    _fitted_optional = ("feature_names_in_", "table_", "random_state_")
    _parameter_constraints: dict = PARAMETER_CONSTRAINTS

    def __init__(
        self,
        *,
        mode: str = "exact",
        rho: float = 0.005,
        n_instances: int = 3,
        min_schema_rows: int | str = "auto",
        n_levels: int | None = None,
        n_centroids: int | None = None,
        partition: str = "auto",
        head: str = "auto",
        alpha: float | str = "auto",
        shrinkage: float | str = "auto",
        base_model: Any = "auto",
        lda: bool | str = "auto",
        rebuild: str = "background",
        random_state: int | None = 0,
        secret_key: bytes | str | None = None,
        encoder: Any = None,
        epsilon: float | None = None,
        delta: float | None = None,
        clip: float | None = None,
    ):
        self.mode = mode
        self.rho = rho
        self.n_instances = n_instances
        self.min_schema_rows = min_schema_rows
        self.n_levels = n_levels
        self.n_centroids = n_centroids
        self.partition = partition
        self.head = head
        self.alpha = alpha
        self.shrinkage = shrinkage
        self.base_model = base_model
        self.lda = lda
        self.rebuild = rebuild
        self.random_state = random_state
        self.secret_key = secret_key
        self.encoder = encoder
        self.epsilon = epsilon
        self.delta = delta
        self.clip = clip

    # -- family hooks ----------------------------------------------------------------------
    def _check_params(self) -> None:
        self._validate_params()
        check_params(self.get_params(deep=False), self._task)

    def _validate_X(self, X: Any, *, reset: bool) -> np.ndarray:
        """Dense, finite, float32 features (the precision rows are stored and hashed in),
        every zero +0.0: a value, not its bits, decides the schema and the digest."""
        refuse_unreadable(X)
        X = validate_data(
            self, X, reset=reset, dtype=np.float64, ensure_min_samples=1, ensure_all_finite=True
        )
        X32 = canonical_floats(X.astype(np.float32))
        if not np.all(np.isfinite(X32)):
            raise ValueError("X has values beyond float32 range")
        return X32

    def _check_X(self, X: Any) -> np.ndarray:
        """Features for a fitted model; a table model encodes its raw DataFrame first."""
        self._check_fitted()
        if "table_" in self.__dict__:
            return _float32(self.table_.encode(X))
        return super()._check_X(X)

    def _partition(self) -> str:
        """The partition ``partition="auto"`` resolves to (forgetting.parameters)."""
        return resolve_partition(self.get_params(deep=False))

    def _config(self, n_outputs: int) -> EngineConfig:
        """Resolve the parameters once into the configuration the engine and schemas own."""
        params = {**self.get_params(deep=False), "random_state": self._seed()}
        return engine_config(params, self._task, n_outputs)

    def _new_engine(self, n_outputs: int, n_features: int, dtype: np.dtype) -> QSSEngine:
        return QSSEngine(self._config(n_outputs), self._key(), n_features, dtype)

    def _restored_engine(self, key: bytes, n_outputs: int, snapshot: Any) -> QSSEngine:
        return QSSEngine.from_snapshot(self._config(n_outputs), key, snapshot)

    # -- fit -------------------------------------------------------------------------------
    def fit_from(self, source: RowSource) -> Any:
        """Fit on rows that ``source`` feeds to the engine itself (forgetting.distributed
        fits a dask collection this way, its row work on a cluster).

        The estimator validates its parameters, the labels and the ids exactly as :meth:`fit`
        does, sets the fitted attributes and makes the engine; ``source.build`` fills it.
        The result equals ``fit`` on the same rows, bit for bit, when the source computes the
        rows' work as the engine would. On any error the previous fit stays.
        """
        self._check_params()

        def run():
            self._draw_seed()
            n, d = source.shape()
            targets, n_outputs = self._fit_targets(source.labels(), n)
            id_values = source.ids()
            id_list = normalize_ids(id_values, n)
            self.n_features_in_ = d
            self.__dict__.pop("table_", None)
            names = source.feature_names()
            if names is not None:
                self.feature_names_in_ = names
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            engine = self._new_engine(n_outputs, d, targets.dtype)
            source.build(engine, id_list, targets)
            self._install_engine(engine)
            return self

        return self._fit_atomically(run)

    def _fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None):
        """A dask input goes to the cluster; anything else is fitted here."""
        if is_distributed_input(X):
            return fit_distributed(self, X, y, ids)
        return super()._fit(X, y, ids)

    def _fit_rows(self, X: Any, y: Any, ids: Any, after: tuple | None = None):
        """A raw table through the encoding, an array straight to the engine."""
        refuse_unreadable(X)
        if wants_encoding(X):
            return self._fit_frame(X, y, ids, after)
        self.__dict__.pop("table_", None)
        return super()._fit_rows(X, y, ids, after)

    # -- forget / insert -------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> Receipt:
        """Forget rows by id and return a :class:`~forgetting.receipts.Receipt`.

        ``mode="exact"``: the rows are erased; the model equals a fit without them.
        ``mode="label"``: only the rows' labels are removed unless ``erase_inputs=True``,
        which also erases their inputs from the codebook's training pool — exact too, but it
        rebuilds every instance. Unknown ids raise KeyError, duplicates ValueError; on any
        error nothing changes.
        """
        if "table_" in self.__dict__:
            self._check_forget_options(erase_inputs)
            id_list, id_raw = self._check_ids(ids, None)
            with self.table_.lock:
                return self._forget_frame(id_list, id_raw)
        return super().forget(ids, erase_inputs=erase_inputs)

    def _check_forget_options(self, erase_inputs: bool) -> None:
        if erase_inputs and self.mode != "label":
            raise ValueError("erase_inputs applies to mode='label'; exact mode always erases")

    def _label_only(self, erase_inputs: bool) -> bool:
        return self.mode == "label" and not erase_inputs

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> Receipt:
        """Add labeled rows to the content (online learning); returns a receipt.

        In exact mode the result equals a fit on all rows. In label mode new inputs are encoded
        with the existing codebook but do not join its training pool. A classifier's label is
        one of ``classes_`` when it is equal in value, as in scikit-learn's ``partial_fit``:
        ``1.0`` and ``True`` are class ``1``; ``1.5``, ``"1"`` (for integer classes) or a new
        class are refused (refit to add a class). The HTTP service is stricter: its JSON
        labels must have the classes' type. A model fitted on a DataFrame takes a DataFrame
        with the fitted columns; a new category joins the encoding (the model refits).
        """
        if "table_" in self.__dict__:
            with self.table_.lock:
                return self._insert_frame(X, y, ids)
        return super().insert(X, y, ids)

    # -- what the model is -------------------------------------------------------------------
    def state_digest(self) -> str:
        """SHA-256 (hex) of the canonical schema + content state (a model fitted on a raw
        DataFrame: with its table encoding's state)."""
        check_is_fitted(self)
        if "table_" in self.__dict__:
            return self._frame_digest(self.engine_.state_digest())
        return self.engine_.state_digest()

    def audit_content(self) -> bool:
        """Recompute the accumulators from the stored rows and check they match, bit for bit."""
        check_is_fitted(self)
        return self.engine_.audit_content()

    @property
    def corrections_(self) -> list[str | None]:
        """Per instance, the correction it serves on top of g: "head" (exact ridge head on all
        rows), "tables" (flat partition), "codebook" (RQ), or None while rebuilding."""
        check_is_fitted(self)
        return self.engine_.corrections()

    @property
    def privacy_(self) -> PrivacyReport:
        """mode="dp": ε, δ, σ, sensitivity, the number of distinct releases so far and the
        ε they compose to (see docs/privacy.md). Each release is (ε, δ)-label-DP on its own;
        a stream of releases around deletions composes."""
        check_is_fitted(self)
        ledger = self.engine_.privacy
        if ledger is None:
            raise AttributeError("privacy_ is defined for mode='dp' only")
        return ledger.report()

    def _outputs(self, X: Any, instance: int | None = None) -> np.ndarray:
        if "table_" in self.__dict__:
            with self.table_.lock:
                return self.engine_.predict_outputs(self._check_X(X), instance)
        X = self._check_X(X)
        return self.engine_.predict_outputs(X, instance)

    # -- snapshots -----------------------------------------------------------------------------
    def _snapshot_fitted(self, fitted: dict, engine_snapshot: Any) -> None:
        if "table_" in fitted:  # the raw rows, in the engine's row order
            fitted["table_"] = self.table_.stored(engine_snapshot.rows.ids)

    def _restore_fitted(self, snapshot: ModelSnapshot, key: bytes) -> Any:
        engine_snapshot = snapshot.engine
        if "table_" in snapshot.fitted:
            rows = engine_snapshot.rows
            self.table_, encoded = self._restored_table(snapshot.fitted["table_"], rows, key)
            if rows.X is None:  # a store keeps the raw rows only: the encoding is refitted
                rows = dataclasses.replace(rows, X=encoded)
                engine_snapshot = dataclasses.replace(engine_snapshot, rows=rows)
        return engine_snapshot

    @classmethod
    def _checked_fitted(cls, fitted: Any, rows: Any) -> dict:
        checked = super()._checked_fitted(fitted, rows)
        if "table_" in checked and "feature_names_in_" not in checked:
            raise SnapshotError("fitted: a table model has feature_names_in_")
        return checked

    @classmethod
    def _snapshot_width(cls, fitted: dict, rows: Any) -> int | None:
        if isinstance(fitted, dict) and "table_" in fitted:  # raw columns, checked on restore
            names = fitted["table_"].get("names") if isinstance(fitted["table_"], dict) else None
            return len(names) if isinstance(names, list) else None
        return super()._snapshot_width(fitted, rows)


class QSSClassifier(ClassifierMixin, ClassifierTargets, _QSSBase):
    """Exact-unlearning classifier: g on D° plus quantized residual statistics of all rows.

    Parameters
    ----------
    mode : {"exact", "label", "dp"}
        "exact" (QSS-E): the whole schema depends on D° only, ``forget`` erases rows exactly.
        "label" (QSS-L): the codebook is trained on all inputs; ``forget`` erases labels.
        "dp" (QSS-DP): exact mode whose released statistics carry keyed Gaussian noise for
        (``epsilon``, ``delta``)-label-DP of the rows outside D°; needs ``secret_key``.
        Still exact: ``forget`` equals a refit bit for bit (docs/privacy.md).
    rho : float
        Fraction of rows (by keyed hash) in each instance's schema subset D°.
    n_instances : int
        p redundant instances; a request blocks only if all p are rebuilding.
    min_schema_rows : int or "auto"
        D° keeps at least this many labeled rows (the lowest keyed draws), so small data sets
        fit; "auto" is max(50, 5 · classes). D° stays a function of the set of rows, so
        exactness holds; the price is a higher ``effective_rho_`` on small data.
    n_levels, n_centroids : int or None
        ℓ and b of the residual quantizer; None chooses from D° alone.
    partition : {"auto", "rq", "trees", "hyperplanes"}
        How rows are cut into cells. "auto": "trees" in exact mode, "rq" in label and dp
        modes or when ``n_levels``/``n_centroids`` are set (chosen by
        benchmarks/results/partitions.md). "rq": the paper's residual-quantization codebook (k-means
        on D° in exact mode). "trees": 64 random oblivious trees whose thresholds are values of
        random D° rows; "hyperplanes": 64 random hyperplane hashes of D°-standardized
        features. The flat partitions need few D° rows, are far more accurate in exact mode
        on many classes, and a forget touches only one cell per table: nothing is
        re-materialized before the next prediction. See docs/partitions.md.
    head : {"auto", "ridge", "shared-ridge", "shared-rf", "newton", "none"}
        "ridge": each instance also keeps an exact ridge regression of g's residuals on φ(x)
        over *all* rows, from int64 sums Σvvᵀ and Σvrᵀ (exact under deletion), and serves it
        instead of the tables when its out-of-fold gain is larger (g is fit on D° alone; the
        head is what lifts image and text features to SISA's accuracy). Costs (d + 1)²
        integers per instance and one (d + 1)² factorization on the first prediction after
        a change. "newton" (classification): one Newton step of one-vs-rest logistic
        regression started from g's probabilities, also from exact integer sums (per class
        Σ p_c(1 − p_c) v vᵀ), served as softmax(log g + δᵀv) — closer to SISA's logistic
        shards on image features (benchmarks/results/heads.md), at k more
        (d + 1)² sums and factorizations per instance. "shared-ridge": the ridge head on the
        L2-normalized input x itself instead of φ(x) (no D°-fitted LDA directions), so every
        instance holds the same Gram matrix and the p instances share one factorization and
        one stacked solve after a change (the fastest head to forget and serve; the same
        accuracy as "ridge" on the paper benchmark, benchmarks/results/heads.md). With a
        learned encoder its input is the instance's f(x): per-instance Grams again.
        "shared-rf": "shared-ridge" on [x̂, ψ(x̂)], x̂ the normalized input and ψ E fixed,
        data-free random ReLU features (E = 64·⌈d/64⌉, at most 512): still one Gram for all
        instances, closer to SISA on image features (docs/partitions.md) at a (d + E + 1)²
        factorization per change; features as given only (refused with an encoder). "auto":
        with a flat partition outside mode="dp", "shared-rf" for classification and
        "shared-ridge" for regression ("ridge" with a learned encoder); "none": tables only.
    alpha : float or "auto"
        Weight of the quantized correction; "auto" cross-fits it on the statistics' two folds.
    shrinkage : float or "auto"
        λ in μ = S / (n + λ); "auto" cross-fits it the same way.
    base_model : "auto" or estimator
        g: logistic regression (n° < 5000) or a one-hidden-layer MLP; or any classifier with
        ``predict_proba``.
    lda : bool or "auto"
        Append an LDA projection (fitted on D°) to the normalized features.
    rebuild : {"background", "sync"}
        Whether D° hits rebuild in a background thread or before ``forget`` returns.
    random_state : int or None
        Seeds and (unless ``secret_key`` is set) the membership key: a reproducible model.
        None draws a seed at each ``fit`` and keeps it in ``random_state_`` (saved with the
        model): forgets, rebuilds and reloads use it, so ``forget`` still equals a fit
        without the rows *with* ``random_state=model.random_state_``.
    secret_key : bytes, str or None
        Key of the keyed hash that decides D°; set it in production so nobody can aim
        deletions at D°. Never shown in ``repr``, never written to files unless asked.
    encoder : learned encoder or None
        An encoder f learned from data (``learned = True``, e.g.
        :class:`forgetting.encoders.LightGBMLeafContrib`). It is part of the schema: each
        instance trains its own copy on D° only and retrains it on rebuild, so exactness
        holds. Frozen encoders (identity, MiniLM) are applied to ``X`` before ``fit``.
    epsilon, delta : float or None
        mode="dp": the privacy of each release (ε > 0, 0 < δ < 1); ``privacy_`` reports it
        and its composition over releases.
    clip : float or None
        mode="dp", regressor only: residuals (in D°-standardized units) are clipped to ±clip,
        which bounds one label's influence.

    See Also
    --------
    ExactForestClassifier : the model for tables (numeric and categorical columns, missing
        values): closer to a retrained HistGradientBoosting there. QSS is the model for
        embeddings (text, images), raw pixels, semi-supervised label mode and ``mode="dp"``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_digits
    >>> from forgetting import QSSClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> model = QSSClassifier(rho=0.05, rebuild="sync").fit(X, y, ids=range(len(y)))
    >>> receipt = model.forget([3, 14, 15])
    >>> refit = QSSClassifier(rho=0.05).fit(
    ...     np.delete(X, [3, 14, 15], axis=0), np.delete(y, [3, 14, 15]),
    ...     ids=[i for i in range(len(y)) if i not in (3, 14, 15)])
    >>> bool(np.array_equal(model.predict_proba(X), refit.predict_proba(X)))
    True
    >>> model.state_digest() == refit.state_digest()
    True
    """

    _task = "classification"

    def fit(
        self, X: Any, y: Any, ids: Sequence[Hashable] | None = None, **fit_params: Any
    ) -> QSSClassifier:
        """Fit on rows ``X`` with labels ``y`` and unique ``ids`` (default ``range(n)``).

        In label mode, ``y == -1`` marks unlabeled rows (scikit-learn's semi-supervised
        convention, numeric labels only): they shape the codebook only. A dask array or
        DataFrame ``X`` is fitted on the active dask.distributed client (bit for bit the
        in-memory fit; ``pip install "forgetting[distributed]"``, docs/distributed.md).
        ``sample_weight`` is refused (:meth:`_refuse_fit_params` says why).
        """
        self._refuse_fit_params(fit_params)
        return self._fit(X, y, ids)

    def _unlabeled(self, y: np.ndarray) -> np.ndarray | None:
        """Label mode: ``y == -1`` marks an unlabeled row."""
        return user_unlabeled(y) if self.mode == "label" else None

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities: g(x) + α·correction, clipped at 0 and renormalized.

        A row whose outputs are all ≤ 0 (possible when the correction outweighs g, e.g. under
        mode="dp" noise) gets probability 1 on its largest output — the class ``predict``
        returns — rather than 0/0.
        """
        raw = self._outputs(X)
        out = np.maximum(raw, 0.0)
        total = out.sum(axis=1, keepdims=True)
        empty = total[:, 0] <= 0.0
        if np.any(empty):
            out[empty] = 0.0
            out[empty, np.argmax(raw[empty], axis=1)] = 1.0
            total[empty] = 1.0
        return out / total

    def predict(self, X: Any) -> np.ndarray:
        """The class with the largest output (ties: the first class in ``classes_``).

        The labels alone: after a change, an exact head that serves need not be solved when
        its tracked weights make every row's winner certain (QSSEngine.certified_labels —
        the same labels, bit for bit); :meth:`predict_proba` always takes the exact route."""
        if "table_" in self.__dict__:
            with self.table_.lock:
                labels = self._labels(self._check_X(X))
        else:
            labels = self._labels(self._check_X(X))
        return self.classes_[labels]

    def _labels(self, X: np.ndarray) -> np.ndarray:
        labels = self.engine_.certified_labels(X)
        if labels is None:
            labels = np.argmax(self.engine_.predict_outputs(X), axis=1)
        return labels


class QSSRegressor(RegressorMixin, RegressorTargets, _QSSBase):
    """Exact-unlearning regressor (k = 1): g on D° plus quantized residual statistics.

    Same parameters as :class:`QSSClassifier` ("auto" ``min_schema_rows`` is 50). In label
    mode, ``y = NaN`` marks unlabeled rows in ``fit``. Targets are standardized with D°'s mean
    and scale inside the schema.

    See Also
    --------
    ExactForestRegressor : the model for tables (categorical columns, missing values,
        non-linear targets); QSS for embeddings, label mode and ``mode="dp"``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_diabetes
    >>> from forgetting import QSSRegressor
    >>> X, y = load_diabetes(return_X_y=True)
    >>> model = QSSRegressor(rho=0.2, rebuild="sync").fit(X, y)
    >>> model.forget([0, 1]).scope
    'instance'
    >>> refit = QSSRegressor(rho=0.2).fit(X[2:], y[2:], ids=range(2, len(y)))
    >>> bool(np.array_equal(model.predict(X), refit.predict(X)))
    True
    """

    _task = "regression"

    def fit(
        self, X: Any, y: Any, ids: Sequence[Hashable] | None = None, **fit_params: Any
    ) -> QSSRegressor:
        """Fit on rows ``X`` with targets ``y`` (NaN = unlabeled, label mode) and ``ids``;
        a dask ``X`` is fitted on the active dask.distributed client (see QSSClassifier.fit).
        ``sample_weight`` is refused (:meth:`_refuse_fit_params` says why)."""
        self._refuse_fit_params(fit_params)
        return self._fit(X, y, ids)

    def _allow_unlabeled(self) -> bool:
        return self.mode == "label"

    def predict(self, X: Any) -> np.ndarray:
        return self._outputs(X)[:, 0]


def defaults_fingerprint() -> str:
    """12 hex digits naming the shipped defaults: both estimators' default parameters, what
    ``partition="auto"`` and ``head="auto"`` resolve to for each task, the head-vs-tables
    factor and the library version.

    Why: a benchmark's figures describe the model it measured. Results files record this
    fingerprint (the lab's ``write_results``), so a figure quoted from a file written before
    a default changed is detected (tests/test_results_staleness.py) rather than silently
    describing a model no longer shipped.
    """
    import hashlib
    import json
    from importlib.metadata import PackageNotFoundError, version

    from ..content.tables.flat_content import TABLES_GAIN_FACTOR
    from ..parameters import resolve_head

    try:
        release = version("forgetting")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        release = "unknown"
    described = {"version": release, "tables_gain_factor": TABLES_GAIN_FACTOR}
    for cls in (QSSClassifier, QSSRegressor):
        params = cls().get_params(deep=False)
        task = cls._task
        described[cls.__name__] = {
            **{k: repr(v) for k, v in sorted(params.items())},
            "partition_resolved": resolve_partition(params),
            "head_resolved": repr(resolve_head(params, task)),
        }
    blob = json.dumps(described, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
