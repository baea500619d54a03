"""The lab tests' fixtures: the library tests' (tests/helpers.py, on pytest's ``pythonpath``),
registered here too."""

from helpers import *  # noqa: F403
