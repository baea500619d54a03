"""scikit-learn's preprocessing, translated to exact steps — or refused by name.

:func:`exact` maps each scikit-learn step to its exact equivalent (docs/pipelines.md lists
them and the parameters each supports): ``StandardScaler``, ``MinMaxScaler``,
``SimpleImputer``, ``OneHotEncoder``, ``OrdinalEncoder``, ``ColumnTransformer``, a nested
``Pipeline``, ``"passthrough"`` / None. A parameter without an exact meaning is refused with
its name; anything else — PCA, an unknown transformer, a fitted encoder — is refused with the
step's name and the ways out (``OnSchemaRows`` fits it on the schema rows D° only, ``Frozen``
declares it never learns from the rows), never silently accepted (SPEC §5 decision 11).

The translation reads a step's parameters only, never its fitted state: a pipeline fits
every step itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..encoders import Encoder
from .base import Chain, ExactStep, Frozen, Passthrough
from .compose import ColumnTransformer
from .encoding import OneHotEncoder, OrdinalEncoder
from .impute import SimpleImputer
from .scaling import MinMaxScaler, StandardScaler

ALTERNATIVES = (
    "fit it on the pipeline's schema rows D° only with "
    "forgetting.preprocessing.OnSchemaRows({cls}(...)) (refitted when a forget hits D°), "
    "declare it frozen with forgetting.preprocessing.Frozen(...) if it never learns from these "
    "rows, or use an exact step of forgetting.preprocessing (StandardScaler, MinMaxScaler, "
    "SimpleImputer, OneHotEncoder, OrdinalEncoder, ColumnTransformer)"
)


class NotExactError(ValueError):
    """A pipeline step that cannot be made exact (the message names it and the way out)."""


def _refuse_params(name: str, step: Any, allowed: dict[str, Any]) -> dict[str, Any]:
    """The step's parameters; those outside ``allowed`` at a non-default value are refused.

    ``allowed`` maps a supported parameter to None, and an unsupported one to the only value
    accepted (its default, or a value equal in effect here).
    """
    params = step.get_params(deep=False)
    defaults = type(step)().get_params(deep=False) if len(params) > len(allowed) else {}
    for key, value in params.items():
        # a parameter this translation does not know is accepted at its default only
        ok = allowed[key] if key in allowed else (defaults.get(key),)
        if ok is None:
            continue
        accepted = ok if isinstance(ok, tuple) else (ok,)
        if not any(_same(value, a) for a in accepted):
            raise NotExactError(
                f"step {name!r}: {type(step).__name__}({key}={value!r}) has no exact "
                f"translation ({key} must be {' or '.join(repr(a) for a in accepted)}); "
                "remove the parameter"
            )
    return params


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):
        return False


def exact(step: Any, name: str = "step") -> ExactStep:
    """The exact step for ``step`` (an exact step stays itself); raises NotExactError."""
    if step is None or (isinstance(step, str) and step == "passthrough"):
        return Passthrough()
    if isinstance(step, ExactStep):
        return _exact_children(step, name)
    if _is_library_encoder(step):
        if getattr(step, "learned", True):
            raise NotExactError(
                f"step {name!r} ({type(step).__name__}) is a learned encoder: "
                + ALTERNATIVES.format(cls=type(step).__name__)
            )
        return Frozen(step)
    module = type(step).__module__
    if module.startswith("sklearn."):
        translator = _TRANSLATORS.get(type(step).__name__)
        if translator is not None:
            return translator(name, step)
    raise NotExactError(
        f"step {name!r} ({module}.{type(step).__name__}) cannot be made exact: its fitted "
        "state is not a sum over rows that a forget could subtract; "
        + ALTERNATIVES.format(cls=type(step).__name__)
    )


def _is_library_encoder(step: Any) -> bool:
    return isinstance(step, Encoder)


def _exact_children(step: ExactStep, name: str) -> ExactStep:
    """An exact composite with scikit-learn children translates them (a copy)."""
    if isinstance(step, Chain):
        return Chain([(n, exact(s, f"{name}__{n}")) for n, s in step.steps])
    if isinstance(step, ColumnTransformer):
        parts = [(n, _exact_part(t, f"{name}__{n}"), c) for n, t, c in step.transformers]
        return ColumnTransformer(parts, remainder=_exact_part(step.remainder, f"{name}__remainder"))
    return step


def _exact_part(t: Any, name: str) -> Any:
    return t if isinstance(t, str) and t in ("drop", "passthrough") else exact(t, name)


def _standard_scaler(name: str, step: Any) -> ExactStep:
    p = _refuse_params(name, step, {"copy": None, "with_mean": None, "with_std": None})
    return StandardScaler(with_mean=p["with_mean"], with_std=p["with_std"])


def _min_max_scaler(name: str, step: Any) -> ExactStep:
    p = _refuse_params(name, step, {"copy": None, "feature_range": None, "clip": None})
    return MinMaxScaler(p["feature_range"], clip=p["clip"])


def _simple_imputer(name: str, step: Any) -> ExactStep:
    p = _refuse_params(
        name,
        step,
        {
            "missing_values": None,
            "strategy": ("mean", "median", "most_frequent", "constant"),
            "fill_value": None,
            "copy": None,
            "add_indicator": False,
            "keep_empty_features": None,
        },
    )
    return SimpleImputer(
        missing_values=p["missing_values"],
        strategy=p["strategy"],
        fill_value=p["fill_value"],
        keep_empty_features=p["keep_empty_features"],
    )


def _one_hot(name: str, step: Any) -> ExactStep:
    p = _refuse_params(
        name,
        step,
        {
            "categories": None,
            "drop": (None, "first", "if_binary"),
            "sparse_output": None,
            "dtype": None,
            "handle_unknown": ("error", "ignore", "infrequent_if_exist"),
            "min_frequency": (None,),
            "max_categories": (None,),
            "feature_name_combiner": "concat",
        },
    )
    unknown = "error" if p["handle_unknown"] == "error" else "ignore"
    return OneHotEncoder(categories=p["categories"], drop=p["drop"], handle_unknown=unknown)


def _ordinal(name: str, step: Any) -> ExactStep:
    p = _refuse_params(
        name,
        step,
        {
            "categories": None,
            "dtype": None,
            "handle_unknown": ("error", "use_encoded_value"),
            "unknown_value": None,
            "encoded_missing_value": None,
            "min_frequency": (None,),
            "max_categories": (None,),
        },
    )
    return OrdinalEncoder(
        categories=p["categories"],
        handle_unknown=p["handle_unknown"],
        unknown_value=p["unknown_value"],
        encoded_missing_value=p["encoded_missing_value"],
    )


def _column_transformer(name: str, step: Any) -> ExactStep:
    p = _refuse_params(
        name,
        step,
        {
            "transformers": None,
            "remainder": None,
            "sparse_threshold": None,
            "n_jobs": None,
            "transformer_weights": (None,),
            "verbose": None,
            "verbose_feature_names_out": None,
            "force_int_remainder_cols": None,
        },
    )
    parts = [(n, _exact_part(t, f"{name}__{n}"), c) for n, t, c in p["transformers"]]
    return ColumnTransformer(parts, remainder=_exact_part(p["remainder"], f"{name}__remainder"))


def _pipeline(name: str, step: Any) -> ExactStep:
    p = _refuse_params(
        name, step, {"steps": None, "memory": (None,), "transform_input": (None,), "verbose": None}
    )
    return Chain([(n, exact(s, f"{name}__{n}")) for n, s in p["steps"]])


_TRANSLATORS = {
    "StandardScaler": _standard_scaler,
    "MinMaxScaler": _min_max_scaler,
    "SimpleImputer": _simple_imputer,
    "OneHotEncoder": _one_hot,
    "OrdinalEncoder": _ordinal,
    "ColumnTransformer": _column_transformer,
    "Pipeline": _pipeline,
}
"""scikit-learn class name (in a ``sklearn.`` module) → its translation."""
