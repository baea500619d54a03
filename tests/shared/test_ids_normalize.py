"""forgetting.ids.normalize_ids: the one normalization every model, baseline and the CLI use.

Its plain-int fast path checks the ids' types in one C-level pass; these tests pin what it
must keep doing on every path: the same values, the same refusals and the same messages.
"""

from __future__ import annotations

import numpy as np
import pytest

from forgetting.ids import normalize_id, normalize_ids

BIG = 2**63 - 1


@pytest.mark.parametrize(
    "ids",
    [
        [3, 1, 2],
        list(range(1000)),
        [-(2**63), BIG, 0],
        np.arange(50, dtype=np.int32),
        np.array([BIG], dtype=np.uint64),
        [np.int64(4), 5, np.uint8(6)],
        ["a", " a", "a ", "A", ""],
        [1, "1", np.str_("x")],
        range(5),
        (7, "seven"),
    ],
)
def test_values_are_plain_ints_and_strings_in_order(ids):
    given = list(ids) if not isinstance(ids, np.ndarray) else ids.tolist()
    out = normalize_ids(ids)
    assert out == [normalize_id(v) for v in given]
    assert all(type(v) in (int, str) for v in out)


@pytest.mark.parametrize(
    "ids,error,message",
    [
        ([1, True], TypeError, "ids must be ints or strings, got bool True"),
        ([1, 2.0], TypeError, "ids must be ints or strings, got float 2.0"),
        ([1, None], TypeError, "ids must be ints or strings, got NoneType None"),
        ([1, 2**63], ValueError, f"integer ids must fit in int64, got {2**63}"),
        ([-(2**63) - 1, 1], ValueError, f"integer ids must fit in int64, got {-(2**63) - 1}"),
        (np.array([2**63], dtype=np.uint64), ValueError, "integer ids must fit in int64"),
        ([1, 2, 1, 3, 3], ValueError, "ids must be unique; duplicated: [1, 3]"),
        (["u", "v", "u"], ValueError, "ids must be unique; duplicated: ['u']"),
        (list(range(12)) * 2, ValueError, "duplicated: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (2 "),
        ("abc", TypeError, "ids must be a sequence of ids, not a single str"),
        (7, TypeError, "ids must be a sequence of ids, not a single int"),
        (np.zeros((2, 2), dtype=int), ValueError, "ids must be one-dimensional, got shape (2, 2)"),
    ],
)
def test_refusals_keep_their_messages(ids, error, message):
    with pytest.raises(error) as err:
        normalize_ids(ids)
    assert message in str(err.value)


def test_length_and_range_defaults():
    assert normalize_ids(None, 3) == [0, 1, 2]
    with pytest.raises(ValueError, match="ids must be given"):
        normalize_ids(None)
    with pytest.raises(ValueError, match="ids has 2 entries but X has 3 rows"):
        normalize_ids([1, 2], 3)
    assert normalize_ids([]) == []
