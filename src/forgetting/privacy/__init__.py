"""QSS-DP: (ε, δ)-label-DP for the residual statistics, calibrated with ``dp-accounting``.

The mechanism (proof in ``docs/privacy.md``): each instance's fold sums (T_A, T_B) get
Gaussian noise σ·Z before anything is computed from them. One label change of a D• row moves
them by at most Δ = √(2G) (classification) or 2C·√G (regression, residuals clipped to
[−C, C]) for G levels/tables; counts carry no labels; means, α/λ cross-fitting and
predictions are post-processing. Z is a keyed pseudorandom function of the instance's state,
so equal states get equal noise (``forget(R)`` ≡ refit, bit for bit) and neighbouring states
independent noise (no cancellation across a deletion). A head's cross sums Σ v rᵀ move by
‖v‖·‖r − r'‖ under one label change (:func:`head_label_sensitivity`, ‖v‖ bounded from the
schema); they are noised in their own domain as part of the same release
(:meth:`PrivacyLedger.noisy_head`; docs/privacy.md, Theorem 3).

Integration surface (what the estimators call)
----------------------------------------------
1. Before fitting, in ``_check_params`` when ``mode == "dp"``::

       check_privacy_params(epsilon, delta, task=self._task, clip=clip, secret_key=secret_key)

   (ValueError for ε ≤ 0 / non-finite, δ ∉ (0, 1), regression without clip C > 0, a clip on
   classification, or ``secret_key=None``.)
2. Once per fit, next to the engine::

       ledger = PrivacyLedger(epsilon, delta, task=task, n_instances=p, clip=clip)

   It calibrates z = σ/Δ with the accountant so that the p instances' releases of one model
   state are (ε, δ)-DP together (``calibrate_noise_multiplier(ε, δ, p)``).
3. Regression residuals: ``clip_residuals(y − g(x), clip)`` *before* ``quantize_residuals``
   (in D°-standardized units, where ``MAX_ABS_RESIDUAL`` already applies).
4. Where instance r's content is materialized (``Instance.content_for`` → ``build_content``),
   noise the fold sums and build everything from them — both folds' α/λ cross-fitting *and*
   the full-data means (which use T_A + T_B of the noisy folds). Simplest, with no change to
   ``build_content``: noise in fixed point and materialize a noisy copy::

       noisy = inst.accumulators.copy()
       noisy.sums = ledger.noisy_fixed_point(
           noisy.sums, noisy.scale_bits, key=noise_key, state_digest=inst.digest(), instance=r,
           counts=noisy.counts,  # optional: zero the (public) empty cells
       )
       inst.content = build_content(noisy, alpha, shrinkage)

   (or ``ledger.noise_fold_sums(T_float, key=..., state_digest=..., instance=r, n_groups=G,
   scale_bits=...)`` for float sums; G = ``sums.shape[1]``, levels or tables). The same works
   for flat tables (copy, replace ``sums``, ``rebuild_totals()``). ``noise_key`` is the
   engine's secret 32-byte key (the ledger and the noise derive their own
   domain-separated HMAC keys from it); ``inst.digest()`` commits to the instance's integer
   state *and its row ids* (a digest of the statistics' values alone would let a row replaced
   by a copy with a guessed label replay an earlier state). Counts n and pair counts N are
   used as they are. Never keep the noisy copy as the live accumulators: deletions subtract
   from the exact integers.
5. After every successful ``forget`` call ``ledger.record_forgotten(noise_key, id_raw)``, and
   before every ``insert`` call ``ledger.check_insert(noise_key, id_raw)`` (ValueError if an id
   was forgotten before: re-inserting it with a guessed label would replay the old state, and
   its identical release, exactly when the guess is right).
6. ``model.privacy_`` returns ``ledger.report()`` (:class:`PrivacyReport`: ``epsilon``,
   ``delta``, ``sigma``, ``sensitivity``, ``noise_multiplier``, ``n_releases``,
   ``composed_epsilon``, ``guarantee``). ``ledger.to_dict()`` / ``PrivacyLedger.from_dict``
   persist it as plain JSON types.
7. In ``mode="dp"`` publish only keyed digests (``public_state_digest(key, digest)``) in
   ``state_digest()`` and receipts: the plain digest is an unkeyed function of the labels.

The exact forest's ``mode="dp"`` uses another mechanism, keyed randomized response on the
labels (:mod:`.randomized_response`, docs/privacy.md §12): ε-label-DP for the whole
transcript, δ = 0, no noise on any statistic and no composition over releases.

Lower-level pieces: :func:`calibrate_sigma`, :func:`composed_epsilon`,
:func:`label_sensitivity`, :func:`noise_fold_sums`, :func:`standard_normal`.
"""

from .accounting import (
    analytic_sigma,
    calibrate_noise_multiplier,
    calibrate_sigma,
    composed_epsilon,
)
from .ledger import GUARANTEE, PrivacyLedger, PrivacyReport, check_privacy_params
from .noise import noise_fold_sums, noise_seed, public_state_digest, standard_normal
from .randomized_response import RRLedger, RRReport, check_rr_params, keep_probability
from .sensitivity import (
    check_clip,
    clip_residuals,
    head_label_sensitivity,
    label_sensitivity,
    quantization_slack,
)

__all__ = [
    "GUARANTEE",
    "PrivacyLedger",
    "PrivacyReport",
    "RRLedger",
    "RRReport",
    "analytic_sigma",
    "calibrate_noise_multiplier",
    "calibrate_sigma",
    "check_clip",
    "check_privacy_params",
    "check_rr_params",
    "clip_residuals",
    "composed_epsilon",
    "head_label_sensitivity",
    "keep_probability",
    "label_sensitivity",
    "noise_fold_sums",
    "noise_seed",
    "public_state_digest",
    "quantization_slack",
    "standard_normal",
]
