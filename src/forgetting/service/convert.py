"""Between JSON and numpy: input checks before the model is touched, and plain JSON out
(rows themselves are read by :mod:`.body`).

Why the checks here as well as in the model: each one raises before anything changes, with a
message that names the offending row, so every 4xx leaves the model exactly as it was.

Why labels are checked for their JSON type: a classifier's classes are integers or strings,
and a label is sent as the class itself. JSON ``1.0`` for the class ``1`` is refused, as
``"1.5"`` for a number is (the schemas' strict types): a client that sends floats where the
classes are integers has a bug to learn about, and numpy's ``1.0 == 1`` (what the Python API
compares with) would otherwise decide for it.

Why receipts read back from the store are checked: the store is the server's own data, but a
body altered in the database (tampered, or damaged) must come back as one clear answer
(:func:`.errors.damaged_receipt`), not as a response that fails validation (a 500) or a body
nested deep enough to exhaust the recursion limit on its way out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import HTTPException, status
from pydantic import ValidationError

from ..ids import listing, shown
from .errors import unprocessable
from .schemas import ReceiptResponse

#: The deepest a stored receipt nests (the object, a list of hashes in it, and room for a
#: field a later version may add); anything deeper was not written by the store.
MAX_RECEIPT_DEPTH = 4

#: The JSON type of a classifier's classes, by Python type: what a label must be sent as.
_LABEL_TYPES = {int: "integer", str: "string"}


def check_batch(n: int, what: str, limit: int) -> None:
    """A 413 when one request carries more than ``limit`` rows or ids."""
    if n > limit:
        raise HTTPException(
            status_code=status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"{n} {what} in one request; the limit is {limit}: split the request",
        )


def check_labels(y: list, classes: list | None) -> None:
    """A 422 naming the first label that is not of its classifier's class type (module
    docstring); whether it is a known class is the model's to say."""
    kinds = {type(c) for c in classes or ()}
    if len(kinds) != 1 or (want := kinds.pop()) not in _LABEL_TYPES:
        return
    name = _LABEL_TYPES[want]
    for i, label in enumerate(y):
        if type(label) is not want:
            raise unprocessable(
                f"y[{i}] is {shown(label)}, not one of the classifier's {name} classes "
                f"{listing(classes)}: send each label as the class itself (a JSON {name})"
            )


class DamagedReceipt(ValueError):
    """A receipt read back from the store fails its checks (altered or damaged there)."""


def stored_receipt(value: Any, id_hash: str | None = None) -> dict:
    """``value``, a receipt the store returned, if it is one: a JSON object of the
    receipt's fields with their types (strictly), nested at most :data:`MAX_RECEIPT_DEPTH`
    deep, naming ``id_hash`` when given. Else :class:`DamagedReceipt` saying why."""
    if not isinstance(value, dict):
        raise DamagedReceipt(f"a JSON {type(value).__name__}, not an object")
    stack = [(value, 1)]
    while stack:  # iterative: the depth is what is being checked
        item, depth = stack.pop()
        if depth > MAX_RECEIPT_DEPTH:
            raise DamagedReceipt(f"nested more than {MAX_RECEIPT_DEPTH} levels deep")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    try:
        receipt = ReceiptResponse.model_validate(value, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        raise DamagedReceipt(f"field {where}: {first.get('msg', 'invalid')}") from None
    if id_hash is not None and id_hash not in receipt.id_hashes:
        raise DamagedReceipt("it does not name this id hash")
    return value


def jsonable(values: Any) -> list:
    """numpy array -> plain Python list (numpy scalars are not JSON serializable, and an
    object array's ``tolist`` keeps them as they are)."""
    return finite(np.asarray(values).tolist())


def labels_from_proba(
    proba: np.ndarray, classes: list | None, predict: Callable[[np.ndarray], Any]
) -> np.ndarray:
    """Predicted classes from probabilities, without a second model call where that is exact.

    ``predict`` is the argmax of the model's outputs and ``predict_proba`` a per-row
    non-decreasing map of them (clip at 0, divide by the row total). If a row's largest
    probability is attained by one class only, that class is also the strict argmax of the
    outputs (a larger-or-equal output elsewhere would give a larger-or-equal probability), so
    the label is exactly ``predict``'s. Rows with a tie or a non-finite value (rare) are
    asked to ``predict(rows)`` itself.
    """
    if classes is None or proba.ndim != 2 or proba.shape[1] != len(classes):
        return np.asarray(predict(np.arange(len(proba))))
    top = np.argmax(proba, axis=1)
    best = proba[np.arange(len(proba)), top]
    unique = np.isfinite(best) & ((proba == best[:, None]).sum(axis=1) == 1)
    labels = np.asarray(classes)[top]
    if not np.all(unique):
        rows = np.flatnonzero(~unique)
        labels = labels.astype(object)
        labels[rows] = list(np.asarray(predict(rows)))
    return labels


def finite(value: Any) -> Any:
    """Replace non-finite floats (not representable in JSON) with None, recursively."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
