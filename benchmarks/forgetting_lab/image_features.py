"""How the image encoder's setting was chosen -- on training data only.

Each image training split is cut, by a fixed seed-0 permutation, into a fitting part
(``--n-fit`` rows) and a validation part (``--n-val`` rows); the test split is never read.
Every candidate feature map is scored by the validation accuracy of a logistic regression
(g's model family) fitted on the fitting part. The winner became ``HOGEncoder``'s defaults
and the features of the paper benchmark's image rows.

Run: ``python -m forgetting_lab.image_features`` (~3 minutes on 2 cores); writes
``benchmarks/results/image_features.md`` and ``.csv`` with this command.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from forgetting.encoders import HOGEncoder, IdentityEncoder

from .bench.report import write_results
from .datasets import load_dataset

CANDIDATES = {
    "raw pixels (784)": IdentityEncoder(),
    "HOG 7px cells, 1×1 blocks, 12 orientations": HOGEncoder(
        pixels_per_cell=7, cells_per_block=1, orientations=12, pool=0
    ),
    "HOG 7px cells, 2×2 blocks": HOGEncoder(pool=0),
    "HOG 4px cells, 1×1 blocks, 8 orientations": HOGEncoder(
        pixels_per_cell=4, cells_per_block=1, orientations=8, pool=0
    ),
    "HOG 4px cells, 2×2 blocks": HOGEncoder(pixels_per_cell=4, pool=0),
    "HOG 7px cells, 2×2 blocks + 2×2-pooled pixels (default)": HOGEncoder(),
}
COLUMNS = ["dataset", "features", "dim", "val_accuracy", "encode_ms_per_image", "fit_s"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="mnist,fashion_mnist")
    parser.add_argument("--n-fit", type=int, default=20000, help="rows to fit on")
    parser.add_argument("--n-val", type=int, default=10000, help="rows to validate on")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    rows = []
    for name in args.datasets.split(","):
        ds = load_dataset(name)
        order = np.random.default_rng(0).permutation(len(ds.y_train))
        fit, val = order[: args.n_fit], order[args.n_fit : args.n_fit + args.n_val]
        for label, encoder in CANDIDATES.items():
            t = time.perf_counter()
            F_fit, F_val = encoder.transform(ds.X_train[fit]), encoder.transform(ds.X_train[val])
            encode_ms = (time.perf_counter() - t) / (len(fit) + len(val)) * 1e3
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf = LogisticRegression(max_iter=500).fit(F_fit, ds.y_train[fit])
            row = {
                "dataset": name,
                "features": label,
                "dim": F_fit.shape[1],
                "val_accuracy": float(clf.score(F_val, ds.y_train[val])),
                "encode_ms_per_image": encode_ms,
                "fit_s": time.perf_counter() - t,
            }
            print(row, flush=True)
            rows.append(row)
    command = shlex.join(["python", "benchmarks/forgetting_lab/image_features.py", *argv])
    notes = (
        f"Validation = {args.n_val:,} training images held out from a fit on {args.n_fit:,} "
        "others (fixed seed-0 permutation of the training split); logistic regression, "
        "max_iter=500, sklearn defaults otherwise. The test split is not read."
    )
    md = write_results(
        Path(args.out),
        "image_features",
        command,
        {"Image features: validation accuracy of logistic regression": (rows, COLUMNS)},
        notes,
    )
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
