"""The lab tests' own helpers. (The fixtures and helpers they share with the library's tests
are tests/helpers.py's.)"""

from __future__ import annotations

from helpers import source_missing


def load_dataset_or_skip(name: str, **kwargs):
    """``forgetting_lab.datasets.load_dataset``, with :func:`source_missing` when not installed."""
    from forgetting_lab.datasets import DatasetUnavailableError, load_dataset

    try:
        return load_dataset(name, **kwargs)
    except DatasetUnavailableError as err:
        source_missing(err)
        raise  # unreachable: skip/fail raise
