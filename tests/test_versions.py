"""Library versions in model files and stores: which differences are refused, which recorded."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers import FAST, classification_data

from forgetting import ModelFileError, QSSClassifier, persistence
from forgetting.store import DurableModel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def saved(tmp_path):
    X, y = classification_data()
    path = tmp_path / "model.qss"
    QSSClassifier(**FAST).fit(X, y).save(path)
    return path


def test_the_file_records_the_bit_owning_libraries_and_the_environment(saved):
    libraries = persistence.library_versions()
    assert set(libraries) == {"numpy", "scipy", "scikit-learn", "faiss"}
    raw = saved.read_bytes()
    for value in [*libraries.values(), persistence.environment()["numba"]]:
        assert value.encode() in raw


@pytest.mark.parametrize("library", ["numpy", "scipy", "scikit-learn", "faiss"])
def test_each_bit_owning_library_mismatch_is_refused_by_name(saved, monkeypatch, library):
    real = persistence.library_versions()
    monkeypatch.setattr(persistence, "library_versions", lambda: {**real, library: "0.0"})
    with pytest.raises(ModelFileError, match=f"{library} .* \\(running 0.0\\)"):
        QSSClassifier.load(saved)
    X, _ = classification_data()
    allowed = QSSClassifier.load(saved, allow_version_mismatch=True)
    assert allowed.predict(X).shape == (len(X),)


def test_a_numba_difference_alone_loads_the_same_bits(saved, monkeypatch):
    """numba only runs kernels checked equal to the numpy route: not a reason to refuse."""
    X, _ = classification_data()
    before = QSSClassifier.load(saved)
    monkeypatch.setattr(
        persistence, "environment", lambda: {"python": "3.99", "numba": "0.0", "machine": "x"}
    )
    after = QSSClassifier.load(saved)
    assert after.state_digest() == before.state_digest()
    assert np.array_equal(after.predict_proba(X), before.predict_proba(X))


def test_a_file_without_recorded_versions_is_refused():
    assert "no valid library versions" in persistence.version_mismatch(None)
    assert persistence.version_mismatch(persistence.library_versions()) is None


def test_a_record_from_before_scipy_was_recorded_stands_for_the_scipy_then_required(monkeypatch):
    """Releases before scipy's version was recorded required scipy==1.17.1: their files and
    stores open under that scipy and are refused, naming it, under another."""
    real = persistence.library_versions()
    older = {k: v for k, v in real.items() if k != "scipy"}
    then = persistence.SCIPY_BEFORE_RECORDED
    monkeypatch.setattr(persistence, "library_versions", lambda: {**real, "scipy": then})
    assert persistence.version_mismatch(older) is None
    monkeypatch.setattr(persistence, "library_versions", lambda: {**real, "scipy": "9.9"})
    assert f"scipy {then} (running 9.9)" in persistence.version_mismatch(older)


def test_a_store_written_under_other_versions_is_refused(tmp_path, monkeypatch):
    X, y = classification_data()
    path = tmp_path / "model.db"
    DurableModel.create(path, QSSClassifier(**FAST), X, y, ids=np.arange(len(y))).close()
    real = persistence.library_versions()
    monkeypatch.setattr(persistence, "library_versions", lambda: {**real, "scipy": "0.0"})
    with pytest.raises(ValueError, match="scipy .* \\(running 0.0\\).*same library versions"):
        DurableModel.open(path)


def test_runtime_dependencies_are_ranges_and_the_lock_pins_them():
    """pyproject declares ranges (no ==); constraints/tested.txt pins every one of them, and
    constraints/oldest.txt sits on each range's low end."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    assert not [r for r in requirements if "==" in r]
    assert project["requires-python"] == ">=3.11"

    def pins(name):
        lines = (ROOT / "constraints" / name).read_text().splitlines()
        return dict(line.split("==") for line in lines if line and not line.startswith("#"))

    tested, oldest = pins("tested.txt"), pins("oldest.txt")
    for requirement in project["dependencies"]:
        name, low = requirement.split(">=")
        assert name in tested and oldest[name] == low.split(",")[0], name
    for requirement in requirements:  # the extras' floors that CI's oldest job installs
        name, _, low = requirement.partition(">=")
        name = name.split("[")[0]
        if name in oldest:
            assert oldest[name] == low.split(",")[0], name


def test_py_typed_ships_in_the_package():
    """The marker is package data; where the package is installed (not from src/), it is there."""
    import forgetting

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in config["package-data"]["forgetting"]
    assert (ROOT / "src" / "forgetting" / "py.typed").exists()
    assert (Path(forgetting.__file__).parent / "py.typed").exists()
