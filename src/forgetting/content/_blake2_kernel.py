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

SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    ],
    dtype=np.intp,
)

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


@numba.njit(cache=True, nogil=True, inline="always")
def _rotr(x, n):
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@numba.njit(cache=True, nogil=True, inline="always")
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
def _compress(h, block, t, last, m):
    """F(h, m, t, f) of RFC 7693 §3.2 on one 128-byte ``block``; ``m`` is scratch. The working
    vector lives in sixteen locals (registers), not an array."""
    for w in range(16):
        word = np.uint64(0)
        for k in range(8):
            word |= np.uint64(block[8 * w + k]) << np.uint64(8 * k)
        m[w] = word
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = IV[0], IV[1], IV[2], IV[3]
    v12 = IV[4] ^ np.uint64(t)  # messages here are far below 2^64 bytes: high word stays 0
    v13 = IV[5]
    v14 = IV[6] ^ _MASK if last else IV[6]
    v15 = IV[7]
    for r in range(12):
        s = SIGMA[r]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m[s[0]], m[s[1]])
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, m[s[2]], m[s[3]])
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, m[s[4]], m[s[5]])
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, m[s[6]], m[s[7]])
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m[s[8]], m[s[9]])
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m[s[10]], m[s[11]])
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, m[s[12]], m[s[13]])
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, m[s[14]], m[s[15]])
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
    ``out.shape[1]`` bytes of the final state are row i's digest."""
    n, n_segments = starts.shape
    digest_size = out.shape[1]
    h = np.empty(8, dtype=np.uint64)
    m = np.empty(16, dtype=np.uint64)
    block = np.empty(128, dtype=np.uint8)
    for i in range(n):
        for w in range(8):
            h[w] = h0[w]
        t = 0
        pos = 0
        if keyed:
            for k in range(128):
                block[k] = key_block[k]
            pos = 128
        for c in range(n_segments):
            start = starts[i, c]
            for j in range(lengths[i, c]):
                if pos == 128:  # a full block with more to come: not the last one
                    t += 128
                    _compress(h, block, t, False, m)
                    pos = 0
                block[pos] = src[start + j]
                pos += 1
        t += pos
        for k in range(pos, 128):
            block[k] = 0
        _compress(h, block, t, True, m)
        for k in range(digest_size):
            out[i, k] = np.uint8((h[k // 8] >> np.uint64(8 * (k % 8))) & np.uint64(0xFF))
