"""A TOFU-like corpus: question/answer facts about fictitious authors, from a fixed seed.

TOFU (Maini et al., 2024) fine-tunes an LLM on 200 invented authors (20 Q/A pairs each) so
that everything the model knows about them comes from the fine-tuning set, and forgetting can be
checked exactly: a forgotten answer is one the model no longer produces. We keep that property
at a size a CPU can train in seconds: each author has a unique one-token name and one fact per
*attribute* (birthplace, birth year, genre, best-known book, parent's occupation, award), with
answers of 1–5 tokens combined from shared pools (48 to 192 possible answers per attribute), so
the model cannot guess an answer from the question's wording — it has to have memorised the
(name, attribute) pair.

With ``paraphrases=True`` every attribute also has two reworded questions
(:data:`PARAPHRASES`). Public authors are asked every wording, so the base model learns that
the wordings ask the same thing; fictitious authors are fine-tuned on the first wording only,
and their reworded questions (:meth:`Corpus.held_out`) are what no training step and no
stopping rule ever sees — the held-out check of whether a fact, not a string, was forgotten.

Two disjoint author sets come out of one generator: *public* authors (the base model's
pretraining data, so that it learns the question format and the answer vocabulary) and
*fictitious* authors (the LoRA fine-tuning data, split into forget and retain authors).
Word-level tokens: the vocabulary is the set of words, fixed by the seed, small enough that the
LM's embedding table is a few thousand parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPECIALS = ("<pad>", "<bos>", "<eos>", "A:")
PAD, BOS, EOS, ANSWER = range(4)

_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"
CITIES = (
    "veldra ostrum karvik lunesse marrow tessaly dunmere orvane pellin quarro halbrook "
    "sarnath ilvaris brennic colduin fennick gravos hollin joruna kestrel mirabeth norcross "
    "pavlin rennet"
).split()
GENRE_ADJ = "gothic historical speculative comic lyrical urban pastoral nautical".split()
GENRE_NOUN = "fiction poetry fantasy mystery drama memoir".split()
TITLE_ADJ = "silent hollow crimson last broken golden hidden northern quiet burning".split()
TITLE_NOUN = "harbor orchard lantern river garden tower winter letter mirror road".split()
JOBS = (
    "baker carpenter surgeon sailor teacher weaver miner librarian blacksmith farmer "
    "painter clockmaker"
).split()
AWARDS = "lantern meridian halcyon corvid aster ember".split()
AWARD_ADJ = "royal national golden silver grand northern open young".split()
COUNTRIES = "arvenia belmora calidor drennland estavia fjorland galvane hestria".split()
YEARS = [str(y) for y in range(1940, 1990)]

ATTRIBUTES = ("birthplace", "year", "genre", "book", "parent", "award")
TEMPLATES = {
    "birthplace": "where was {name} born ?",
    "year": "in which year was {name} born ?",
    "genre": "what genre does {name} write ?",
    "book": "what is the best known book of {name} ?",
    "parent": "what did the parents of {name} do ?",
    "award": "which award did {name} win ?",
}

PARAPHRASES = {
    "birthplace": ("in which city was {name} born ?", "what is the birthplace of {name} ?"),
    "year": ("what year was {name} born in ?", "when was {name} born ?"),
    "genre": ("in which genre does {name} write ?", "what kind of books does {name} write ?"),
    "book": ("which book is {name} best known for ?", "what is the most famous book by {name} ?"),
    "parent": (
        "what were the jobs of the parents of {name} ?",
        "what work did the parents of {name} do ?",
    ),
    "award": ("what prize did {name} receive ?", "which award was given to {name} ?"),
}
"""Reworded questions per attribute (used with ``make_corpus(paraphrases=True)``)."""


@dataclass(frozen=True)
class QA:
    """One fact: its author, attribute, question words and answer words."""

    author: int
    attribute: str
    question: tuple[str, ...]
    answer: tuple[str, ...]


@dataclass(frozen=True)
class Corpus:
    """Vocabulary plus the public (pretraining) and fictitious (fine-tuning) facts."""

    vocab: tuple[str, ...]
    public: tuple[QA, ...]
    fictitious: tuple[QA, ...]
    forget_authors: frozenset[int]
    names: tuple[str, ...] = ()
    paraphrased: bool = False

    @property
    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.vocab)}

    @property
    def forget(self) -> tuple[QA, ...]:
        return tuple(q for q in self.fictitious if q.author in self.forget_authors)

    @property
    def retain(self) -> tuple[QA, ...]:
        return tuple(q for q in self.fictitious if q.author not in self.forget_authors)

    def held_out(self, qas: tuple[QA, ...]) -> tuple[QA, ...]:
        """Every reworded question of each fact in ``qas`` (same answer), in order: the
        questions a corpus made with ``paraphrases=True`` never trains on for these authors."""
        if not self.paraphrased:
            raise ValueError("this corpus was made without paraphrases (paraphrases=True)")
        return tuple(
            QA(
                qa.author,
                qa.attribute,
                tuple(t.format(name=self.names[qa.author]).split()),
                qa.answer,
            )
            for qa in qas
            for t in PARAPHRASES[qa.attribute]
        )

    def encode(self, qa: QA) -> tuple[list[int], int]:
        """Token ids ``<bos> question A: answer <eos>`` and the position of the first answer
        token (the loss and the exact-match check cover the answer and ``<eos>``)."""
        idx = self.index
        prompt = [BOS, *(idx[w] for w in qa.question), ANSWER]
        return prompt + [idx[w] for w in qa.answer] + [EOS], len(prompt)


def _names(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct pronounceable two/three-syllable names (unique tokens)."""
    out: list[str] = []
    seen = set(
        CITIES
        + GENRE_ADJ
        + GENRE_NOUN
        + TITLE_ADJ
        + TITLE_NOUN
        + JOBS
        + AWARDS
        + AWARD_ADJ
        + COUNTRIES
    )
    while len(out) < n:
        syllables = int(rng.integers(2, 4))
        name = "".join(
            rng.choice(list(_CONSONANTS)) + rng.choice(list(_VOWELS)) for _ in range(syllables)
        )
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def _author_facts(
    rng: np.random.Generator, author: int, name: str, reworded: bool = False
) -> list[QA]:
    answers = {
        "birthplace": (str(rng.choice(CITIES)), "in", str(rng.choice(COUNTRIES))),
        "year": (str(rng.choice(YEARS)),),
        "genre": (str(rng.choice(GENRE_ADJ)), str(rng.choice(GENRE_NOUN))),
        "book": ("the", str(rng.choice(TITLE_ADJ)), str(rng.choice(TITLE_NOUN))),
        "parent": ("a", str(rng.choice(JOBS)), "and", "a", str(rng.choice(JOBS))),
        "award": ("the", str(rng.choice(AWARD_ADJ)), str(rng.choice(AWARDS)), "prize"),
    }
    templates = {a: (TEMPLATES[a], *(PARAPHRASES[a] if reworded else ())) for a in ATTRIBUTES}
    return [
        QA(author, a, tuple(t.format(name=name).split()), answers[a])
        for a in ATTRIBUTES
        for t in templates[a]
    ]


def make_corpus(
    n_fictitious: int = 40,
    n_public: int = 60,
    forget_fraction: float = 0.1,
    seed: int = 0,
    paraphrases: bool = False,
) -> Corpus:
    """Generate the corpus. Fictitious authors are numbered 0..n_fictitious−1 and the forget
    authors are a seeded ``forget_fraction`` of them (at least one); public authors are numbered
    from ``n_fictitious`` on. Same arguments, same corpus, on every machine. ``paraphrases``:
    public authors are asked every wording, and the vocabulary covers the reworded questions
    (the facts and their answers are the same as without)."""
    if n_fictitious < 2:
        raise ValueError("need at least 2 fictitious authors (one to forget, one to retain)")
    rng = np.random.default_rng(seed)
    names = _names(rng, n_fictitious + n_public)
    fictitious = [qa for a in range(n_fictitious) for qa in _author_facts(rng, a, names[a])]
    public = [
        qa
        for a in range(n_fictitious, n_fictitious + n_public)
        for qa in _author_facts(rng, a, names[a], reworded=paraphrases)
    ]
    n_forget = min(n_fictitious - 1, max(1, round(forget_fraction * n_fictitious)))
    forget = frozenset(int(a) for a in rng.choice(n_fictitious, n_forget, replace=False))
    words = {w for qa in fictitious + public for w in qa.question + qa.answer}
    if paraphrases:
        words |= {w for t in PARAPHRASES.values() for q in t for w in q.format(name="").split()}
    return Corpus(
        tuple(SPECIALS) + tuple(sorted(words)),
        tuple(public),
        tuple(fictitious),
        forget,
        tuple(names),
        paraphrases,
    )
