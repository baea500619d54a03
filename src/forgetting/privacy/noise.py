"""Deterministic Gaussian noise keyed by (secret key, state): exact *and* private.

Two requirements pull against each other. Exactness (design.md §5.1) wants the released model to be
a pure function of the current training set, so ``fit(D); forget(R)`` and ``fit(D \\ R)``
must draw the very same noise. Privacy wants two releases of *neighbouring* states to carry
independent noise: with one fixed noise array Z, the releases T(D) + Z and T(D \\ {i}) + Z
before and after a deletion differ by exactly row i's residual — its label, read off by a
subtraction.

Both hold when the noise is a pseudorandom function of the state: a standard normal array
drawn from a counter-based generator seeded with HMAC-SHA256(noise key, domain ‖ instance ‖
state digest ‖ shape). Equal states give equal digests, hence equal bits; different states
(any change of the row multiset changes the digest) give keys that are, to anyone without
the secret, independent uniform strings — so their noise arrays are independent draws. The
guarantee is therefore computational: it holds against adversaries who cannot tell
HMAC-SHA256 from a random function, and it needs the key to be secret (a key derived from a
public ``random_state`` makes the noise predictable, and is refused by
:func:`~forgetting.privacy.ledger.check_privacy_params`).
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

NOISE_DOMAIN = b"qss-dp-noise"
HEAD_NOISE_DOMAIN = b"qss-dp-head-noise"
"""The head's cross sums draw from their own domain: independent of the tables' noise even
where the two arrays have the same shape."""
PUBLIC_DIGEST_DOMAIN = b"qss-dp-public-digest"


def _check_key(key: bytes) -> bytes:
    if not isinstance(key, bytes | bytearray) or len(key) < 16:
        raise ValueError("the noise key must be a secret of at least 16 bytes")
    return bytes(key)


def _state_bytes(state_digest: bytes | str) -> bytes:
    if isinstance(state_digest, str):
        return state_digest.encode("ascii")
    if isinstance(state_digest, bytes | bytearray):
        return bytes(state_digest)
    raise TypeError("state_digest must be bytes or a hex string")


def noise_seed(
    key: bytes,
    state_digest: bytes | str,
    instance: int,
    shape: tuple[int, ...],
    domain: bytes = NOISE_DOMAIN,
):
    """The 256-bit HMAC-SHA256 tag that seeds one noise array (an int, for SeedSequence).

    Every field is length-framed so that no two (instance, digest, shape) triples share a
    message; ``domain`` (:data:`NOISE_DOMAIN` for the tables, :data:`HEAD_NOISE_DOMAIN` for
    the head's sums) separates the arrays of one release.
    """
    key = _check_key(key)
    state = _state_bytes(state_digest)
    if isinstance(instance, bool) or not isinstance(instance, int | np.integer) or instance < 0:
        raise ValueError(f"instance must be an int ≥ 0, got {instance!r}")
    shape = tuple(int(s) for s in shape)
    message = b"".join(
        [
            bytes(domain),
            int(instance).to_bytes(8, "little"),
            len(state).to_bytes(8, "little"),
            state,
            len(shape).to_bytes(8, "little"),
            *(s.to_bytes(8, "little") for s in shape),
        ]
    )
    return int.from_bytes(hmac.new(key, message, hashlib.sha256).digest(), "little")


def standard_normal(
    key: bytes,
    state_digest: bytes | str,
    instance: int,
    shape: tuple[int, ...],
    domain: bytes = NOISE_DOMAIN,
) -> np.ndarray:
    """A float64 N(0, 1) array that is a deterministic function of its arguments.

    PCG64 seeded through SeedSequence with the full 256-bit tag; the bits are fixed for the
    pinned NumPy version (NumPy does not promise identical streams across versions, which is
    why exactness is stated per installation, like the rest of the float pipeline).
    """
    seed = noise_seed(key, state_digest, instance, shape, domain)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
    return rng.standard_normal(tuple(int(s) for s in shape))


def noise_fold_sums(
    sums: np.ndarray,
    sigma: float,
    key: bytes,
    state_digest: bytes | str,
    *,
    instance: int,
) -> np.ndarray:
    """Fold sums (2, …) in residual units plus σ·Z, Z = :func:`standard_normal` of the state.

    ``sums`` are one instance's fixed-point fold sums converted to float64 residual units
    (``acc.sums * 2**-scale_bits``); both folds are noised, with independent coordinates.
    ``state_digest`` must commit to that instance's integer state (e.g. ``Instance.digest()``)
    and ``instance`` is its index: instances of one model must never share noise, or the
    difference of their releases would cancel it. σ = 0 returns a copy unchanged.
    """
    sums = np.asarray(sums, dtype=np.float64)
    if sums.ndim < 1 or sums.shape[0] != 2:
        raise ValueError(f"sums must have a leading fold axis of size 2, got shape {sums.shape}")
    sigma = float(sigma)
    if not (np.isfinite(sigma) and sigma >= 0.0):
        raise ValueError(f"sigma must be a finite number ≥ 0, got {sigma!r}")
    if sigma == 0.0:
        return sums.copy()
    return sums + sigma * standard_normal(key, state_digest, instance, sums.shape)


def public_state_digest(key: bytes, state_digest: bytes | str) -> str:
    """A keyed digest of a state, safe to publish next to a DP model (hex).

    A plain hash of the statistics is a deterministic, *unkeyed* function of the labels:
    anyone who knows every other row can hash both candidate data sets and compare, which
    defeats DP outright. The keyed version reveals only whether two states are equal.
    """
    key = _check_key(key)
    return hmac.new(
        key, PUBLIC_DIGEST_DOMAIN + _state_bytes(state_digest), hashlib.sha256
    ).hexdigest()
