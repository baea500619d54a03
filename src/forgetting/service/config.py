"""Configuration of the HTTP service: who may change the model, and how big a request may be.

Why a dedicated class rather than keyword arguments: the bearer tokens are secrets. Keeping
them in one frozen object whose ``repr`` shows only *how many* there are means no log line,
traceback or debugger print of the configuration can leak one, and every error raised while
loading them names the source (a file path, an environment variable), never a token.
"""

from __future__ import annotations

import os
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
    """

    tokens: tuple[str, ...] = field(default=(), repr=False)
    open_reads: bool = True
    max_batch: int = DEFAULT_MAX_BATCH
    open_receipts: bool = False
    max_open_body: int = DEFAULT_MAX_OPEN_BODY

    def __post_init__(self) -> None:
        if isinstance(self.tokens, str):
            raise ConfigError("tokens must be a sequence of strings, not one string")
        object.__setattr__(self, "tokens", _check_tokens(self.tokens, "the configuration"))
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
        """
        environ = os.environ if environ is None else environ
        tokens: list[str] = []
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
            tokens += _check_tokens(from_file, f"token file {str(path)!r}")
        env_value = environ.get(TOKENS_ENV, "")
        if env_value.strip():
            tokens += _check_tokens(_split_tokens(env_value), f"${TOKENS_ENV}")
        return cls(
            tokens=tuple(tokens),
            open_reads=open_reads,
            max_batch=max_batch,
            open_receipts=open_receipts,
            max_open_body=max_open_body,
        )
