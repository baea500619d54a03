"""The frozen schema of one QSS instance: φ, g and the partition, trained on D°_r only.

The partition is the paper's RQ codebook (``partition="rq"``) or a flat partition of many
random tables (``"trees"``, ``"hyperplanes"``; see :mod:`.partitions`).

Everything here is a pure function of (schema rows, configuration, seed); it is replaced, never
mutated, when the instance rebuilds.
"""

from __future__ import annotations

import copy
import hashlib
import pickle
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .._rowwise import BLOCK_ROWS, one_blas_thread, rowwise
from . import serving
from .base_model import BaseModel, fit_base_model
from .codebook import Codebook, train_codebook
from .membership import MembershipRule
from .partitions import ThresholdPartition, fit_partition
from .preprocess import Preprocessor, fit_preprocessor, l2_normalize
from .random_features import RF_SEED, RandomFeatures, random_features, rf_width
from .selection import choose_lda, choose_n_centroids, choose_n_levels

HEAD_KINDS = ("ridge", "newton", "shared-ridge", "shared-rf")
"""The exact heads an instance may keep (content.heads): "ridge" and "newton" on φ — the
normalized input plus the D°-fitted LDA directions, so each instance's features differ —
"shared-ridge", the ridge head on the normalized input itself: the same features, hence the
same Gram matrix, in every instance, so the p instances share one factorization (design.md
§5.13) — and "shared-rf", the same on the normalized input widened by E fixed, data-free
random ReLU features (:mod:`.random_features`): still one Gram for every instance."""
INPUT_HEADS = ("shared-ridge", "shared-rf")
"""The heads whose features are a fixed function of the input as given (no encoder)."""


def head_kind(head: bool | str | None) -> str | None:
    """A schema's ``head`` as one of :data:`HEAD_KINDS` or None; True (the boolean form a
    saved model may carry) is "ridge". Anything else is refused."""
    if head is True:
        return "ridge"
    if head is False or head is None:
        return None
    if head in HEAD_KINDS:
        return str(head)
    raise ValueError(f"unknown head {head!r}; expected one of {HEAD_KINDS} or False")


@dataclass(frozen=True)
class SchemaConfig:
    """The configuration a schema is trained under (resolved from the estimator's params)."""

    task: str
    n_outputs: int
    rho: float
    min_schema_rows: int
    """D° holds at least this many labeled rows (see :class:`.membership.MembershipRule`)."""
    n_levels: int | None
    n_centroids: int | None
    lda: bool | str
    base_model: Any
    encoder: Any = None
    """A *learned* encoder f (``fit(X, y, seed)``, ``transform(X)``), trained on D° only, or
    None for features used as given."""
    residual_clip: float | None = None
    """mode="dp", regression: residuals (in D°-standardized units) are clipped to ±this."""
    partition: str = "rq"
    """How rows are cut into cells: "rq" (the paper's residual codebook) or a flat partition
    ("trees", "hyperplanes"), see :mod:`.partitions`."""
    head: bool | str = False
    """Keep an exact head on all rows (:mod:`forgetting.content.heads`): "ridge" (or True),
    "newton", "shared-ridge" or "shared-rf" (features used as given only); flat partitions
    only."""

    @property
    def membership(self) -> MembershipRule:
        return MembershipRule(self.rho, self.min_schema_rows)


@dataclass(frozen=True)
class Schema:
    preprocessor: Preprocessor
    base_model: BaseModel
    codebook: Codebook | None
    n_schema_rows: int
    encoder: Any = None
    residual_clip: float | None = None
    """Regression residuals are clipped to ±this before quantization (mode="dp")."""
    partition: ThresholdPartition | None = None
    """A flat partition, used instead of the codebook (which is then None)."""
    probe_codes: np.ndarray | None = None
    """Flat partitions: the cells (m, T) and statistic folds (m,) of the probe rows — D°'s rows,
    at most :data:`MAX_PROBES` of them (:func:`probe_rows`) — on which the content estimates
    the square term of its α cross-fit (see content.tables)."""
    probe_folds: np.ndarray | None = None
    head: bool | str = False
    """The instance keeps an exact head over all rows (content.heads): "ridge" — or True, its
    boolean form in saved models — or "newton" on φ, "shared-ridge" on the normalized input;
    False for none."""
    n_features: int = 0
    """Dimension of the head's features (φ(f(x)), or f(x) for "shared-ridge", or d + E for
    "shared-rf"; set with a head: its sums are (n_features + 1)²)."""
    rf_width: int = 0
    """"shared-rf": E, the number of random ReLU features (:func:`.random_features.rf_width`
    of d at fit time; kept, so a model keeps its E if the rule changes); 0 otherwise."""
    rf_seed: int = 0
    """"shared-rf": the seed of the random projection R (:data:`.random_features.RF_SEED` at
    fit time); 0 otherwise."""
    rf_exact: bool = False
    """"shared-rf": ψ on the integer grid (:mod:`.random_features`: exact, so a row is computed
    alone); False: the float product in canonical blocks, which a saved model without the
    flag keeps."""

    @cached_property
    def head_kind(self) -> str | None:
        """One of :data:`HEAD_KINDS` or None (``head`` normalized: True is "ridge").

        This and the other head properties are cached (the schema is frozen: they never
        change): a one-row forget with its first prediction asks for them dozens of times."""
        return head_kind(self.head)

    @cached_property
    def input_head(self) -> bool:
        """Whether the head's features are a fixed function of the input alone — "shared-ridge"
        on features used as given: the same numbers, hence the same Gram sums, in every
        instance (design.md §5.13); "shared-rf" likewise (its random features are data-free,
        the same in every instance)."""
        return self.head_kind in INPUT_HEADS and self.encoder is None

    def head_inputs(
        self, X: np.ndarray, block_rows: int = BLOCK_ROWS, normalized: np.ndarray | None = None
    ) -> np.ndarray:
        """The real-valued features the head is fitted on, for raw rows, in canonical blocks:
        φ(f(x)) for "ridge" and "newton"; for "shared-ridge" the L2-normalized f(x) alone
        (φ's first step, without the D°-fitted LDA directions), which does not depend on D°
        when the features are used as given — every instance then holds the same Gram; for
        "shared-rf" [u, ψ(u)], u the normalized input and ψ its fixed random ReLU features,
        computed in the same ``block_rows`` blocks (:mod:`.random_features`).
        ``normalized``: :func:`normalized_rows` of ``X`` in the same blocks, if already known
        (features used as given only)."""
        kind = self.head_kind
        if kind == "shared-rf":
            if self.encoder is not None:
                raise ValueError('head "shared-rf" takes the features as given (no encoder)')
            U = normalized_rows(X, block_rows) if normalized is None else normalized
            return np.hstack([U, self.input_random_features(U.shape[1])(U, block_rows)])
        if kind != "shared-ridge":
            return self.features(X, block_rows, normalized)
        if self.encoder is None:
            return normalized_rows(X, block_rows) if normalized is None else normalized
        return rowwise(lambda b: l2_normalize(self.encoder.transform(b)), X, block_rows)

    def input_random_features(self, d: int) -> RandomFeatures | None:
        """The ψ of "shared-rf" for d normalized input features (on the integer grid when
        ``rf_exact``); None for every other head."""
        if self.head_kind != "shared-rf":
            return None
        return random_features(d, self.rf_width, self.rf_seed, self.rf_exact)

    def features(
        self, X: np.ndarray, block_rows: int = BLOCK_ROWS, normalized: np.ndarray | None = None
    ) -> np.ndarray:
        """φ(f(x)) for raw rows, in canonical blocks (row-wise bits never depend on the batch).

        ``normalized`` (features used as given): :func:`normalized_rows` of ``X`` in the same
        blocks, φ's first step, which every instance shares; φ is then finished from it with
        the same bits (the normalization is row by row: a block of normalized rows, zero rows
        padding it, is what :meth:`Preprocessor.transform` computes inside its own block)."""
        if self.encoder is None:
            if normalized is not None:
                if not self.preprocessor.uses_lda:
                    return normalized
                return rowwise(
                    self.preprocessor.from_normalized,
                    normalized,
                    block_rows,
                    owner=self.preprocessor,
                    variant="from_normalized",
                )
            return rowwise(self.preprocessor.transform, X, block_rows, owner=self.preprocessor)
        return rowwise(
            lambda b: self.preprocessor.transform(self.encoder.transform(b)), X, block_rows
        )

    def transform(
        self, X: np.ndarray, block_rows: int = BLOCK_ROWS
    ) -> tuple[np.ndarray, np.ndarray]:
        """Codes (n, ℓ) and base-model outputs g(x) (n, k) for raw features ``X``.

        φ and g are float computations, run in canonical blocks so each row gets the same bits
        in any batch; the codes are exact (see :mod:`.codebook`) and need no such care.
        Statistics use the default blocks; predictions pass ``SERVE_BLOCK_ROWS`` (see
        :mod:`forgetting._rowwise`).
        """
        codes, g, _ = self.encode(X, block_rows)
        return codes, g

    def encode(
        self,
        X: np.ndarray,
        block_rows: int = BLOCK_ROWS,
        normalized: np.ndarray | None = None,
        head: bool = True,
        head_inputs: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Codes, g(x) and the head's inputs (:meth:`head_inputs`: φ(f(x)) itself, or the
        normalized f(x) for "shared-ridge", [u, ψ(u)] for "shared-rf"); ``normalized`` as in
        :meth:`features`; ``head_inputs``: those inputs in these blocks when already computed
        (the p instances of an input head share them). With ``head=False`` the third item is
        φ whatever the head (the caller computes the head's inputs in blocks of its own)."""
        Z = self.features(X, block_rows, normalized)
        codes = self.codebook.encode(Z) if self.partition is None else self.partition.cells(Z)
        g = rowwise(self.base_model.predict, Z, block_rows, owner=self.base_model)
        return codes, g, self.served_inputs(Z, X, block_rows, normalized, head, head_inputs)

    def serve(self, X: np.ndarray, head: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`encode` for a prediction: codes, g(x) and the head's inputs (φ with
        ``head=False``) of rows ``X`` by the serving route (:mod:`.serving`) — what the engine
        serves for this schema, alone or beside others."""
        return serving.encode([self], X, None, [head])[0]

    def served_inputs(
        self,
        phi: np.ndarray,
        X: np.ndarray,
        block_rows: int,
        normalized: np.ndarray | None = None,
        head: bool = True,
        head_inputs: np.ndarray | None = None,
    ) -> np.ndarray:
        """The third item :meth:`encode` returns, given the rows' φ: φ itself, or — with
        ``head`` and a head on other inputs — those inputs (``head_inputs`` when known)."""
        if head and not self.head_takes_phi:
            return (
                self.head_inputs(X, block_rows, normalized) if head_inputs is None else head_inputs
            )
        return phi

    @cached_property
    def head_takes_phi(self) -> bool:
        """Whether the head's inputs are φ itself: "ridge", "newton" (or no head), and
        "shared-ridge" where φ is the normalized input (no LDA directions, no encoder)."""
        kind = self.head_kind
        if kind == "shared-ridge":
            return self.encoder is None and not self.preprocessor.uses_lda
        return kind != "shared-rf"

    @cached_property
    def input_head_key(self) -> tuple | None:
        """What an input head's features depend on — (kind, E, seed, ψ on the integer grid) —
        or None when they are not a fixed function of the input: instances with equal keys
        have equal head inputs."""
        if not self.input_head:
            return None
        return (self.head_kind, int(self.rf_width), int(self.rf_seed), bool(self.rf_exact))

    def digest(self) -> bytes:
        """SHA-256 over the schema's learned parameters, in a canonical order."""
        h = hashlib.sha256(b"forgetting-schema-v1")
        if self.encoder is not None:
            h.update(pickle.dumps(self.encoder, protocol=5))
        _hash_value(h, self.preprocessor.lda)
        # optional fields are hashed only when present: a model without them keeps its digest
        if self.preprocessor.projection is not None:
            h.update(b"lda-projection")
            _hash_value(h, self.preprocessor.projection)
        _hash_value(h, self.base_model)
        if self.partition is None:
            _hash_value(h, self.codebook.centroids)
        else:
            h.update(b"flat-partition")
            _hash_value(h, (self.partition, self.probe_codes, self.probe_folds))
        h.update(str(self.n_schema_rows).encode())
        if self.head_kind == "ridge":
            h.update(b"ridge-head")
        elif self.head_kind == "newton":
            h.update(b"newton-head")
        elif self.head_kind == "shared-ridge":
            h.update(b"shared-ridge-head")
        elif self.head_kind == "shared-rf":
            h.update(repr(("shared-rf-head", int(self.rf_width), int(self.rf_seed))).encode())
            if self.rf_exact:  # only when set, as above
                h.update(b"rf-integer-grid")
        if self.residual_clip is not None:
            h.update(repr(("residual_clip", float(self.residual_clip))).encode())
        return h.digest()


def normalized_rows(X: np.ndarray, block_rows: int = BLOCK_ROWS) -> np.ndarray:
    """The L2-normalized rows of raw features in canonical blocks: φ's first step and the
    "shared-ridge" head's input, a fixed function with no fitted state — the same numbers for
    every instance of a model (so serving computes it once for all p)."""
    if 0 < X.shape[0] <= block_rows:
        # a forget's row or a prediction's: the normalization is row by row, the same bits
        # in any block (tests/schema/test_serving_blocks.py), so no padded block
        return l2_normalize(X)
    # a fixed row-local function: many blocks per call once checked (_rowwise)
    return rowwise(l2_normalize, X, block_rows, owner=l2_normalize)


def _hash_value(h, value: Any, depth: int = 0) -> None:
    """Feed a canonical encoding of nested estimator state into ``h``."""
    if depth > 8:
        raise ValueError("estimator state nested too deeply to digest")
    if value is None or isinstance(value, bool | int | float | str | np.generic):
        h.update(repr((type(value).__name__, value)).encode())
    elif isinstance(value, np.ndarray):
        h.update(repr((value.dtype.str, value.shape)).encode())
        if value.dtype == object:
            for item in value.ravel():
                _hash_value(h, item, depth + 1)
        else:
            h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, list | tuple):
        h.update(f"seq{len(value)}".encode())
        for item in value:
            _hash_value(h, item, depth + 1)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(str(key).encode())
            _hash_value(h, value[key], depth + 1)
    elif isinstance(value, np.random.RandomState):
        # An MLP keeps its RandomState; its repr names a memory address, its state does not.
        h.update(b"RandomState")
        _hash_value(h, value.get_state(legacy=True), depth + 1)
    elif hasattr(value, "__dict__"):
        h.update(type(value).__qualname__.encode())
        state = {k: v for k, v in vars(value).items() if not callable(v) or hasattr(v, "__dict__")}
        _hash_value(h, state, depth + 1)
    else:
        text = repr(value)
        if " at 0x" in text:
            raise TypeError(
                f"cannot digest {type(value).__name__}: its repr names a memory address, so "
                "the digest would differ between equal models"
            )
        h.update(text.encode())


MAX_PROBES = 4096
"""At most this many D° rows serve as the flat tables' probes (content.tables.probe_square)."""


def probe_rows(n_schema: int) -> np.ndarray:
    """Which D° rows (in canonical order) are the tables' probes: all of them up to
    :data:`MAX_PROBES`, else that many evenly spaced ones.

    Why a cap: a forget updates the probe terms of every probe in the T cells the row leaves,
    and with a probe per D° row there are ρ·n of them over at most 4 096 cells per table — a
    one-row forget would grow with n, almost all of it in the probe terms (at 10 M rows, see
    benchmarks/results/scale_probecap.md against scale.md). 4 096 rows estimate the square
    term's ratio as well as 50 000 for this purpose; the choice is a function of D° alone, so
    forget ≡ refit is untouched, and a model whose D° has ≤ 4 096 rows (n ≲ 800k at
    ρ = 0.5 %) keeps every D° row as a probe.
    """
    if n_schema <= MAX_PROBES:
        return np.arange(n_schema, dtype=np.intp)
    return (np.arange(MAX_PROBES, dtype=np.int64) * (n_schema - 1) // (MAX_PROBES - 1)).astype(
        np.intp
    )


def train_schema(
    config: SchemaConfig,
    X_schema: np.ndarray,
    y_schema: np.ndarray,
    X_codebook: np.ndarray | None,
    seed: int,
    schema_folds: np.ndarray | None = None,
) -> Schema:
    """Train φ, g and the codebook for one instance, on one BLAS thread.

    One thread always: LAPACK's eigensolver (LDA) and the logistic fit round differently on one
    thread than on two, so a schema trained with whatever count the process had at the moment
    would depend on it — a background rebuild that ran while a prediction had pinned BLAS to
    one thread would train another schema than a refit (tests/schema/test_threads.py), as would a
    refit on a machine with more cores.
    """
    with one_blas_thread():
        return _train_schema(config, X_schema, y_schema, X_codebook, seed, schema_folds)


def _train_schema(
    config: SchemaConfig,
    X_schema: np.ndarray,
    y_schema: np.ndarray,
    X_codebook: np.ndarray | None,
    seed: int,
    schema_folds: np.ndarray | None,
) -> Schema:
    """Train φ, g and the codebook for one instance.

    ``X_schema``/``y_schema`` are D°_r in canonical order. ``X_codebook`` is the codebook's
    training pool in label mode (all inputs), or None in exact mode (the codebook sees D°_r).
    A flat partition (``config.partition``) is drawn from the same rows; ``schema_folds`` are
    D°_r's statistic folds, kept with its cells as the content's probes.
    """
    n_schema = X_schema.shape[0]
    encoder = None
    if head_kind(config.head) == "shared-rf" and config.encoder is not None:
        raise ValueError(
            'head "shared-rf" takes the features as given: with a learned encoder every '
            'instance\'s inputs differ, so nothing is shared; use head="ridge" or "newton"'
        )
    if config.encoder is not None:
        encoder = copy.deepcopy(config.encoder).fit(X_schema, y_schema, seed)
        X_schema = rowwise(encoder.transform, X_schema)
        if X_codebook is not None:
            X_codebook = rowwise(encoder.transform, X_codebook)
    if config.task == "classification":
        _, class_counts = np.unique(y_schema, return_counts=True)
        use_lda = (
            choose_lda(config.task, class_counts, X_schema.shape[1])
            if config.lda == "auto"
            else config.lda
        )
        pre = fit_preprocessor(X_schema, y_schema, bool(use_lda))
    else:
        pre = fit_preprocessor(X_schema, None, False)
    Z_schema = rowwise(pre.transform, X_schema)
    g = fit_base_model(config.base_model, config.task, Z_schema, y_schema, config.n_outputs, seed)
    Z_codebook = Z_schema if X_codebook is None else rowwise(pre.transform, X_codebook)
    if config.partition != "rq":
        partition = fit_partition(
            config.partition, Z_codebook, n_schema, config.rho, config.n_outputs, seed
        )
        folds = np.zeros(n_schema, np.int64) if schema_folds is None else schema_folds
        probes = probe_rows(n_schema)
        kind = head_kind(config.head)
        d = X_schema.shape[1]
        rf = rf_width(d) if kind == "shared-rf" else 0
        n_features = {"shared-ridge": d, "shared-rf": d + rf}.get(kind, Z_schema.shape[1])
        return Schema(
            preprocessor=pre,
            base_model=g,
            codebook=None,
            n_schema_rows=n_schema,
            encoder=encoder,
            residual_clip=config.residual_clip,
            partition=partition,
            probe_codes=partition.cells(Z_schema[probes]),
            probe_folds=np.asarray(folds, dtype=np.int64)[probes],
            head=config.head,
            n_features=int(n_features),
            rf_width=int(rf),
            rf_seed=RF_SEED if kind == "shared-rf" else 0,
            rf_exact=kind == "shared-rf",
        )
    n_centroids = config.n_centroids or choose_n_centroids(
        Z_codebook.shape[0], n_schema, config.rho
    )
    n_levels = config.n_levels or choose_n_levels(n_centroids)
    codebook = train_codebook(Z_codebook, n_levels, n_centroids, seed)
    return Schema(
        preprocessor=pre,
        base_model=g,
        codebook=codebook,
        n_schema_rows=n_schema,
        encoder=encoder,
        residual_clip=config.residual_clip,
    )
