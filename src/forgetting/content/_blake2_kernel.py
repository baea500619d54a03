"""The compiled half of :mod:`forgetting.content.blake2`: BLAKE2b (RFC 7693) over many rows.

Imported only on the first batched hash (importing numba costs a few hundred milliseconds, and
``import forgetting`` must stay cheap). ``cache=True`` keeps the machine code on disk beside
this file, so only the first process after an install pays the compilation. ``nogil=True``
lets a background rebuild hash rows while the serving thread runs.

Every row's message is streamed from ``n_segments`` pieces of one byte buffer (one piece per
column of :func:`~forgetting.content.fingerprint.digest_rows`), so fixed-width columns and
variable-length ids are hashed without first being copied into one message per row. The
arithmetic is the reference algorithm word for word; :mod:`tests.test_hashing` checks it bit
for bit against :func:`hashlib.blake2b` (keys, personalization, every digest size in use).
"""

from __future__ import annotations

import numba
import numpy as np

from .blake2 import IV  # the BLAKE2b initialization vector, defined once

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


@numba.njit(cache=True, nogil=True)
def _rotr(x, n):
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@numba.njit(cache=True, nogil=True)
def _word(block, i):
    """Little-endian 64-bit word i of a 128-byte block."""
    word = np.uint64(0)
    for k in range(8):
        word |= np.uint64(block[8 * i + k]) << np.uint64(8 * k)
    return word


@numba.njit(cache=True, nogil=True)
def _g(a, b, c, d, x, y):
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@numba.njit(cache=True, nogil=True)
def _compress(h, block, t, last):
    """F(h, m, t, f) of RFC 7693 §3.2 on one 128-byte ``block``.

    The twelve rounds are written out with the message schedule σ (RFC 7693 §2.7; rounds 10
    and 11 reuse σ0 and σ1) as literal indices, so the message and the working vector live
    in 32 locals (registers), where a loop indexing arrays by a σ table keeps them in memory.
    """
    m0, m1, m2, m3 = _word(block, 0), _word(block, 1), _word(block, 2), _word(block, 3)
    m4, m5, m6, m7 = _word(block, 4), _word(block, 5), _word(block, 6), _word(block, 7)
    m8, m9, m10, m11 = _word(block, 8), _word(block, 9), _word(block, 10), _word(block, 11)
    m12, m13, m14, m15 = _word(block, 12), _word(block, 13), _word(block, 14), _word(block, 15)
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = IV[0], IV[1], IV[2], IV[3]
    v12 = IV[4] ^ np.uint64(t)  # messages here are far below 2^64 bytes: high word stays 0
    v13 = IV[5]
    v14 = IV[6] ^ _MASK if last else IV[6]
    v15 = IV[7]
    # round 0: σ0
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m0, m1)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m2, m3)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m4, m5)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m6, m7)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m8, m9)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m10, m11)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m12, m13)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m14, m15)
    # round 1: σ1
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m14, m10)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m4, m8)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m9, m15)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m13, m6)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m1, m12)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m0, m2)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m11, m7)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m5, m3)
    # round 2: σ2
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m11, m8)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m12, m0)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m5, m2)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m15, m13)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m10, m14)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m3, m6)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m7, m1)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m9, m4)
    # round 3: σ3
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m7, m9)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m3, m1)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m13, m12)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m11, m14)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m2, m6)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m5, m10)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m4, m0)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m15, m8)
    # round 4: σ4
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m9, m0)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m5, m7)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m2, m4)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m10, m15)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m14, m1)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m11, m12)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m6, m8)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m3, m13)
    # round 5: σ5
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m2, m12)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m6, m10)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m0, m11)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m8, m3)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m4, m13)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m7, m5)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m15, m14)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m1, m9)
    # round 6: σ6
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m12, m5)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m1, m15)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m14, m13)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m4, m10)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m0, m7)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m6, m3)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m9, m2)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m8, m11)
    # round 7: σ7
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m13, m11)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m7, m14)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m12, m1)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m3, m9)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m5, m0)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m15, m4)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m8, m6)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m2, m10)
    # round 8: σ8
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m6, m15)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m14, m9)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m11, m3)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m0, m8)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m12, m2)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m13, m7)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m1, m4)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m10, m5)
    # round 9: σ9
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m10, m2)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m8, m4)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m7, m6)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m1, m5)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m15, m11)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m9, m14)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m3, m12)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m13, m0)
    # round 10: σ0
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m0, m1)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m2, m3)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m4, m5)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m6, m7)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m8, m9)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m10, m11)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m12, m13)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m14, m15)
    # round 11: σ1
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, m14, m10)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, m4, m8)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, m9, m15)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, m13, m6)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, m1, m12)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, m0, m2)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, m11, m7)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, m5, m3)
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@numba.njit(cache=True, nogil=True)
def hash_segments(src, starts, lengths, h0, key_block, keyed, out):
    """BLAKE2b of every row i: the concatenation of ``src[starts[i, c] : + lengths[i, c]]``
    over c, after the padded key block when ``keyed``. ``h0`` is IV ⊕ the parameter block
    (digest length, key length, fanout 1, depth 1, personalization); the first
    ``out.shape[1]`` bytes of the final state are row i's digest.

    Keyed: the key block is the first block of every row's input, and — unless the row's
    message is empty — not the last one, so it is compressed the same way (counter 128, not
    final) for every row: it is compressed once per call and each row starts from that state
    (one compression per short row instead of two). A row with an empty message ends on the
    key block and takes the long way."""
    n, n_segments = starts.shape
    digest_size = out.shape[1]
    h = np.empty(8, dtype=np.uint64)
    h_keyed = np.empty(8, dtype=np.uint64)
    block = np.empty(128, dtype=np.uint8)
    for w in range(8):
        h_keyed[w] = h0[w]
    if keyed:
        for k in range(128):
            block[k] = key_block[k]
        _compress(h_keyed, block, 128, False)
    for i in range(n):
        total = 0
        for c in range(n_segments):
            total += lengths[i, c]
        t = 0
        pos = 0
        if keyed and total > 0:
            for w in range(8):
                h[w] = h_keyed[w]
            t = 128
        else:
            for w in range(8):
                h[w] = h0[w]
            if keyed:
                for k in range(128):
                    block[k] = key_block[k]
                pos = 128
        for c in range(n_segments):
            start = starts[i, c]
            for j in range(lengths[i, c]):
                if pos == 128:  # a full block with more to come: not the last one
                    t += 128
                    _compress(h, block, t, False)
                    pos = 0
                block[pos] = src[start + j]
                pos += 1
        t += pos
        for k in range(pos, 128):
            block[k] = 0
        _compress(h, block, t, True)
        for k in range(digest_size):
            out[i, k] = np.uint8((h[k // 8] >> np.uint64(8 * (k % 8))) & np.uint64(0xFF))
