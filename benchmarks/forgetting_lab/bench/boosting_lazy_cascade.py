"""The lazy exact cascade of boosting_lazy.py (issue 68): kernels, fit and forget.

A booster whose every quantity is an integer sum or a deterministic function of one, and
:func:`forget`, which updates it in place to bitwise what :func:`fit` gives without the row. See
boosting_lazy.py's docstring for the design; this module holds the mechanics so each stays under
600 lines.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
from numba import njit

N_COUNTERS = 10
(C_UPDATES, C_NODES, C_LEAF_CHANGES, C_STAGES, C_MOVED_MAX, C_MOVED_SUM, C_PREFIX, C_REFITS,
 C_K0, C_FLIP_ROWS) = range(N_COUNTERS)  # fmt: skip
"""Per-deletion counters :func:`forget` fills: integer updates (one slot of one node's sums or
statistics), nodes whose choice was re-evaluated, leaf values changed, stages with a changed
leaf or a moved row, the largest moved set, moved rows summed over stages, stage steps walked
to find a newly moved row's score, stages refitted (structure changed), base score changed,
rows under the nodes whose choice flipped (what a subtree refit would re-read)."""


class Data(NamedTuple):
    codes: np.ndarray  # (n, d) uint8 bin codes
    y: np.ndarray  # (n,) int64 labels in {0, 1}
    alive: np.ndarray  # (n,) bool: rows in the model


class Cfg(NamedTuple):
    depth: int
    cands: int  # 0: every bin of every feature; else random (feature, threshold) pairs a node
    min_leaf: int
    lam: float  # L2 on the integer hessian sums
    lr: float
    q: float  # score quantum
    scale: float  # integer scale of gradients and hessians


class Geo(NamedTuple):
    nbins: np.ndarray  # (d,) codes per feature
    off: np.ndarray  # (d,) first histogram slot of each feature (cands=0)
    cand: np.ndarray  # (T, NI, M, 2) keyed (feature, threshold) per node (cands>0)


class Model(NamedTuple):
    """Stacked stages; NN = 2^(depth+1) − 1 heap-indexed nodes, NI = 2^depth − 1 may split."""

    feat: np.ndarray  # (T, NN) split feature, −1 leaf or unused
    thr: np.ndarray  # (T, NN) rows with code <= thr go left (child 2j+1)
    value: np.ndarray  # (T, NN) leaf value in quanta
    sums: np.ndarray  # (T, NN, 3) integer (G, H, N) of the node's rows
    stats: np.ndarray  # (T, NI, M, 3) histogram (cands=0) or candidates' left sums
    order: np.ndarray  # (T, n) rows grouped by node, −1 past the end
    seg: np.ndarray  # (T, NN, 2) [start, stop) of a node's rows in ``order``
    k0: np.ndarray  # (1,) base score in quanta


class Moved(NamedTuple):
    """Scratch of :func:`forget`: rows whose score differs between the old and new model."""

    idx: np.ndarray  # (n,) row ids, first ``size[0]`` valid
    kold: np.ndarray  # (n,) the row's score before the current stage, old model
    knew: np.ndarray  # (n,) the same, new model
    inset: np.ndarray  # (n,) bool: the row is in idx
    size: np.ndarray  # (1,)
    victim: np.ndarray  # (2,) the forgotten row and its old score before the current stage
    skip: np.ndarray  # (1,) a planted bug for the tests: this stage skips the moved rows (−1)


@njit(cache=True)
def _grad(k, y, cfg):
    p = 1.0 / (1.0 + np.exp(-(k * cfg.q)))
    g = np.int64(np.rint((p - y) * cfg.scale))
    h = max(np.int64(np.rint(p * (1.0 - p) * cfg.scale)), 1)
    return g, h


@njit(cache=True)
def _leaf_value(G, H, cfg):
    return np.int64(np.rint(-cfg.lr * G / (H + cfg.lam) / cfg.q))


@njit(cache=True)
def _choose(stats, tot, t, j, cfg, geo):
    """(feature, threshold) a node picks from its statistics and sums; (−1, −1): a leaf."""
    G, H, N = tot[0], tot[1], tot[2]
    parent = (G * 1.0) ** 2 / (H + cfg.lam)
    best, bf, bb = 0.0, -1, -1
    if cfg.cands > 0:
        for c in range(cfg.cands):
            gl, hl, nl = stats[c, 0], stats[c, 1], stats[c, 2]
            if nl < cfg.min_leaf or N - nl < cfg.min_leaf:
                continue
            gain = (gl * 1.0) ** 2 / (hl + cfg.lam) + ((G - gl) * 1.0) ** 2 / (H - hl + cfg.lam)
            if gain - parent > best:
                best, bf, bb = gain - parent, geo.cand[t, j, c, 0], geo.cand[t, j, c, 1]
        return bf, bb
    for f in range(geo.nbins.shape[0]):
        gl = 0
        hl = 0
        nl = 0
        for b in range(geo.nbins[f] - 1):
            s = geo.off[f] + b
            gl += stats[s, 0]
            hl += stats[s, 1]
            nl += stats[s, 2]
            if nl < cfg.min_leaf:
                continue
            if N - nl < cfg.min_leaf:
                break
            gain = (gl * 1.0) ** 2 / (hl + cfg.lam) + ((G - gl) * 1.0) ** 2 / (H - hl + cfg.lam)
            if gain - parent > best:
                best, bf, bb = gain - parent, f, b
    return bf, bb


@njit(cache=True)
def _add_row(stats, codes, r, delta, at, cfg, geo):
    """Adds ``delta`` (dg, dh, dn) of row ``r`` into the statistics of node ``at`` = (stage,
    node); returns how many slots it touched."""
    t, j = at
    if cfg.cands > 0:
        for c in range(cfg.cands):
            if codes[r, geo.cand[t, j, c, 0]] <= geo.cand[t, j, c, 1]:
                for z in range(3):
                    stats[c, z] += delta[z]
        return cfg.cands
    for f in range(codes.shape[1]):
        s = geo.off[f] + codes[r, f]
        for z in range(3):
            stats[s, z] += delta[z]
    return codes.shape[1]


@njit(cache=True)
def _fit_stage(data, model, t, k, cfg, geo):
    """Fits stage ``t`` on the alive rows whose scores ``k`` brings in; takes ``k`` out
    advanced by the stage (and writes the stage's arrays into ``model``)."""
    n = data.codes.shape[0]
    NI = model.stats.shape[1]
    order, buf = model.order[t], np.empty(n, np.int64)
    m = 0
    for r in range(n):
        if data.alive[r]:
            order[m] = r
            m += 1
    order[m:] = -1
    g = np.zeros(n, np.int64)
    h = np.zeros(n, np.int64)
    for i in range(m):
        g[order[i]], h[order[i]] = _grad(k[order[i]], data.y[order[i]], cfg)
    model.feat[t] = -1
    model.thr[t] = -1
    model.value[t] = 0
    model.sums[t] = 0
    model.stats[t] = 0
    model.seg[t] = 0
    model.seg[t, 0, 1] = m
    one = np.empty(3, np.int64)
    for j in range(model.feat.shape[1]):
        a, b = model.seg[t, j, 0], model.seg[t, j, 1]
        if b == a and j > 0:
            continue
        for i in range(a, b):
            r = order[i]
            one[0], one[1], one[2] = g[r], h[r], 1
            for z in range(3):
                model.sums[t, j, z] += one[z]
            if j < NI:
                _add_row(model.stats[t, j], data.codes, r, one, (t, j), cfg, geo)
        f, bb = -1, -1
        if j < NI:
            f, bb = _choose(model.stats[t, j], model.sums[t, j], t, j, cfg, geo)
        if f < 0:
            v = _leaf_value(model.sums[t, j, 0], model.sums[t, j, 1], cfg)
            model.value[t, j] = v
            for i in range(a, b):
                k[order[i]] += v
            continue
        model.feat[t, j], model.thr[t, j] = f, bb
        nl = 0
        nr = 0
        for i in range(a, b):
            if data.codes[order[i], f] <= bb:
                order[a + nl] = order[i]
                nl += 1
            else:
                buf[nr] = order[i]
                nr += 1
        order[a + nl : b] = buf[:nr]
        model.seg[t, 2 * j + 1, 0], model.seg[t, 2 * j + 1, 1] = a, a + nl
        model.seg[t, 2 * j + 2, 0], model.seg[t, 2 * j + 2, 1] = a + nl, b


@njit(cache=True)
def _leaf(model, t, codes, r):
    j = 0
    while model.feat[t, j] >= 0:
        j = 2 * j + 1 if codes[r, model.feat[t, j]] <= model.thr[t, j] else 2 * j + 2
    return j


@njit(cache=True)
def _leaves(model, t, codes, out):
    """Takes out every row's leaf in stage ``t``."""
    for r in range(codes.shape[0]):
        out[r] = _leaf(model, t, codes, r)


@njit(cache=True)
def _advance(model, codes, k, span):
    """Brings in every row's score before stage ``span[0]``, takes it out before ``span[1]``."""
    for r in range(codes.shape[0]):
        for t in range(span[0], span[1]):
            k[r] += model.value[t, _leaf(model, t, codes, r)]


def scores(model, codes, upto, out):
    """Takes out every row's score before stage ``upto`` (k0 plus stages < upto)."""
    out[:] = model.k0[0]
    _advance(model, codes, out, (0, upto))


@njit(cache=True)
def _cascade(data, model, start, mv, cfg, geo, cnt):
    """Runs the lazy cascade from stage ``start``: ``mv`` brings in the moved rows and the
    victim (scores before ``start``) and carries them forward. Returns the first stage whose
    structure changes (its sums already touched, its choices and values not), or T when every
    stage is done; ``cnt`` takes out the counts."""
    T, NN = model.feat.shape
    NI = model.stats.shape[1]
    codes = data.codes
    touched = np.zeros(NN, np.bool_)
    old = np.empty(NN, np.int64)
    delta = np.empty(3, np.int64)
    victim = mv.victim
    for t in range(start, T):
        touched[:] = False
        old[:] = model.value[t]
        m = mv.size[0]
        cnt[C_MOVED_SUM] += m  # counted before a flip can end the stage
        cnt[C_MOVED_MAX] = max(cnt[C_MOVED_MAX], m)
        for i in range(-1, m if t != mv.skip[0] else 0):
            if i < 0:
                r = victim[0]
                g0, h0 = _grad(victim[1], data.y[r], cfg)
                delta[0], delta[1], delta[2] = -g0, -h0, -1
            else:
                r = mv.idx[i]
                g0, h0 = _grad(mv.kold[r], data.y[r], cfg)
                g1, h1 = _grad(mv.knew[r], data.y[r], cfg)
                delta[0], delta[1], delta[2] = g1 - g0, h1 - h0, 0
                if g1 == g0 and h1 == h0:
                    continue
            j = 0
            while True:
                touched[j] = True
                for z in range(3):
                    model.sums[t, j, z] += delta[z]
                cnt[C_UPDATES] += 3
                if j < NI:
                    slots = _add_row(model.stats[t, j], codes, r, delta, (t, j), cfg, geo)
                    cnt[C_UPDATES] += 3 * slots
                if model.feat[t, j] < 0:
                    break
                j = 2 * j + 1 if codes[r, model.feat[t, j]] <= model.thr[t, j] else 2 * j + 2
        for j in range(NI):
            if touched[j]:
                cnt[C_NODES] += 1
                f, b = _choose(model.stats[t, j], model.sums[t, j], t, j, cfg, geo)
                if f != model.feat[t, j] or (f >= 0 and b != model.thr[t, j]):
                    cnt[C_FLIP_ROWS] += model.sums[t, j, 2]
                    return t
        changed = False
        for j in range(NN):
            if touched[j] and model.feat[t, j] < 0:
                v = _leaf_value(model.sums[t, j, 0], model.sums[t, j, 1], cfg)
                if v != old[j]:
                    changed = True
                    cnt[C_LEAF_CHANGES] += 1
                model.value[t, j] = v
        if changed or m > 0:
            cnt[C_STAGES] += 1
        for i in range(m):
            r = mv.idx[i]
            j = _leaf(model, t, codes, r)
            mv.kold[r] += old[j]
            mv.knew[r] += model.value[t, j]
        if changed:
            for j in range(NN):
                if not touched[j] or model.feat[t, j] >= 0 or model.value[t, j] == old[j]:
                    continue
                for i in range(model.seg[t, j, 0], model.seg[t, j, 1]):
                    r = model.order[t, i]
                    if not data.alive[r] or mv.inset[r]:
                        continue
                    k = model.k0[0]
                    for s in range(t):
                        k += model.value[s, _leaf(model, s, codes, r)]
                    cnt[C_PREFIX] += t
                    mv.kold[r], mv.knew[r] = k + old[j], k + model.value[t, j]
                    mv.inset[r] = True
                    mv.idx[mv.size[0]] = r
                    mv.size[0] += 1
        victim[1] += old[_leaf(model, t, codes, victim[0])]
        w = 0
        for i in range(mv.size[0]):
            r = mv.idx[i]
            if mv.kold[r] == mv.knew[r]:
                mv.inset[r] = False
            else:
                mv.idx[w] = r
                w += 1
        mv.size[0] = w
    return T


def _k0(data: Data, cfg: Cfg) -> int:
    """The base score: the log-odds of the alive rows on a grid of 1/4 logit, in quanta."""
    pos = int(np.sum(data.y[data.alive]))
    neg = int(np.sum(data.alive)) - pos
    return int(np.rint(np.log(pos / neg) * 4)) * int(round(0.25 / cfg.q))


def make_geo(nbins: np.ndarray, cfg: Cfg, stages: int, seed: int) -> Geo:
    """Bin slots and keyed candidates: a node's pairs are a function of (seed, stage, node)."""
    nbins = nbins.astype(np.int64)
    off = np.concatenate([[0], np.cumsum(nbins)[:-1]]).astype(np.int64)
    ni = 2**cfg.depth - 1
    cand = np.zeros((stages, ni, max(cfg.cands, 1), 2), np.int64)
    usable = np.flatnonzero(nbins >= 2)
    for t in range(stages):
        for j in range(ni):
            rng = np.random.default_rng([seed, t, j])
            f = usable[rng.integers(0, len(usable), max(cfg.cands, 1))]
            cand[t, j, :, 0] = f
            cand[t, j, :, 1] = rng.integers(0, nbins[f] - 1)
    return Geo(nbins, off, cand)


def fit(data: Data, cfg: Cfg, geo: Geo) -> Model:
    """The booster on ``data``'s alive rows: one stage per row of ``geo.cand``."""
    T, n = geo.cand.shape[0], data.codes.shape[0]
    nn, ni = 2 ** (cfg.depth + 1) - 1, 2**cfg.depth - 1
    slots = cfg.cands if cfg.cands > 0 else int(geo.nbins.sum())
    model = Model(
        np.empty((T, nn), np.int64), np.empty((T, nn), np.int64), np.empty((T, nn), np.int64),
        np.empty((T, nn, 3), np.int64), np.empty((T, ni, slots, 3), np.int64),
        np.empty((T, n), np.int64), np.empty((T, nn, 2), np.int64),
        np.array([_k0(data, cfg)], np.int64),
    )  # fmt: skip
    refit_from(data, model, 0, cfg, geo)
    return model


def refit_from(data: Data, model: Model, start: int, cfg: Cfg, geo: Geo, stop: int = -1) -> None:
    """Refits stages ``start`` .. ``stop`` (all later ones by default) in place."""
    k = np.empty(data.codes.shape[0], np.int64)
    scores(model, data.codes, start, k)
    for t in range(start, model.feat.shape[0] if stop < 0 else stop):
        _fit_stage(data, model, t, k, cfg, geo)


def new_moved(n: int) -> Moved:
    z = np.zeros(n, np.int64)
    return Moved(
        z.copy(), z.copy(), z.copy(), np.zeros(n, bool), np.zeros(1, np.int64),
        np.zeros(2, np.int64), np.full(1, -1, np.int64),
    )  # fmt: skip


def forget(data: Data, model: Model, row: int, cfg: Cfg, geo: Geo, mv: Moved) -> np.ndarray:
    """Forgets ``row`` in place (``data.alive`` and ``model``), bitwise what :func:`fit` gives
    without it; returns the counters (see :data:`N_COUNTERS`). ``mv`` is scratch (empty in,
    empty out)."""
    cnt = np.zeros(N_COUNTERS, np.int64)
    if not data.alive[row]:
        raise ValueError(f"row {row} is not in the model")
    data.alive[row] = False
    if _k0(data, cfg) != model.k0[0]:
        model.k0[0] = _k0(data, cfg)
        cnt[C_K0] = cnt[C_REFITS] = 1
        refit_from(data, model, 0, cfg, geo)
        return cnt
    victim = mv.victim
    victim[0], victim[1] = row, model.k0[0]
    start, T, n = 0, model.feat.shape[0], data.codes.shape[0]
    before = None
    while (t := _cascade(data, model, start, mv, cfg, geo, cnt)) < T:
        cnt[C_REFITS] += 1
        if before is None:  # every alive row's score in the new model, before stage ``start``
            before = np.full(n, model.k0[0], np.int64)
            start = 0
        _advance(model, data.codes, before, (start, t))
        idx = mv.idx[: mv.size[0]]
        k_old = before.copy()
        k_old[idx] = mv.kold[idx]
        k_old[row] = victim[1]
        old_leaf = np.empty(n, np.int64)
        _leaves(model, t, data.codes, old_leaf)
        k_old = k_old + model.value[t][old_leaf]
        _fit_stage(data, model, t, before, cfg, geo)
        k_new = before
        victim[1] = k_old[row]
        mv.inset[idx] = False
        moved = np.flatnonzero(data.alive & (k_old != k_new))
        mv.idx[: moved.size], mv.size[0] = moved, moved.size
        mv.kold[moved], mv.knew[moved], mv.inset[moved] = k_old[moved], k_new[moved], True
        start = t + 1
    mv.inset[mv.idx[: mv.size[0]]] = False
    mv.size[0] = 0
    return cnt


def same_model(a: Model, b: Model, data: Data) -> bool:
    """Equal structures, leaf values, sums, statistics, base score and every alive row's
    score (``order`` and ``seg`` may differ: a forgotten row stays there as a tombstone)."""
    parts = ("feat", "thr", "value", "sums", "stats", "k0")
    if not all(np.array_equal(getattr(a, p), getattr(b, p)) for p in parts):
        return False
    T = a.feat.shape[0]
    sa, sb = np.empty(len(data.y), np.int64), np.empty(len(data.y), np.int64)
    scores(a, data.codes, T, sa)
    scores(b, data.codes, T, sb)
    return bool(np.array_equal(sa[data.alive], sb[data.alive]))


@njit(cache=True)
def predict_one(model, codes, r):
    k = model.k0[0]
    for t in range(model.feat.shape[0]):
        k += model.value[t, _leaf(model, t, codes, r)]
    return k


@njit(cache=True)
def _scatter_adds(stats, slots, rounds):
    """The unit of the cascade's work: int64 adds into scattered slots (ns per add measured)."""
    for _ in range(rounds):
        for i in range(slots.shape[0]):
            stats[slots[i]] += 3
    return stats[0]


def ns_per_update() -> float:
    stats, slots = (
        np.zeros(1 << 22, np.int64),
        np.random.default_rng(0).integers(0, 1 << 22, 1 << 16),
    )
    _scatter_adds(stats, slots, 1)
    started = time.perf_counter()
    _scatter_adds(stats, slots, 200)
    return (time.perf_counter() - started) * 1e9 / (200 * slots.size)
