"""A figure quoted in README.md or docs/ must describe the model the library ships, or say what
it describes: every cited results file records the shipped-defaults fingerprint of each model
family it measured, or benchmarks/results/configurations.toml declares what it measured.

One fingerprint per family (forgetting.estimators.defaults_fingerprints): the QSS one is the
"shipped defaults fingerprint" of a file's "Library:" line, the forest's its "forest defaults
fingerprint". A file describes the exact forest when its text names a forest that is not a
random-forest head; such a file must record the forest's current fingerprint or declare
``forest = "<fingerprint>"`` / ``forest_describes = "..."``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from forgetting.estimators import defaults_fingerprint, defaults_fingerprints

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DECLARED = RESULTS / "configurations.toml"
CITE = re.compile(r"benchmarks/results/([A-Za-z0-9_.-]+\.md)")
RECORDED = re.compile(
    r"^Library: forgetting \S+; shipped defaults fingerprint ([0-9a-f]{12})", re.M
)
RECORDED_FOREST = re.compile(r"^Library: .*; forest defaults fingerprint ([0-9a-f]{12})", re.M)
NAMES_THE_FOREST = re.compile(r"(?<!random )\bforests?\b", re.I)
QSS_KEYS = ({"defaults"}, {"describes"}, set())
FOREST_KEYS = ({"forest"}, {"forest_describes"}, set())


def cited_files() -> set[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {name for page in pages for name in CITE.findall(page.read_text(encoding="utf-8"))}


def text(name: str) -> str:
    return (RESULTS / name).read_text(encoding="utf-8")


def recorded(name: str) -> str | None:
    found = RECORDED.search(text(name))
    return found.group(1) if found else None


def recorded_forest(name: str) -> str | None:
    found = RECORDED_FOREST.search(text(name))
    return found.group(1) if found else None


def describes_forest(name: str) -> bool:
    return bool(NAMES_THE_FOREST.search(text(name)))


def declarations() -> dict[str, dict]:
    return tomllib.loads(DECLARED.read_text(encoding="utf-8"))


def stale_qss(name: str, entry: dict, current: str) -> str | None:
    if recorded(name) == current:
        if "defaults" in entry or "describes" in entry:
            return f"{name} records the current defaults: drop its declaration"
        return None
    if entry.get("defaults") is not None:
        if entry["defaults"] != current:
            return (
                f"{name} measured defaults {entry['defaults']}, the library ships "
                f"{current}: rerun it, or declare what it describes"
            )
        return None
    if not str(entry.get("describes", "")).strip():
        return (
            f"{name} records defaults {recorded(name)}, not the shipped {current}: rerun "
            "it, or say in configurations.toml which model it describes"
        )
    return None


def stale_forest(name: str, entry: dict, current: str) -> str | None:
    if not describes_forest(name):
        if "forest" in entry or "forest_describes" in entry:
            return f"{name} does not describe the exact forest: drop its forest declaration"
        return None
    if recorded_forest(name) == current:
        if "forest" in entry or "forest_describes" in entry:
            return f"{name} records the forest's current defaults: drop its forest declaration"
        return None
    if entry.get("forest") is not None:
        if entry["forest"] != current:
            return (
                f"{name} measured forest defaults {entry['forest']}, the library ships "
                f"{current}: rerun it, or declare what it describes"
            )
        return None
    if not str(entry.get("forest_describes", "")).strip():
        return (
            f"{name} describes the exact forest but records forest defaults "
            f"{recorded_forest(name)}, not the shipped {current}: rerun it, or say in "
            "configurations.toml (forest = / forest_describes =) which forest it describes"
        )
    return None


def test_the_fingerprints_are_stable_and_short():
    prints = defaults_fingerprints()
    assert set(prints) == {"qss", "forest"}
    for value in prints.values():
        assert re.fullmatch(r"[0-9a-f]{12}", value)
    assert prints == defaults_fingerprints()
    assert defaults_fingerprint() == prints["qss"]
    assert prints["qss"] != prints["forest"]


def test_a_forest_default_moves_only_the_forest_fingerprint(monkeypatch):
    from forgetting.estimators import ExactForestClassifier

    before = defaults_fingerprints()
    init = ExactForestClassifier.__init__
    defaults = list(init.__kwdefaults__.items())
    changed = {k: (60 if k == "n_estimators" else v) for k, v in defaults}
    monkeypatch.setattr(init, "__kwdefaults__", changed)
    after = defaults_fingerprints()
    assert after["qss"] == before["qss"]
    assert after["forest"] != before["forest"]


def test_every_cited_results_file_describes_the_shipped_model_or_says_what_it_describes():
    prints = defaults_fingerprints()
    declared = declarations()
    problems = []
    for name in sorted(cited_files()):
        assert (RESULTS / name).exists(), f"{name} is cited but does not exist"
        entry = declared.get(name, {})
        for problem in (
            stale_qss(name, entry, prints["qss"]),
            stale_forest(name, entry, prints["forest"]),
        ):
            if problem:
                problems.append(problem)
    assert not problems, "\n".join(problems)


def test_declarations_name_cited_files_and_one_kind_each():
    declared = declarations()
    cited = cited_files()
    for name, entry in declared.items():
        assert name in cited, f"configurations.toml declares {name}, which nothing cites"
        keys = set(entry)
        assert keys, f"{name}: an empty declaration"
        assert keys & {"defaults", "describes"} in QSS_KEYS, f"{name}: {sorted(entry)}"
        assert keys & {"forest", "forest_describes"} in FOREST_KEYS, f"{name}: {sorted(entry)}"
        assert keys <= {"defaults", "describes", "forest", "forest_describes"}, sorted(entry)


def test_the_forest_is_told_from_a_random_forest_head():
    assert NAMES_THE_FOREST.search("the exact forest at its defaults")
    assert NAMES_THE_FOREST.search("| forest (defaults) |")
    assert not NAMES_THE_FOREST.search("head='shared-rf' (a random forest on the cells)")


def test_a_changed_default_is_caught(monkeypatch):
    """The guard can fail: with another fingerprint every `defaults` entry is stale, and
    with another forest fingerprint every file describing the forest is."""
    for family in ("qss", "forest"):
        stale = {**defaults_fingerprints(), family: "0" * 12}
        monkeypatch.setitem(globals(), "defaults_fingerprints", lambda stale=stale: stale)
        try:
            test_every_cited_results_file_describes_the_shipped_model_or_says_what_it_describes()
        except AssertionError as err:
            assert "rerun it" in str(err)
        else:
            raise AssertionError(f"a changed {family} default went unnoticed")
