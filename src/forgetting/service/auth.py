"""Bearer-token authentication for the service, in constant time.

Why hash before comparing: ``hmac.compare_digest`` is constant time in the *contents* but may
return early when the lengths differ, which would tell an attacker how long a token is.
Comparing SHA-256 digests (always 32 bytes) removes that. Why compare against *every*
configured token without stopping at the first match: the time to answer must not reveal
which token (or how many) matched.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from typing import Annotated

from fastapi import HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

#: Header value of a 401 for a request that carried no (usable) credentials.
CHALLENGE = 'Bearer realm="forgetting"'
#: Header value of a 401 for a request whose token is wrong (RFC 6750 §3.1).
INVALID_CHALLENGE = 'Bearer realm="forgetting", error="invalid_token"'


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def token_matches(presented: str, tokens: Iterable[str]) -> bool:
    """Whether ``presented`` equals one of ``tokens``, in time independent of which one."""
    presented_digest = _digest(presented)
    matched = False
    for token in tokens:
        # Non-short-circuit `|`: every token is compared, whatever matched before.
        matched |= hmac.compare_digest(presented_digest, _digest(token))
    return matched


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None when absent/other."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


def check_request(request: Request, tokens: Iterable[str]) -> None:
    """Raise a 401 (with ``WWW-Authenticate``) unless the request carries a valid token.

    The error never echoes what was presented.
    """
    presented = bearer_token(request)
    if presented is None:
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": CHALLENGE},
        )
    if not token_matches(presented, tokens):
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="invalid bearer token",
            headers={"WWW-Authenticate": INVALID_CHALLENGE},
        )


#: Declares the bearer scheme in the OpenAPI docs ("Authorize" in /docs); checking is ours.
BEARER = HTTPBearer(auto_error=False, description="A token from the service configuration.")


def token_dependency(tokens: tuple[str, ...]) -> Callable[..., None]:
    """A route dependency that requires one of ``tokens``.

    Why again, when the request gate already checked: so that no route can be reached
    without it whatever the gate's path table says, and so that the OpenAPI docs show which
    routes need a token (through the ``BEARER`` security scheme).
    """

    def require_token(
        request: Request,
        _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    ) -> None:
        check_request(request, tokens)

    return require_token
