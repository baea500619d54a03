"""Keyed-hash identities of rows: who is in D°, which fold, what a row looks like.

Membership of a row in an instance's schema subset D°_r must not depend on any other row
(design.md §5.3): removing row j may never move row i in or out of D°_r, otherwise a deletion of a
D• row would silently change the schema and break exactness. A keyed PRF of (instance, id)
gives exactly that, and because the key is secret an outsider cannot pick ids that land in D°
to force rebuilds (the paper's denial-of-service concern).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..content.blake2 import blake2b_many
from ..ids import normalize_id

_KEY_BYTES = 32
_DIGEST_BYTES_PER_DRAW = 8
_TWO_64 = float(2**64)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def id_bytes(row_id: Hashable) -> bytes:
    """Canonical, type-tagged bytes of an external row id (see :mod:`forgetting.ids`).

    ``1`` and ``"1"`` are different ids; numpy integers are the same id as Python ints.
    """
    # Plain ints and strs (what normalize_ids hands out) skip the general normalization: a fit
    # makes one of these per row.
    if type(row_id) is int and _INT64_MIN <= row_id <= _INT64_MAX:
        return b"i:%d" % row_id
    if type(row_id) is not str:
        row_id = normalize_id(row_id)
        if isinstance(row_id, int):
            return b"i:" + str(row_id).encode()
    return b"s:" + row_id.encode("utf-8")


def ids_bytes(row_ids: Iterable[Hashable]) -> list[bytes]:
    """:func:`id_bytes` of every id, in order."""
    return [id_bytes(i) for i in row_ids]


def canonical_id(row_id: Hashable) -> int | str:
    """The Python value stored for an id (see :func:`forgetting.ids.normalize_id`)."""
    return normalize_id(row_id)


def derive_key(secret_key: bytes | str | None, random_state: int) -> bytes:
    """The 32-byte membership key.

    With ``secret_key=None`` the key is derived from ``random_state``: reproducible, so that
    ``fit(D \\ R)`` lands on the same D° as ``fit(D); forget(R)``, but *not secret*. A
    deployment that must resist targeted deletions passes its own secret.
    """
    if secret_key is None:
        material = b"forgetting-default-membership-key:" + str(int(random_state)).encode()
    elif isinstance(secret_key, str):
        material = b"forgetting-user-key:" + secret_key.encode("utf-8")
    elif isinstance(secret_key, bytes | bytearray):
        material = b"forgetting-user-key:" + bytes(secret_key)
    else:
        raise TypeError("secret_key must be bytes, str or None")
    return hashlib.sha256(material).digest()


@dataclass(frozen=True)
class MembershipRule:
    """Who is in D°_r: labeled rows whose keyed draw for instance r is below a threshold.

    The threshold is ρ — unless fewer than ``min_rows`` labeled rows draw below ρ, in which
    case it rises just far enough to take the ``min_rows`` lowest draws (all labeled rows when
    there are fewer). So a schema always has rows enough for g, LDA and the partition, on any
    data size, and D° stays a pure function of the *set* of rows: the ``min_rows`` lowest
    draws of a set do not depend on how the set was reached. A change to rows outside D°
    (draw at or above the threshold) leaves the threshold and so D° unchanged, so only
    deletions of D° rows — and insertions that land in D° — force a rebuild. The
    price on small data is a higher *effective* ρ (|D°|/n), the probability that a deletion
    hits D°: models report it.
    """

    rho: float
    min_rows: int

    def threshold(self, labeled_draws: np.ndarray) -> float:
        """The membership threshold for the draws of one instance's labeled rows."""
        if self.min_rows <= 0 or np.count_nonzero(labeled_draws < self.rho) >= self.min_rows:
            return self.rho
        if labeled_draws.size <= self.min_rows:
            return np.inf
        kth = np.partition(labeled_draws, self.min_rows - 1)[self.min_rows - 1]
        return max(self.rho, float(np.nextafter(kth, np.inf)))

    def members(self, draws: np.ndarray, labeled: np.ndarray) -> np.ndarray:
        """Mask of D° rows given one instance's draws and the labeled mask of the same rows."""
        return labeled & (draws < self.threshold(draws[labeled]))


def key_fingerprint(key: bytes) -> str:
    """A public fingerprint of the key (safe to print or put in a digest)."""
    return hashlib.blake2b(b"fingerprint", key=key, digest_size=16).hexdigest()


def draws(key: bytes, ids: Iterable[bytes], n_instances: int) -> np.ndarray:
    """Uniform [0, 1) draws per row: columns 0..p-1 are instance membership, column p the fold.

    One keyed BLAKE2b call per row yields all p+1 draws, each from its own 8 bytes; the rows
    are hashed in one compiled batch (:mod:`forgetting.content.blake2`, same digests as
    :func:`hashlib.blake2b`).
    """
    width = _DIGEST_BYTES_PER_DRAW * (n_instances + 1)
    raw = blake2b_many(list(ids), digest_size=width, key=key, person=b"qss-member")
    ints = raw.view("<u8").reshape(-1, n_instances + 1)
    return ints.astype(np.float64) / _TWO_64


def receipt_hash(key: bytes, row_id_bytes: bytes) -> str:
    """Keyed hash of an id for receipts: the key holder can match it, nobody can invert it."""
    return hashlib.blake2b(row_id_bytes, key=key, digest_size=16, person=b"qss-receipt").hexdigest()


BATCH_RECEIPT_IDS = 256
"""From this many ids :func:`receipt_hashes` hashes them in one compiled batch; fewer are
hashed singly, where a batch's set-up dominates."""


def receipt_hashes(key: bytes, ids: Sequence[bytes]) -> list[str]:
    """:func:`receipt_hash` of every id (a receipt for a large forget or insert names every
    row): in one compiled batch from :data:`BATCH_RECEIPT_IDS` ids on."""
    if len(ids) < BATCH_RECEIPT_IDS:
        return [receipt_hash(key, b) for b in ids]
    raw = blake2b_many(ids, digest_size=16, key=key, person=b"qss-receipt")
    text = raw.tobytes().hex()
    return [text[i : i + 32] for i in range(0, len(text), 32)]
