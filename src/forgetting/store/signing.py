"""The store's receipt log, signed and hash-chained: tamper-evident proof of every change.

Each stored receipt carries the hash of the receipt before it (``prev``) and an Ed25519
signature. The entry hash is SHA-256 over a canonical JSON encoding (keys sorted, no
whitespace, ASCII) of ``{"prev": ..., "receipt": <the receipt body>, "seq": <its sequence
number>}``; the signature is over that hash (with a domain prefix). The first signed receipt's
``prev`` is :data:`GENESIS`. ``meta`` keeps the log's head — the last signed receipt's
sequence number and hash, signed too — so that receipts cut off the end of the log are found.

**Keys.** A store gets its key pair when it is created (or, for a store created before the log
was signed, at its first writable open): the public key in clear (``meta.log_public_key``,
PEM) and the private key only encrypted (``meta.log_private_key``: AES-256-GCM under a key
derived with HKDF-SHA256 from the store's membership key, the public key as associated data).
Every writer — it holds the membership key to open the store — can sign; someone holding the
store's files alone cannot, unless the membership key is itself readable from them (a key
derived from ``random_state``, or kept with ``store_key=True``: docs/store.md).

:func:`verify_log` checks a sequence of :class:`LogEntry` — read from a store
(:meth:`.sql.SQLStore.log_entries`) or from an export (:func:`read_export`) — and names the
first receipt that is missing, out of place, changed or unsigned.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

GENESIS = "0" * 64
"""The ``prev`` of the first signed receipt."""
PUBLIC_KEY = "log_public_key"
PRIVATE_KEY = "log_private_key"
HEAD = "log_head"
META_ENTRIES = frozenset({PUBLIC_KEY, PRIVATE_KEY, HEAD})
"""The ``meta`` entries of the signed log."""
EXPORT_FIELDS = ("seq", "prev_hash", "signature")
"""What an export adds to each receipt so that it can be verified offline."""

_WRAP = b"fls1"  # the encrypted private key's format tag
_KDF_INFO = b"forgetting receipt-log signing key v1"
_RECEIPT_DOMAIN = b"forgetting receipt-log entry v1\n"
_HEAD_DOMAIN = b"forgetting receipt-log head v1\n"


class SigningKeyError(ValueError):
    """The signing key cannot be read or decrypted (a wrong membership key, or damage)."""


# -- hashing ----------------------------------------------------------------------------------
def canonical(value) -> bytes:
    """The canonical JSON encoding hashed and signed (sorted keys, no whitespace, ASCII)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def entry_hash(receipt: dict, seq: int, prev: str) -> str:
    """SHA-256 (hex) of one log entry: the receipt body, its sequence number and ``prev``."""
    return hashlib.sha256(canonical({"prev": prev, "receipt": receipt, "seq": seq})).hexdigest()


def _head_message(seq: int, digest: str) -> bytes:
    return _HEAD_DOMAIN + canonical({"hash": digest, "seq": seq})


# -- keys -------------------------------------------------------------------------------------
def _wrapping_key(membership_key: bytes) -> AESGCM:
    kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KDF_INFO)
    return AESGCM(kdf.derive(bytes(membership_key)))


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def new_keys(membership_key: bytes) -> dict[str, bytes]:
    """A new key pair as the ``meta`` entries that keep it: the public key (PEM) and the
    private key encrypted under a key derived from ``membership_key``."""
    private = Ed25519PrivateKey.generate()
    pem = public_pem(private.public_key())
    raw = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    nonce = os.urandom(12)
    sealed = _WRAP + nonce + _wrapping_key(membership_key).encrypt(nonce, raw, pem)
    return {PUBLIC_KEY: pem, PRIVATE_KEY: sealed}


def load_public_key(pem: bytes, where: str = "the public key") -> Ed25519PublicKey:
    """An Ed25519 public key from PEM; SigningKeyError in one line otherwise."""
    try:
        key = serialization.load_pem_public_key(bytes(pem))
    except (ValueError, TypeError) as err:
        raise SigningKeyError(f"{where} is not a PEM public key ({err})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{where} is not an Ed25519 public key")
    return key


class Signer:
    """The private key of a store's log: signs entries and the head."""

    def __init__(self, private: Ed25519PrivateKey):
        self._private = private
        self.public_key = private.public_key()

    @classmethod
    def unlock(cls, meta: dict[str, bytes], membership_key: bytes) -> Signer:
        """The signer of a store whose ``meta`` holds its keys (:func:`new_keys`)."""
        pem, sealed = meta.get(PUBLIC_KEY), meta.get(PRIVATE_KEY)
        if pem is None or sealed is None:
            raise SigningKeyError("the store's log has no signing key")
        if not sealed.startswith(_WRAP) or len(sealed) < len(_WRAP) + 12 + 16:
            raise SigningKeyError("the log's encrypted signing key is damaged")
        nonce, body = sealed[len(_WRAP) : len(_WRAP) + 12], sealed[len(_WRAP) + 12 :]
        try:
            raw = _wrapping_key(membership_key).decrypt(nonce, body, bytes(pem))
        except InvalidTag:
            raise SigningKeyError(
                "the log's signing key does not decrypt with this membership key (another "
                "key, or the key entries were changed)"
            ) from None
        signer = cls(Ed25519PrivateKey.from_private_bytes(raw))
        if public_pem(signer.public_key) != bytes(pem):
            raise SigningKeyError("the log's public key is not the signing key's")
        return signer

    def sign_entry(self, receipt: dict, seq: int, prev: str) -> tuple[str, str]:
        """(entry hash, signature hex) of one receipt."""
        digest = entry_hash(receipt, seq, prev)
        return digest, self._private.sign(_RECEIPT_DOMAIN + digest.encode()).hex()

    def head(self, seq: int, digest: str) -> bytes:
        """The ``meta`` entry naming the log's last signed receipt."""
        signature = self._private.sign(_head_message(seq, digest)).hex()
        return canonical({"hash": digest, "seq": seq, "signature": signature})


def _verifies(key: Ed25519PublicKey, signature, message: bytes) -> bool:
    try:
        key.verify(bytes.fromhex(signature), message)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


# -- verification ------------------------------------------------------------------------------
@dataclass
class LogEntry:
    """One receipt as stored or exported: ``receipt`` None when its body is unreadable
    (``problem`` says why); ``prev`` and ``signature`` None when it was never signed."""

    seq: int
    receipt: dict | None
    prev: str | None
    signature: str | None
    problem: str | None = None


@dataclass
class LogReport:
    """What :func:`verify_log` found: ``ok`` when every receipt checked, in order and signed
    (``unsigned`` counts the receipts from before the log was signed: then ``ok`` is False
    and ``problem`` None); ``bad_seq`` and ``problem`` name the first bad receipt."""

    receipts: int = 0
    signed: int = 0
    unsigned: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    head_hash: str | None = None
    bad_seq: int | None = None
    problem: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.problem is None and self.unsigned == 0

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "receipts": self.receipts,
            "signed": self.signed,
            "unsigned": self.unsigned,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "head_hash": self.head_hash,
            "bad_seq": self.bad_seq,
            "problem": self.problem,
            "notes": self.notes,
        }


def verify_log(
    entries: Iterable[LogEntry], key: Ed25519PublicKey | None, head: bytes | None, *, whole=True
) -> LogReport:
    """Check a log, oldest first: unsigned receipts (from before the log was signed) only
    before the first signed one, whose ``prev`` is :data:`GENESIS`; each signed receipt's
    ``prev`` the hash of the one before, its sequence number above it, its signature valid
    under ``key``; and, for a store's log (``whole``), the signed ``head`` — read before the
    entries — naming a receipt of the log with its hash (before the first signed receipt:
    the last of the older unsigned ones). Receipts after the head's are those a writer added
    meanwhile: their chain is checked. Stops at the first bad receipt."""
    report = LogReport()
    parsed, head_problem = _parse_head(head, key) if whole else (None, None)
    unsigned_until = parsed[0] if parsed is not None and parsed[1] == GENESIS else None
    last_hash: str | None = None
    last_seq: int | None = None
    at_head: tuple[bool, str | None] | None = None  # (signed, hash) of the head's receipt
    for entry in entries:
        report.receipts += 1
        report.first_seq = entry.seq if report.first_seq is None else report.first_seq
        report.last_seq = entry.seq
        problem = _entry_problem(entry, key, last_hash, last_seq)
        if problem is None and head_problem is None and unsigned_until is not None:
            if entry.signature is None and entry.seq > unsigned_until:
                problem = "unsigned, but written after the log was signed (a forged receipt?)"
            elif entry.signature is not None and entry.seq <= unsigned_until:
                problem = (
                    "signed, but the log's signed head says the log was signed after it (the "
                    "head was replaced by an older copy)"
                )
        if problem is not None:
            report.bad_seq, report.problem = entry.seq, f"receipt {entry.seq}: {problem}"
            return report
        last_seq = entry.seq
        if entry.signature is None:
            report.unsigned += 1
        else:
            report.signed += 1
            last_hash = entry_hash(entry.receipt, entry.seq, entry.prev)  # type: ignore[arg-type]
        if parsed is not None and entry.seq == parsed[0]:
            at_head = (entry.signature is not None, last_hash)
    report.head_hash = last_hash
    if whole:
        report.problem = head_problem or _head_problem(parsed, at_head, last_seq, report)
    return report


def _entry_problem(entry: LogEntry, key, last_hash: str | None, last_seq: int | None):
    """What is wrong with one entry given the one before (None when it checks)."""
    if entry.problem is not None:
        return entry.problem
    if last_seq is not None and entry.seq <= last_seq:
        return f"out of order (after receipt {last_seq})"
    if entry.signature is None or entry.prev is None:
        if last_hash is not None:
            return "unsigned, after the log was signed (its signature was removed?)"
        if entry.signature is not None or entry.prev is not None:
            return "holds a signature without a previous hash, or the reverse"
        return None
    if last_hash is None and entry.prev != GENESIS:
        return (
            "the first signed receipt, but its previous hash is not the log's start: it was "
            "moved, or the receipts before it were removed or their signatures stripped"
        )
    if last_hash is not None and entry.prev != last_hash:
        return (
            f"its previous hash is not receipt {last_seq}'s: a receipt between them was "
            "removed, or one of them was changed or moved"
        )
    if key is None:
        return "signed, but no public key to check it with"
    digest = entry_hash(entry.receipt, entry.seq, entry.prev)  # type: ignore[arg-type]
    if not _verifies(key, entry.signature, _RECEIPT_DOMAIN + digest.encode()):
        return "its signature does not verify: the receipt or its sequence number was changed"
    return None


def _parse_head(head, key) -> tuple[tuple[int, str] | None, str | None]:
    """(seq, hash) of the store's signed head entry, or the problem with it."""
    if head is None:
        if key is not None:
            return None, "the log's head entry (meta.log_head) is missing: the log was altered"
        return None, None
    try:
        value = json.loads(head)
        seq, digest, signature = value["seq"], value["hash"], value["signature"]
        if type(seq) is not int or not isinstance(digest, str):
            raise ValueError
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, "the log's head entry (meta.log_head) is unreadable"
    if key is None or not _verifies(key, signature, _head_message(seq, digest)):
        return None, "the log's head entry (meta.log_head) is not signed by the log's key"
    return (seq, digest), None


def _head_problem(parsed, at_head, last_seq, report: LogReport) -> str | None:
    """Whether the store's signed head names a receipt of the log, as it was signed."""
    if parsed is None:
        return None
    seq, digest = parsed
    if seq == 0 and digest == GENESIS:  # signed before any receipt was written
        return None
    report.bad_seq = seq
    if at_head is None:
        end = "no receipt" if last_seq is None else f"receipt {last_seq}"
        return (
            f"receipt {seq}: missing — the log's signed head names it (receipts were removed "
            f"or cut off the end: the log ends at {end})"
        )
    signed, found = at_head
    if digest == GENESIS:  # the last receipt from before the log was signed
        if signed:
            return f"receipt {seq}: signed, but the log's signed head names it as unsigned"
    elif not signed:
        return (
            f"receipt {seq}: not signed, but the log's signed head names it as signed "
            "(signatures were stripped)"
        )
    elif found != digest:
        return f"receipt {seq}: not the receipt the log's signed head names (another hash)"
    report.bad_seq = None
    return None


# -- exports ----------------------------------------------------------------------------------
def export_entry(receipt: dict, prev: str | None, signature: str | None) -> dict:
    """A receipt as an export writes it: with its ``seq``, ``prev_hash`` and ``signature``."""
    return {**receipt, "prev_hash": prev, "signature": signature}


def read_export(path) -> list[LogEntry]:
    """The entries of a JSON export (``forgetting receipts export --format json``); a
    ValueError in one line when the file is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            items = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"{path} is not a JSON export of receipts ({err})") from None
    if not isinstance(items, list):
        raise ValueError(f"{path} is not a JSON export of receipts (not an array)")
    entries = []
    for n, item in enumerate(items):
        if not isinstance(item, dict) or type(item.get("seq")) is not int:
            raise ValueError(f"{path}: element {n} is not a receipt with a seq")
        body = {k: v for k, v in item.items() if k not in EXPORT_FIELDS}
        prev, signature = item.get("prev_hash"), item.get("signature")
        problem = None
        if not all(v is None or isinstance(v, str) for v in (prev, signature)):
            problem = "its prev_hash or signature is not text"
        entries.append(LogEntry(item["seq"], body, prev, signature, problem))
    return entries
