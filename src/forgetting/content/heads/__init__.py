"""Heads: exact linear models on all rows, solved from integer sums of fixed-point terms.

``fixed_point`` puts features and residuals on integer grids and sums their products
exactly; ``gram`` keeps the Gram sums (pending rows, penalty, factorization, a cache shared by
the instances); ``solve`` turns them into served weights and an out-of-fold gain; ``linear``
is the ridge head, ``newton`` the heads served as a logistic step; ``gain_filter`` decides
"the head is not served" without a solve when that is certain.
"""

from .fixed_point import FixedWeights, fold_grams, head_features
from .gram import GramCache, GramSystem, head_penalty
from .linear import LinearHead
from .newton import LogitRidgeHead, NewtonHead, NewtonWeights
from .solve import solve_stacked

__all__ = [
    "FixedWeights",
    "GramCache",
    "GramSystem",
    "LinearHead",
    "LogitRidgeHead",
    "NewtonHead",
    "NewtonWeights",
    "fold_grams",
    "head_features",
    "head_penalty",
    "solve_stacked",
]
