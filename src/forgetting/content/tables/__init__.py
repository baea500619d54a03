"""Flat multi-table content: per-cell integer sums for T tables, served without materializing.

``flat`` holds the tables (:class:`FlatTables`) and keeps their derived totals exact;
``terms`` defines the per-cell cross-fit and probe terms, ``probes`` the D° probes' index and
totals, ``scatter`` and ``update`` how rows enter and leave, ``serve`` what a prediction reads,
``units`` the fixed-point grids, and ``flat_content`` what an instance serves (the tables or
its head). The compiled kernels (``_*_kernels``) sit beside the code they speed up and give its
numpy definitions' bits.
"""

from .flat import FlatTables
from .flat_content import FlatContent, build_flat_content, certified_flat_content
from .units import SHRINKAGE_GRID

__all__ = [
    "SHRINKAGE_GRID",
    "FlatContent",
    "FlatTables",
    "build_flat_content",
    "certified_flat_content",
]
