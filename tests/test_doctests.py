"""The public estimators' docstring examples run as written."""

from __future__ import annotations

import doctest

import forgetting.estimators


def test_estimator_docstring_examples():
    result = doctest.testmod(forgetting.estimators, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10
    assert result.failed == 0
