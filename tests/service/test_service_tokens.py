"""The token-strength rule (issue 73): a random token from ``secrets`` is never refused, weak
ones are, and the bounds the module docstring of ``forgetting.service.tokens`` states hold.

Nothing here depends on the luck of a draw: the random tokens come from a seeded generator,
built from its bytes exactly as :func:`secrets.token_urlsafe` and :func:`secrets.token_hex`
build theirs, and the probabilities are computed exactly (dynamic programming over the rule's
grammar, checked against brute force on a small alphabet).
"""

from __future__ import annotations

import base64
import itertools
import math
import random
from fractions import Fraction

import pytest

from forgetting.service import ServiceConfig
from forgetting.service.config import TOKENS_ENV, ConfigError
from forgetting.service.tokens import (
    MIN_TOKEN_BITS,
    is_generated,
    reads_as_words,
    structure_bits,
    token_bits,
    weakness,
)

#: The token that failed CI (secrets.token_urlsafe(16), 128 random bits; scored 79 before).
CI_TOKEN = "KyxEdSk7HoMlyobYirigkw"


def urlsafe(rng: random.Random, nbytes: int) -> str:
    """What ``secrets.token_urlsafe(nbytes)`` returns for these bytes."""
    return base64.urlsafe_b64encode(rng.randbytes(nbytes)).rstrip(b"=").decode("ascii")


def hexed(rng: random.Random, nbytes: int) -> str:
    """What ``secrets.token_hex(nbytes)`` returns for these bytes."""
    return rng.randbytes(nbytes).hex()


@pytest.mark.parametrize(
    "make,nbytes,seed",
    [(urlsafe, 16, 7316), (urlsafe, 32, 7332), (hexed, 16, 7364)],
    ids=["token_urlsafe(16)", "token_urlsafe(32)", "token_hex(16)"],
)
def test_seeded_random_tokens_are_never_refused(make, nbytes, seed):
    """Zero of 8,000 tokens of each generator refused (of 10^6 each, run once offline: zero
    too; the module docstring bounds the probability)."""
    rng = random.Random(seed)
    tokens = [make(rng, nbytes) for _ in range(8_000)]
    assert [t for t in tokens if weakness(t) is not None] == []
    # credited about their bytes' bits, far from the threshold
    assert min(map(token_bits, tokens[:500])) > max(MIN_TOKEN_BITS + 30, 8 * nbytes - 16)


def test_the_token_that_failed_ci_passes_with_its_128_bits():
    assert weakness(CI_TOKEN) is None
    assert is_generated(CI_TOKEN) and token_bits(CI_TOKEN) == 128


@pytest.mark.parametrize(
    "token,why",
    [
        ("change-me-16-chars-min", "placeholder"),  # the README's old example
        ("your-token-goes-here-please", "placeholder"),
        ("password12345678", "placeholder"),
        ("xk9Qsecret-zcyWa7LXgKHf1FD8QmR98", "placeholder"),  # written out in a random one
        ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "guessable"),
        ("abcdefghijklmnopqrstuvwxyz012345", "guessable"),
        ("0123456789abcdef0123456789abcdef", "guessable"),
        ("sunshine12345678901234", "guessable"),
        ("xk9Q-xk9Q-xk9Q-xk9Q-xk9Q-xk9Q-", "guessable"),
        ("xk9Q-" * 1000, "guessable"),
        ("deadbeef" * 4, "guessable"),
        ("correcthorsebatterystaple", "guessable"),
        ("CorrectHorseBatteryStaple", "guessable"),
        ("correctHorseBatteryStaple", "guessable"),
        ("correct-horse-battery-staple", "guessable"),
        ("CORRECT_HORSE_BATTERY_STAPLE", "guessable"),
        ("Correct_Horse_Battery_Staple_1", "guessable"),
    ],
)
def test_weak_tokens_are_refused(token, why):
    message = weakness(token)
    assert message is not None and why in message
    with pytest.raises(ConfigError, match=why) as err:
        ServiceConfig.load(environ={TOKENS_ENV: token})
    assert token not in str(err.value) and "secrets.token_urlsafe(32)" in str(err.value)


def test_a_long_token_is_judged_by_its_start():
    rng = random.Random(73)
    strong = urlsafe(rng, 32)
    assert weakness(strong + "a" * 5000) is None  # its first 256 characters carry the bits
    assert weakness("a" * 300 + strong) is not None


# -- the bounds of the module docstring ---------------------------------------------------


def test_the_structure_code_is_a_code():
    """Kraft: fewer than 2^b strings of one length describe in under b bits. Checked on
    every hex string of 4 characters (the code depends on nothing else)."""
    every = itertools.product("0123456789abcdef", repeat=4)
    lengths = [structure_bits("".join(s)) for s in every]
    assert sum(2.0**-bits for bits in lengths) <= 1.0
    for b in range(1, 17):
        assert sum(bits < b for bits in lengths) < 2**b


def _word_count(length: int, vowels: int, consonants: int, max_run: int) -> int:
    """Strings of ``length`` letters with a vowel and at most ``max_run`` consonants in a row."""
    states = {(0, False): 1}  # (consonants in a row, a vowel seen) -> strings
    for _ in range(length):
        after: dict[tuple[int, bool], int] = {}
        for (run, vowel), n in states.items():
            after[0, True] = after.get((0, True), 0) + n * vowels
            if run < max_run:
                after[run + 1, vowel] = after.get((run + 1, vowel), 0) + n * consonants
        states = after
    return sum(n for (_, vowel), n in states.items() if vowel)


def words_bound(n: int, vowels: int, consonants: int, digits: int, separators: int) -> Fraction:
    """An upper bound on the probability that a uniform string of ``n`` characters (lower-
    and uppercase letters, digits and separators in the given numbers) reads as words: the
    sum over the parses of ``reads_as_words``'s grammar, the quarter of vowels left out."""
    size = 2 * (vowels + consonants) + digits + separators
    total = Fraction(0)
    for style, max_run in (("lower", 3), ("upper", 3), ("capitalized", 2)):
        word = [
            Fraction(_word_count(k, vowels, consonants, max_run), size**k) if k >= 4 else 0
            for k in range(n + 1)
        ]
        # at[i][(last piece, a word seen)]: the probability of the parses of the first i
        at: list[dict] = [{} for _ in range(n + 1)]
        at[0]["start", False] = Fraction(1)
        for i in range(n):
            for (last, seen), p in at[i].items():
                steps = []  # (end, state, probability) of each next piece
                for k in range(1, n - i + 1):
                    if last != "digits":
                        steps.append((i + k, ("digits", seen), Fraction(digits, size) ** k))
                    if style == "capitalized":  # after anything; a lowercase first word
                        steps.append((i + k, ("word", True), word[k] * (1 + (last == "start"))))
                    elif last != "word":  # one case: words run together into one
                        steps.append((i + k, ("word", True), word[k]))
                if separators and last != "separator":
                    steps.append((i + 1, ("separator", seen), Fraction(separators, size)))
                for end, state, q in steps:
                    at[end][state] = at[end].get(state, 0) + p * q
        total += sum(p for (_, seen), p in at[n].items() if seen)
    return total


def test_the_words_bound_bounds_reads_as_words():
    """Brute force on a small alphabet: every string that reads as words is one the bound
    counts (the bound is the grammar's, with multiplicity)."""
    letters, digits, separators = "abAB", "1", "-"
    alphabet = letters + digits + separators
    for n in range(4, 7):
        found = sum(reads_as_words("".join(s)) for s in itertools.product(alphabet, repeat=n))
        assert found > 0
        assert found <= words_bound(n, 1, 1, 1, 1) * len(alphabet) ** n


def test_few_random_tokens_read_as_words():
    """Exact bounds (base64url: 6 vowels, 20 consonants, 10 digits, 2 separators) quoted in
    the module docstring: a random token reads as words with probability below 1e-7 at 22
    characters (token_urlsafe(16)) and 2e-14 at 43 (token_urlsafe(32))."""
    p22, p43 = (float(words_bound(n, 6, 20, 10, 2)) for n in (22, 43))
    assert p22 < 1e-7 and p43 < 2e-14
    assert p22 > 1e-9  # the bound is tight enough to be worth stating


def test_placeholders_written_out_are_rare_in_random_tokens():
    """A union bound over positions and case forms (module docstring): below 1e-9 at 22
    characters and 2e-9 at 43; the 6 letters of ``secret`` dominate."""
    from forgetting.service.tokens import PLACEHOLDER_WORDS

    def bound(n: int) -> float:
        p = 0.0
        for words in PLACEHOLDER_WORDS:
            k = sum(map(len, words))
            forms = 3 ** len(words) * sum(  # each word's case; a separator or not in each gap
                math.comb(len(words) - 1, g) * 2**g * 64.0**-g for g in range(len(words))
            )
            p += max(n - k + 1, 0) * forms * 64.0**-k
        return p

    assert bound(22) < 1e-9 and bound(43) < 2e-9
    assert MIN_TOKEN_BITS == 80.0
