"""The batched BLAKE2b (compiled, and its hashlib fallback) equals hashlib.blake2b bit for bit.

Stores, model files and receipts written before the batch hasher existed must keep verifying,
so every digest, membership draw and receipt hash is compared with the one-call-per-row
definition: random messages of every length around the 128-byte block boundaries, keyed and
personalized, at every digest size the package uses (8·(p+1) draw bytes, 16 for receipts,
32 for row digests) and the extremes 1 and 64.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from forgetting.content import blake2
from forgetting.content.fingerprint import MODULUS, digest_rows, digest_rows_reference, multiset_sum
from forgetting.schema import membership
from forgetting.schema.membership import derive_key, draws, id_bytes, ids_bytes, receipt_hash

LENGTHS = [0, 1, 7, 8, 63, 64, 111, 127, 128, 129, 255, 256, 257, 383, 384, 385, 1000]
KEYS = [b"", b"k", derive_key(None, 0), bytes(range(64))]
PERSONS = [b"", b"qss-member", b"qss-content", b"qss-receipt", b"qss-row", bytes(range(16))]
DIGEST_SIZES = [1, 8, 16, 24, 32, 40, 48, 56, 64]


@pytest.fixture(params=["numba", "hashlib"])
def hash_backend(request, use_kernels):
    """Run a test with the compiled kernel and again with the hashlib fallback."""
    use_kernels(hashing=request.param)
    assert blake2.backend(1) == request.param  # numba is a core dependency: it must load
    return request.param


def _messages(seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    fixed = [rng.bytes(n) for n in LENGTHS]
    return fixed + [rng.bytes(int(n)) for n in rng.integers(0, 700, size=200)]


def _reference(messages, digest_size, key, person) -> np.ndarray:
    return np.array(
        [
            np.frombuffer(
                hashlib.blake2b(m, digest_size=digest_size, key=key, person=person).digest(),
                dtype=np.uint8,
            )
            for m in messages
        ],
        dtype=np.uint8,
    ).reshape(len(messages), digest_size)


def test_blake2b_many_equals_hashlib(hash_backend):
    messages = _messages(0)
    for key in KEYS:
        for person in PERSONS:
            for size in DIGEST_SIZES:
                got = blake2.blake2b_many(messages, digest_size=size, key=key, person=person)
                assert np.array_equal(got, _reference(messages, size, key, person)), (
                    key,
                    person,
                    size,
                )


def test_segments_concatenate_like_updates(hash_backend):
    """A row split into pieces anywhere hashes like the whole (hashlib's update semantics)."""
    rng = np.random.default_rng(1)
    src = np.frombuffer(rng.bytes(5000), dtype=np.uint8)
    n, pieces = 60, 4
    starts = rng.integers(0, 4000, size=(n, pieces))
    lengths = rng.integers(0, 300, size=(n, pieces))
    lengths[::7] = 0  # some rows are all empty pieces
    got = blake2.blake2b_segments(
        src, starts, lengths, digest_size=32, key=b"key", person=b"qss-row"
    )
    whole = [
        b"".join(src[s : s + m].tobytes() for s, m in zip(a, b, strict=True))
        for a, b in zip(starts, lengths, strict=True)
    ]
    assert np.array_equal(got, _reference(whole, 32, b"key", b"qss-row"))


def test_parameters_refused_like_hashlib(hash_backend):
    for kwargs in ({"digest_size": 0}, {"digest_size": 65}, {"digest_size": 8, "key": bytes(65)}):
        with pytest.raises(ValueError):
            hashlib.blake2b(b"", **kwargs)
        with pytest.raises(ValueError):
            blake2.blake2b_many([b"x"], **kwargs)
    with pytest.raises(ValueError):
        blake2.blake2b_many([b"x"], digest_size=8, person=bytes(17))
    with pytest.raises(ValueError):
        blake2.blake2b_segments(np.zeros(4, np.uint8), [[2]], [[3]], digest_size=8)
    assert blake2.blake2b_many([], digest_size=16).shape == (0, 16)


def _columns(n: int, seed: int):
    """The column mixes digest_rows is fed: framed ids + target + pool flag + features (row
    hashes), and row hash + codes + int64 residuals (contributions)."""
    rng = np.random.default_rng(seed)
    ids = [id_bytes(int(i)) for i in rng.integers(-(2**63), 2**63 - 1, size=n // 2)]
    ids += [id_bytes("u" * int(k) + "é") for k in rng.integers(0, 300, size=n - n // 2)]
    framed = np.array([len(b).to_bytes(4, "little") + b for b in ids], dtype=object)
    targets = rng.integers(-1, 10, size=n)
    pool = rng.random(n) < 0.5
    X = rng.normal(size=(n, 37)).astype(np.float32)
    row_hash = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
    codes = rng.integers(0, 2**15, size=(n, 64), dtype=np.int16)
    residuals = rng.integers(-(2**40), 2**40, size=(n, 10)).astype("<i8")
    return (framed, targets, pool, X), (row_hash, codes, residuals)


def test_digest_rows_equals_reference(hash_backend):
    rows, contributions = _columns(300, 2)
    for columns, person in ((rows, b"qss-row"), (contributions, b"qss-content")):
        batch = digest_rows(*columns, person=person)
        assert np.array_equal(batch, digest_rows_reference(*columns, person=person))
        for few in (1, 3, 5):  # a forget's few rows take the reference loop, 5 the batch
            assert np.array_equal(
                digest_rows(*(c[:few] for c in columns), person=person), batch[:few]
            )
    float_targets = np.random.default_rng(3).normal(size=300)
    mixed = (rows[0], float_targets, rows[2], rows[3].astype(np.float64))
    assert np.array_equal(
        digest_rows(*mixed, person=b"qss-row"), digest_rows_reference(*mixed, person=b"qss-row")
    )


def test_digest_rows_odd_columns(hash_backend, monkeypatch):
    """Chunk boundaries, big-endian and non-contiguous columns, and columns the batch path
    leaves to the reference loop (strings) all give the reference digests."""
    monkeypatch.setattr("forgetting.content.fingerprint.DIGEST_CHUNK_ROWS", 7)
    rng = np.random.default_rng(4)
    n = 50
    big_1d = rng.integers(0, 2**30, size=n).astype(">i4")
    big_2d = rng.normal(size=(n, 3)).astype(">f8")
    strided = rng.normal(size=(n, 8))[:, ::2]
    cube = rng.integers(0, 9, size=(n, 2, 3), dtype=np.uint16)
    labels = np.array([f"r{i}" for i in range(n)])
    for columns in ((big_1d, big_2d), (strided, cube), (big_1d, labels)):
        assert np.array_equal(
            digest_rows(*columns, person=b"p"), digest_rows_reference(*columns, person=b"p")
        )
    assert digest_rows(np.zeros((0, 4)), person=b"p").shape == (0, 32)


def test_multiset_sum_is_the_sum_of_the_digests_as_numbers():
    """Σ digests mod 2^256, each read as a little-endian 256-bit number: the few-row path
    (Python ints from the bytes) and the column-sum path agree with that definition on both
    sides of their boundary, with carries across every 32-bit word (all-0xff digests) and
    wrapping past 2^256."""
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 7, 8, 9, 40):
        for fill in ("random", "max"):
            if fill == "max":
                digests = np.full((n, 32), 0xFF, dtype=np.uint8)
            else:
                digests = rng.integers(0, 256, (n, 32), dtype=np.uint8)
            want = sum(int.from_bytes(row.tobytes(), "little") for row in digests) % MODULUS
            assert multiset_sum(digests) == want, (n, fill)
            assert multiset_sum(digests[::-1].copy()) == want  # order-free
    # one row (a one-row forget's path), also as a strided view of a wider array
    wide = rng.integers(0, 256, (3, 64), dtype=np.uint8)
    one = wide[1:2, ::2]
    assert multiset_sum(one) == int.from_bytes(bytes(one[0].tolist()), "little")


def test_draws_and_receipts_equal_hashlib(hash_backend):
    key = derive_key("secret", 0)
    ids = ids_bytes(list(range(-5, 200)) + ["", "a", "é" * 200, np.int64(7) + 1000])
    for p in (1, 3, 7):
        width = 8 * (p + 1)
        raw = b"".join(
            hashlib.blake2b(b, key=key, digest_size=width, person=b"qss-member").digest()
            for b in ids
        )
        want = np.frombuffer(raw, dtype="<u8").reshape(-1, p + 1).astype(np.float64) / 2.0**64
        assert np.array_equal(draws(key, iter(ids), p), want)
    assert membership.receipt_hashes(key, ids) == [receipt_hash(key, b) for b in ids]
    with pytest.raises(ValueError):
        draws(key, ids, 8)  # 72 digest bytes: refused, as hashlib refuses it


def test_small_batches_skip_loading_the_kernel(use_kernels):
    from forgetting.content import kernels

    use_kernels(hashing="auto")
    kernels.HASH_KERNELS.unload()  # as if never loaded
    assert blake2.backend(blake2.LOAD_MIN_ROWS - 1) == "hashlib"
    assert blake2.backend(blake2.LOAD_MIN_ROWS) == "numba"
    assert blake2.backend(1) == "numba"  # once loaded, every batch uses it


def test_id_bytes_fast_path_matches_normalization():
    assert id_bytes(3) == id_bytes(np.int64(3)) == b"i:3"
    assert id_bytes(-(2**63)) == b"i:-9223372036854775808"
    assert id_bytes("3") == id_bytes(np.str_("3")) == b"s:3"
    for bad in (True, 2**63, 1.0):
        with pytest.raises((TypeError, ValueError)):
            id_bytes(bad)
