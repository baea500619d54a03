"""Receipts: what a deletion or insertion did, and the state it left, without the rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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

    def to_dict(self) -> dict:
        """A JSON-ready dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
