"""Fingerprints of the shipped defaults, one per model family.

Why: a benchmark's figures describe the model it measured. Results files record the
fingerprint of each family's defaults (the lab's ``write_results``), so a figure quoted from a
file written before a default changed is detected (tests/test_results_staleness.py) rather
than silently describing a model no longer shipped. One fingerprint per family, because a
change to the forest's defaults does not change what a QSS figure describes, and the other
way round.

* ``"qss"`` — :class:`~.qss.QSSClassifier` and :class:`~.qss.QSSRegressor`: their default
  parameters, what ``partition="auto"`` and ``head="auto"`` resolve to for each task, the
  head-vs-tables factor and the library version: :func:`~.qss.defaults_fingerprint`, the
  value results files have recorded as "shipped defaults fingerprint" since they first did.
* ``"forest"`` — :class:`~.forest.ExactForestClassifier` and
  :class:`~.forest.ExactForestRegressor`: their default parameters, the configuration fields
  they do not expose (:class:`~forgetting.forest.config.ForestConfig`), the forest's state
  format and the library version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version

FAMILIES = ("qss", "forest")
"""The model families with a defaults fingerprint, in the order results files record them."""


def _release() -> str:
    try:
        return version("forgetting")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


def _digest(described: dict) -> str:
    blob = json.dumps(described, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _qss() -> str:
    from .qss import defaults_fingerprint as qss_fingerprint

    return qss_fingerprint()


def _forest() -> str:
    from ..forest.config import ForestConfig
    from ..forest.core import STATE_FORMAT
    from .forest import ExactForestClassifier, ExactForestRegressor

    described: dict = {
        "version": _release(),
        "state_format": STATE_FORMAT.decode(),
        "config": {k: repr(v) for k, v in sorted(asdict(ForestConfig()).items())},
    }
    for cls in (ExactForestClassifier, ExactForestRegressor):
        params = cls().get_params(deep=False)
        described[cls.__name__] = {k: repr(v) for k, v in sorted(params.items())}
    return _digest(described)


def defaults_fingerprints() -> dict[str, str]:
    """12 hex digits per model family (:data:`FAMILIES`) naming its shipped defaults."""
    return {"qss": _qss(), "forest": _forest()}
