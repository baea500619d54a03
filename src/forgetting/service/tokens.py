"""Which bearer tokens are too weak to guard the service: placeholders and guessable ones.

A token is judged by what it is. One in the *form of a generator's output* — only base64url
characters and at least 22 of them (:func:`secrets.token_urlsafe` of 16+ bytes), or only hex
digits of one case and at least 32 (:func:`secrets.token_hex` of 16+ bytes) — is credited
the bits of that form (8 per whole byte its characters encode: 128 for 22 base64url
characters; 4 per hex digit) and refused only for structure a random draw all but never has:
a documented placeholder written out whole (``changeme``, ``Change-Me``, ``SECRET``), or a
description shorter than :data:`MIN_TOKEN_BITS` in a fixed code (:func:`structure_bits`:
literals, runs of one character repeated or stepping through its class as in ``abcd`` or
``1234567890``, copies of an earlier stretch). A base64url-form token that reads as words
(:func:`reads_as_words`: a passphrase like ``correct-horse-battery-staple``, perhaps with
digits) is human-chosen after all and the estimator judges it too. Any other string (shorter,
or with other characters) is human-chosen: :func:`estimated_bits` judges it, and a
placeholder anywhere in its letters (case, digits and punctuation dropped) refuses it.

Why not the estimator for every token: its heuristics fire on random strings. CI once drew
``secrets.token_urlsafe(16)`` = ``KyxEdSk7HoMlyobYirigkw`` (128 random bits), which it
scored 79 bits (its capitals all start lowercase runs, so it read as human-chosen, and
``lyob`` and ``irigkw`` as words). A random token from ``secrets`` must never be refused;
under this rule the probability is bounded, by three terms:

* **The code.** It satisfies Kraft's inequality, so fewer than 2^80 strings of one length
  and alphabet describe in under 80 bits: a token drawn uniformly from 2^128 values is
  refused by it with probability below 2^(81-128) ≈ 7e-15 (two alphabets), 2^-175 for
  ``token_urlsafe(32)``.
* **Reads as words.** An exact upper bound (dynamic programming over the rule's grammar,
  tests/service/test_service_tokens.py): 8e-8 of ``token_urlsafe(16)``'s outputs read as words,
  1.1e-14 of ``token_urlsafe(32)``'s; hex-form tokens never go to the estimator.
* **A placeholder written out** in a random token: below 8e-10 at 22 characters, 1.7e-9 at
  43 (a union bound; the 6 letters of ``secret`` dominate).

So ``token_urlsafe(16)`` is refused with probability below 1e-7, ``token_urlsafe(32)`` (the
recommended one) and ``token_hex(16)`` below 2e-9; seeded simulations of 10^6 tokens of each
refused none. The price: a passphrase whose words do not read as words here (``strength``:
3 consonants in a row in a capitalized word) is credited its length.

The estimator for human-chosen strings is conservative: a character costs the bits of its
character classes (lower, upper, digits, symbols), a repeat of the previous character or a
step of one from it one bit, a run of same-case letters four or longer that could be words
(vowels, no long consonant cluster) two bits a letter, as does a separator between two such
(unless the string mixes cases beyond capital initials), and a string that repeats a shorter
block costs only that block.
"""

from __future__ import annotations

import math
import re

#: The least estimated entropy a token needs, in bits.
MIN_TOKEN_BITS = 80.0

#: How to make a good token (shown in every refusal).
TOKEN_HINT = 'generate one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'

#: Placeholders from documentation and examples, split into their words: a token containing
#: one was copied, not generated.
PLACEHOLDER_WORDS = (
    ("change", "me"),
    ("replace", "me"),
    ("your", "token"),
    ("my", "token"),
    ("place", "holder"),
    ("example",),
    ("password",),
    ("secret",),
    ("some", "token"),
    ("test", "token"),
)
#: The same, as compared without case, digits or punctuation in a human-chosen string.
PLACEHOLDERS = tuple("".join(words) for words in PLACEHOLDER_WORDS)

#: The shortest base64url (``token_urlsafe``, 16 bytes) and hex (``token_hex``, 16 bytes)
#: strings judged as a generator's output.
MIN_URLSAFE_LENGTH = 22
MIN_HEX_LENGTH = 32
#: The characters of the code's analysis (:func:`structure_bits`); a longer token is credited
#: what its first ones carry (far more than :data:`MIN_TOKEN_BITS` for a generator's output).
MAX_ANALYSED = 256
#: Earlier starts tried for a copy (the latest); each further one would only lengthen the time.
_COPY_CANDIDATES = 16

_URLSAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_HEX_LOWER = frozenset("0123456789abcdef")
_HEX_UPPER = frozenset("0123456789ABCDEF")

_CLASSES = ((str.islower, 26), (str.isupper, 26), (str.isdigit, 10))
_WORDISH = re.compile(r"[a-z]{4,}|[A-Z]{4,}|[A-Z][a-z]{3,}")
#: A capital starting a word (``Horse``, ``correctHorse``).
_CAPITAL = re.compile(r"[A-Z](?=[a-z])")
_CLUSTER = re.compile(r"[^aeiouy]{4}")
_VOWEL = re.compile(r"[aeiouyAEIOUY]")
_CLUSTER3 = re.compile(r"[^aeiouy]{3}")
_SEPARATORS = frozenset("-_. ")
#: The pieces of a string that may read as words: a (capitalized) lowercase word, an
#: uppercase word, a group of digits, one separator.
_PIECE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+|[-_]")


def _placeholder_pattern(words: tuple[str, ...]) -> str:
    """A placeholder written out: each word lower, upper or capitalized, ``-``/``_`` between."""
    cased = [f"(?:{w}|{w.upper()}|{w.capitalize()})" for w in words]
    return "[-_]?".join(cased)


_WRITTEN_PLACEHOLDER = re.compile("|".join(map(_placeholder_pattern, PLACEHOLDER_WORDS)))

# Flags of the code's three kinds of step (probabilities summing to 1, so a code).
_LITERAL_FLAG = math.log2(4 / 3)
_RUN_FLAG = math.log2(8)
_COPY_FLAG = math.log2(8)


def generator_bits(token: str) -> int | None:
    """The bits of ``token`` read as a generator's output (module docstring), or None when it
    is not in such a form: 8 per whole byte of a base64url string of 22+ characters, 4 per
    digit of a hex string of 32+ (one case)."""
    chars = set(token)
    if len(token) >= MIN_HEX_LENGTH and (chars <= _HEX_LOWER or chars <= _HEX_UPPER):
        return 4 * len(token)
    if len(token) >= MIN_URLSAFE_LENGTH and chars <= _URLSAFE:
        return 8 * (6 * len(token) // 8)
    return None


def _alphabet_size(token: str) -> int:
    """The size of the generator alphabet a generator-form ``token`` is written in."""
    chars = set(token)
    return 16 if chars <= _HEX_LOWER or chars <= _HEX_UPPER else 64


def _step(char: str, delta: int) -> str:
    """The character ``delta`` after ``char`` in its class, cyclically (``z`` -> ``a``,
    ``9`` -> ``0``: ``1234567890`` is one run); other characters only repeat."""
    for first, size in ((48, 10), (65, 26), (97, 26)):  # 0-9, A-Z, a-z
        if first <= ord(char) < first + size:
            return chr(first + (ord(char) - first + delta) % size)
    return char if delta == 0 else ""


#: :func:`_step` for the characters of a generator's alphabets, by ``delta``.
_STEPS = {delta: {c: _step(c, delta) for c in _URLSAFE} for delta in (0, 1, -1)}


def structure_bits(token: str) -> float:
    """The length in bits of ``token``'s shortest description in a fixed code, given its
    length n and its generator alphabet of A characters: a sequence of

    * a literal: one character (flag, then log2 A bits);
    * a run: k ≥ 1 characters each equal to, one after or one before the one before them in
      its class (``a-z``, ``A-Z``, ``0-9``, cyclically) (flag, log2 3 for which, log2 n for k);
    * a copy: k ≥ 3 characters repeating those from d back (flag, log2 i for d at position i,
      log2 n for k).

    The flags' probabilities sum to 1, so the code satisfies Kraft's inequality: fewer than
    2^b strings of one length have a description shorter than b bits, which is what bounds
    how often a random token is refused (module docstring); trying only some parses (the
    latest :data:`_COPY_CANDIDATES` earlier starts of a copy) can only lengthen the shortest
    found. Only the first :data:`MAX_ANALYSED` characters are described: a longer token is
    credited what they carry.
    """
    head = token[:MAX_ANALYSED]
    m = len(head)
    literal = _LITERAL_FLAG + math.log2(_alphabet_size(token))
    length_bits = math.log2(max(m, 2))
    # runs[i]: how many characters from i on continue one run (each one step from the last;
    # one direction throughout)
    runs = [0] * (m + 1)
    for delta, steps in _STEPS.items():
        count = 0
        for i in range(m - 1, 0, -1):
            before = head[i - 1]
            count = count + 1 if head[i] == steps.get(before, _step(before, delta)) else 0
            runs[i] = max(runs[i], count)
    # copies[i]: the longest stretch from i that repeats one starting earlier (overlap allowed)
    # (a copy is 3+ characters, so only earlier starts of the same 3 characters can begin one)
    copies = [0] * m
    starts: dict[str, list[int]] = {}
    for i in range(m - 2):
        key = head[i : i + 3]
        for start in reversed(starts.get(key, ())[-_COPY_CANDIDATES:]):  # the latest first
            length = 3
            while i + length < m and head[i + length] == head[start + length]:
                length += 1
            copies[i] = max(copies[i], length)
            if i + length == m:
                break
        starts.setdefault(key, []).append(i)
    run_bits = _RUN_FLAG + math.log2(3) + length_bits
    best = [0.0] + [math.inf] * m
    for i in range(m):
        here = best[i]
        if here + literal < best[i + 1]:
            best[i + 1] = here + literal
        if runs[i]:
            for end in range(i + 1, i + runs[i] + 1):
                best[end] = min(best[end], here + run_bits)
        if copies[i]:
            cost = here + _COPY_FLAG + math.log2(i) + length_bits
            for end in range(i + 3, i + copies[i] + 1):
                best[end] = min(best[end], cost)
    return best[m]


def _pronounceable(run: str) -> bool:
    """Whether a run of letters could be words: enough vowels, no long consonant cluster
    (random letters seldom are)."""
    run = run.lower()
    vowels = sum(c in "aeiouy" for c in run)
    return vowels >= 0.25 * len(run) and not _CLUSTER.search(run)


def reads_as_words(token: str) -> bool:
    """Whether ``token`` reads as words (a passphrase, perhaps with digits and separators):
    it is words, digit groups and single ``-``/``_`` separators, with at least one word, and
    a quarter of its letters are vowels (``y`` counts as one). The words are 4+ letters with
    a vowel and either all lowercase or all uppercase, with no 4 consonants in a row (words
    may run together: ``correcthorse``), or all capitalized (the first may be lowercase:
    ``correctHorse``), each with no 3 consonants in a row."""
    pieces = _PIECE.findall(token)
    if sum(map(len, pieces)) != len(token):
        return False  # another character: not words and digits
    if any(a in "-_" and b in "-_" for a, b in zip(pieces, pieces[1:], strict=False)):
        return False
    words = [p for p in pieces if p.isalpha()]
    if not words or any(len(w) < 4 or not _VOWEL.search(w) for w in words):
        return False
    if all(map(str.islower, words)) or all(map(str.isupper, words)):
        cluster = _CLUSTER
    elif all(w[0].isupper() and w[1:].islower() for w in words[1:]) and (
        words[0][1:].islower() and (words[0][0].isupper() or token.startswith(words[0]))
    ):
        cluster = _CLUSTER3
    else:
        return False
    if any(cluster.search(w.lower()) for w in words):
        return False
    return _pronounceable("".join(words))


def _alphabet(token: str) -> int:
    """The size of the character classes ``token`` draws from."""
    size = sum(n for test, n in _CLASSES if any(test(c) for c in token))
    if any(not (c.isascii() and c.isalnum()) for c in token):
        size += 33
    return max(size, 2)


def _period(token: str) -> str:
    """The shortest block whose repetition makes ``token`` (``token`` itself if none)."""
    for size in range(1, len(token) // 2 + 1):
        block = token[:size]
        if (block * (len(token) // size + 1))[: len(token)] == token:
            return block
    return token


def estimated_bits(token: str) -> float:
    """A conservative estimate of a human-chosen ``token``'s entropy in bits (module
    docstring); :func:`token_bits` judges any token."""
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
    for i in range(1, len(block) - 1):  # a separator between two words: a word's cost
        if block[i] in _SEPARATORS and words[i - 1] and words[i + 1]:
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


def _judge(token: str) -> tuple[bool, float]:
    """(whether ``token`` is judged as a generator's output alone, the bits it is credited
    with): a generator-form token's form bits, less if a short description of it exists
    (:func:`structure_bits`), less again if it reads as words (:func:`estimated_bits`; a
    base64url-form token only: hex-form ones are judged by form and structure alone); a
    human-chosen string's estimate."""
    form = generator_bits(token)
    if form is None:
        return False, estimated_bits(token)
    bits = min(float(form), structure_bits(token))
    if _alphabet_size(token) == 64 and reads_as_words(token):
        return False, min(bits, estimated_bits(token))
    return True, bits


def is_generated(token: str) -> bool:
    """Whether ``token`` is judged as a generator's output alone (module docstring)."""
    return _judge(token)[0]


def token_bits(token: str) -> float:
    """The bits ``token`` is credited with (:func:`_judge`, module docstring)."""
    return _judge(token)[1]


def weakness(token: str) -> str | None:
    """Why ``token`` must not guard the service, or None when it may."""
    generated, bits = _judge(token)
    if generated:
        found = _WRITTEN_PLACEHOLDER.search(token)
        word = found.group().lower().replace("-", "").replace("_", "") if found else None
    else:
        folded = "".join(c for c in token.lower() if c.isalpha())
        word = next((w for w in PLACEHOLDERS if w in folded), None)
    if word is not None:
        return f"looks like a documented placeholder (it contains {word!r})"
    if bits < MIN_TOKEN_BITS:
        return (
            f"is guessable: about {bits:.0f} bits of entropy, fewer than {MIN_TOKEN_BITS:.0f} "
            "(too short, repeated characters or sequences, or words)"
        )
    return None
