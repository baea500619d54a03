"""The serving route: φ, g and the cells of the rows a prediction asks for.

Why a route of its own: the statistics — every row's contribution, computed at fit, insert and
rebuild — must keep the bits they were stored with, so φ and g there are the fitted models' own
arithmetic in canonical blocks (:mod:`forgetting._rowwise`, :mod:`.direct`). A prediction's
bits are recomputed on every call and never stored: they need only be a fixed function of the
row and the schema — the same alone or in any batch, under one instance or several, and so the
same for a model after ``forget`` and for its refit. The first prediction after a deletion
encodes one row in each of the p schemas, and through the models' own arithmetic that is some
two dozen small numpy and BLAS calls, whose overhead dwarfs the arithmetic on one row.

What it computes:

- u, the input normalized row by row: the sum of squares left to right, its root, each entry
  divided by it (:func:`normalized`) — the first step of every schema's φ (features used as
  given) and of an input head's features when it serves.
- For a schema whose g is a multinomial ``LogisticRegression`` on φ = the narrow LDA
  projection or u itself (the exact-mode default; :func:`serves_compiled`): t = u P,
  φ = [u, t] / ‖[u, t]‖ (φ = u without LDA) and the scores φ coef_ᵀ + intercept_, every sum
  left to right from its first term; then scikit-learn's softmax (numpy's, row by row), g's
  columns and the cells of φ. One compiled call for the p schemas
  (``schema._kernels.serve_normalize``/``serve_scores``), or the numpy definition here
  (``np.add.accumulate`` sums in that very order): the same bits either way, so which runs
  changes timings only (tests/schema/test_serving.py).
- Any other schema (a binary or regression g, an encoder, an LDA model without the narrow
  projection): :meth:`Schema.encode` on ``SERVE_BLOCK_ROWS`` blocks, from the same u.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression

from .._parallel import serial_map
from .._rowwise import SERVE_BLOCK_ROWS, kept_for
from ..content.kernels import SCHEMA_KERNELS

_CHUNK_ROWS = 256
"""Rows per step of the numpy definition: its products are (rows, d + e, k) temporaries."""


def normalized(X: np.ndarray) -> np.ndarray:
    """Serving's u: each row of ``X`` (n, d) divided by its L2 norm (all-zero rows stay
    zero), the sum of squares taken left to right — a function of the row alone."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, d = X.shape
    out = np.empty((n, d), dtype=np.float64)
    if n == 0 or d == 0:
        return out
    kernels = SCHEMA_KERNELS.get(n * d)
    if kernels is not None:
        kernels.serve_normalize(X, out)
        return out
    for start in range(0, n, _CHUNK_ROWS):
        block = X[start : start + _CHUNK_ROWS]
        norm = np.sqrt(np.add.accumulate(block * block, axis=1)[:, -1])
        norm[norm == 0.0] = 1.0
        np.divide(block, norm[:, None], out=out[start : start + _CHUNK_ROWS])
    return out


def serves_compiled(schema) -> bool:
    """Whether ``schema``'s φ and g are served by this module's own sums (see the module
    docstring); otherwise by :meth:`Schema.encode` in serving blocks."""
    return _arrays(schema) is not None


def encode(
    schemas: Sequence,
    X: np.ndarray,
    u: np.ndarray | None,
    heads: Sequence[bool],
    head_inputs: np.ndarray | None = None,
    each: Callable = serial_map,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per schema, ``(codes, g, inputs)`` of rows ``X`` for a prediction — what
    :meth:`Schema.encode` returns, by the serving route. ``u``: :func:`normalized` of ``X``
    (None when the schemas have an encoder); ``heads[r]``: whether schema r's third item is
    its head's inputs (``head_inputs`` when the caller computed them once for all) rather
    than φ; ``each``: how to map over the schemas (a thread pool for many rows)."""
    out: list = [None] * len(schemas)
    if u is None and any(schema.encoder is None for schema in schemas):
        u = normalized(X)  # serving's u whichever schemas ask: a function of the row alone
    compiled = [r for r, schema in enumerate(schemas) if serves_compiled(schema)]
    if compiled and X.shape[0] > 0:
        # one call per shape of arrays; one per schema, each on a thread, for many rows
        groups = [[r] for r in compiled] if each is not serial_map else _groups(schemas, compiled)
        computed = each(lambda group: _phi_and_proba([schemas[r] for r in group], u), groups)
        for group, results in zip(groups, computed, strict=True):
            for r, (phi, proba) in zip(group, results, strict=True):
                schema = schemas[r]
                codes = (
                    schema.codebook.encode(phi)
                    if schema.partition is None
                    else schema.partition.cells(phi)
                )
                base = schema.base_model
                g = np.zeros((X.shape[0], base.n_outputs), dtype=np.float64)
                g[:, base.columns] = proba
                inputs = schema.served_inputs(phi, X, SERVE_BLOCK_ROWS, u, heads[r], head_inputs)
                out[r] = (codes, g, inputs)
    rest = [r for r in range(len(schemas)) if out[r] is None]
    if rest:
        done = each(
            lambda r: schemas[r].encode(
                X,
                SERVE_BLOCK_ROWS,
                u if schemas[r].encoder is None else None,
                head=heads[r],
                head_inputs=head_inputs,
            ),
            rest,
        )
        for r, result in zip(rest, done, strict=True):
            out[r] = result
    return out


def _phi_and_proba(schemas: Sequence, u: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """φ and g's probabilities (over its own classes) of rows ``u`` under ``schemas``, whose
    arrays have one shape (:func:`_groups`): one compiled call for all of them."""
    P, coef, b = _stacked(schemas)
    s, n = len(schemas), u.shape[0]
    D, k = coef.shape[1], coef.shape[2]
    kernels = SCHEMA_KERNELS.get(s * n * D * k)
    if kernels is not None:
        phi = np.empty((s, n, D), dtype=np.float64)
        scores = np.empty((s, n, k), dtype=np.float64)
        kernels.serve_scores(u, P, coef, b, phi, scores)
    else:
        phi, scores = _scores_numpy(u, P, coef, b)
    # scikit-learn's softmax (schema.direct), row by row
    flat = scores.reshape(s * n, k)
    flat -= np.max(flat, axis=1).reshape((-1, 1))
    np.exp(flat, out=flat)
    flat /= np.sum(flat, axis=1).reshape((-1, 1))
    return [(phi[r], scores[r]) for r in range(s)]


def _scores_numpy(u: np.ndarray, P: np.ndarray, coef: np.ndarray, b: np.ndarray):
    """The definition ``schema._kernels.serve_scores`` computes: the same products, each sum
    left to right from its first term (``np.add.accumulate``), the same quotients."""
    s, n, d = coef.shape[0], u.shape[0], u.shape[1]
    e = P.shape[2]
    phi = np.empty((s, n, d + e), dtype=np.float64)
    scores = np.empty((s, n, coef.shape[2]), dtype=np.float64)
    for r in range(s):
        for start in range(0, n, _CHUNK_ROWS):
            rows = slice(start, start + _CHUNK_ROWS)
            block = u[rows]
            if e == 0:
                phi[r, rows] = block
            else:
                t = np.add.accumulate(block[:, :, None] * P[r][None], axis=1)[:, -1]
                squares = np.concatenate((block * block, t * t), axis=1)
                norm = np.sqrt(np.add.accumulate(squares, axis=1)[:, -1])
                norm[norm == 0.0] = 1.0
                phi[r, rows, :d] = block / norm[:, None]
                phi[r, rows, d:] = t / norm[:, None]
            products = phi[r, rows][:, :, None] * coef[r][None]
            scores[r, rows] = np.add.accumulate(products, axis=1)[:, -1] + b[r]
    return phi, scores


def _arrays(schema) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(P (d, e), coef_ᵀ (d + e, k), intercept (k,)) of a schema served by this module's
    sums, else None — kept with the schema (its fitted arrays never change)."""
    kept = kept_for(schema)
    if "serving arrays" not in kept:
        kept["serving arrays"] = _fitted_arrays(schema)
    return kept["serving arrays"]


def _fitted_arrays(schema) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    est = schema.base_model.estimator
    pre = schema.preprocessor
    if (
        schema.encoder is not None
        or schema.base_model.task != "classification"
        or type(est) is not LogisticRegression
        or np.ndim(est.coef_) != 2
        or est.coef_.shape[0] < 3  # binary: expit, another formula
        or (pre.uses_lda and pre.projection is None)  # scikit-learn's wide LDA product
    ):
        return None
    d = est.coef_.shape[1]
    if pre.uses_lda:
        P = np.ascontiguousarray(pre.projection, dtype=np.float64)
        d = P.shape[0]
        if P.shape[0] + P.shape[1] != est.coef_.shape[1]:
            return None
    else:
        P = np.zeros((d, 0), dtype=np.float64)
    coef = np.ascontiguousarray(np.asarray(est.coef_, dtype=np.float64).T)
    b = np.ascontiguousarray(np.asarray(est.intercept_, dtype=np.float64))
    if b.shape != (coef.shape[1],):
        return None
    return P, coef, b


def _groups(schemas: Sequence, compiled: Sequence[int]) -> list[list[int]]:
    """The compiled schemas grouped by the shapes of their arrays (one call per group)."""
    groups: dict[tuple, list[int]] = {}
    for r in compiled:
        P, coef, _ = _arrays(schemas[r])  # type: ignore[misc]
        groups.setdefault((P.shape, coef.shape), []).append(r)
    return list(groups.values())


def _stacked(schemas: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``schemas``' arrays stacked (s, ...), kept with the first schema for the others
    (checked by weak reference), so a call does not stack them anew. One stack per
    group size, replaced when the others differ: a rebuild replaces another instance's
    schema, and a stack per set of others would pile up while the first schema lives."""
    kept = kept_for(schemas[0])
    key = ("serving stack", len(schemas))
    entry = kept.get(key)
    if entry is not None and all(
        ref() is schema for ref, schema in zip(entry[0], schemas[1:], strict=True)
    ):
        return entry[1]
    arrays = [_arrays(schema) for schema in schemas]
    value = tuple(np.ascontiguousarray(np.stack(part)) for part in zip(*arrays, strict=True))
    kept[key] = ([weakref.ref(schema) for schema in schemas[1:]], value)
    return value  # type: ignore[return-value]
