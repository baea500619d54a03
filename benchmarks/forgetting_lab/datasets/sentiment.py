"""~23k human-rated sentences (VADER's ground truth), as a binary positive/negative text task.

Why this source: Hutto & Gilbert (ICWSM 2014) had every sentence rated by about 20 people on a
-4..+4 scale, across four genres (tweets, movie-review snippets, Amazon review snippets, New York
Times editorial snippets). The ratings ship only inside the *source distribution* of the PyPI
package ``vaderSentiment==3.3.2`` (``additional_resources/hutto_ICWSM_2014.tar.gz``; the wheel
lacks it), so the loader reads that sdist from the local cache directory, where ``pip download``
puts it -- nothing is fetched at run time. The sdist's SHA-256 is pinned, so a different or
damaged file fails loudly instead of silently changing the data.

Why this task: label 1 when the mean rating is > 0, label 0 when it is < 0; the few sentences
rated exactly 0 (neutral, 383 of 23 703) have no binary label and are dropped. Each text is the
ground-truth file's sentence with surrounding whitespace stripped, otherwise unchanged (HTML
entities such as ``&amp;`` in tweets are left as the raters saw them). Duplicate sentences (a
few dozen, mostly short Amazon/NYT snippets) are kept: each is a separately rated row.

Why this split: a stratified (by label) 80/20 split with a fixed seed over the rows in file
order (tweets, movies, Amazon, NYT), so every run sees the same data.
"""

from __future__ import annotations

import hashlib
import io
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from forgetting.encoders.text import CACHE_ENV, cache_dir

from .base import Dataset, DatasetUnavailableError, subsample_train

__all__ = [
    "SENTIMENT_CLASSES",
    "SENTIMENT_SOURCES",
    "SENTIMENT_SPLIT_SEED",
    "SENTIMENT_TEST_FRACTION",
    "VADER_SDIST",
    "VADER_SDIST_SHA256",
    "RatedSentence",
    "cache_dir",
    "load_sentiment",
    "locate_sentiment",
    "read_rated_sentences",
    "sentiment_install_command",
]

VADER_SDIST = "vaderSentiment-3.3.2.tar.gz"
#: SHA-256 of the PyPI sdist vaderSentiment 3.3.2 (PyPI files are immutable).
VADER_SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
_INNER_TARBALL = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
#: The four ground-truth files (ID, mean rating, text; tab separated), in load order, with the
#: number of rows each must hold.
SENTIMENT_SOURCES = {
    "tweets": ("hutto_ICWSM_2014/tweets_GroundTruth.txt", 4200),
    "movie_reviews": ("hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt", 10605),
    "amazon_reviews": ("hutto_ICWSM_2014/amazonReviewSnippets_GroundTruth.txt", 3708),
    "nyt_editorials": ("hutto_ICWSM_2014/nytEditorialSnippets_GroundTruth.txt", 5190),
}
SENTIMENT_CLASSES = ("negative", "positive")
SENTIMENT_TEST_FRACTION = 0.2
#: ``random_state`` of the stratified train/test split (never change: it defines the data).
SENTIMENT_SPLIT_SEED = 0


def sentiment_install_command(directory: Path | None = None) -> str:
    """The exact command that puts the vaderSentiment 3.3.2 sdist into ``directory``.

    ``--no-binary :all:`` makes pip fetch the sdist (the wheel lacks the rated sentences);
    ``--no-deps`` keeps it from fetching anything else.
    """
    directory = cache_dir() if directory is None else directory
    default = Path.home() / ".cache" / "forgetting"
    where = "~/.cache/forgetting" if directory == default else shlex.quote(str(directory))
    return f"pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d {where}"


def locate_sentiment() -> Path:
    """Path of the verified vaderSentiment 3.3.2 sdist in :func:`cache_dir`.

    Accepts the file name in any letter case (pip normalizes project names in some versions).

    Raises:
        DatasetUnavailableError: the sdist is missing or is not the pinned file; the message
            gives the command that puts it there.
    """
    directory = cache_dir()
    candidates = (
        sorted(p for p in directory.iterdir() if p.name.lower() == VADER_SDIST.lower())
        if directory.is_dir()
        else []
    )
    if not candidates:
        raise DatasetUnavailableError(
            f"The sentiment dataset is not available: {directory} holds no {VADER_SDIST} (the "
            f"human-rated sentences ship in the PyPI sdist of vaderSentiment 3.3.2). Put it "
            f"there with: {sentiment_install_command(directory)}  (set {CACHE_ENV} to use "
            f"another directory)"
        )
    path = candidates[0]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != VADER_SDIST_SHA256:
        raise DatasetUnavailableError(
            f"{path} is not the vaderSentiment 3.3.2 sdist (sha256 {digest}, expected "
            f"{VADER_SDIST_SHA256}); delete it and run: {sentiment_install_command(directory)}"
        )
    return path


@dataclass(frozen=True)
class RatedSentence:
    """One row of a ground-truth file: its genre, file id, mean human rating and text."""

    source: str
    id: str
    rating: float
    text: str


def read_rated_sentences(path: Path | None = None) -> list[RatedSentence]:
    """Every rated sentence in the sdist at ``path`` (default: :func:`locate_sentiment`).

    Read straight from the nested tarballs in memory; nothing is extracted to disk. Includes
    the neutral (rating 0) rows that :func:`load_sentiment` drops.
    """
    path = locate_sentiment() if path is None else path
    with tarfile.open(path, "r:gz") as outer:
        member = outer.extractfile(_INNER_TARBALL)
        if member is None:
            raise ValueError(f"{path}: {_INNER_TARBALL} is not a regular file")
        inner_bytes = member.read()
    out: list[RatedSentence] = []
    with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
        for source, (name, n_rows) in SENTIMENT_SOURCES.items():
            handle = inner.extractfile(name)
            if handle is None:
                raise ValueError(f"{path}: {name} is not a regular file")
            lines = [ln for ln in handle.read().decode("utf-8").splitlines() if ln.strip()]
            if len(lines) != n_rows:
                raise ValueError(f"{path}: {name} has {len(lines)} rows, expected {n_rows}")
            for lineno, line in enumerate(lines, 1):
                fields = line.split("\t", 2)
                if len(fields) != 3:
                    raise ValueError(f"{path}: {name}:{lineno}: expected 3 tab-separated fields")
                out.append(RatedSentence(source, fields[0], float(fields[1]), fields[2].strip()))
    return out


def load_sentiment(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """The VADER human-rated sentences as binary sentiment: 1 = mean rating > 0, 0 = < 0.

    ``X`` is TEXT: 1-D object arrays of ``str`` (``modality="text"``); embed them with a frozen
    encoder such as :class:`forgetting.encoders.MiniLMEncoder`. 23 320 labelled sentences
    (neutral ones dropped), split 80/20 stratified by label with ``random_state=0``
    (18 656 train / 4 664 test). ``n_train`` keeps the first ``n_train`` rows of a
    ``subsample_seed``-ed permutation of the train split.

    Raises:
        DatasetUnavailableError: the sdist is not in the cache directory (the message gives
            the ``pip download`` command that puts it there).
    """
    from sklearn.model_selection import train_test_split

    path = locate_sentiment()
    rated = [r for r in read_rated_sentences(path) if r.rating != 0]
    texts = np.empty(len(rated), dtype=object)
    texts[:] = [r.text for r in rated]
    labels = np.array([r.rating > 0 for r in rated], dtype=np.int64)
    counts = {s: sum(r.source == s for r in rated) for s in SENTIMENT_SOURCES}
    Xtr, Xte, ytr, yte = train_test_split(
        texts,
        labels,
        test_size=SENTIMENT_TEST_FRACTION,
        random_state=SENTIMENT_SPLIT_SEED,
        stratify=labels,
    )
    Xtr, ytr = subsample_train(Xtr, ytr, n_train, subsample_seed)
    return Dataset(
        name="sentiment",
        task="classification",
        X_train=Xtr,
        y_train=ytr,
        X_test=Xte,
        y_test=yte,
        feature_description=(
            "text: one English sentence per row (VADER ground truth: "
            + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items())
            + "); label 1 = mean human rating > 0, 0 = < 0 (neutral rows dropped)"
        ),
        source=f"vaderSentiment 3.3.2 sdist (PyPI), {_INNER_TARBALL}: {path}",
        class_names=SENTIMENT_CLASSES,
        modality="text",
    )
