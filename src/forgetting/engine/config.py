"""The engine's configuration, resolved once from the estimator's parameters
(forgetting.parameters), and the error a failed background rebuild raises."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..schema import SchemaConfig


@dataclass(frozen=True)
class EngineConfig:
    schema: SchemaConfig
    mode: str
    n_instances: int
    alpha: float | str
    shrinkage: float | str
    rebuild: str
    random_state: int
    public_params: str
    """Canonical JSON of the estimator parameters that define the state (no secrets)."""
    epsilon: float | None = None
    delta: float | None = None
    """mode="dp": the (ε, δ) of each release (see forgetting.privacy)."""

    @property
    def label_mode(self) -> bool:
        return self.mode == "label"

    @property
    def private(self) -> bool:
        return self.mode == "dp"


class RebuildError(RuntimeError):
    """A background rebuild failed; the instance stays invalid."""


def canonical_params(params: dict[str, Any]) -> str:
    """JSON of the parameters that define a model's state.

    Estimators appear by their scikit-learn repr; other objects (encoders) by class name and
    their plain attributes, never by a repr that could embed a memory address.
    """

    def encode(value):
        if isinstance(value, bool | int | float | str) or value is None:
            return value
        if hasattr(value, "get_params"):
            return repr(value)
        attrs = {
            k: v
            for k, v in sorted(vars(value).items())
            if isinstance(v, bool | int | float | str) or v is None
        }
        return f"{type(value).__qualname__}{json.dumps(attrs, sort_keys=True)}"

    return json.dumps({k: encode(v) for k, v in sorted(params.items())}, sort_keys=True)
