"""Parameter checks, the release ledger and the report ``model.privacy_`` exposes.

What counts as a release: one materialization of one instance's noisy fold sums — with a
head, its noisy cross sums too (one Gaussian mechanism together: :data:`HEAD_SHARE`) — for one
state. Materializing the same state again redraws the same noise (see
:mod:`~forgetting.privacy.noise`) and so reveals nothing new; it is recorded once. A model
serves p instances, so one model state is p releases, and σ is calibrated so that those p
releases *together* are (ε, δ)-DP: every instance uses the noise multiplier z of
``calibrate_noise_multiplier(ε, δ, p)``, σ_r = z·Δ_r with Δ_r its own sensitivity. A stream
of insertions and deletions releases new states; the ledger composes all distinct releases
with the accountant (an upper bound for any one row, whose label may be in all of them).

The ledger is deliberately *not* part of the state digest: the model is history independent,
its privacy spend is not (two models with equal states may have spent different budgets).
It stores no raw state digests — those are unkeyed functions of the labels — only keyed
16-byte tags, enough to count distinct releases.

Replays. Equal states get equal noise, so the transcript reveals which releases are of equal
states. That is harmless as long as the *pattern* of equal states is the same in neighbouring
worlds — and it is, except in one case: forget a row, then insert a row with the same id and
input and a guessed label. The new state equals the old one exactly when the guess is right,
and the identical release would confirm it (ε = ∞). The ledger therefore remembers keyed tags
of forgotten ids and :meth:`PrivacyLedger.check_insert` refuses to re-insert them.

The ledger is the model's history, so no refit resets it: a change that refits the model (a
class's last rows, a raw table's encoding, a pipeline's step) makes a new engine that takes
it over first (:meth:`PrivacyLedger.continued`), and files and stores keep it. Only a new
``fit`` starts a new one (docs/privacy.md, §6: the threat model).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .accounting import calibrate_noise_multiplier, composed_epsilon
from .noise import HEAD_NOISE_DOMAIN, _check_key, _state_bytes, noise_fold_sums, standard_normal
from .sensitivity import TASKS, check_clip, head_label_sensitivity, label_sensitivity

HEAD_SHARE = 1.0
"""With a head, the share s of one release's privacy budget (in GDP terms, of 1/z²) spent on
the head's cross sums; the tables get the rest: σ_H = z·Δ_H/√s, σ_T = z·Δ_T/√(1 − s), and the
joint release is one Gaussian mechanism with multiplier z (docs/privacy.md, Theorem 3).
s = 1 (the head takes the whole release, the tables' sums are not released and serve
nothing): on digits' validation split (ε = 8, p = 3, "shared-rf") 0.85 against 0.84 at
s = 0.9 and 0.5 — 64 flat tables need √64 times a head's noise, and their noisy out-of-fold
gain chose them where they served 0.2–0.3."""

RELEASE_TAG_DOMAIN = b"qss-dp-release"
FORGOTTEN_TAG_DOMAIN = b"qss-dp-forgotten-id"

GUARANTEE = (
    "(epsilon, delta)-label-DP per model state for the labels of rows outside every schema "
    "subset D° (the noisy residual sums and everything computed from them: means, alpha, "
    "shrinkage, predictions); composed_epsilon bounds all distinct releases so far. NOT "
    "covered: the labels of D° rows (they train g and the schema in the clear), any row's "
    "inputs (label-DP only; in label mode the codebook is trained on all inputs), and the "
    "raw statistics kept inside the model (the curator's secret, like the key). Computational: "
    "assumes HMAC-SHA256 is a PRF and the secret key stays secret."
)


def check_privacy_params(
    epsilon: Any,
    delta: Any,
    *,
    task: str,
    clip: Any = None,
    secret_key: Any = None,
) -> None:
    """Refuse, before anything is fitted, every setting that cannot be (ε, δ)-label-DP.

    * ε must be a finite number > 0 (ε = ∞ is simply ``mode="exact"``), δ in (0, 1);
    * regression needs a clip C > 0 (unbounded residuals have unbounded sensitivity);
      classification refuses one (its residuals are bounded already);
    * ``secret_key`` must be set: the noise is derived from the key, and without one the key
      is derived from the public ``random_state`` — anyone could recompute and subtract the
      noise.
    """
    check_dp_epsilon(epsilon)
    if isinstance(delta, bool) or not isinstance(delta, int | float | np.integer | np.floating):
        raise ValueError(f"mode='dp' needs delta in (0, 1); got {delta!r}")
    if not (math.isfinite(float(delta)) and 0.0 < float(delta) < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task == "regression":
        check_clip(clip)
    elif clip is not None:
        raise ValueError("clip applies to regression only (one-hot residuals are bounded)")
    check_dp_secret_key(
        secret_key,
        "the noise is a keyed function of the state, and without a secret the key comes from "
        "the public random_state, so anyone could recompute the noise and subtract it",
    )


def check_dp_epsilon(epsilon: Any) -> None:
    """``mode="dp"`` of any family needs ε, a finite number > 0 (ε = ∞ is ``mode="exact"``)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise ValueError(f"mode='dp' needs epsilon, a finite number > 0; got {epsilon!r}")
    if not (math.isfinite(float(epsilon)) and float(epsilon) > 0.0):
        raise ValueError(
            f"epsilon must be a finite number > 0, got {epsilon!r} (for no privacy use "
            "mode='exact')"
        )


def check_dp_secret_key(secret_key: Any, why: str) -> None:
    """``mode="dp"`` of any family needs a secret key of at least 16 bytes/characters;
    ``why`` ends the error line: what a key derived from the public random_state exposes."""
    if secret_key is None:
        raise ValueError(f"mode='dp' needs secret_key: {why}")
    if isinstance(secret_key, str | bytes | bytearray) and len(secret_key) < 16:
        raise ValueError("secret_key must be at least 16 bytes/characters in mode='dp'")


@dataclass(frozen=True)
class PrivacyReport:
    """What ``model.privacy_`` shows: the promise per model state and the spend so far."""

    epsilon: float
    """Target ε of one model state (all p instances' releases together)."""
    delta: float
    noise_multiplier: float
    """z = σ/Δ of every release."""
    sigma: float
    """Noise standard deviation of the latest releases of the tables' sums (largest over
    instances; residual units, i.e. one-hot or D°-standardized target units). NaN before the
    first release, and where a head takes the whole release (``head_share`` 1: no tables'
    sums are released; see ``head_sigma``)."""
    sensitivity: float
    """L2 sensitivity Δ behind ``sigma``. NaN before the first release."""
    n_instances: int
    n_releases: int
    """Distinct (instance, state) releases so far: in the model's whole history, across
    refits, files and stores (a new ``fit`` starts at 0)."""
    composed_epsilon: float
    """ε at ``delta`` of all releases so far (the exact composition: see .accounting)."""
    task: str
    clip: float | None
    guarantee: str = GUARANTEE
    head_sigma: float = math.nan
    """With a head: the noise σ_H on its cross sums (largest over instances, residual ×
    feature units); NaN without one. The head's sums are part of the same release as the
    tables' (one Gaussian mechanism with multiplier z, counted once in ``n_releases``)."""
    head_sensitivity: float = math.nan
    """Δ_H behind ``head_sigma`` (:func:`head_label_sensitivity`); NaN without a head."""
    head_share: float = 0.0
    """The share s of each release's budget the head's sums take (0 without a head)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PrivacyLedger:
    """The calibrated mechanism of one QSS-DP model and the record of what it released.

    Create it once per model, at ``fit`` (after :func:`check_privacy_params`; a refit
    continues it: :meth:`continued`); call
    :meth:`noise_fold_sums` wherever an instance's content is materialized,
    :meth:`record_forgotten` after every forget and :meth:`check_insert` before every insert;
    expose :meth:`report` as ``model.privacy_``. Thread-safe.
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        *,
        task: str,
        n_instances: int = 1,
        clip: float | None = None,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if task == "regression":
            clip = check_clip(clip)
        elif clip is not None:
            raise ValueError("clip applies to regression only")
        if isinstance(n_instances, bool) or not isinstance(n_instances, int) or n_instances < 1:
            raise ValueError(f"n_instances must be a positive int, got {n_instances!r}")
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.task = task
        self.clip = clip
        self.n_instances = n_instances
        self.noise_multiplier = calibrate_noise_multiplier(self.epsilon, self.delta, n_instances)
        self._lock = threading.Lock()
        self._tags: set[bytes] = set()
        self._latest: dict[int, tuple[float, float]] = {}
        self._latest_head: dict[int, tuple[float, float, float]] = {}
        self._forgotten: set[bytes] = set()

    # -- the mechanism --------------------------------------------------------------------
    def sensitivity(self, n_groups: int, scale_bits: int | None = None) -> float:
        """Δ of one instance with ``n_groups`` levels/tables (see :func:`label_sensitivity`)."""
        return label_sensitivity(self.task, n_groups, clip=self.clip, scale_bits=scale_bits)

    def sigma(self, n_groups: int, scale_bits: int | None = None) -> float:
        """σ = z·Δ for one instance with ``n_groups`` levels/tables."""
        return self.noise_multiplier * self.sensitivity(n_groups, scale_bits)

    def noise_fold_sums(
        self,
        sums: np.ndarray,
        *,
        key: bytes,
        state_digest: bytes | str,
        instance: int,
        n_groups: int,
        scale_bits: int | None = None,
        head_share: float = 0.0,
    ) -> np.ndarray:
        """Noise one instance's fold sums (2, G, cells, k) for its current state and record
        the release. ``sums`` in float64 residual units; see
        :func:`~forgetting.privacy.noise.noise_fold_sums`. ``head_share`` s > 0 when the
        instance also releases a head (:meth:`noisy_head`): σ = z·Δ/√(1 − s)."""
        self._check_instance(instance)
        sensitivity = self.sensitivity(n_groups, scale_bits)
        share = _check_share(head_share)
        if share == 1.0:
            raise ValueError("head_share = 1: the head takes the whole release, no tables' sums")
        sigma = self.noise_multiplier * sensitivity / math.sqrt(1.0 - share)
        noisy = noise_fold_sums(sums, sigma, key, state_digest, instance=int(instance))
        self.record(key, state_digest, int(instance), sigma, sensitivity)
        return noisy

    def noisy_fixed_point(
        self,
        sums: np.ndarray,
        scale_bits: int,
        *,
        key: bytes,
        state_digest: bytes | str,
        instance: int,
        counts: np.ndarray | None = None,
        head_share: float = 0.0,
    ) -> np.ndarray:
        """:meth:`noise_fold_sums` for integer fold sums (2, G, cells, k) in fixed point
        (``value · 2^scale_bits``), rounded back to int64 in the same fixed point.

        Rounding a DP output is post-processing, so the result can replace the sums of a copy
        of the accumulators and be materialized by the unchanged exact-mode code
        (``acc_noisy = acc.copy(); acc_noisy.sums = ledger.noisy_fixed_point(...)``).
        G is read from axis 1. With ``counts`` (2, G, cells), cells holding no row are set to
        0 after noising — post-processing on public counts, which keeps pure noise out of the
        means of empty cells.
        """
        sums = np.asarray(sums)
        if sums.dtype.kind not in "iu":
            raise ValueError("noisy_fixed_point takes the integer fixed-point sums")
        scale = math.ldexp(1.0, int(scale_bits))
        noisy = self.noise_fold_sums(
            sums.astype(np.float64) / scale,
            key=key,
            state_digest=state_digest,
            instance=instance,
            n_groups=int(sums.shape[1]),
            scale_bits=scale_bits,
            head_share=head_share,
        )
        fixed = np.rint(noisy * scale)
        if counts is not None:
            fixed[np.asarray(counts) == 0] = 0.0
        if not np.all(np.abs(fixed) < 2.0**62):
            raise OverflowError("noise this large does not fit the fixed-point sums; raise ε")
        return fixed.astype(np.int64)

    def noisy_head(
        self,
        cross: np.ndarray,
        cross_unit: float,
        curvature: np.ndarray | None,
        curvature_unit: float,
        *,
        key: bytes,
        state_digest: bytes | str,
        instance: int,
        feature_norm: float,
        head_share: float = HEAD_SHARE,
    ) -> tuple[np.ndarray, np.ndarray | None, float]:
        """The head's part of one instance's release: its integer fold cross sums (2, D, k)
        (``cross_unit`` real units per integer) and, for the logistic step's head, its
        integer curvature sums (k,) (``curvature_unit``), each plus Gaussian noise of
        σ_H = z·Δ_H/√s in real units — one keyed array from the state, in the head's own
        noise domain, independent of the tables' — rounded back to their integer grids
        (post-processing). Curvature sums are floored at 0 (post-processing: they are sums
        of p(1 − p) ≥ 0). ``feature_norm`` bounds ‖[φ(x), 1]‖₂ for every row. Records the
        release (the same (instance, state) as the tables': counted once). Returns the noisy
        integers and σ_H (public: the solve's penalty is chosen in its units)."""
        self._check_instance(instance)
        share = _check_share(head_share)
        if share == 0.0:
            raise ValueError("a head's release needs head_share > 0")
        cross = np.asarray(cross)
        if cross.dtype.kind not in "iu" or cross.ndim != 3 or cross.shape[0] != 2:
            raise ValueError(f"cross must be integer fold sums (2, D, k), got {cross.shape}")
        sensitivity = head_label_sensitivity(
            self.task, feature_norm, clip=self.clip, curvature=curvature is not None
        )
        sigma = self.noise_multiplier * sensitivity / math.sqrt(share)
        size = cross.size + (0 if curvature is None else np.asarray(curvature).size)
        Z = standard_normal(key, state_digest, int(instance), (size,), HEAD_NOISE_DOMAIN)
        real = cross.astype(np.float64) * cross_unit + sigma * Z[: cross.size].reshape(cross.shape)
        noisy_cross = _to_grid(real, cross_unit)
        noisy_curvature = None
        if curvature is not None:
            curvature = np.asarray(curvature)
            c_real = curvature.astype(np.float64) * curvature_unit + sigma * Z[cross.size :]
            noisy_curvature = np.maximum(_to_grid(c_real, curvature_unit), 0)
        self.record(key, state_digest, int(instance), None, None)
        with self._lock:
            self._latest_head[int(instance)] = (sigma, sensitivity, share)
        return noisy_cross, noisy_curvature, sigma

    def _check_instance(self, instance) -> None:
        if not (isinstance(instance, int | np.integer) and 0 <= instance < self.n_instances):
            raise ValueError(f"instance must be in 0..{self.n_instances - 1}, got {instance!r}")

    def record(
        self,
        key: bytes,
        state_digest: bytes | str,
        instance: int,
        sigma: float | None,
        sensitivity: float | None,
    ) -> bool:
        """Count a release of ``instance`` in ``state_digest``; False if already counted."""
        message = RELEASE_TAG_DOMAIN + int(instance).to_bytes(8, "little")
        message += _state_bytes(state_digest)
        tag = hmac.new(_check_key(key), message, hashlib.sha256).digest()[:16]
        with self._lock:
            if sigma is not None:
                self._latest[int(instance)] = (float(sigma), float(sensitivity))
            if tag in self._tags:
                return False
            self._tags.add(tag)
            return True

    # -- replays --------------------------------------------------------------------------
    @staticmethod
    def _id_tag(key: bytes, row_id: bytes) -> bytes:
        message = FORGOTTEN_TAG_DOMAIN + len(row_id).to_bytes(8, "little") + bytes(row_id)
        return hmac.new(_check_key(key), message, hashlib.sha256).digest()[:16]

    def record_forgotten(self, key: bytes, id_bytes: Sequence[bytes]) -> None:
        """Remember (keyed tags of) forgotten ids; call after a forget succeeds."""
        tags = {self._id_tag(key, b) for b in id_bytes}
        with self._lock:
            self._forgotten |= tags

    def check_insert(self, key: bytes, id_bytes: Sequence[bytes]) -> None:
        """Refuse ids forgotten earlier: re-inserting one with a guessed label would recreate
        an earlier state exactly when the guess is right (see the module docstring)."""
        with self._lock:
            again = [i for i, b in enumerate(id_bytes) if self._id_tag(key, b) in self._forgotten]
        if again:
            raise ValueError(
                f"{len(again)} of these ids were forgotten earlier; in mode='dp' a forgotten id "
                "cannot be inserted again (an identical release would confirm a guessed label). "
                "Use a new id."
            )

    # -- the history across refits --------------------------------------------------------
    def continued(self, fresh: PrivacyLedger) -> PrivacyLedger:
        """A copy of this ledger for the next engine of the same model (a refit after a
        forget or insert), whose own new ledger is ``fresh``: every release and forgotten id
        so far carries over, so a refit neither drops the count (composed ε) nor lets a
        forgotten id back in. Both must be the same mechanism (ε, δ, task, clip, p); a model
        whose privacy parameters changed since its fit is refused (fit it again: a new
        model, a new ledger)."""
        mine = (self.epsilon, self.delta, self.task, self.clip, self.n_instances)
        theirs = (fresh.epsilon, fresh.delta, fresh.task, fresh.clip, fresh.n_instances)
        if mine != theirs:
            raise ValueError(
                "the privacy parameters (epsilon, delta, clip, n_instances) changed since the "
                "model was fitted: its releases so far cannot be composed with the new ones; "
                "fit the model again to start a new ledger"
            )
        carried = PrivacyLedger.from_dict(self.to_dict())
        with fresh._lock:  # made before the new engine released anything; kept all the same
            carried._tags |= fresh._tags
            carried._forgotten |= fresh._forgotten
        return carried

    # -- the spend -----------------------------------------------------------------------
    @property
    def n_releases(self) -> int:
        with self._lock:
            return len(self._tags)

    def composed_epsilon(self) -> float:
        """ε at δ of every distinct release so far (exact and O(1): see .accounting)."""
        return composed_epsilon(self.noise_multiplier, self.n_releases, self.delta)

    def report(self) -> PrivacyReport:
        with self._lock:
            n = len(self._tags)
            latest = max(self._latest.values(), default=(math.nan, math.nan))
            head = max(self._latest_head.values(), default=(math.nan, math.nan, 0.0))
        return PrivacyReport(
            epsilon=self.epsilon,
            delta=self.delta,
            noise_multiplier=self.noise_multiplier,
            sigma=latest[0],
            sensitivity=latest[1],
            n_instances=self.n_instances,
            n_releases=n,
            composed_epsilon=composed_epsilon(self.noise_multiplier, n, self.delta),
            task=self.task,
            clip=self.clip,
            head_sigma=head[0],
            head_sensitivity=head[1],
            head_share=head[2],
        )

    # -- persistence (plain JSON types: no pickles) ----------------------------------------
    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "epsilon": self.epsilon,
                "delta": self.delta,
                "task": self.task,
                "clip": self.clip,
                "n_instances": self.n_instances,
                "noise_multiplier": self.noise_multiplier,
                "release_tags": sorted(t.hex() for t in self._tags),
                "latest": {str(r): list(v) for r, v in sorted(self._latest.items())},
                "forgotten_tags": sorted(t.hex() for t in self._forgotten),
                **(
                    {"latest_head": {str(r): list(v) for r, v in sorted(self._latest_head.items())}}
                    if self._latest_head
                    else {}
                ),
            }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> PrivacyLedger:
        """Restore a ledger with the noise multiplier it was created with, so the restored
        model releases what the saved one did and every release keeps one multiplier. The
        mapping must be one :meth:`to_dict` writes (:func:`check_ledger_state`: its entries,
        their types, tags as written, σ = z·Δ of every latest release); ValueError otherwise.

        A multiplier at least this version's calibration for the stored (ε, δ, p) is kept
        (more noise is at least as private: a ledger calibrated with the earlier PLD search
        holds a multiplier a hair above the analytic one); a smaller one would not give the
        promised (ε, δ) and is refused."""
        check_ledger_state(state)
        ledger = cls(
            state["epsilon"],
            state["delta"],
            task=state["task"],
            n_instances=int(state["n_instances"]),
            clip=state["clip"],
        )
        stored = float(state["noise_multiplier"])
        if not (math.isfinite(stored) and stored >= ledger.noise_multiplier * (1 - 1e-9)):
            raise ValueError(
                f"stored noise multiplier {stored!r} is below this version's calibration "
                f"{ledger.noise_multiplier!r} for the stored epsilon and delta: its releases "
                "would not be (epsilon, delta)-DP; refusing to load the ledger"
            )
        ledger.noise_multiplier = stored
        ledger._tags = {bytes.fromhex(t) for t in state["release_tags"]}
        ledger._latest = {int(r): (float(v[0]), float(v[1])) for r, v in state["latest"].items()}
        ledger._forgotten = {bytes.fromhex(t) for t in state.get("forgotten_tags", [])}
        ledger._latest_head = {
            int(r): (float(v[0]), float(v[1]), float(v[2]))
            for r, v in state.get("latest_head", {}).items()
        }
        return ledger


LEDGER_ENTRIES = {
    "epsilon": float,
    "delta": float,
    "task": str,
    "clip": (float, type(None)),
    "n_instances": int,
    "noise_multiplier": float,
    "release_tags": list,
    "latest": dict,
}
LEDGER_OPTIONAL = {"forgotten_tags": list, "latest_head": dict}
"""A stored ledger's entries (:meth:`PrivacyLedger.to_dict`); ``forgotten_tags`` is absent
from ledgers written before forgotten ids were kept, ``latest_head`` without a head."""


def check_ledger_state(state: Any) -> None:
    """Refuse, in one ValueError line naming the entry, a stored ledger :meth:`to_dict` could
    not have written: entries missing or unknown, of another type, tags that are not sorted,
    distinct 16-byte hex strings, latest releases of an unknown instance or whose σ is not
    z·Δ (z the ledger's multiplier). Its mechanism against the model's parameters is the
    restore's to check."""
    if not isinstance(state, dict):
        raise ValueError("the ledger is not a mapping")
    allowed = {**LEDGER_ENTRIES, **LEDGER_OPTIONAL}
    missing = sorted(set(LEDGER_ENTRIES) - set(state))
    unknown = sorted(str(k)[:40] for k in set(state) - set(allowed))
    if missing or unknown:
        raise ValueError(f"the ledger's entries: missing {missing}, unknown {unknown[:5]}")
    for name, kind in allowed.items():
        if name in state and (not isinstance(state[name], kind) or type(state[name]) is bool):
            raise ValueError(f"the ledger's {name} is a {type(state[name]).__name__}")
    z = state["noise_multiplier"]
    if not (math.isfinite(z) and z > 0):
        raise ValueError("the ledger's noise_multiplier is not a finite number > 0")
    for name in ("release_tags", "forgotten_tags"):
        tags = state.get(name, [])
        if not all(type(t) is str and len(t) == 32 and _lower_hex(t) for t in tags) or any(
            a >= b for a, b in zip(tags, tags[1:], strict=False)
        ):
            raise ValueError(f"the ledger's {name} are not sorted, distinct 16-byte hex tags")
    p = state["n_instances"]
    for name, width in (("latest", 2), ("latest_head", 3)):
        for r, values in state.get(name, {}).items():
            if not (type(r) is str and r.isdigit() and int(r) < p and str(int(r)) == r):
                raise ValueError(f"the ledger's {name} names an instance {str(r)[:20]!r}")
            if not (
                isinstance(values, list)
                and len(values) == width
                and all(type(v) is float and math.isfinite(v) and v > 0 for v in values)
                and _recorded(z, *values)
            ):
                raise ValueError(f"the ledger's {name}[{r}] is not a release's (σ, Δ)")


def _recorded(z: float, sigma: float, sensitivity: float, share: float | None = None) -> bool:
    """Whether σ is what a release records: z·Δ/√(1 − s) ≥ z·Δ for the tables' sums (s the
    head's share, 0 without one), exactly z·Δ_H/√s for a head's (its s recorded beside)."""
    if share is None:
        return sigma >= z * sensitivity
    return share <= 1.0 and sigma == z * sensitivity / math.sqrt(share)


def _lower_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _check_share(share: float) -> float:
    share = float(share)
    if not (0.0 <= share <= 1.0):
        raise ValueError(f"head_share must be in [0, 1], got {share!r}")
    return share


def _to_grid(real: np.ndarray, unit: float) -> np.ndarray:
    """Noisy real values back on an integer grid of step ``unit`` (post-processing)."""
    fixed = np.rint(real / unit)
    if not np.all(np.abs(fixed) < 2.0**62):
        raise OverflowError("noise this large does not fit the fixed-point sums; raise ε")
    return fixed.astype(np.int64)
