"""Argument types of the command line: what an option's text must be, refused by argparse
with one line naming the value.

Why apart: the parser (:mod:`.parser`) and the fit command's options
(:mod:`.fit_options`) both use them, and both must import nothing heavy (``--help``
answers at once)."""

from __future__ import annotations

import argparse
import math

from ..io.table_types import parse_size


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number")
    return value


def max_features(text: str) -> int | float | str:
    """``--max-features``: sqrt, log2, a positive count, or a fraction in (0, 1]."""
    if text in ("sqrt", "log2"):
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give sqrt, log2, a positive count or a fraction in (0, 1]"
        )
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0.0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number > 0")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} must be in (0, 1]")
    return value


def size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
