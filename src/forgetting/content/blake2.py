"""BLAKE2b over many short messages at once, bit for bit :func:`hashlib.blake2b`.

Why: a fit hashes every row several times (its identity, its keyed membership draws, one
content digest per instance), and one ``hashlib`` call per row from a Python loop spends most
of that in the interpreter's per-call overhead, not in the hashing (see
benchmarks/results/throughput.md). Here the rows of a batch go to one compiled loop
(:mod:`forgetting.content._blake2_kernel`, numba, compiled on first use and cached on disk)
that runs the reference algorithm on each row's message. The digests are the ones ``hashlib``
gives — stores, model files and receipts written before keep verifying — and
``tests/content/test_hashing.py`` checks that for keyed and personalized hashes of every length and
digest size in use.

Small batches in a process that has not loaded the kernel yet, and every batch without numba
(or with the hash backend set to ``hashlib``: :mod:`forgetting.content.kernels`), loop over
:func:`hashlib.blake2b` instead: slower per row, identical output, tested to agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from .kernels import HASH_KERNELS, LOAD_MIN_ROWS

IV = np.array(
    [
        0x6A09E667F3BCC908,
        0xBB67AE8584CAA73B,
        0x3C6EF372FE94F82B,
        0xA54FF53A5F1D36F1,
        0x510E527FADE682D1,
        0x9B05688C2B3E6C1F,
        0x1F83D9ABFB41BD6B,
        0x5BE0CD19137E2179,
    ],
    dtype=np.uint64,
)


def _kernel(n_rows: int):
    """The compiled row hasher for a batch of ``n_rows``, or None for the hashlib loop
    (content.kernels: forced either way by the hash backend setting; on ``auto``, used once
    loaded or when the batch is big enough to load it)."""
    module = HASH_KERNELS.get(n_rows)
    return None if module is None else module.hash_segments


def backend(n_rows: int = LOAD_MIN_ROWS) -> str:
    """``"numba"`` or ``"hashlib"``: which implementation hashes a batch of ``n_rows`` now
    (asking may load the kernel, as hashing such a batch would)."""
    return "hashlib" if _kernel(n_rows) is None else "numba"


def _check_params(digest_size: int, key: bytes, person: bytes) -> None:
    # The same limits, and the same exception type, as hashlib.blake2b.
    if not 1 <= digest_size <= 64:
        raise ValueError("digest_size must be between 1 and 64 bytes")
    if len(key) > 64:
        raise ValueError("maximum key length is 64 bytes")
    if len(person) > 16:
        raise ValueError("maximum person length is 16 bytes")


def _initial_state(digest_size: int, key: bytes, person: bytes) -> np.ndarray:
    """h0 = IV ⊕ parameter block (RFC 7693 §2.5; BLAKE2b's salt and tree fields left 0)."""
    params = bytearray(64)
    params[0] = digest_size
    params[1] = len(key)
    params[2] = 1  # fanout
    params[3] = 1  # depth
    params[48 : 48 + len(person)] = person
    return IV ^ np.frombuffer(bytes(params), dtype="<u8").astype(np.uint64)


def blake2b_segments(
    src: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    *,
    digest_size: int,
    key: bytes = b"",
    person: bytes = b"",
) -> np.ndarray:
    """(n, digest_size) uint8: row i hashes ``src[starts[i, c] : starts[i, c] + lengths[i, c]]``
    for c = 0, 1, … concatenated — equal to ``hashlib.blake2b(that, digest_size=…, key=…,
    person=…).digest()``. ``src`` is a flat uint8 buffer; ``starts``/``lengths`` are (n, C)."""
    key, person = bytes(key), bytes(person)
    _check_params(digest_size, key, person)
    src = np.ascontiguousarray(src, dtype=np.uint8).reshape(-1)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if starts.ndim != 2 or starts.shape != lengths.shape:
        raise ValueError("starts and lengths must be (n, segments) arrays of one shape")
    if starts.size and (
        lengths.min() < 0 or starts.min() < 0 or (starts + lengths).max() > src.size
    ):
        raise ValueError("a segment lies outside src")
    out = np.empty((starts.shape[0], digest_size), dtype=np.uint8)
    kernel = _kernel(len(out))
    if kernel is None:
        for i in range(len(out)):
            h = hashlib.blake2b(digest_size=digest_size, key=key, person=person)
            for s, n in zip(starts[i].tolist(), lengths[i].tolist(), strict=True):
                h.update(src[s : s + n].tobytes())
            out[i] = np.frombuffer(h.digest(), dtype=np.uint8)
        return out
    key_block = np.zeros(128, dtype=np.uint8)
    key_block[: len(key)] = np.frombuffer(key, dtype=np.uint8)
    kernel(
        src, starts, lengths, _initial_state(digest_size, key, person), key_block, bool(key), out
    )
    return out


def blake2b_many(
    messages: Sequence[bytes], *, digest_size: int, key: bytes = b"", person: bytes = b""
) -> np.ndarray:
    """(len(messages), digest_size) uint8: one keyed/personalized BLAKE2b digest per message."""
    lengths = np.fromiter(map(len, messages), dtype=np.int64, count=len(messages))
    starts = np.zeros_like(lengths)
    np.cumsum(lengths[:-1], out=starts[1:])
    src = np.frombuffer(b"".join(messages), dtype=np.uint8)
    return blake2b_segments(
        src,
        starts[:, None],
        lengths[:, None],
        digest_size=digest_size,
        key=key,
        person=person,
    )
