"""``forgetting fit``'s options for choosing and configuring the model, and for fitting a
Parquet dataset directory on a dask cluster.

Why apart from :mod:`.parser`: they are most of ``fit``'s surface (the model, every
estimator parameter the command exposes, the cluster), and the parser stays a list of
commands. Like the parser, this imports nothing heavy: ``forgetting fit --help`` answers at
once (tests/test_import_cost.py)."""

from __future__ import annotations

import argparse
from typing import Any

from .arg_types import fraction, max_features, positive_float, positive_int
from .estimator import FOREST_DEFAULTS, MODELS, QSS_DP_DELTA, estimator_defaults


def add_cluster_options(fit: Any) -> None:
    """``fit``'s options for a Parquet dataset directory fitted on a dask cluster."""
    cluster = fit.add_argument_group(
        'dask (a Parquet dataset directory; needs pip install "forgetting[distributed]")',
        "A dataset directory is read lazily with dask.dataframe.read_parquet, one file per "
        "task: the workers read and check the feature columns (and, for QSS, compute every "
        "row's contribution); this process reads the id and label columns, trains the "
        "schemas or grows the forest's trees from the gathered rows, and writes the store. "
        "The model is the one an in-memory fit on the same rows in the same order writes, "
        "bit for bit (docs/distributed.md).",
    )
    where = cluster.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="fit on the running dask.distributed cluster whose scheduler is at ADDRESS "
        "(tcp://host:8786); its workers must read the dataset at the same path and run the "
        "same forgetting version. The cluster is left running",
    )
    where.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="start a local dask cluster of N worker processes (one thread each) for this fit "
        "and stop it afterwards (default, without --scheduler: one per CPU core)",
    )


def add_estimator_options(fit: Any) -> None:
    """``fit``'s estimator options; left out, the estimator's own defaults apply."""
    defaults = estimator_defaults()
    est = fit.add_argument_group("estimator (defaults: the estimator's own)")
    est.add_argument(
        "--task",
        choices=("classification", "regression"),
        default="classification",
        help="a classifier (classification, the default) or a regressor (regression) of the "
        "model --model names",
    )
    keep = argparse.SUPPRESS  # left out: the estimator's default applies
    est.add_argument(
        "--mode",
        choices=("exact", "label", "dp"),
        default=keep,
        help="exact: forget erases rows exactly; label (QSS): forget erases labels exactly, "
        "inputs still shaped the codebook (more accurate); dp: label-DP at --epsilon (needs "
        "--secret-key-file) — --model auto picks the DP forest (keyed randomized response) "
        "or QSS-DP by the measured rule (docs/privacy.md §12). Default "
        f"{defaults['mode']}",
    )
    est.add_argument(
        "--epsilon",
        type=positive_float,
        default=keep,
        help="--mode dp: ε of label-DP (the forest: per label, for every release; QSS-DP: per "
        "release, composed in its ledger)",
    )
    est.add_argument(
        "--delta",
        type=fraction,
        default=keep,
        help=f"--mode dp, QSS only: δ of each release. Default {QSS_DP_DELTA} with QSS-DP",
    )
    est.add_argument(
        "--rho",
        type=fraction,
        default=keep,
        help="fraction of rows in each instance's schema subset D°; a deletion hitting it "
        f"costs a rebuild. Default {defaults['rho']}",
    )
    est.add_argument(
        "--n-instances",
        type=positive_int,
        default=keep,
        help="redundant instances p, each with its own D°: a deletion hitting one D° "
        "rebuilds that instance in the background while the others serve; requests block "
        f"only if all p rebuild (1: a D° hit refits in the call). Default "
        f"{defaults['n_instances']} (QSS), {FOREST_DEFAULTS['n_instances']} (forest: the trees "
        "split among the instances)",
    )
    est.add_argument(
        "--n-levels",
        type=positive_int,
        default=keep,
        help=f"QSS: codebook levels. Default {defaults['n_levels']}",
    )
    est.add_argument(
        "--n-centroids",
        type=positive_int,
        default=keep,
        help=f"QSS: centroids per level, a power of 2. Default {defaults['n_centroids']}",
    )
    est.add_argument(
        "--rebuild",
        choices=("background", "sync"),
        default=keep,
        help="QSS: rebuild in the background or before forget returns. "
        f"Default {defaults['rebuild']}",
    )
    est.add_argument(
        "--model",
        choices=MODELS,
        default="auto",
        help="auto (the default): the exact forest, or QSS for "
        "--raw-table, --text-col or a QSS-only option (the line fit prints says which); qss: "
        "QSSClassifier / QSSRegressor; forest: ExactForestClassifier / ExactForestRegressor, "
        "extremely randomized trees with exact forget, the exact model closest to a retrained "
        "gradient-boosting model on tables (docs/forest.md). The options below marked QSS or "
        "forest apply to that model only",
    )
    forest = FOREST_DEFAULTS
    est.add_argument(
        "--n-estimators",
        type=positive_int,
        default=keep,
        help=f"forest: trees. Default {forest['n_estimators']}",
    )
    est.add_argument(
        "--max-features",
        type=max_features,
        default=keep,
        help="forest: candidate splits per node — a count, a fraction of the features, sqrt "
        f"or log2. Default {forest['max_features']}",
    )
    est.add_argument(
        "--min-samples-leaf",
        type=positive_int,
        default=keep,
        help=f"forest: rows a leaf holds at least. Default {forest['min_samples_leaf']}",
    )
    est.add_argument(
        "--random-state",
        type=int,
        default=keep,
        help=f"seed; also derives the membership key when no secret key is given. "
        f"Default {defaults['random_state']}",
    )
    est.add_argument(
        "--secret-key-file",
        metavar="FILE",
        help="file holding the secret membership key (recommended in production: without it "
        "the key is derived from --random-state, so anyone can aim deletions at the schema "
        "subset and compute the receipt hash of any id). The store keeps the key only with "
        "--store-key; without it, pass the same file to every later command",
    )
    est.add_argument(
        "--store-key",
        action="store_true",
        help="keep the secret key in the store, so later commands need no --secret-key-file "
        "(anyone who can read the store can then read the key)",
    )
