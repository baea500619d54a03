"""Keyed randomized response: ε-label-DP for the exact forest (``mode="dp"``).

Why randomized response and not noisy leaf counts: the forest chooses every split by the Gini
gain over the labels of all the node's rows, so one label can change the whole structure of
a tree — a leaf-count mechanism has no small sensitivity to calibrate to. Randomized response
(RR) privatizes each label once, *before* the forest sees it: row i's label y (one of k
classes) is replaced by ỹ = RR(u_i, y), where u_i is a keyed pseudorandom uniform draw from
HMAC-SHA256(key, "forest-dp-rr" ‖ k ‖ id_i). With probability p = e^ε/(e^ε + k − 1) (u < p)
ỹ = y; otherwise ỹ is one of the other k − 1 classes, uniformly (from the same draw). Each ỹ
is ε-label-DP with respect to its own y (δ = 0), and the forest, its predictions, digests and
every later state (forgets, inserts, refits) are functions of the fixed set {(id, x, ỹ)}:
post-processing, so the whole transcript is ε-label-DP with no composition over trees or
releases (docs/privacy.md, §12). ỹ is a function of (key, id, y, k), so ``forget`` ≡ a
DP refit, bit for bit.

What the estimator calls (:class:`~forgetting.estimators.ExactForestClassifier`):

* :func:`check_rr_params` in ``mode="dp"`` before a fit;
* :func:`randomize` on class indices at fit and insert (ids as canonical bytes);
* :func:`recover` where the true labels are needed again (a class's last row forgotten):
  RR with a known draw is a bijection of the labels, so the key holder recovers y from ỹ;
* :class:`RRLedger`: forgotten ids (refused on insert), the class counts k used so far,
  ``model.privacy_`` (:class:`RRReport`), stored with the model;
* :func:`debias` on the forest's class frequencies of ỹ (``predict_proba``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .ledger import check_dp_epsilon, check_dp_secret_key

RR_DOMAIN = b"forest-dp-rr"
"""Domain of the HMAC message of a row's RR draw (the membership key has other uses)."""
FORGOTTEN_DOMAIN = b"forest-dp-forgotten-id"
MECHANISM = "keyed randomized response on the labels (k-ary)"

LEAF_FACTOR = 0.5
"""``mode="dp"``: the leaf-size floor is LEAF_FACTOR / (p − q)² rows, rounded (:func:`dp_min_leaf`):
a leaf's frequency of ỹ estimates p·P(y) + q·(1 − P(y)), whose signal shrinks as (p − q) and
whose sampling noise as 1/√rows, so the rows needed grow as 1/(p − q)². The factor was chosen
on validation splits of the training rows only (benchmarks/results/privacy-forest-dp.md)."""

RR_GUARANTEE = (
    "epsilon-label-DP (delta = 0) for every row's label, for the whole transcript: the model "
    "sees only randomized labels, drawn once per (row id, label, class count) by keyed "
    "randomized response, and every tree, prediction, digest and later state is "
    "post-processing of them; releases do not compose. A class dropped after its last row "
    "was forgotten redraws the labels over the classes left: each class list used composes "
    "(composed_epsilon). NOT covered: ids, inputs, the number of rows and the class list "
    "(public), a forgotten id inserted again (refused), a new fit with the same key on "
    "changed labels. Computational: assumes HMAC-SHA256 is a PRF and the key stays secret."
)


def keep_probability(epsilon: float, n_classes: int) -> float:
    """p = e^ε / (e^ε + k − 1): the probability that RR keeps the label (written so that a
    large ε does not overflow)."""
    return 1.0 / (1.0 + (int(n_classes) - 1) * math.exp(-float(epsilon)))


def flip_probability(epsilon: float, n_classes: int) -> float:
    """q = (1 − p)/(k − 1): the probability of each particular other class."""
    return (1.0 - keep_probability(epsilon, n_classes)) / (int(n_classes) - 1)


def dp_min_leaf(epsilon: float, n_classes: int, factor: float | None = None) -> int:
    """The leaf-size floor of ``mode="dp"``: factor / (p − q)², rounded, at least 1 (1 at
    large ε with factor 1). Debiasing divides a leaf's frequency by p − q, so its variance
    grows by 1/(p − q)²: that many times the rows give a leaf the variance of one row's."""
    factor = LEAF_FACTOR if factor is None else factor  # read at call time (the bench's grid)
    gap = keep_probability(epsilon, n_classes) - flip_probability(epsilon, n_classes)
    return max(1, round(float(factor) / (gap * gap)))


def check_rr_params(epsilon: Any, secret_key: Any) -> None:
    """Refuse, before anything is fitted, a setting that cannot be ε-label-DP: ε must be a
    finite number > 0 and ``secret_key`` set (at least 16 bytes/characters): the draws are
    keyed, and a key derived from the public ``random_state`` lets anyone recompute them and
    undo the randomization."""
    check_dp_epsilon(epsilon)
    check_dp_secret_key(
        secret_key,
        "the randomized labels are keyed draws, and without a secret the key comes from the "
        "public random_state, so anyone could recompute the draws and undo them",
    )


def _check_key(key: bytes) -> bytes:
    if not isinstance(key, bytes | bytearray) or len(key) < 16:
        raise ValueError("the RR key must be at least 16 bytes")
    return bytes(key)


def keyed_uniforms(key: bytes, id_raw: Sequence[bytes], n_classes: int) -> np.ndarray:
    """One uniform draw in [0, 1) per row (53 bits of HMAC-SHA256(key, "forest-dp-rr" ‖ k ‖
    id)): a function of the key, the id and the class count only. Takes ids as canonical
    bytes; returns float64 (n,)."""
    key = _check_key(key)
    head = RR_DOMAIN + int(n_classes).to_bytes(8, "little")
    out = np.empty(len(id_raw), dtype=np.uint64)
    for i, raw in enumerate(id_raw):
        message = head + len(raw).to_bytes(8, "little") + bytes(raw)
        out[i] = int.from_bytes(hmac.digest(key, message, "sha256")[:8], "little")
    return (out >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _offsets(u: np.ndarray, epsilon: float, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(keep mask, offset j ∈ 0..k−2 of a flipped label) of draws ``u``."""
    p = keep_probability(epsilon, n_classes)
    keep = u < p
    scaled = np.floor((u - p) / (1.0 - p) * (n_classes - 1)) if p < 1.0 else np.zeros_like(u)
    j = np.clip(np.where(keep, 0, scaled), 0, n_classes - 2).astype(np.int64)
    return keep, j


def randomize(
    targets: np.ndarray, key: bytes, id_raw: Sequence[bytes], epsilon: float, n_classes: int
) -> np.ndarray:
    """ỹ = RR(u, y) for class indices ``targets`` (int64 in 0..k−1) of rows ``id_raw``: kept
    when u < p, else (y + 1 + j) mod k with j = ⌊(u − p)/(1 − p)·(k − 1)⌋, uniform over the
    other k − 1 classes. Returns new int64 class indices."""
    y = np.asarray(targets, dtype=np.int64)
    if y.shape != (len(id_raw),):
        raise ValueError("one target per id")
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError("targets must be class indices in 0..k-1")
    keep, j = _offsets(keyed_uniforms(key, id_raw, n_classes), epsilon, n_classes)
    return np.where(keep, y, (y + 1 + j) % n_classes).astype(np.int64)


def recover(
    randomized: np.ndarray, key: bytes, id_raw: Sequence[bytes], epsilon: float, n_classes: int
) -> np.ndarray:
    """The labels y behind ỹ (:func:`randomize` with a known draw is a bijection of the k
    classes): only the key holder can do this."""
    t = np.asarray(randomized, dtype=np.int64)
    keep, j = _offsets(keyed_uniforms(key, id_raw, n_classes), epsilon, n_classes)
    return np.where(keep, t, (t - 1 - j) % n_classes).astype(np.int64)


def debias(proba: np.ndarray, epsilon: float, n_classes: int) -> np.ndarray:
    """Class probabilities of y from frequencies of ỹ: P(ỹ = c) = q + (p − q)·P(y = c), so
    P(y = c) ≈ (P̃(c) − q)/(p − q), clipped at 0 and renormalised (rows sum to 1; the order
    of the classes, hence the argmax, is unchanged). Takes and returns (n, k) float64."""
    p = keep_probability(epsilon, n_classes)
    q = flip_probability(epsilon, n_classes)
    out = np.clip((np.asarray(proba, dtype=np.float64) - q) / (p - q), 0.0, None)
    total = out.sum(axis=1, keepdims=True)
    return out / np.where(total > 0, total, 1.0)


@dataclass(frozen=True)
class RRReport:
    """What ``model.privacy_`` shows for a forest in ``mode="dp"``."""

    epsilon: float
    """ε of every row's label, for the whole transcript of one class list."""
    delta: float
    mechanism: str
    keep_probability: float
    """p = e^ε/(e^ε + k − 1) for the current class count k."""
    n_classes: int
    min_samples_leaf: int
    """The leaf size the trees use (the parameter, raised to :func:`dp_min_leaf`'s floor)."""
    n_class_lists: int
    """Class lists the labels were randomized over in this model's history (1 unless a
    class's last row was forgotten)."""
    composed_epsilon: float
    """ε of everything released so far: ``epsilon`` × ``n_class_lists`` (releases, trees
    and changes do not add to it)."""
    n_forgotten: int
    """Forgotten ids kept (as keyed tags) so that they are refused on insert."""
    guarantee: str = RR_GUARANTEE

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RRLedger:
    """The history of one forest in ``mode="dp"``: the class counts its labels were
    randomized over and keyed tags of the ids it forgot. Not part of the state digest (the
    model is history independent, its history is not); stored with the model."""

    def __init__(self, epsilon: float) -> None:
        self.epsilon = float(epsilon)
        self.class_counts: set[int] = set()
        self.forgotten: set[bytes] = set()

    @staticmethod
    def _tag(key: bytes, raw: bytes) -> bytes:
        message = FORGOTTEN_DOMAIN + len(raw).to_bytes(8, "little") + bytes(raw)
        return hmac.new(_check_key(key), message, hashlib.sha256).digest()[:16]

    def record_class_count(self, n_classes: int) -> None:
        self.class_counts.add(int(n_classes))

    def record_forgotten(self, key: bytes, id_raw: Iterable[bytes]) -> None:
        """Remember (keyed tags of) forgotten ids; call after a forget succeeds."""
        self.forgotten |= {self._tag(key, raw) for raw in id_raw}

    def check_insert(self, key: bytes, id_raw: Sequence[bytes]) -> None:
        """Refuse ids forgotten earlier: the same id draws the same u, so inserting it again
        with a guessed label would give the old ỹ — and the old model — exactly when the
        guess is right."""
        again = sum(self._tag(key, raw) in self.forgotten for raw in id_raw)
        if again:
            raise ValueError(
                f"{again} of these ids were forgotten earlier; in mode='dp' a forgotten id "
                "cannot be inserted again (an identical model would confirm a guessed label). "
                "Use a new id."
            )

    def continued(self) -> RRLedger:
        """A copy for the model's next engine (a refit keeps the history)."""
        return RRLedger.from_dict(self.to_dict())

    def report(self, n_classes: int, min_samples_leaf: int) -> RRReport:
        lists = max(1, len(self.class_counts))
        return RRReport(
            epsilon=self.epsilon,
            delta=0.0,
            mechanism=MECHANISM,
            keep_probability=keep_probability(self.epsilon, n_classes),
            n_classes=int(n_classes),
            min_samples_leaf=int(min_samples_leaf),
            n_class_lists=lists,
            composed_epsilon=self.epsilon * lists,
            n_forgotten=len(self.forgotten),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (a model file or snapshot holds them)."""
        return {
            "mechanism": "randomized-response",
            "epsilon": self.epsilon,
            "class_counts": sorted(self.class_counts),
            "forgotten_tags": sorted(t.hex() for t in self.forgotten),
        }

    @classmethod
    def from_dict(cls, state: Any) -> RRLedger:
        """The ledger :meth:`to_dict` wrote; ValueError naming the entry otherwise."""
        entries = {"mechanism", "epsilon", "class_counts", "forgotten_tags"}
        if not isinstance(state, dict) or set(state) != entries:
            raise ValueError(f"the RR ledger's entries are not {sorted(entries)}")
        if state["mechanism"] != "randomized-response":
            raise ValueError("the ledger is not a randomized-response ledger")
        epsilon = state["epsilon"]
        if type(epsilon) is not float or not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError("the RR ledger's epsilon is not a finite float > 0")
        counts = state["class_counts"]
        if not isinstance(counts, list) or not all(type(c) is int and c >= 2 for c in counts):
            raise ValueError("the RR ledger's class_counts are not class counts")
        tags = state["forgotten_tags"]
        if not isinstance(tags, list) or not all(
            type(t) is str and len(t) == 32 and all(c in "0123456789abcdef" for c in t)
            for t in tags
        ):
            raise ValueError("the RR ledger's forgotten_tags are not 16-byte hex tags")
        ledger = cls(epsilon)
        ledger.class_counts = set(counts)
        ledger.forgotten = {bytes.fromhex(t) for t in tags}
        return ledger


DP_FOREST_MIN_SIGNAL = 0.15
""":func:`dp_model_for`: the least p − q (randomized response's signal) at which the DP forest
is chosen over QSS-DP. Measured (benchmarks/results/privacy-forest-dp.md, validation splits):
QSS-DP won where p − q < 0.15 (letter 0.062, Vowel 0.135 at ε = 1), the DP forest wherever
p − q ≥ 0.19 on 2,230 training rows or more."""
DP_FOREST_MIN_ROWS = 2000
""":func:`dp_model_for`: the fewest training rows at which the DP forest is chosen (QSS-DP won on
Vehicle's 592, the DP forest from DNA's 2,230 up; tables in between were not measured)."""


def dp_model_for(task: str, n_rows: int | None, n_classes: int, epsilon: float) -> tuple[str, str]:
    """The label-DP model for a table — ``("forest", why)`` or ``("qss", why)`` — by the rule
    measured in benchmarks/results/privacy-forest-dp.md: the DP forest for classification when
    randomized response leaves signal p − q ≥ :data:`DP_FOREST_MIN_SIGNAL` and the table has
    at least :data:`DP_FOREST_MIN_ROWS` rows (``n_rows`` None: a dataset directory, counted as
    large); QSS-DP otherwise (and for regression, which the forest's DP does not cover)."""
    if task != "classification":
        return "qss", "label-DP for regression is QSS-DP's (the forest's DP needs classes)"
    k = max(int(n_classes), 2)
    signal = keep_probability(epsilon, k) - flip_probability(epsilon, k)
    if signal < DP_FOREST_MIN_SIGNAL:
        return "qss", (
            f"QSS-DP: at epsilon {epsilon:g} with {k} classes randomized response keeps "
            f"signal p - q = {signal:.3f} < {DP_FOREST_MIN_SIGNAL}, where QSS-DP was the more "
            "accurate DP model"
        )
    if n_rows is not None and n_rows < DP_FOREST_MIN_ROWS:
        return "qss", (
            f"QSS-DP: {n_rows} rows < {DP_FOREST_MIN_ROWS}, where QSS-DP was the more accurate "
            "DP model"
        )
    return "forest", (
        f"the DP forest (keyed randomized response): p - q = {signal:.3f} at epsilon "
        f"{epsilon:g} with {k} classes, where it was the more accurate DP model"
    )
