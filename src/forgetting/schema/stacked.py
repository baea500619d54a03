"""One padded block of rows through the p instances' φ and g at once: the first prediction
after a forget.

Why: that prediction encodes one row in each of the p schemas — φ's LDA directions, the L2
normalization, g's logistic scores and softmax — on an 8-row padded block, a dozen small numpy
calls per schema (~37 µs each at d = 128, k = 10, ~0.11 ms of a forget + first predict at
p = 3). The schemas differ only in their fitted arrays, so the same steps can run once on the
stacked blocks: numpy's matmul over a stack makes the same BLAS call on every (8, d) slice as
on one block, and the normalization and the softmax are row by row (tests/test_serving_blocks.py).
Measured: 138 → 67 µs for three schemas.

Exactness: the stacked route must give each schema the bits its own :meth:`Schema.encode`
gives, or a prediction would depend on how many instances serve it. BLAS picks its kernels by
shape and layout, never by value, so that is checked once per fitted g and stack size, on the
first call (both routes computed and compared; any difference keeps that g on its own route
for good) — the pattern of :mod:`.direct`. Only the common case is stacked: features used as
given, φ's LDA as the narrow projection or no LDA in every schema, and a multiclass
LogisticRegression g of one shape; anything else returns None and the caller encodes schema by
schema.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression

from .._rowwise import kept_for, one_blas_thread
from .preprocess import l2_normalize

_VERDICTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""g's estimator → {stack size: whether the stacked route gave its own route's bits}."""
_LOCK = threading.Lock()


def encode_block(schemas: Sequence, X: np.ndarray, normalized: np.ndarray, block_rows: int):
    """``[schema.encode(X, block_rows, normalized, head=False) for schema in schemas]`` for
    fewer rows than one block — the same codes, g and φ, bit for bit — or None when the
    schemas are not all of the stackable kind (then the caller encodes them one by one)."""
    n = X.shape[0]
    if not (0 < n < block_rows and len(schemas) >= 2 and _kept(schemas, "stackable", _stackable)):
        return None
    estimators = [schema.base_model.estimator for schema in schemas]
    size = len(schemas)
    verdicts = [_VERDICTS.get(est, {}).get(size) for est in estimators]
    if any(v is False for v in verdicts):
        return None
    stacked = _encode_stacked(schemas, normalized, block_rows)
    if all(verdicts):
        return stacked
    own = [schema.encode(X, block_rows, normalized, head=False) for schema in schemas]
    same = [
        all(np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))
        for mine, theirs in zip(stacked, own, strict=True)
    ]
    with _LOCK:
        for est, ok in zip(estimators, same, strict=True):
            _VERDICTS.setdefault(est, {})[size] = ok
    return own


def _stackable(schemas: Sequence) -> bool:
    first = schemas[0]
    lda = first.preprocessor.uses_lda
    shape = (
        first.preprocessor.projection.shape
        if lda and first.preprocessor.projection is not None
        else None
    )
    for schema in schemas:
        est = schema.base_model.estimator
        pre = schema.preprocessor
        if (
            schema.encoder is not None
            or schema.base_model.task != "classification"
            or type(est) is not LogisticRegression
            or est.coef_.ndim != 2
            or est.coef_.shape[0] < 3  # binary: expit, another formula
            or est.coef_.shape != first.base_model.estimator.coef_.shape
            or pre.uses_lda != lda
            or (lda and (pre.projection is None or pre.projection.shape != shape))
        ):
            return False
    return True


def _encode_stacked(schemas: Sequence, normalized: np.ndarray, block_rows: int) -> list:
    """The stacked route: φ and g of the padded block for every schema at once, then each
    schema's codes and its g's columns (what :meth:`Schema.encode` returns)."""
    n, s = normalized.shape[0], len(schemas)
    P, coef_t, intercepts = _kept(schemas, "stacked arrays", _stacked_arrays)
    block = np.zeros((block_rows,) + normalized.shape[1:], dtype=np.float64)
    block[:n] = normalized
    with one_blas_thread():
        if P is not None:
            # Preprocessor.from_normalized per schema: [u, u P] normalized, row by row (the
            # padded rows are zeros, which the normalization leaves zero: only the n rows);
            # [u, u P] written into one array (broadcast_to + concatenate: ~3 µs more)
            d = block.shape[1]
            both = np.empty((s, block_rows, d + P.shape[2]), dtype=np.float64)
            both[:, :, :d] = block
            both[:, :, d:] = np.matmul(block, P)
            both[:, :n] = l2_normalize(both[:, :n].reshape(s * n, -1)).reshape(s, n, -1)
            Z = both
        else:
            Z = np.broadcast_to(block, (s,) + block.shape)
        # direct.predict_proba's softmax of Z coef_ᵀ + intercept_, coef_ᵀ laid out as each g's;
        # the product on the whole padded block (BLAS picks its kernel by shape), the softmax
        # row by row, so on the n rows alone
        scores = (np.matmul(Z, coef_t) + intercepts)[:, :n].reshape(s * n, -1)
        scores -= np.max(scores, axis=1).reshape((-1, 1))
        np.exp(scores, out=scores)
        scores /= np.sum(scores, axis=1).reshape((-1, 1))
        proba = scores.reshape(s, n, -1)
    out = []
    for r, schema in enumerate(schemas):
        phi = Z[r, :n] if schema.preprocessor.uses_lda else normalized  # as Schema.features
        codes = (
            schema.codebook.encode(phi) if schema.partition is None else schema.partition.cells(phi)
        )
        base = schema.base_model
        g = np.zeros((n, base.n_outputs), dtype=np.float64)
        g[:, base.columns] = proba[r]
        out.append((codes, g, phi))
    return out


def _kept(schemas: Sequence, name: str, compute):
    """``compute(schemas)``, kept with the first schema (``_rowwise.kept_for``) under the
    others' identities, checked by weak reference: what depends on the schemas' fitted
    arrays alone changes only when an instance is rebuilt, and every first prediction after
    a forget asked for it — stacking the arrays anew was ~35 µs, the stackability test ~5."""
    kept = kept_for(schemas[0])
    key = (name, tuple(map(id, schemas[1:])))
    entry = kept.get(key)
    if entry is not None and all(
        ref() is schema for ref, schema in zip(entry[0], schemas[1:], strict=True)
    ):
        return entry[1]
    value = compute(schemas)
    kept[key] = ([weakref.ref(schema) for schema in schemas[1:]], value)
    return value


def _stacked_arrays(schemas: Sequence) -> tuple:
    """(LDA directions or None, coef_ᵀ, intercepts) of ``schemas`` stacked (kept: :func:`_kept`)."""
    P = None
    if schemas[0].preprocessor.uses_lda:
        P = np.stack([schema.preprocessor.projection for schema in schemas])
    estimators = [schema.base_model.estimator for schema in schemas]
    coef_t = np.stack([est.coef_ for est in estimators]).transpose(0, 2, 1)
    intercepts = np.stack([est.intercept_ for est in estimators])[:, None, :]
    return P, coef_t, intercepts
