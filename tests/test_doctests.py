"""The public estimators' docstring examples run as written (every family's module)."""

from __future__ import annotations

import doctest

import forgetting.estimators.forest
import forgetting.estimators.qss


def test_estimator_docstring_examples():
    attempted = 0
    for module in (forgetting.estimators.qss, forgetting.estimators.forest):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
        attempted += result.attempted
    assert attempted >= 15
