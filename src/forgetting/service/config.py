"""Configuration of the HTTP service: who may change the model, and how big a request may be.

Why a dedicated class rather than keyword arguments: the bearer tokens are secrets. Keeping
them in one frozen object whose ``repr`` shows only *how many* there are means no log line,
traceback or debugger print of the configuration can leak one, and every error raised while
loading them names the source (a file path, an environment variable), never a token.

Operators: each token belongs to a named operator, whose name every receipt of a change made
with it records (``operator``). A token entry ``NAME TOKEN`` names it; a bare ``TOKEN`` gets
a stable name derived from it (:func:`derived_name`: ``token-`` and 8 hex digits of the
token's SHA-256), which identifies it without revealing it.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .tokens import TOKEN_HINT, weakness

#: Environment variable holding comma-separated bearer tokens.
TOKENS_ENV = "FORGETTING_TOKENS"

#: Default cap on rows (predict/insert) or ids (forget) in one request.
DEFAULT_MAX_BATCH = 10_000

#: Default cap on the body of a request without a valid token (an open read), in bytes:
#: about 1,000 rows of 784 features as 8-character numbers. A token holder's requests may be
#: as large as ``max_batch`` rows of the model's width need.
DEFAULT_MAX_OPEN_BODY = 8 << 20

#: Shortest accepted token. Shorter ones are guessable; refusing them at start-up is cheaper
#: than discovering it after an incident. Placeholders and tokens of too little estimated
#: entropy are refused too (:mod:`.tokens`).
MIN_TOKEN_LENGTH = 16

#: An operator's name: what receipts record as ``operator`` (no spaces, at most 64 characters).
OPERATOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


def derived_name(token: str) -> str:
    """The stable operator name of a token given without one: ``token-`` and the first 8 hex
    digits of its SHA-256 (never the token itself)."""
    return "token-" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:8]


class ConfigError(ValueError):
    """The service configuration is unusable; the message says what to fix (never a token)."""


def _split_tokens(text: str) -> list[str]:
    """Tokens separated by commas and/or newlines; blank entries and ``#`` comment lines
    dropped (whole lines only: a token may itself contain ``#``)."""
    tokens = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        tokens.extend(part.strip() for part in line.split(","))
    return [t for t in tokens if t]


def _named(entries: Iterable[str], source: str) -> list[tuple[str, str]]:
    """``(name, token)`` of each entry: ``NAME TOKEN`` (one run of spaces between), or a bare
    ``TOKEN`` named by :func:`derived_name`."""
    named = []
    for position, entry in enumerate(entries, start=1):
        parts = entry.split()
        if len(parts) == 2 and not (parts[0].isprintable() and OPERATOR_NAME.fullmatch(parts[0])):
            raise ConfigError(
                f"entry #{position} from {source}: an operator's name is 1 to 64 letters, "
                "digits or ._@+- (starting with a letter or digit), then a space and the token"
            )
        if len(parts) > 2:
            raise ConfigError(
                f"entry #{position} from {source} has {len(parts)} words: give TOKEN or NAME TOKEN"
            )
        named.append((parts[0], parts[1]) if len(parts) == 2 else ("", entry))
    return named


def _check_tokens(tokens: Iterable[str], source: str) -> tuple[str, ...]:
    checked = []
    for position, token in enumerate(tokens, start=1):
        if not isinstance(token, str):
            raise ConfigError(f"token #{position} from {source} is not a string")
        if len(token) < MIN_TOKEN_LENGTH:
            raise ConfigError(
                f"token #{position} from {source} is shorter than {MIN_TOKEN_LENGTH} "
                f"characters; {TOKEN_HINT}"
            )
        if any(c.isspace() for c in token) or not token.isprintable():
            raise ConfigError(
                f"token #{position} from {source} contains whitespace or unprintable characters"
            )
        why = weakness(token)
        if why is not None:
            raise ConfigError(f"token #{position} from {source} {why}; {TOKEN_HINT}")
        checked.append(token)
    # Keep the order (it does not matter for matching) but drop duplicates.
    return tuple(dict.fromkeys(checked))


@dataclass(frozen=True)
class ServiceConfig:
    """How the service authenticates and bounds requests.

    ``tokens``: accepted bearer tokens for mutations (and for reads when ``open_reads`` is
    False). ``open_reads``: whether ``/predict`` and ``/stats`` answer without a token.
    ``open_receipts``: whether ``/receipts/{hash}`` answers without a token; off unless the
    operator opens it, and refused by the app under a derived (public) membership key, with
    which anyone can compute an id's hash and learn whether and when it was forgotten.
    ``max_batch``: the most rows or ids one request may carry (larger -> 413), so a
    single client cannot hold the mutation lock or the worker pool for minutes.
    ``max_open_body``: the largest body of a request without a valid token, in bytes
    (larger -> 413), whatever the model's width: what an anonymous client can make the
    server read and parse (see :mod:`.app`).
    ``operators``: the name of each token's operator, in the order of ``tokens`` (shorter,
    or an empty name: :func:`derived_name`).
    """

    tokens: tuple[str, ...] = field(default=(), repr=False)
    operators: tuple[str, ...] = field(default=(), repr=False)
    open_reads: bool = True
    max_batch: int = DEFAULT_MAX_BATCH
    open_receipts: bool = False
    max_open_body: int = DEFAULT_MAX_OPEN_BODY

    def __post_init__(self) -> None:
        if isinstance(self.tokens, str):
            raise ConfigError("tokens must be a sequence of strings, not one string")
        names = tuple(self.operators) + ("",) * max(0, len(self.tokens) - len(self.operators))
        given = list(zip(names, self.tokens, strict=False))
        object.__setattr__(self, "tokens", _check_tokens(self.tokens, "the configuration"))
        first: dict[str, str] = {}
        for name, token in given:  # a token given twice keeps its first name
            first.setdefault(token, name or derived_name(token))
        object.__setattr__(self, "operators", tuple(first[t] for t in self.tokens))
        if not isinstance(self.open_reads, bool):
            raise ConfigError("open_reads must be True or False")
        if not isinstance(self.open_receipts, bool):
            raise ConfigError("open_receipts must be True or False")
        if (
            isinstance(self.max_batch, bool)
            or not isinstance(self.max_batch, int)
            or self.max_batch < 1
        ):
            raise ConfigError(f"max_batch must be a positive integer, got {self.max_batch!r}")
        if (
            isinstance(self.max_open_body, bool)
            or not isinstance(self.max_open_body, int)
            or self.max_open_body < 1024
        ):
            raise ConfigError(
                f"max_open_body must be a whole number of bytes, at least 1024; got "
                f"{self.max_open_body!r}"
            )

    def __repr__(self) -> str:
        """Shows how many tokens are configured, never the tokens themselves."""
        return (
            f"ServiceConfig(tokens=<{len(self.tokens)} configured>, "
            f"open_reads={self.open_reads}, open_receipts={self.open_receipts}, "
            f"max_batch={self.max_batch}, max_open_body={self.max_open_body})"
        )

    __str__ = __repr__

    def operator_of(self, token: str | None) -> str | None:
        """The name of the operator whose token ``token`` is (None if it is none of them),
        comparing against every token in constant time (:func:`.auth.token_matches`)."""
        if token is None:
            return None
        from .auth import token_matches

        found = None
        for name, known in zip(self.operators, self.tokens, strict=True):
            if token_matches(token, (known,)) and found is None:
                found = name
        return found

    @classmethod
    def load(
        cls,
        *,
        token_file: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        open_reads: bool = True,
        max_batch: int = DEFAULT_MAX_BATCH,
        open_receipts: bool = False,
        max_open_body: int = DEFAULT_MAX_OPEN_BODY,
    ) -> ServiceConfig:
        """Gather tokens from ``token_file`` (commas or one per line, ``#`` comments) and from
        the ``FORGETTING_TOKENS`` environment variable (comma separated); both are accepted
        together so a rotation can add the new token in one place before removing the old.
        An entry ``NAME TOKEN`` names the token's operator (module docstring).
        """
        environ = os.environ if environ is None else environ
        tokens: list[str] = []
        names: list[str] = []
        if token_file is not None:
            path = Path(token_file)
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise ConfigError(f"token file {str(path)!r} does not exist") from None
            except (OSError, UnicodeDecodeError) as err:
                raise ConfigError(
                    f"cannot read token file {str(path)!r}: {type(err).__name__}"
                ) from None
            from_file = _split_tokens(text)
            if not from_file:
                raise ConfigError(f"token file {str(path)!r} holds no token")
            named = _named(from_file, f"token file {str(path)!r}")
            _check_tokens([t for _, t in named], f"token file {str(path)!r}")
            names += [n for n, _ in named]
            tokens += [t for _, t in named]
        env_value = environ.get(TOKENS_ENV, "")
        if env_value.strip():
            named = _named(_split_tokens(env_value), f"${TOKENS_ENV}")
            _check_tokens([t for _, t in named], f"${TOKENS_ENV}")
            names += [n for n, _ in named]
            tokens += [t for _, t in named]
        return cls(
            tokens=tuple(tokens),
            operators=tuple(names),
            open_reads=open_reads,
            max_batch=max_batch,
            open_receipts=open_receipts,
            max_open_body=max_open_body,
        )
