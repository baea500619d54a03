"""A figure quoted in README.md or docs/ must describe the model the library ships, or say what
it describes: every cited results file records the shipped-defaults fingerprint it was measured
with, or benchmarks/results/configurations.toml declares what it measured."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from forgetting.estimators import defaults_fingerprint

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DECLARED = RESULTS / "configurations.toml"
CITE = re.compile(r"benchmarks/results/([A-Za-z0-9_.-]+\.md)")
RECORDED = re.compile(
    r"^Library: forgetting \S+; shipped defaults fingerprint ([0-9a-f]{12})", re.M
)


def cited_files() -> set[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {name for page in pages for name in CITE.findall(page.read_text(encoding="utf-8"))}


def recorded(name: str) -> str | None:
    found = RECORDED.search((RESULTS / name).read_text(encoding="utf-8"))
    return found.group(1) if found else None


def declarations() -> dict[str, dict]:
    return tomllib.loads(DECLARED.read_text(encoding="utf-8"))


def test_the_fingerprint_is_stable_and_short():
    assert re.fullmatch(r"[0-9a-f]{12}", defaults_fingerprint())
    assert defaults_fingerprint() == defaults_fingerprint()


def test_every_cited_results_file_describes_the_shipped_model_or_says_what_it_describes():
    current = defaults_fingerprint()
    declared = declarations()
    problems = []
    for name in sorted(cited_files()):
        assert (RESULTS / name).exists(), f"{name} is cited but does not exist"
        entry = declared.get(name, {})
        if recorded(name) == current:
            if entry:
                problems.append(f"{name} records the current defaults: drop its declaration")
        elif entry.get("defaults") is not None:
            if entry["defaults"] != current:
                problems.append(
                    f"{name} measured defaults {entry['defaults']}, the library ships "
                    f"{current}: rerun it, or declare what it describes"
                )
        elif not str(entry.get("describes", "")).strip():
            problems.append(
                f"{name} records defaults {recorded(name)}, not the shipped {current}: rerun "
                "it, or say in configurations.toml which model it describes"
            )
    assert not problems, "\n".join(problems)


def test_declarations_name_cited_files_and_one_kind_each():
    declared = declarations()
    cited = cited_files()
    for name, entry in declared.items():
        assert name in cited, f"configurations.toml declares {name}, which nothing cites"
        assert set(entry) in ({"defaults"}, {"describes"}), f"{name}: {sorted(entry)}"


def test_a_changed_default_is_caught(monkeypatch):
    """The guard can fail: with another fingerprint every `defaults` entry is stale."""
    import forgetting.estimators as estimators

    monkeypatch.setattr(estimators, "defaults_fingerprint", lambda: "0" * 12)
    monkeypatch.setitem(globals(), "defaults_fingerprint", estimators.defaults_fingerprint)
    try:
        test_every_cited_results_file_describes_the_shipped_model_or_says_what_it_describes()
    except AssertionError as err:
        assert "rerun it" in str(err)
    else:
        raise AssertionError("a changed default went unnoticed")
