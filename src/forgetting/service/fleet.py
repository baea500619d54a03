"""Several models behind one service: which one a request means, and one deletion for all.

A service serves one or more models, each by name (``forgetting serve`` names a model after
its store's file stem). With one model every route behaves as it always has, and ``?model=``
may name it. With several:

* **Routes about one model** (``/predict``, ``/insert``, ``/stats``, the receipt log and
  export, ``/receipts/{id_hash}``) need ``?model=NAME``: an answer from an unnamed model
  could be the wrong one. Without it: 422 listing the names; an unknown name: 404 listing
  them.
* **A deletion request** (``POST /forget`` without ``?model=``) goes to every model that
  holds, or once held, one of the ids (:func:`forget_everywhere`): one request for every
  model, as a privacy team answering "forget me" needs. Each model's deletion is its own
  durable change with its own receipt; a model that fails (a store error) does not undo the
  others', which were acknowledged. The answer lists each model's outcome
  (:func:`combined_status` says its status code).
* **Finding a person** (``GET /receipts?id=``) asks every model (:func:`lookup_everywhere`).

Why models are independent rather than one transaction: each store is its own database
(possibly a different SQLite file and a PostgreSQL server); no commit spans them. So the
promise is per model: what a model acknowledged is durable, and a retry of the same request
is safe (a model that already forgot answers with its stored receipt).

Each model keeps its own recovery (a store error in one reloads that one) and its own
predict batcher and write lock.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException, status

from ..store.errors import ReceiptCorrupt, StoreCorrupt, StoreError
from .convert import DamagedReceipt, stored_receipt
from .errors import error_message
from .model import ServableModel
from .recovery import ModelUnavailable, Recovery, one_line

#: The longest ``reason`` a change may carry, in characters.
MAX_REASON = 500


@dataclass
class Served:
    """One served model and what the service keeps for it."""

    name: str
    model: ServableModel
    recovery: Recovery
    mutation_lock: threading.Lock
    write_lock: Any
    """The mutation lock, or a null context when the model commits concurrent writes itself."""
    extras: dict = field(default_factory=dict)
    """Per-model parts other modules attach (the predict batcher, the console's jobs)."""


class Fleet:
    """The served models, in the order given (module docstring)."""

    def __init__(self, served: list[Served]):
        if not served:
            raise ValueError("a service needs at least one model")
        self._by_name = {s.name: s for s in served}
        if len(self._by_name) != len(served):
            raise ValueError("two models have the same name")

    def __iter__(self) -> Iterator[Served]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    @property
    def first(self) -> Served:
        return next(iter(self._by_name.values()))

    @property
    def several(self) -> bool:
        return len(self._by_name) > 1

    def listing(self) -> str:
        return ", ".join(self._by_name)

    def get(self, name: str | None) -> Served | None:
        """The model named ``name`` (None: the only one), or None if there is no such one."""
        if name is None or name == "":
            return None if self.several else self.first
        return self._by_name.get(name)

    def pick(self, name: str | None, what: str, *, available: bool = True) -> Served:
        """The model a request about one model means, or the 404/422 that says which exist;
        with ``available``, a 503 (through :class:`ModelUnavailable`) while it reloads."""
        if name is None or name == "":
            if self.several:
                raise HTTPException(
                    status.HTTP_422_UNPROCESSABLE_CONTENT,
                    f"{what} needs ?model=NAME: this service serves {self.listing()}",
                )
            served = self.first
        else:
            found = self._by_name.get(name)
            if found is None:
                raise HTTPException(
                    status.HTTP_404_NOT_FOUND,
                    f"no model named {one_line(name, 80)!r}: this service serves {self.listing()}",
                )
            served = found
        if available:
            served.recovery.require_available()
        return served

    def require_available(self) -> None:
        """What the request gate checks: with one model, that it may serve; with several,
        that one of them may (each route checks the model it uses)."""
        if not self.several:
            self.first.recovery.require_available()
            return
        if not any(s.recovery.available for s in self):
            for s in self:
                s.recovery.start_reload()
            raise ModelUnavailable(
                "every model is reloading from its store after a store error; retry shortly"
            )

    def start_reloads(self) -> None:
        """Start the reload of every model that may be out of step with its store."""
        for s in self:
            if not s.recovery.available:
                s.recovery.start_reload()

    def close(self) -> None:
        for s in self:
            s.recovery.close()


def check_reason(reason: str | None) -> str | None:
    """``reason`` stripped (None when empty), or a ValueError when over :data:`MAX_REASON`
    characters or not printable text."""
    if reason is None:
        return None
    reason = reason.strip()
    if not reason:
        return None
    if len(reason) > MAX_REASON:
        raise ValueError(f"reason: at most {MAX_REASON} characters, got {len(reason)}")
    if not all(c.isprintable() or c in "\n\t" for c in reason):
        raise ValueError("reason: text without control characters")
    return reason


_ACCEPTS: dict[Any, bool] = {}


def attributed(method: Callable, operator: str | None, reason: str | None) -> dict:
    """The keyword arguments naming who made a change and why, for ``method`` (a model's
    ``forget`` or ``insert``): empty for a model whose methods take neither (one predating
    them, such as a test's fake); with ``reason`` refused there rather than dropped."""
    func = getattr(method, "__func__", method)
    accepts = _ACCEPTS.get(func)
    if accepts is None:
        try:
            accepts = "operator" in inspect.signature(method).parameters
        except (TypeError, ValueError):
            accepts = False
        _ACCEPTS[func] = accepts
    if accepts:
        return {"operator": operator, "reason": reason}
    if reason is not None:
        raise ValueError("this model's store cannot record a reason")
    return {}


@dataclass
class Outcome:
    """What one model did with a deletion request sent to every model."""

    model: str
    status: str
    """``forgotten`` (``receipt`` says how), ``not_held`` (no id was ever in this model) or
    ``failed`` (``error`` says why, ``code`` is the status it would answer alone)."""
    receipt: dict | None = None
    error: str | None = None
    code: int | None = None
    note: str | None = None
    """For ``not_held``: the model's own words on the ids (not part of the answer)."""

    def to_dict(self) -> dict:
        out: dict = {"model": self.model, "status": self.status}
        if self.receipt is not None:
            out["receipt"] = self.receipt
        if self.error is not None:
            out["error"], out["code"] = self.error, self.code
        return out


def _held(model: ServableModel, ids: list) -> list:
    """The ids ``model`` holds or once held (whose forget it can answer)."""
    return [i for i in ids if model.lookup(i)["status"] in ("present", "forgotten")]


def forget_in(
    served: Served,
    ids: list,
    *,
    erase_inputs: bool,
    operator: str | None,
    reason: str | None,
    partial: bool = True,
) -> Outcome:
    """Forget ``ids`` in one model, as part of a request to every model (module docstring):
    the ids it never held are left out; none held is ``not_held``; an error is ``failed``.
    Without ``partial`` (a request for this model alone) an id it never held changes
    nothing: ``not_held``, with the model's message in ``note``."""
    model = served.model
    try:
        extra = attributed(model.forget, operator, reason)
        with served.write_lock:
            served.recovery.require_available()
            try:
                reply = model.forget(list(ids), erase_inputs=erase_inputs, **extra)
            except KeyError as err:  # some ids were never in this model: forget the others
                held = _held(model, ids) if partial else []
                if not held:
                    return Outcome(served.name, "not_held", note=error_message(err))
                reply = model.forget(held, erase_inputs=erase_inputs, **extra)
        return Outcome(served.name, "forgotten", receipt=stored_receipt(reply.to_dict()))
    except StoreError as err:
        if isinstance(err, ReceiptCorrupt | StoreCorrupt):
            return Outcome(served.name, "failed", error=one_line(err, 200), code=409)
        if not served.recovery.available:
            served.recovery.start_reload()
        return Outcome(served.name, "failed", error=one_line(err, 200), code=503)
    except DamagedReceipt as err:
        return Outcome(served.name, "failed", error=one_line(err, 200), code=409)
    except KeyError as err:
        return Outcome(served.name, "failed", error=error_message(err), code=404)
    except (ValueError, TypeError) as err:
        return Outcome(served.name, "failed", error=error_message(err), code=422)


def forget_everywhere(
    fleet: Fleet, ids: list, *, erase_inputs: bool, operator: str | None, reason: str | None
) -> list[Outcome]:
    """Forget ``ids`` in every model that holds one of them, one model after another; each
    model's deletion is durable once its outcome is ``forgotten``, whatever the next does."""
    return [
        forget_in(s, ids, erase_inputs=erase_inputs, operator=operator, reason=reason)
        for s in fleet
    ]


def combined_status(outcomes: list[Outcome]) -> int:
    """The status code of a deletion sent to every model: 200 when no model failed and one
    held an id; 404 when none held any (nothing changed); when one failed, its code, 503
    first (then ``Retry-After``: a retry is safe, the models that forgot answer with their
    stored receipts), then 409 (a damaged receipt), then 422."""
    failed = {o.code for o in outcomes if o.status == "failed"}
    for code in (503, 409, 422, 404):
        if code in failed:
            return code
    if failed:
        return max(c or 500 for c in failed)
    if not any(o.status == "forgotten" for o in outcomes):
        return status.HTTP_404_NOT_FOUND
    return status.HTTP_200_OK


def combined_answer(outcomes: list[Outcome]) -> dict:
    """The body of a deletion sent to every model: each model's outcome, in order, and the
    names of the models by outcome."""
    return {
        "models": [o.to_dict() for o in outcomes],
        "forgotten_in": [o.model for o in outcomes if o.status == "forgotten"],
        "not_held_in": [o.model for o in outcomes if o.status == "not_held"],
        "failed_in": [o.model for o in outcomes if o.status == "failed"],
    }


def lookup_in(served: Served, row_id: Any) -> dict:
    """One model's answer to "what do you know of this id": its lookup, receipts checked, or
    an ``error`` saying why it cannot tell now."""
    try:
        served.recovery.require_available()
        found = served.model.lookup(row_id)
        receipts = [stored_receipt(r, found["id_hash"]) for r in found["receipts"]]
        return {"model": served.name, **found, "receipts": receipts}
    except (StoreCorrupt, DamagedReceipt, RecursionError) as err:
        why = "nested too deeply to read" if isinstance(err, RecursionError) else one_line(err, 200)
        return {"model": served.name, "error": f"a receipt of this id is damaged: {why}"}
    except StoreError as err:
        return {"model": served.name, "error": f"the store is unavailable: {one_line(err, 200)}"}


def lookup_everywhere(fleet: Fleet, row_id: Any) -> list[dict]:
    """Every model's answer for ``row_id``, in order (:func:`lookup_in`). A malformed id
    raises TypeError/ValueError from the first model."""
    return [lookup_in(s, row_id) for s in fleet]


def as_fleet(
    models: ServableModel | Mapping[str, ServableModel],
    make: Callable[[str, ServableModel], Served],
) -> Fleet:
    """A fleet of ``models``: one model (named ``model``) or names to models."""
    if isinstance(models, Mapping):
        return Fleet([make(name, m) for name, m in models.items()])
    return Fleet([make("model", models)])
