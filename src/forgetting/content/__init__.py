"""The additive content of a QSS instance: integer sufficient statistics and what is served
from them.

``accumulators`` and ``materialize`` hold the RQ codebook's statistics and their cell means;
``tables`` the flat partition's per-cell sums, served without materializing; ``heads`` the
exact linear heads on all rows; ``fingerprint`` and ``blake2`` hash what each row contributed.
``kernels`` chooses, once per process, whether the compiled kernels beside them run.
"""
