"""The estimators' parameters: their constraints, the checks across them, and their resolution
into the configuration the engine and the schemas own.

Why a module of its own: ``QSSClassifier`` and ``QSSRegressor`` store their parameters
verbatim (scikit-learn's contract) and resolve them once, at ``fit`` or restore; what
``"auto"`` means and which combinations are refused is one job, stated here as functions of
the ``get_params()`` mapping and the task ("classification" or "regression"), so it reads and
tests apart from the estimators' surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from .engine import EngineConfig, canonical_params
from .privacy import check_privacy_params
from .schema import SchemaConfig

PARAMETER_CONSTRAINTS: dict = {
    "mode": [StrOptions({"exact", "label", "dp"})],
    "rho": [Interval(Real, 0.0, 1.0, closed="right")],
    "n_instances": [Interval(Integral, 1, None, closed="left")],
    "min_schema_rows": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
    "n_levels": [None, Interval(Integral, 1, 16, closed="both")],
    "n_centroids": [None, Interval(Integral, 2, 65536, closed="both")],
    "partition": [StrOptions({"auto", "rq", "trees", "hyperplanes"})],
    "head": [StrOptions({"auto", "ridge", "shared-ridge", "shared-rf", "newton", "none"})],
    "alpha": [StrOptions({"auto"}), Interval(Real, 0.0, None, closed="left")],
    "shrinkage": [StrOptions({"auto"}), Interval(Real, 0.0, None, closed="left")],
    "base_model": [StrOptions({"auto"}), HasMethods(["fit", "predict"])],
    "lda": [StrOptions({"auto"}), "boolean"],
    "rebuild": [StrOptions({"background", "sync"})],
    "random_state": [None, Interval(Integral, None, None, closed="neither")],
    "secret_key": [None, bytes, str],
    "encoder": "no_validation",  # checked in check_params: None or a learned encoder
    "epsilon": [None, Interval(Real, 0.0, None, closed="neither")],
    "delta": [None, Interval(Real, 0.0, 1.0, closed="neither")],
    "clip": [None, Interval(Real, 0.0, None, closed="neither")],
}
"""scikit-learn's ``_parameter_constraints`` of both estimators (checked by
``_validate_params`` before :func:`check_params`)."""

MIN_SCHEMA_ROWS = 50
"""``min_schema_rows="auto"``: D° keeps at least max(50, 5 · classes) labeled rows."""
MIN_SCHEMA_ROWS_PER_CLASS = 5

_EXACT_HEADS = ("ridge", "shared-ridge", "shared-rf", "newton")


def _no_bools(params: Mapping[str, Any], *names: str) -> None:
    """bool is an int subclass: ``rho=True`` would pass a numeric interval check."""
    for name in names:
        value = params[name]
        if isinstance(value, bool | np.bool_):
            raise ValueError(f"{name} must be a number, got the bool {value!r}")


def check_params(params: Mapping[str, Any], task: str) -> None:
    """Refuse what the constraints alone cannot: bools for numbers, combinations that do not
    go together, and the privacy settings of mode="dp". Raises ValueError, naming the
    parameter and what to do."""
    _no_bools(
        params,
        "rho",
        "n_instances",
        "min_schema_rows",
        "n_levels",
        "n_centroids",
        "alpha",
        "shrinkage",
        "random_state",
    )
    partition, head, mode = resolve_partition(params), params["head"], params["mode"]
    if partition != "rq" and (params["n_levels"] is not None or params["n_centroids"] is not None):
        raise ValueError("n_levels and n_centroids shape partition='rq' only")
    if head in _EXACT_HEADS and partition == "rq":
        raise ValueError(
            f"head={head!r} needs a flat partition ('trees' or 'hyperplanes'), not 'rq'"
        )
    if head == "newton" and mode == "dp":
        raise ValueError(
            "head='newton' is not released in mode='dp' (its per-class weighted Grams have no "
            "noise); use head='shared-rf', 'shared-ridge' or 'ridge'"
        )
    if head == "shared-rf" and params["encoder"] is not None:
        raise ValueError(
            "head='shared-rf' takes the features as given: with a learned encoder each "
            "instance's inputs differ, so its Gram is not shared; use head='ridge' or "
            "'newton'"
        )
    if head == "newton" and task != "classification":
        raise ValueError(
            "head='newton' is a Newton step of logistic regression: classification only; "
            "use head='ridge' for regression"
        )
    b = params["n_centroids"]
    if b is not None and (b & (b - 1)) != 0:
        raise ValueError(f"n_centroids must be None or a power of two, got {b!r}")
    for name in ("alpha", "shrinkage"):
        value = params[name]
        if value != "auto" and not np.isfinite(value):
            raise ValueError(f"{name} must be 'auto' or a finite number ≥ 0, got {value!r}")
    if mode == "dp":
        check_privacy_params(
            params["epsilon"],
            params["delta"],
            task=task,
            clip=params["clip"],
            secret_key=params["secret_key"],
        )
    elif any(params[name] is not None for name in ("epsilon", "delta", "clip")):
        raise ValueError("epsilon, delta and clip apply to mode='dp' only")
    encoder = params["encoder"]
    if encoder is not None and not getattr(encoder, "learned", False):
        raise ValueError(
            "encoder must be a learned encoder (learned=True), trained on D° per instance; "
            "apply frozen encoders (e.g. MiniLMEncoder) to X before fit"
        )


def resolve_partition(params: Mapping[str, Any]) -> str:
    """Resolve ``partition="auto"``: random trees in exact mode (they won every exact-mode
    comparison of benchmarks/results/partitions.md), the RQ codebook in label mode (its
    codebook sees every input there), in mode="dp" (ℓ levels need less noise than 64 tables:
    the sensitivity is √(2G) for G groups) unless a head is asked for (trees: a head needs a
    flat partition), and whenever ``n_levels``/``n_centroids`` ask for a codebook's shape."""
    if params["partition"] != "auto":
        return params["partition"]
    wants_codebook = params["n_levels"] is not None or params["n_centroids"] is not None
    if wants_codebook:
        return "rq"
    if params["mode"] == "exact":
        return "trees"
    # mode="dp" with a head asked for: the head needs a flat partition
    return "trees" if params["mode"] == "dp" and params["head"] in _EXACT_HEADS else "rq"


def resolve_head(params: Mapping[str, Any], task: str) -> str | bool:
    """Resolve ``head="auto"``: an exact ridge head on all rows wherever it can run (flat
    partitions, modes other than "dp"); each instance serves its head only when the ridge
    head's out-of-fold gain exceeds ``TABLES_GAIN_FACTOR`` × the tables' (chosen on
    validation splits: benchmarks/results/head_rule.md).

    Classification: "shared-rf" — the shared ridge head on the normalized input and its fixed
    random ReLU features (design.md §5.13), the head that reaches SISA on the paper
    benchmark's low-k sets where "shared-ridge" trails on image features
    (benchmarks/results/heads-rf.md). Its price is a (d + E + 1)² system per change where the
    head serves, and wider gain-filter and head sums per deletion where the tables serve
    (benchmarks/results/heads-rf.md, core.md). Regression: "shared-ridge" (the random
    features were studied on classification only). With a learned encoder: "ridge" (the
    instance's own f(x) makes every instance's inputs differ). ``False``: tables only.

    mode="dp" keeps tables only (the RQ codebook) unless a head is asked for: a head is
    released with noise there (docs/privacy.md, Theorem 3), and on the validation splits of
    benchmarks/results/dp-head.md "shared-ridge" won on digits, Adult and MNIST-HOG and lost
    on Letter (the switch of this default is left open there)."""
    head = params["head"]
    if head == "auto":
        if resolve_partition(params) == "rq" or params["mode"] == "dp":
            return False
        if params["encoder"] is not None:
            return "ridge"
        return "shared-rf" if task == "classification" else "shared-ridge"
    return False if head == "none" else head


def min_schema_rows(params: Mapping[str, Any], task: str, n_outputs: int) -> int:
    """The least number of labeled rows D° keeps (``"auto"``: max(50, 5 · classes))."""
    if params["min_schema_rows"] == "auto":
        k = n_outputs if task == "classification" else 1
        return max(MIN_SCHEMA_ROWS, MIN_SCHEMA_ROWS_PER_CLASS * k)
    return int(params["min_schema_rows"])


def engine_config(params: Mapping[str, Any], task: str, n_outputs: int) -> EngineConfig:
    """The configuration the engine and schemas own, resolved once from the parameters.

    ``public_params`` (part of every state digest) holds the parameters that define the state:
    not the secret key, and not ``rebuild`` (when a rebuild runs, not what the state is).
    """
    public = {k: v for k, v in params.items() if k not in ("secret_key", "rebuild")}
    clip, epsilon, delta = params["clip"], params["epsilon"], params["delta"]
    schema = SchemaConfig(
        task=task,
        n_outputs=n_outputs,
        rho=float(params["rho"]),
        min_schema_rows=min_schema_rows(params, task, n_outputs),
        n_levels=None if params["n_levels"] is None else int(params["n_levels"]),
        n_centroids=None if params["n_centroids"] is None else int(params["n_centroids"]),
        lda=params["lda"],
        base_model=params["base_model"],
        encoder=params["encoder"],
        residual_clip=None if clip is None else float(clip),
        partition=resolve_partition(params),
        head=resolve_head(params, task),
    )
    alpha, shrinkage = params["alpha"], params["shrinkage"]
    return EngineConfig(
        schema=schema,
        mode=params["mode"],
        n_instances=int(params["n_instances"]),
        alpha=alpha if alpha == "auto" else float(alpha),
        shrinkage=shrinkage if shrinkage == "auto" else float(shrinkage),
        rebuild=params["rebuild"],
        random_state=int(params["random_state"]),
        public_params=canonical_params({**public, "task": task, "n_outputs": n_outputs}),
        epsilon=None if epsilon is None else float(epsilon),
        delta=None if delta is None else float(delta),
    )
