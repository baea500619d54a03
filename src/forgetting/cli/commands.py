"""The store commands: ``fit`` writes a new store; ``predict``, ``inspect`` and ``verify`` read
one (read-only); ``forget`` and ``insert`` change one (the store's one writer for the moment).

Each ``cmd_*`` takes the parsed arguments and returns the exit code; it reads its inputs through
:mod:`.inputs`, calls :class:`~forgetting.store.durable.DurableModel` and prints through
:mod:`.render`. Failures are raised, never printed here: :func:`.errors.run_command` turns them
into one line and an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..io import tables
from .errors import is_dsn, redact, usage
from .estimator import (
    ESTIMATOR_OPTIONS,
    FOREST_ONLY_OPTIONS,
    FOREST_OPTIONS,
    QSS_DP_DELTA,
    dp_model,
    estimator_class,
    options_of,
    resolve_model,
)
from .inputs import (
    cluster_failures,
    dask_cluster,
    dataset_rows,
    durable_class,
    file_rows,
    holdout_fraction,
    model_features,
    open_store,
    read_ids_arg,
    split_holdout,
)
from .inputs import secret_key as read_secret_key
from .render import note, print_json, progress, render_stats, report_receipt

#: Rows per predict call: bounded memory and a progress bar that moves.
PREDICT_CHUNK = 4096


def derived_key_warning(random_state: Any) -> str:
    """What a store fitted without ``--secret-key-file`` exposes, and what to do about it."""
    return (
        "warning: no --secret-key-file, so the D° membership key is derived from "
        f"random_state={random_state!r}, which is not secret: anyone can tell which ids fall "
        "in D° (and aim deletions at them to force rebuilds) and compute any id's receipt "
        "hash (so open receipt reads reveal whether and when it was forgotten); pass "
        "--secret-key-file FILE in production"
    )


def held_out_score(model: Any, X: Any, y: np.ndarray, name: str) -> str:
    """The line ``fit --holdout`` prints: the stored model's accuracy on the held-out rows
    (regression: RMSE and R²), beside the model's name."""
    predicted = np.concatenate(
        [
            np.asarray(model.predict(X[start : start + PREDICT_CHUNK]))
            for start in range(0, len(y), PREDICT_CHUNK)
        ]
    )
    if model.task == "classification":
        accuracy = float(np.mean(predicted == y))
        return f"held-out accuracy {accuracy:.4f} on {len(y)} rows ({name})"
    from sklearn.metrics import r2_score

    truth = np.asarray(y, dtype=np.float64)
    rmse = float(np.sqrt(np.mean((predicted.astype(np.float64) - truth) ** 2)))
    r2 = float(r2_score(truth, predicted))
    return f"held-out RMSE {rmse:.5g} and R² {r2:.4f} on {len(y)} rows ({name})"


def cmd_fit(args: argparse.Namespace) -> int:
    holdout = holdout_fraction(getattr(args, "holdout", None))
    dataset = tables.is_dataset(args.data)
    asked = getattr(args, "model", "qss")
    given = {n for n in (*ESTIMATOR_OPTIONS, *FOREST_OPTIONS) if hasattr(args, n)}
    mode = getattr(args, "mode", None)
    if mode == "dp" and not hasattr(args, "epsilon"):
        raise usage("--mode dp needs --epsilon (the ε of label-DP), and --secret-key-file")
    if hasattr(args, "epsilon") and mode != "dp":
        raise usage("--epsilon applies to --mode dp only")
    if hasattr(args, "delta") and mode != "dp":
        raise usage("--delta applies to --mode dp (QSS-DP) only")
    model_kind, why = resolve_model(
        asked,
        given=given,
        dataset=dataset,
        raw_table=args.raw_table,
        text=bool(args.text_col),
        mode=mode,
    )
    # --model auto --mode dp: the rows decide between the DP forest and QSS-DP (below)
    choose_dp = asked == "auto" and mode == "dp" and model_kind == "forest"
    choose_dp = choose_dp and not given & set(FOREST_ONLY_OPTIONS)
    args.model = model_kind  # what reads the rows (missing values) sees the model chosen
    estimator_cls = estimator_class(args.task, model_kind)
    allowed = options_of(model_kind)
    for name in dict.fromkeys((*ESTIMATOR_OPTIONS, *FOREST_OPTIONS)):
        if hasattr(args, name) and name not in allowed:
            other = "forest" if model_kind == "qss" else "qss"
            raise usage(f"--{name.replace('_', '-')} applies to --model {other} only")
    if model_kind == "forest" and mode == "label":
        raise usage("--mode label applies to --model qss only (the forest's modes: exact, dp)")
    params = {name: getattr(args, name) for name in allowed if hasattr(args, name)}
    if model_kind == "qss" and mode == "dp":
        params.setdefault("delta", QSS_DP_DELTA)
    key = read_secret_key(args)
    if key is not None:
        params["secret_key"] = key
    elif args.store_key:
        raise usage("--store-key stores the key of --secret-key-file: give that file too")
    if not is_dsn(args.store) and Path(args.store).exists() and not args.overwrite:
        raise usage(f"{args.store!r} exists: pass --overwrite to replace it, or another --store")
    if dataset and args.raw_table:
        raise usage("--raw-table reads one CSV or Parquet file in memory, not a dataset directory")
    if not dataset and (args.scheduler or args.workers):
        raise usage(
            "--scheduler and --workers fit a Parquet dataset directory on dask; "
            f"{args.data!r} is one file, fitted in memory: leave them out"
        )
    if dataset and holdout is not None:
        raise usage(
            "--holdout splits a data file fitted in memory, not a Parquet dataset directory "
            "(fitted on dask): hold out some of its files instead, and predict them"
        )
    if model_kind == "forest" and args.raw_table:
        raise usage(
            "--model forest reads numeric feature columns (missing values welcome): leave "
            "--raw-table out"
        )
    rows = dataset_rows(args) if dataset else file_rows(args)
    if choose_dp:
        model_kind, why = dp_model(
            args.task, None if dataset else len(rows.y), np.asarray(rows.y), args.epsilon
        )
        if model_kind == "qss":  # QSS-DP: its options, and the rows read as QSS reads them
            args.model = model_kind
            estimator_cls = estimator_class(args.task, model_kind)
            params = {n: getattr(args, n) for n in options_of(model_kind) if hasattr(args, n)}
            params.setdefault("delta", QSS_DP_DELTA)
            if key is not None:
                params["secret_key"] = key
            rows = dataset_rows(args) if dataset else file_rows(args)
    if rows.skipped:
        note(
            f"left out column(s) with no numbers in them: {', '.join(rows.skipped)} "
            "(name the features with --feature-cols, or embed text with --text-col)"
        )
    estimator = estimator_cls(**params)
    seed = estimator.get_params()["random_state"]
    if key is None:
        print(derived_key_warning(seed), file=sys.stderr)
    held_out, X_test, y_test = "", None, np.empty(0)
    if holdout is not None:
        rows, X_test, y_test = split_holdout(rows, holdout, args.task, seed)
        held_out = f", {len(y_test)} rows held out"
    shown = ", ".join(rows.columns) if len(rows.columns) <= 8 else f"{len(rows.columns)} columns"
    with contextlib.ExitStack() as stack:
        where = ""
        if dataset:
            where = f" ({rows.source}) on {stack.enter_context(dask_cluster(args))}"
            stack.enter_context(cluster_failures())
        print(
            f"fitting {estimator_cls.__name__} on {rows.X.shape[0]} rows x {rows.X.shape[1]} "
            f"features from {shown}{where}{held_out}{f' ({why})' if why else ''} ...",
            file=sys.stderr,
        )
        if dataset:
            # one bar over the cluster's chunks (pass 1, then each instance's pass 2), on a
            # terminal only (progress() is silent on pipes, CI and tests)
            from ..distributed import fit_progress

            bar = stack.enter_context(progress(None, desc="fitting", unit="chunk"))
            stack.enter_context(fit_progress(bar))
        started = time.perf_counter()
        store = durable_class(model_kind).create(
            args.store,
            estimator,
            rows.X,
            rows.y,
            rows.ids,
            overwrite=args.overwrite,
            store_key=args.store_key,
            feature_names=rows.names,
        )
        score, scoring = "", 0.0
        with store as model:
            stats = model.stats()
            if held_out:  # scored by the stored model, not counted in the fit's time
                scoring = time.perf_counter()
                score = held_out_score(model, X_test, y_test, estimator_cls.__name__)
                scoring = time.perf_counter() - scoring
        seconds = time.perf_counter() - started - scoring
    made = (
        f"{stats.get('n_estimators')} trees"
        if model_kind == "forest"
        else f"{len(stats.get('instances', []))} instances"
    )
    print(f"wrote {redact(args.store)}: {stats.get('n_rows')} rows, {made}, in {seconds:.2f} s")
    if score:
        print(score)
    print(f"feature columns: {','.join(rows.columns)}")
    print(f"state digest: {stats.get('state_digest')}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    table = tables.read_table(args.data, max_bytes=args.max_data_size)
    ids = tables.id_column(table, args.id_col, id_type=args.id_type, required=False)
    with open_store(args, read_only=True) as model:
        X = model_features(args, table, model)
        tables.check_rows(table, ids=ids, features=X)
        classification = model.task == "classification"
        labels, probas = [], []
        for start in progress(range(0, len(X), PREDICT_CHUNK), desc="predicting", unit="chunk"):
            chunk = X[start : start + PREDICT_CHUNK]
            labels.append(np.asarray(model.predict(chunk)))
            if classification and not args.no_proba:
                probas.append(np.asarray(model.predict_proba(chunk)))
        classes = model.classes
    predictions = np.concatenate(labels) if labels else np.empty(0)
    header = (["id"] if ids is not None else []) + ["prediction"]
    if probas:
        header += [f"proba_{c}" for c in classes or []]
    out_handle = open(args.out, "w", newline="") if args.out else sys.stdout  # noqa: SIM115
    try:
        writer = csv.writer(out_handle)
        writer.writerow(header)
        proba = np.concatenate(probas) if probas else None
        for i, label in enumerate(predictions.tolist()):
            row = ([ids[i]] if ids is not None else []) + [label]
            if proba is not None:
                row += [repr(float(p)) for p in proba[i]]
            writer.writerow(row)
    finally:
        if args.out:
            out_handle.close()
    if args.out:
        print(f"wrote {len(predictions)} predictions to {args.out}", file=sys.stderr)
    return 0


def settle(model: Any, no_wait: bool) -> None:
    """Let background rebuilds land and reach the store before the process exits.

    The change itself is already durable; a rebuild that dies with the process would only be
    redone by the next ``open``, so waiting here makes the next command fast.
    """
    if no_wait:
        return
    if model.stats().get("pending_rebuilds"):
        print("waiting for background rebuilds to land in the store ...", file=sys.stderr)
    model.wait_for_rebuilds()


def attribution_args(args: argparse.Namespace) -> dict[str, str]:
    """``--operator`` (default ``cli:<login name>``, or ``cli`` when there is none) and
    ``--reason``, checked before the store opens: a usage error saying what is wrong."""
    from ..receipts import attribution

    operator = args.operator
    if operator is None:
        import getpass

        try:
            operator = f"cli:{getpass.getuser()}"
        except Exception:  # noqa: BLE001 - no login name (no USER, no passwd entry)
            operator = "cli"
        if len(operator) > 100 or not operator.isprintable():
            operator = "cli"
    try:
        return attribution(operator, args.reason)
    except ValueError as err:
        raise usage(f"--{str(err)}") from None


def cmd_forget(args: argparse.Namespace) -> int:
    ids = read_ids_arg(args)
    notes = attribution_args(args)
    with open_store(args, read_only=False) as model:
        receipt = model.forget(ids, erase_inputs=args.erase_inputs, **notes)
        settle(model, args.no_wait)
    report_receipt(receipt.to_dict(), args.json)
    return 0


def cmd_insert(args: argparse.Namespace) -> int:
    notes = attribution_args(args)
    table = tables.read_table(args.data, max_bytes=args.max_data_size)
    ids = tables.id_column(table, args.id_col, id_type=args.id_type)
    with open_store(args, read_only=False) as model:
        y = tables.label_column(table, args.label_col, task=model.task)
        X = model_features(args, table, model)
        tables.check_rows(table, ids=ids, labels=y, features=X)
        receipt = model.insert(X, y, ids, **notes)
        settle(model, args.no_wait)
    report_receipt(receipt.to_dict(), args.json)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    with open_store(args, read_only=True) as model:
        stats = model.stats()
    if args.json:
        print_json(stats)
    else:
        print(render_stats(stats, args.store))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    with open_store(args, read_only=True) as model:
        print("refitting from the stored rows to compare digests ...", file=sys.stderr)
        result = model.verify()
    if args.json:
        print_json(result)
    else:
        problems = result.get("problems", [])
        verdict = "OK: identical" if result["ok"] else "MISMATCH"
        if problems and result["state_digest"] == result["refit_digest"]:
            verdict = "INCONSISTENT: digests identical, contributions not"
        print(f"{verdict} ({result.get('seconds', float('nan')):.2f} s)")
        print(f"  state digest: {result['state_digest']}")
        print(f"  refit digest: {result['refit_digest']}")
        for problem in problems:
            print(f"  problem: {problem}")
    return 0 if result["ok"] else 1
