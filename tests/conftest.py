"""The library tests' fixtures: those of tests/helpers.py, registered for every folder below.

Helpers are imported from ``helpers`` (``tests/`` is on pytest's ``pythonpath``); they are
re-exported here too, so ``from conftest import ...`` keeps working from any folder."""

from helpers import *  # noqa: F403
