"""Certified labels: the labels of a prediction without solving a changed head.

Why apart: :meth:`CertifiedLabels.certified_labels` is the engine's one-row ``predict`` fast
path after a change (design.md §5.15) — a bound on how far each output can be from the exact
route's, and a winner that leads by more than the bounds. The engine (:mod:`.core`) inherits
it; it reads the engine's serving instances and Gram cache under the engine's lock.
"""

from __future__ import annotations

import numpy as np

from .._parallel import map_instances
from .._rowwise import one_blas_thread
from ..content.heads import head_features
from ..content.tables import FlatTables, certified_flat_content
from .serving import combine, encode_served

CERTIFIED_ROWS = 256
"""Rows up to which :meth:`QSSEngine.certified_labels` tries to certify a prediction's
labels (it encodes them under the engine's lock); a larger batch takes the exact route,
whose solve its encoding then outweighs anyway."""
SUM_ROUNDING = 2.0**-40
"""Room, relative to the magnitudes summed, for the roundings in which two computations of
the p-instance mean differ (an addition per instance and a division, u = 2^-53 each, in
both): enough up to thousands of instances."""


class CertifiedLabels:
    """The certified-labels route of :class:`~.core.QSSEngine` (a mixin of it)."""

    def certified_labels(self, X: np.ndarray) -> np.ndarray | None:
        """Each row's index of the largest output — ``argmax`` of :meth:`predict_outputs`,
        the first on ties — when that is certain without solving a changed head; None when it
        is not (the caller asks :meth:`predict_outputs`).

        Why: after a change, the exact outputs of an instance that serves its ridge head need
        the head's (D, D) factorization (tens of ms at D ≈ 1000); a label does not. Where the
        gain filter tracks the heads (content.heads.gain_filter), each such instance serves its
        tracked weights with a bound on how far each output can be from the exact route's
        (content.heads.certified); a row is certain when its winning class leads every other
        by more than their bounds together — then no output the exact weights give can change
        the winner, and the label is the refit's. Anything unsure (the head-vs-tables choice,
        a weight's exponent, one row's margin) sends the whole call to the exact route.
        Classification in exact or label mode, at most :data:`CERTIFIED_ROWS` rows."""
        if self.privacy is not None or len(X) > CERTIFIED_ROWS:
            return None
        alpha, shrinkage = self.config.alpha, self.config.shrinkage
        with one_blas_thread(), self._changed:
            served = self._serving()
            if served[0].schema.base_model.task == "regression":
                return None
            schemas = [inst.schema for inst in served]

            def contents() -> list | None:
                parts = []
                for inst in served:
                    head = inst.head
                    if (
                        inst.content is None
                        and head is not None
                        and head.solved is None
                        and isinstance(inst.accumulators, FlatTables)
                    ):
                        found = certified_flat_content(inst.accumulators, alpha, shrinkage, head)
                        if found is None:
                            return None
                        parts.append((inst, *found))
                    else:  # exact: already solved, or nothing to solve
                        parts.append((inst, self._content(inst), None))
                return parts

            def encode() -> list:
                # the heads' inputs wherever there is a head (an instance the tables serve
                # ignores them; with "shared-rf" they are computed once for all anyway)
                return encode_served(schemas, X, [inst.head is not None for inst in served])[0]

            if self._gram_cache.gains.behind():
                # the choice first runs the gain filter's row updates — compiled passes that
                # release the GIL — so the rows are encoded beside them, on the other core
                parts, encoded = map_instances(lambda job: job(), [contents, encode])
            else:
                parts, encoded = contents(), encode()
            if parts is None:
                return None
            total = radius = size = None
            features: dict[int, np.ndarray] = {}  # the heads' features, once per input
            for (inst, content, bounded), (codes, g, Z) in zip(parts, encoded, strict=True):
                if bounded is None:
                    out = combine(inst.schema, content, codes, g, Z)
                    near = np.zeros_like(out)
                else:
                    if id(Z) not in features:
                        features[id(Z)] = head_features(Z, np.float64)
                    out, near = bounded.served(features[id(Z)], g)
                scale = np.abs(g) + np.abs(out) + near
                if total is None:
                    total, radius, size = out, near, scale
                else:  # summed in instance order, as predict_outputs does
                    total, radius, size = total + out, radius + near, size + scale
        p = len(parts)
        outputs = total / p
        # how far the exact outputs can be: the weights' bounds, and the rounding of the
        # p additions and the division, which differ between the two (a few ulps of the sums)
        radius = (radius + size * SUM_ROUNDING) / p
        labels = np.argmax(outputs, axis=1)
        rows = np.arange(len(outputs))
        lead = outputs[rows, labels][:, None] - outputs
        room = radius[rows, labels][:, None] + radius
        lead[rows, labels] = np.inf
        if not np.all(lead > room):
            return None
        return labels
