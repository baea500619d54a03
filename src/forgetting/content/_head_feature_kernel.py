"""Compiled finishing pass of the "shared-rf" head's fixed-point features
(schema.random_features.RandomFeatures.fixed_point_into).

Why compiled: after the one matrix product, the features are five elementwise steps on ψ and
one on u, written into the columns of an (n, d + E + 1) array. numpy runs an elementwise step
on such a column block as one inner loop per row — 3 ms per step for 20k × 128 where the same
step on a contiguous array takes 0.6 ms — so the composed form spent ~30 ms of a 20k-row batch
forget there. One compiled pass writes each row once.

The same bits as numpy's steps: multiplying by a power of two is ``np.ldexp`` (both are the
exact product, rounded once when it is not representable), ``min(max(x, lo), hi)`` is
``np.clip``, and ``np.rint`` rounds half to even in both; tests/test_rf_head.py compares the
two paths. Loaded like the table kernels (content.kernels.LazyKernel).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, error_model="numpy")
def fixed_point_rows(ui, P, down, unit, out) -> None:
    """out[i] = [clip(ui[i], ±unit), clip(rint(clip(P[i] · down, 0, 1) · unit), ±unit), unit]
    for ũ = ``ui`` (n, d) and the products ``P`` = ũ R̃ (n, E); ``down`` = 2^-(14 + b),
    ``unit`` = 2^14."""
    n, d = ui.shape
    E = P.shape[1]
    for i in range(n):
        row = out[i]
        for j in range(d):
            row[j] = min(max(ui[i, j], -unit), unit)
        for j in range(E):
            psi = min(max(P[i, j] * down, 0.0), 1.0)
            row[d + j] = min(max(np.rint(psi * unit), -unit), unit)
        row[d + E] = unit
