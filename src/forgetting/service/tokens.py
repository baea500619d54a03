"""Which bearer tokens are too weak to guard the service: placeholders and guessable ones.

Why a conservative estimate rather than a length rule alone: ``aaaaaaaaaaaaaaaa``,
``password12345678`` and the README's own example all pass a length check. The estimate
counts what an attacker's guesser would have to try: a character costs the bits of its
character classes (lower, upper, digits, symbols), but a repeat of the previous character or
a step of one from it (``abcd``, ``4321``) costs one bit, a run of same-case letters four or
longer that could be words (vowels, no long consonant cluster) two bits a letter (unless the
token mixes cases beyond capital initials, as only a machine does), and a token that repeats
a shorter block costs only that block. A random token from :func:`secrets.token_urlsafe`
(43 characters) scores over 200 bits; the threshold is :data:`MIN_TOKEN_BITS`.
"""

from __future__ import annotations

import math
import re

#: The least estimated entropy a token needs, in bits.
MIN_TOKEN_BITS = 80.0

#: How to make a good token (shown in every refusal).
TOKEN_HINT = 'generate one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'

#: Placeholders from documentation and examples (compared without case, digits, or
#: punctuation): a token containing one was copied, not generated.
PLACEHOLDERS = (
    "changeme",
    "replaceme",
    "yourtoken",
    "mytoken",
    "placeholder",
    "example",
    "password",
    "secret",
    "sometoken",
    "testtoken",
)

_CLASSES = ((str.islower, 26), (str.isupper, 26), (str.isdigit, 10))
_WORDISH = re.compile(r"[a-z]{4,}|[A-Z]{4,}|[A-Z][a-z]{3,}")
#: A capital starting a word (``Horse``, ``correctHorse``).
_CAPITAL = re.compile(r"[A-Z](?=[a-z])")
_CLUSTER = re.compile(r"[^aeiouy]{4}")


def _alphabet(token: str) -> int:
    """The size of the character classes ``token`` draws from."""
    size = sum(n for test, n in _CLASSES if any(test(c) for c in token))
    if any(not (c.isascii() and c.isalnum()) for c in token):
        size += 33
    return max(size, 2)


def _pronounceable(run: str) -> bool:
    """Whether a run of letters could be words: enough vowels, no long consonant cluster
    (random letters seldom are)."""
    run = run.lower()
    vowels = sum(c in "aeiouy" for c in run)
    return vowels >= 0.3 * len(run) and not _CLUSTER.search(run)


def _period(token: str) -> str:
    """The shortest block whose repetition makes ``token`` (``token`` itself if none)."""
    for size in range(1, len(token) // 2 + 1):
        block = token[:size]
        if (block * (len(token) // size + 1))[: len(token)] == token:
            return block
    return token


def estimated_bits(token: str) -> float:
    """A conservative estimate of ``token``'s entropy in bits (module docstring)."""
    block = _period(token)
    repeats = len(token) / len(block)
    per_char = math.log2(_alphabet(token))
    words = [0] * len(block)
    rest = _CAPITAL.sub("", block)  # mixed case beyond capitals: a machine's, not words
    human = not (any(c.islower() for c in rest) and any(c.isupper() for c in rest))
    for match in _WORDISH.finditer(block) if human else ():
        if not _pronounceable(match.group()):
            continue
        for i in range(match.start(), match.end()):
            words[i] = 1
    bits = 0.0
    for i, c in enumerate(block):
        if i and (c == block[i - 1] or abs(ord(c) - ord(block[i - 1])) == 1):
            bits += 1.0
        elif words[i]:
            bits += 2.0
        else:
            bits += per_char
    return bits + (math.log2(repeats) if repeats > 1 else 0.0)


def weakness(token: str) -> str | None:
    """Why ``token`` must not guard the service, or None when it may."""
    folded = "".join(c for c in token.lower() if c.isalpha())
    for word in PLACEHOLDERS:
        if word in folded:
            return f"looks like a documented placeholder (it contains {word!r})"
    bits = estimated_bits(token)
    if bits < MIN_TOKEN_BITS:
        return (
            f"is guessable: about {bits:.0f} bits of entropy, fewer than {MIN_TOKEN_BITS:.0f} "
            "(too short, repeated characters or sequences, or words)"
        )
    return None
