"""What a prediction computes once the engine has chosen the instances it serves and their
contents: the rows' inputs for every schema, and each instance's outputs.

The engine (:mod:`.core`) holds the lock and decides *which* contents serve; everything here
is a function of immutable schemas, the served contents and the rows, so the encoding runs
without the lock. The per-instance outputs are summed in instance order by the caller, so the
mean is the same bits whoever computed each part.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._parallel import PARALLEL_ROWS, map_instances, serial_map
from .._rowwise import SERVE_BLOCK_ROWS
from ..content.heads import LinearHead, LogitRidgeHead, NewtonHead
from ..content.heads.fixed_point import FEATURE_BITS
from ..content.heads.newton import WEIGHT_BITS
from ..content.heads.private import PrivateHead
from ..content.tables import FlatContent, FlatTables
from ..instance import Instance
from ..privacy import PrivacyLedger
from ..privacy.ledger import HEAD_SHARE
from ..privacy.sensitivity import grid_feature_norm
from ..schema import serving


def serves_head(content) -> bool:
    """Whether an instance's served content reads its head's inputs (a head's weights, not
    the tables: content.tables.FlatContent)."""
    return isinstance(content, FlatContent) and content.head is not None


def combine(schema, content, codes: np.ndarray, g: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """g(x) + α·correction(cells) in the target's units, from a row's codes and g(x)."""
    if isinstance(content, FlatContent):
        out = content.outputs(codes, g, Z)
    else:
        correction = np.zeros_like(g)
        for m in range(codes.shape[1]):
            correction += content.means[m][codes[:, m].astype(np.intp)]
        out = g + content.alpha * correction
    base = schema.base_model
    if base.task == "regression":
        out = out * base.y_scale + base.y_mean
    return out


def instance_outputs(schema, content, X: np.ndarray) -> np.ndarray:
    """One instance's outputs for ``X`` through the schema's own path (``Schema.serve``): the
    definition the serving route must match bit for bit (tests/schema/test_serving_blocks.py)."""
    return combine(schema, content, *schema.serve(X))


def encode_served(
    schemas: Sequence[Any], X: np.ndarray, heads: Sequence[bool]
) -> tuple[list, np.ndarray | None, Callable]:
    """Each schema's (codes, g, head inputs) for the rows ``X``, the normalized input they
    share (None with learned encoders) and how the per-instance work is mapped.

    The normalized input has no fitted state: computed once for all instances. A head's
    inputs are computed only where an instance serves its head (``heads``); an input head's
    features ("shared-rf": u and its random features) are the same in every instance with the
    same key, so they are computed once when several instances serve such a head."""
    normalized = None
    if all(schema.encoder is None for schema in schemas):
        normalized = serving.normalized(X)
    shared = None
    first = schemas[0]
    if (
        sum(heads) > 1
        and first.input_head_key is not None
        and not first.head_takes_phi
        and all(schema.input_head_key == first.input_head_key for schema in schemas)
    ):
        shared = first.head_inputs(X, SERVE_BLOCK_ROWS, normalized)
    each = map_instances if len(X) >= PARALLEL_ROWS else serial_map
    encoded = serving.encode(schemas, X, normalized, list(heads), shared, each)
    return encoded, normalized, each


def contents_in_jobs(serving_instances: list[Instance], alpha, shrinkage) -> list:
    """The served contents of instances that re-materialize after every change (the RQ
    codebook's), their cross-fit directions as separate jobs on the pool's threads
    (Instance.content_jobs: 2p jobs pack onto two cores where p whole instances would not)
    beside the means at each instance's likely λ, then each instance's choice of (α, λ) —
    here, and only where the choice moved its means computed too."""
    split = [inst.content_jobs(alpha, shrinkage) for inst in serving_instances]
    jobs = [job for instance_jobs, _ in split for job in instance_jobs]
    results = map_instances(lambda job: job(), jobs) if jobs else []
    finishing = []
    at = 0
    for instance_jobs, finish in split:
        finishing.append((finish, results[at : at + len(instance_jobs)]))
        at += len(instance_jobs)
    return [finish(results) for finish, results in finishing]


def privatizer(ledger: PrivacyLedger, key: bytes, inst: Instance, r: int) -> Callable:
    """mode="dp": the function that turns instance ``r``'s accumulators — and its head, if it
    keeps one — into the released, noised copies (``Instance.content_for``'s ``privatize``:
    ``privatize(acc, head) -> (noisy_acc, noisy_head or None)``). The noise is a keyed
    function of the instance's state (forgetting.privacy.noise); totals, probe terms, the
    head's weights and its gain are recomputed from the noised sums (post-processing), never
    from the exact ones. With a head, the release's budget is split: ``HEAD_SHARE`` to the
    head's cross sums, the rest to the tables (docs/privacy.md, Theorem 3)."""
    share = HEAD_SHARE if inst.head is not None else 0.0

    def privatize(acc, head=None):
        noisy = acc.copy()
        if share == 1.0:  # the head takes the whole release: the tables' sums are not used
            noisy.sums = np.zeros_like(acc.sums)
        else:
            noisy.sums = ledger.noisy_fixed_point(
                acc.sums,
                acc.scale_bits,
                key=key,
                state_digest=inst.digest(),
                instance=r,
                counts=acc.counts,
                head_share=share,
            )
        if isinstance(noisy, FlatTables):
            noisy.rebuild_totals()
            if noisy.probe_cells is not None:
                noisy.set_probes(inst.schema.probe_codes, inst.schema.probe_folds)
        if head is None:
            return noisy, None
        return noisy, noisy_head(ledger, key, inst, r, head, share)

    return privatize


def noisy_head(
    ledger: PrivacyLedger, key: bytes, inst: Instance, r: int, head: LinearHead, share: float
) -> PrivateHead:
    """A copy of ``head`` whose cross sums (and, for the logistic step's head, curvature
    sums) carry the release's noise; its Gram sums — no labels — are the exact ones, shared
    read-only. The copy knows no solve cache and no gain filter: its weights and its gain
    are solved from the noisy sums alone, at a penalty cross-fitted on them
    (content.heads.private)."""
    if isinstance(head, NewtonHead):
        raise ValueError("mode='dp' does not release a Newton head (its weighted Grams)")
    curvature = head.weights if isinstance(head, LogitRidgeHead) else None
    cross, curv, sigma = ledger.noisy_head(
        head.cross,
        2.0**-FEATURE_BITS * head.target_unit(),
        curvature,
        2.0**-WEIGHT_BITS,
        key=key,
        state_digest=inst.digest(),
        instance=r,
        feature_norm=head_feature_norm(inst.schema, head.cross.shape[1]),
        head_share=share,
    )
    changes = {"_gram": head.gram, "cross": cross, "counts": head.counts.copy()}
    if curv is not None:
        changes["weights"] = curv
    return PrivateHead(dataclasses.replace(head, **changes), sigma)


def head_feature_norm(schema, D: int) -> float:
    """A bound on ‖v‖₂ = ‖[φ(x), 1]‖₂ (the head's grid, real units) that holds for every
    possible row, from the schema alone (docs/privacy.md, Theorem 3): φ's rows are
    L2-normalized for every head but "shared-rf", whose φ = [u, ψ(u)] adds the random ReLU
    features ψ(u) = clip(relu(ũᵀR), 0, 1) with ‖ψ‖ ≤ min(√E, ‖R‖₂ · ‖ũ‖)."""
    if schema.head_kind != "shared-rf":
        return grid_feature_norm(1.0, D - 1)
    E = int(schema.rf_width)
    d = D - 1 - E
    rf = schema.input_random_features(d)
    u = (1.0 + math.sqrt(d) * 2.0**-15) * (1.0 + 1e-9)  # ‖ũ‖ after the 2^-14 grid
    psi = min(math.sqrt(E), _spectral_norm(rf) * u * (1.0 + 1e-9))
    return grid_feature_norm(math.hypot(1.0, psi), D - 1)


@functools.lru_cache(maxsize=16)
def _spectral_norm(rf) -> float:
    """‖R‖₂ of ψ's projection in the units ψ uses (R̃ · 2^-b on the grid): data-free."""
    R = np.ldexp(np.asarray(rf.R, dtype=np.float64), -int(rf.weight_bits))
    return float(np.linalg.norm(R, 2)) * (1.0 + 1e-9)
