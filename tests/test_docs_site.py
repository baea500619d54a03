"""The documentation site (mkdocs.yml, docs/_hooks.py) browses from disk and from a server,
and its nav holds every page: checked from the config and the hooks, without building the
site (mkdocs is the ``docs`` extra; ``make docs`` builds it with ``--strict``, and there the
hooks' ``on_post_build`` fails the build on any link that names no file)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_paths(items) -> list[str]:
    paths = []
    for item in items:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        paths += _nav_paths(value) if isinstance(value, list) else [value]
    return paths


def test_the_site_is_file_friendly_and_strict():
    config = _config()
    # page.html, not page/ (a directory: file:// opens a listing of it)
    assert config["use_directory_urls"] is False
    assert config["strict"] is True
    assert "docs/_hooks.py" in config["hooks"]
    # no warning is downgraded below what --strict fails on
    assert config["validation"]["links"]["not_found"] == "warn"


def test_the_nav_holds_every_guide_page_once():
    nav = _nav_paths(_config()["nav"])
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    guide = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    missing = [page for page in guide if page not in nav]
    assert not missing, f"pages of docs/ outside mkdocs.yml's nav: {missing}"
    generated = {"results.md", "lab/README.md"}
    dead = [page for page in nav if page not in guide and page not in generated]
    assert not dead, f"mkdocs.yml's nav names pages that do not exist: {dead}"


def test_every_results_file_gets_a_nav_place_under_results():
    hooks = _hooks()
    config = {"nav": _config()["nav"]}
    hooks.on_config(config)
    hooks.on_config(config)  # `mkdocs serve` may apply it again: added once
    results = next(item["Results"] for item in config["nav"] if "Results" in item)
    nav = _nav_paths(results)
    files = sorted(
        f"lab/results/{p.relative_to(ROOT / 'benchmarks/results').as_posix()}"
        for p in (ROOT / "benchmarks" / "results").rglob("*.md")
    )
    assert files and all(f in nav for f in files)
    assert {"results.md", "lab/README.md", "lab/results/index.md"} <= set(nav)
    assert len(nav) == len(set(nav))
    # the folder's list names every file, linked relative to itself
    index = hooks.results_index()
    for f in files:
        name = f.removeprefix("lab/results/")
        assert f"]({name})" in index


def test_the_lab_readme_links_pages_not_folders():
    """On a code host ``results/`` lists the folder; on the site it is the list's page."""
    hooks = _hooks()

    class Page:
        class file:
            src_uri = "lab/README.md"

    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    rewritten = hooks.on_page_markdown(text, Page, {}, None)
    folders = re.findall(r"\]\((?!https?:)([^)#\s]*/)(?:#[^)]*)?\)", rewritten)
    assert not folders, f"links to folders, which open a listing from file://: {folders}"


def test_the_post_build_check_finds_links_that_name_no_file(tmp_path):
    site = tmp_path / "site"
    (site / "lab" / "results").mkdir(parents=True)
    (site / "lab" / "results" / "core.html").write_text("<p>core</p>")
    (site / "style.css").write_text("")
    (site / "index.html").write_text(
        '<link href="style.css"><a href="lab/results/core.html#deletion">ok</a>'
        '<a href="#top">anchor</a><a href="https://example.org/">elsewhere</a>'
        '<a href="lab/results/">a folder</a><a href="gone.html">missing</a>'
        '<img src="/style.css"><a href="lab/results/core.html?x=1">ok</a>'
    )
    (site / "404.html").write_text('<a href="/index.html">from the root, for a server</a>')
    assert _hooks().broken_links(site) == [
        "index.html -> lab/results/",
        "index.html -> gone.html",
        "index.html -> /style.css",
    ]
