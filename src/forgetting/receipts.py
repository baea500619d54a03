"""Receipts: what a deletion or insertion did, and the state it left, without the rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Receipt:
    """Proof of one ``forget`` or ``insert`` call.

    ``id_hashes`` are keyed hashes of the ids (the key holder can match a request to its
    receipt; nobody can read ids back). ``instances_hit`` lists the instances whose schema
    subset D° held one of the rows: each of those was rebuilt (``rebuild="sync"``) or is
    rebuilding (``rebuild_started``). ``scope`` says what was removed: ``"instance"`` (rows
    erased entirely) or ``"label"`` (label mode: supervision removed, inputs still shape
    the codebook). ``effective_rho`` is the D°-hit probability per instance after the call.
    ``state_digest`` is the model's digest right after the call; while a
    background rebuild is pending it differs from a refit's until the rebuild lands.

    The estimator, the durable store (:class:`~forgetting.store.DurableModel`) and the CLI
    all return this type; the service sends :meth:`to_dict`. A retried deletion answered by
    the store carries ``already_forgotten`` (every id was gone: this is the stored receipt)
    or ``already_forgotten_ids`` (how many of the ids were gone before). A receipt also reads
    like the dict the store keeps (``receipt["state_digest"]``, ``receipt.get(...)``).
    """

    operation: str
    scope: str
    n_rows: int
    id_hashes: tuple[str, ...]
    instances_hit: tuple[int, ...]
    rebuild_started: bool
    state_digest: str
    timestamp: str
    seconds: float
    effective_rho: float = 0.0
    """Mean over instances of |D°_r| / labeled rows after the call: the probability that
    forgetting one more random row hits an instance's D° (ρ, or more on small data)."""
    already_forgotten: bool = False
    already_forgotten_ids: int = 0
    operator: str = ""
    """Who asked for the change: a name (``cli:alice``, a service's caller name), never a
    token or a password; empty when nobody was named."""
    reason: str = ""
    """Why, as the operator wrote it (a ticket number, "GDPR art. 17 request"); empty when
    none was given."""

    def to_dict(self) -> dict:
        """A JSON-ready dict (tuples become lists); the retry fields, ``operator`` and
        ``reason`` only when set, so a stored receipt keeps the shape it always had."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        for name in _WHEN_SET:
            if not out[name]:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, value: Any) -> Receipt:
        """The receipt a dict of :meth:`to_dict`'s shape describes (a stored one, read back).

        Every field must be there with its type (the optional ones may be left out); other
        keys are refused. A ValueError names the first field that is wrong."""
        if not isinstance(value, dict):
            raise ValueError(f"a receipt is a JSON object, not a {type(value).__name__}")
        unknown = sorted(set(value) - set(_FIELD_TYPES))
        if unknown:
            raise ValueError(f"field {unknown[0]!r} is not a receipt field")
        kwargs = {}
        for name, kind in _FIELD_TYPES.items():
            if name not in value:
                if name in _OPTIONAL:
                    continue
                raise ValueError(f"field {name!r} is missing")
            item = value[name]
            if isinstance(kind, tuple):  # (tuple, element type)
                element = kind[1]
                if not isinstance(item, list | tuple) or not all(
                    isinstance(v, element) and not isinstance(v, bool) for v in item
                ):
                    raise ValueError(f"field {name!r} must be a list of {element.__name__}")
                item = tuple(item)
            elif kind is float:
                if isinstance(item, bool) or not isinstance(item, int | float):
                    raise ValueError(f"field {name!r} must be a number")
            elif kind is int:
                if isinstance(item, bool) or not isinstance(item, int):
                    raise ValueError(f"field {name!r} must be an integer")
            elif not isinstance(item, kind):
                raise ValueError(f"field {name!r} must be a {kind.__name__}")
            kwargs[name] = item
        return cls(**kwargs)

    # -- reads like the stored dict -------------------------------------------------------
    def keys(self) -> list[str]:
        """The keys of :meth:`to_dict`."""
        return list(self.to_dict())

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return self.to_dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default


MAX_OPERATOR = 100
"""The most characters an operator name may have."""
MAX_REASON = 500
"""The most characters a reason may have."""


def attribution(operator: str | None = None, reason: str | None = None) -> dict[str, str]:
    """The ``operator`` and ``reason`` fields a change's receipt records, checked: only those
    given and not empty. The operator is a name of at most :data:`MAX_OPERATOR` printable
    characters (never a token: it is stored in clear); the reason is text of at most
    :data:`MAX_REASON` characters. A ValueError in one line says what is wrong."""
    out: dict[str, str] = {}
    if operator is not None:
        if not isinstance(operator, str):
            raise ValueError(f"operator must be a string (a name), not {type(operator).__name__}")
        if len(operator) > MAX_OPERATOR:
            raise ValueError(
                f"operator is {len(operator)} characters long; at most {MAX_OPERATOR} (a name)"
            )
        if not operator.isprintable():
            raise ValueError("operator must be printable characters only (a name)")
        if operator:
            out["operator"] = operator
    if reason is not None:
        if not isinstance(reason, str):
            raise ValueError(f"reason must be a string, not {type(reason).__name__}")
        if len(reason) > MAX_REASON:
            raise ValueError(f"reason is {len(reason)} characters long; at most {MAX_REASON}")
        if reason:
            out["reason"] = reason
    return out


_RETRY_FIELDS = ("already_forgotten", "already_forgotten_ids")
_WHEN_SET = (*_RETRY_FIELDS, "operator", "reason")
_OPTIONAL = frozenset(("effective_rho", *_WHEN_SET))
_TYPES: dict = {"tuple[str, ...]": (tuple, str), "tuple[int, ...]": (tuple, int)}
_TYPES.update({"str": str, "int": int})
_TYPES.update({"bool": bool, "float": float})
_FIELD_TYPES = {f.name: _TYPES[str(f.type)] for f in fields(Receipt)}
